"""Per-channel scales and shifts after a Conv or Gemm fold into its weights, and HardSwish
spelled out in elementwise ops becomes one node: same results, fewer nodes, names kept."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lowbit.api import run
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize, fold_channel_affine, fuse_hard_swish, optimize, verify

RNG = np.random.default_rng(0)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _graph(nodes, inits, in_shape, outputs=("y",)):
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return canonicalize(import_model(model, "t"))


def _ops(g):
    return [n.op_type for n in g.nodes if n.op_type != "Constant"]


def _same_after(g, rewrite, x, outputs=("y",)):
    ref = run(g, {"x": x})
    g = rewrite(g)
    verify(g)
    got = run(g, {"x": x})
    for o in outputs:
        np.testing.assert_allclose(got[o], ref[o], rtol=1e-5, atol=1e-5)
    return g


# Batch norm as Paddle2ONNX writes it: Mul by a per-channel scale, then Add of a shift, in
# either operand order, plus Sub and Div forms and a scalar.
@pytest.mark.parametrize("ops", [
    [("Mul", (1, 8, 1, 1), False), ("Add", (8, 1, 1), True)],
    [("Mul", (1,), True), ("Add", (1,), False)],
    [("Sub", (8, 1, 1), False), ("Div", (1, 8, 1, 1), False)],
    [("Sub", (1, 8, 1, 1), True)],  # c - x: the weights change sign
])
def test_conv_then_per_channel_affine_folds_into_the_conv(ops):
    inits = [_init("w", RNG.normal(size=(8, 3, 3, 3))), _init("b", RNG.normal(size=8))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t0"], name="conv", pads=[1, 1, 1, 1])]
    for i, (op, shape, const_first) in enumerate(ops):
        inits.append(_init(f"c{i}", RNG.uniform(0.5, 2, shape)))
        operands = [f"c{i}", f"t{i}"] if const_first else [f"t{i}", f"c{i}"]
        out = "y" if i == len(ops) - 1 else f"t{i + 1}"
        nodes.append(helper.make_node(op, operands, [out], name=f"{op.lower()}{i}"))
    g = _graph(nodes, inits, [2, 3, 9, 9])
    g = _same_after(g, fold_channel_affine, RNG.normal(size=(2, 3, 9, 9)).astype(np.float32))
    assert _ops(g) == ["Conv"]
    assert g.nodes[-1].outputs[0].name == "y"


def test_gemm_then_per_column_scale_and_shift_fold():
    inits = [_init("w", RNG.normal(size=(5, 6))), _init("s", RNG.uniform(0.5, 2, 6)),
             _init("t", RNG.normal(size=(1, 6)))]
    nodes = [helper.make_node("Gemm", ["x", "w"], ["g"], name="gemm", alpha=0.5),
             helper.make_node("Mul", ["g", "s"], ["m"], name="mul"),
             helper.make_node("Add", ["t", "m"], ["y"], name="add")]
    g = _same_after(_graph(nodes, inits, [4, 5]), fold_channel_affine,
                    RNG.normal(size=(4, 5)).astype(np.float32))
    assert _ops(g) == ["Gemm"]


@pytest.mark.parametrize("case", ["spatial constant", "second reader", "graph output", "x / c"])
def test_affine_that_does_not_fold_stays(case):
    c_shape = (1, 8, 9, 9) if case == "spatial constant" else (8, 1, 1)
    inits = [_init("w", RNG.normal(size=(8, 3, 3, 3))), _init("c", RNG.uniform(1, 2, c_shape))]
    op_in = ["c", "t"] if case == "x / c" else ["t", "c"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Div" if case == "x / c" else "Mul", op_in, ["y"], name="op")]
    outputs = ("y",)
    if case == "second reader":
        nodes.append(helper.make_node("Relu", ["t"], ["r"], name="relu"))
        outputs = ("y", "r")
    elif case == "graph output":
        outputs = ("y", "t")
    g = _graph(nodes, inits, [1, 3, 9, 9], outputs)
    g = _same_after(g, fold_channel_affine, RNG.normal(size=(1, 3, 9, 9)).astype(np.float32),
                    outputs)
    assert "Mul" in _ops(g) or "Div" in _ops(g)


def _hard_swish_nodes(spelling: str):
    """x * relu6(x + 3) / 6 as exporters spell it; output y."""
    inits = [_init("three", 3.0), _init("zero", 0.0), _init("six", 6.0),
             _init("sixth", 1 / 6)]
    relu6 = [helper.make_node("Add", ["x", "three"], ["a"], name="add3"),
             helper.make_node("Clip", ["a", "zero", "six"], ["r"], name="clip")]
    if spelling == "(x * r) / 6":  # Paddle2ONNX
        nodes = relu6 + [helper.make_node("Mul", ["x", "r"], ["m"], name="mul"),
                         helper.make_node("Div", ["m", "six"], ["y"], name="div")]
    elif spelling == "x * (r * 1/6)":
        nodes = relu6 + [helper.make_node("Mul", ["sixth", "r"], ["h"], name="scale"),
                         helper.make_node("Mul", ["h", "x"], ["y"], name="mul")]
    else:  # x * HardSigmoid(x)
        nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], name="hsig", alpha=1 / 6,
                                  beta=0.5),
                 helper.make_node("Mul", ["x", "h"], ["y"], name="mul")]
    return nodes, inits


@pytest.mark.parametrize("spelling", ["(x * r) / 6", "x * (r * 1/6)", "x * HardSigmoid(x)"])
@pytest.mark.parametrize("pipeline", ["pass alone", "optimize"])
def test_spelled_out_hard_swish_becomes_one_node(spelling, pipeline):
    nodes, inits = _hard_swish_nodes(spelling)
    g = _graph(nodes, inits, [2, 4, 5])
    x = RNG.uniform(-5, 5, size=(2, 4, 5)).astype(np.float32)
    g = _same_after(g, fuse_hard_swish if pipeline == "pass alone" else optimize, x)
    assert _ops(g) == ["HardSwish"]
    assert g.nodes[-1].outputs[0].name == "y"


@pytest.mark.parametrize("case", ["relu6 read twice", "bound 5", "add 2"])
def test_near_miss_of_hard_swish_stays(case):
    inits = [_init("three", 2.0 if case == "add 2" else 3.0), _init("zero", 0.0),
             _init("hi", 5.0 if case == "bound 5" else 6.0), _init("six", 6.0)]
    nodes = [helper.make_node("Add", ["x", "three"], ["a"], name="add3"),
             helper.make_node("Clip", ["a", "zero", "hi"], ["r"], name="clip"),
             helper.make_node("Mul", ["x", "r"], ["m"], name="mul"),
             helper.make_node("Div", ["m", "six"], ["y"], name="div")]
    outputs = ("y", "r") if case == "relu6 read twice" else ("y",)
    g = _graph(nodes, inits, [2, 4, 5], outputs)
    x = RNG.uniform(-5, 5, size=(2, 4, 5)).astype(np.float32)
    g = _same_after(g, optimize, x, outputs)
    assert "HardSwish" not in _ops(g)
