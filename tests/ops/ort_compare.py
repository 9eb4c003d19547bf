"""Build one-node ONNX models and run them in lowbit's reference backend and in ONNX Runtime."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from lowbit.api import compile
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize


def one_node_model(op_type: str, inputs: Mapping[str, np.ndarray], attrs: Mapping[str, Any]
                   | None = None, *, out_dtype: np.dtype | None = None, opset: int = 21,
                   n_outputs: int = 1) -> onnx.ModelProto:
    """A model whose graph inputs are `inputs` (names in order; a name '' omits that input) and
    whose outputs are left untyped for shape inference to fill in."""
    names = list(inputs)
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_outputs)], **(attrs or {}))
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items() if n
    ]
    outputs = [helper.make_value_info(f"y{i}", onnx.TypeProto()) for i in range(n_outputs)]
    graph = helper.make_graph([node], "one_node", graph_inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def run_lowbit(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    graph = canonicalize(import_model(model, source="test"))
    out = compile(graph)({k: v for k, v in inputs.items() if k})
    return [out[v.name] for v in graph.outputs]


def run_ort(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {k: v for k, v in inputs.items() if k})


def run_both(op_type: str, inputs: Mapping[str, np.ndarray], attrs: Mapping[str, Any]
             | None = None, opset: int = 21) -> tuple[np.ndarray, np.ndarray]:
    """(lowbit's, ONNX Runtime's) first output of a one-node model."""
    model = one_node_model(op_type, inputs, attrs, opset=opset)
    return run_lowbit(model, inputs)[0], run_ort(model, inputs)[0]

