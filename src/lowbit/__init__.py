"""lowbit: a post-training quantization compiler for neural networks.

    graph = lowbit.load("model.onnx")
    outputs = lowbit.run(graph, {"input": x})
    stats = lowbit.profile(graph, [{"input": x} for x in calibration_data])
"""

from __future__ import annotations

from lowbit.api import (
    compare,
    compile,
    export_bundle,
    from_torch,
    load,
    profile,
    quantize,
    quantize_dynamic,
    quantize_to_budget,
    run,
    save,
    sensitivity,
)
from lowbit.budget.metrics import Budget
from lowbit.budget.search import BudgetNotMet, BudgetResult
from lowbit.errors import LowbitError
from lowbit.ir import Graph, Node, QuantParams, TensorType, Value
from lowbit.quant.config import QuantConfig
from lowbit.quant.profile import Profile
from lowbit.version import __version__

__all__ = [
    "Budget",
    "BudgetNotMet",
    "BudgetResult",
    "Graph",
    "LowbitError",
    "Node",
    "Profile",
    "QuantConfig",
    "QuantParams",
    "TensorType",
    "Value",
    "__version__",
    "compare",
    "compile",
    "export_bundle",
    "from_torch",
    "load",
    "profile",
    "quantize",
    "quantize_dynamic",
    "quantize_to_budget",
    "run",
    "save",
    "sensitivity",
]
