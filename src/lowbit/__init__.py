"""lowbit: a post-training quantization compiler for neural networks.

    graph = lowbit.load("model.onnx")
    outputs = lowbit.run(graph, {"input": x})
"""

from __future__ import annotations

__version__ = "0.1.0"

from lowbit.api import compile, load, run, save
from lowbit.errors import LowbitError
from lowbit.ir import Graph, Node, QuantParams, TensorType, Value
from lowbit.quant.config import QuantConfig

__all__ = [
    "Graph",
    "LowbitError",
    "Node",
    "QuantConfig",
    "QuantParams",
    "TensorType",
    "Value",
    "__version__",
    "compile",
    "load",
    "run",
    "save",
]
