"""Reshape targets built from Shape at run time become constants over symbolic dims."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize


def _model():
    c = numpy_helper.from_array
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Unsqueeze", ["t", "ax"], ["t1"]),
        helper.make_node("Concat", ["b1", "t1", "heads"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [c(np.array(0, np.int64), "i0"), c(np.array(1, np.int64), "i1"),
             c(np.array([0], np.int64), "ax"), c(np.array([4, 6], np.int64), "heads")]
    graph = helper.make_graph(nodes, "r", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["B", "S", 24])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_shape_arithmetic_disappears_and_results_stay():
    raw = import_model(_model(), "r")
    clean = canonicalize(import_model(_model(), "r"))
    assert set(clean.op_histogram()) == {"Constant", "Reshape"}
    reshape = next(n for n in clean.nodes if n.op_type == "Reshape")
    assert reshape.inputs[1].const_value.tolist() == [0, 0, 4, 6]
    assert reshape.outputs[0].type.shape == ("B", "S", 4, 6)
    for b, s in ((1, 3), (2, 7)):
        x = np.random.default_rng(b).normal(size=(b, s, 24)).astype(np.float32)
        np.testing.assert_array_equal(lowbit.run(clean, {"x": x})["y"],
                                      lowbit.run(raw, {"x": x})["y"])
