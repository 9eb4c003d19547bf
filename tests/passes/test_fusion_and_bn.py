"""Batch-norm folding and activation fusion: same results, fewer nodes, names preserved."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lowbit.api import run
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import canonicalize, fold_batch_norm, fuse_activations, optimize, verify

RNG = np.random.default_rng(0)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _bn_inits(prefix, c):
    return [
        _init(f"{prefix}_g", RNG.uniform(0.5, 2, c)), _init(f"{prefix}_b", RNG.normal(size=c)),
        _init(f"{prefix}_m", RNG.normal(size=c)), _init(f"{prefix}_v", RNG.uniform(0.1, 3, c)),
    ]


def _graph(nodes, inits, in_shape, out_name="y"):
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return canonicalize(import_model(model, "t"))


def _conv_bn_relu(with_bias=True, act="Relu"):
    inits = [_init("w", RNG.normal(size=(8, 3, 3, 3)))] + _bn_inits("bn", 8)
    conv_in = ["x", "w"]
    if with_bias:
        inits.append(_init("b", RNG.normal(size=8)))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn_g", "bn_b", "bn_m", "bn_v"],
                              ["n"], name="bn", epsilon=1e-3)]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["n"], ["y"], name="relu"))
    else:
        inits += [_init("lo", 0.0), _init("hi", 6.0)]
        nodes.append(helper.make_node("Clip", ["n", "lo", "hi"], ["y"], name="clip"))
    return _graph(nodes, inits, [2, 3, 9, 9])


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_conv_bn_act_collapses_to_one_conv(with_bias, act):
    g = _conv_bn_relu(with_bias, act)
    x = RNG.normal(size=(2, 3, 9, 9)).astype(np.float32)
    ref = run(g, {"x": x})["y"]
    g = optimize(g)
    verify(g)
    assert [n.op_type for n in g.nodes if n.op_type != "Constant"] == ["Conv"]
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    assert conv.outputs[0].name == "y"
    lo, hi = conv.attrs["fused_clip"]
    assert lo == 0.0 and hi == (np.inf if act == "Relu" else 6.0)
    got = run(g, {"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert got.min() >= 0


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_bn_folds(trans_b):
    w = RNG.normal(size=(6, 5) if trans_b else (5, 6))
    inits = [_init("w", w), _init("c", RNG.normal(size=6))] + _bn_inits("bn", 6)
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["g"], name="gemm", transB=trans_b,
                              alpha=0.5, beta=2.0),
             helper.make_node("BatchNormalization", ["g", "bn_g", "bn_b", "bn_m", "bn_v"],
                              ["y"], name="bn")]
    g = _graph(nodes, inits, [4, 5])
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    ref = run(g, {"x": x})["y"]
    g = fold_batch_norm(g)
    verify(g)
    assert [n.op_type for n in g.nodes if n.op_type != "Constant"] == ["Gemm"]
    np.testing.assert_allclose(run(g, {"x": x})["y"], ref, rtol=1e-5, atol=1e-5)


def test_no_fusion_when_producer_output_has_other_readers():
    inits = [_init("w", RNG.normal(size=(4, 3, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["c", "r"], ["y"], name="add")]
    g = fuse_activations(_graph(nodes, inits, [1, 3, 4, 4]))
    verify(g)
    assert "Relu" in [n.op_type for n in g.nodes]


def test_no_fusion_of_non_constant_clip_bounds():
    inits = [_init("w", RNG.normal(size=(4, 3, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("ReduceMax", ["x"], ["m"], name="max", keepdims=0),
             helper.make_node("Clip", ["c", "", "m"], ["y"], name="clip")]
    g = fuse_activations(_graph(nodes, inits, [1, 3, 4, 4]))
    assert "Clip" in [n.op_type for n in g.nodes]


def test_add_relu_fuses_and_exports_back_as_clip(tmp_path):
    import onnxruntime as ort

    from lowbit.api import save

    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    g = fuse_activations(_graph(nodes, [], [3, 4]))
    assert [n.op_type for n in g.nodes] == ["Add"]
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    save(g, tmp_path / "f.onnx")
    sess = ort.InferenceSession(str(tmp_path / "f.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(2 * x, 0), rtol=1e-6)
    np.testing.assert_allclose(run(g, {"x": x})["y"], np.maximum(2 * x, 0), rtol=1e-6)
