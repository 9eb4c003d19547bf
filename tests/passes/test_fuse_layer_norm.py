"""The layer normalization older exporters spell out in elementwise ops becomes one
LayerNormalization: same results, names kept; anything that is not exactly that pattern stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.api import run
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize, fuse_layer_norms, optimize
from lowbit.quant.static import quantize

RNG = np.random.default_rng(3)
C = 12


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _decomposed(square="Pow", gamma_shape=(C,), beta=True, axes=(-1,), eps_shape=(),
                extra_reader=False, opset=14):
    """x [N, 5, C] -> the decomposed layer norm (ReduceMean axes as an attribute, opset 14) ->
    MatMul -> y; with `extra_reader`, the mean is also a graph output."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=list(axes), keepdims=1),
             helper.make_node("Sub", ["x", "mean"], ["d"])]
    nodes.append(helper.make_node("Pow", ["d", "two"], ["sq"]) if square == "Pow" else
                 helper.make_node("Mul", ["d", "d"], ["sq"]))
    nodes += [helper.make_node("ReduceMean", ["sq"], ["var"], axes=list(axes), keepdims=1),
              helper.make_node("Add", ["var", "eps"], ["ve"]),
              helper.make_node("Sqrt", ["ve"], ["std"]),
              helper.make_node("Div", ["d", "std"], ["n"]),
              helper.make_node("Mul", ["n", "gamma"], ["scaled"])]
    last = "scaled"
    if beta:
        nodes.append(helper.make_node("Add", ["scaled", "beta"], ["normed"]))
        last = "normed"
    nodes.append(helper.make_node("MatMul", [last, "w"], ["y"]))
    inits = [_const("two", 2.0), _const("eps", np.full(eps_shape, 1e-5)),
             _const("gamma", RNG.uniform(0.5, 3, C).reshape(gamma_shape)),
             _const("beta", RNG.normal(size=C)), _const("w", RNG.normal(size=(C, 7)))]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 5, C])], outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return canonicalize(import_model(model, "ln"))


@pytest.mark.parametrize("kwargs", [{}, {"square": "Mul"}, {"gamma_shape": (1, 1, C)},
                                    {"beta": False}, {"axes": (2,)}])
def test_decomposed_layer_norm_becomes_one_op(kwargs):
    graph = _decomposed(**kwargs)
    x = {"x": (RNG.normal(size=(3, 5, C)) * 4 + 1).astype(np.float32)}
    ref = run(graph, x)["y"]
    fused = fuse_layer_norms(optimize(graph.copy()))
    ops = fused.op_histogram()
    assert ops.get("LayerNormalization") == 1
    assert not {"ReduceMean", "Sub", "Pow", "Sqrt", "Div"} & set(ops)
    norm = next(n for n in fused.nodes if n.op_type == "LayerNormalization")
    assert norm.outputs[0].name == ("normed" if kwargs.get("beta", True) else "scaled")
    assert norm.attrs["epsilon"] == pytest.approx(1e-5)
    assert len(norm.inputs) == (3 if kwargs.get("beta", True) else 2)
    np.testing.assert_allclose(run(fused, x)["y"], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [{"axes": (1,)}, {"eps_shape": (C,)},
                                    {"extra_reader": True}])
def test_anything_else_stays_as_it_is(kwargs):
    graph = optimize(_decomposed(**kwargs))
    assert "LayerNormalization" not in graph.op_histogram()
    assert graph.op_histogram()["ReduceMean"] == 2


def test_quantization_sees_one_float_layer_norm_and_smooths_its_reader():
    """Loaded models come out of `lowbit.load` fused; static quantization then keeps the layer
    norm in float as one op and smooths the product reading it, as for an opset-17 export."""
    graph = optimize(_decomposed())
    calib = [{"x": (RNG.normal(size=(4, 5, C)) * 4 + 1).astype(np.float32)} for _ in range(3)]
    result = quantize(graph, lowbit.profile(graph, calib, progress=False))
    rows = {r.op_type: r for r in result.summary.rows}
    assert rows["LayerNormalization"].mode == "float"
    assert rows["MatMul"].mode == "int8" and "smoothed" in rows["MatMul"].detail
