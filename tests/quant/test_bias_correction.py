"""Bias correction: the profile keeps each product input's channel means, the corrected int32
bias is round((b - (W_q - W) . E[x]) / (s_x s_w)), and it removes the mean output shift that
weight rounding causes (a depthwise conv with large weights that cancel, fed a non-zero mean)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.quant.config import QuantConfig
from lowbit.quant.profile import Profile
from lowbit.quant.static import quantize


def _model(path, rng):
    """x[N, 4, 8, 8] -> depthwise 3x3 (weights ~ +-6 that nearly cancel, no bias) -> 1x1 conv
    (with bias) -> GAP -> Gemm (transB) -> y."""
    dw = rng.normal(size=(4, 1, 3, 3)) * 6
    dw -= dw.mean(axis=(2, 3), keepdims=True) - 0.01  # taps sum to about 0.09
    nodes = [helper.make_node("Conv", ["x", "dw"], ["a"], name="depthwise", group=4,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "pw", "pb"], ["b"], name="pointwise"),
             helper.make_node("GlobalAveragePool", ["b"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], name="fc", transB=1)]
    inits = [numpy_helper.from_array(dw.astype(np.float32), "dw"),
             numpy_helper.from_array(rng.normal(size=(6, 4, 1, 1)).astype(np.float32), "pw"),
             numpy_helper.from_array(rng.normal(size=6).astype(np.float32), "pb"),
             numpy_helper.from_array(rng.normal(size=(3, 6)).astype(np.float32), "fc"),
             numpy_helper.from_array(rng.normal(size=3).astype(np.float32), "fcb")]
    g = helper.make_graph(nodes, "bc", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["N", 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("bc") / "bc.onnx"
    _model(path, rng)
    graph = lowbit.load(path)
    means = np.array([3.0, -2.0, 0.5, 5.0], np.float32).reshape(1, 4, 1, 1)
    batches = [{"x": (rng.normal(size=(4, 4, 8, 8)) + means).astype(np.float32)}
               for _ in range(6)]
    return graph, batches, lowbit.profile(graph, batches[:4], progress=False)


def test_profile_keeps_channel_means_of_product_inputs(setup, tmp_path):
    graph, batches, prof = setup
    x = np.concatenate([b["x"] for b in batches[:4]])
    ch = prof["x"].channels[1]
    assert np.allclose(ch.mean, x.mean(axis=(0, 2, 3)))
    assert np.array_equal(ch.count, np.full(4, x.size // 4))
    a = np.concatenate([_value(graph, b, "a") for b in batches[:4]])
    assert np.allclose(prof["a"].channels[1].mean, a.mean(axis=(0, 2, 3)))
    flat = np.concatenate([_value(graph, b, "f") for b in batches[:4]])
    assert np.allclose(prof["f"].channels[1].mean, flat.mean(axis=0))
    prof.save(tmp_path / "p.yaml")
    again = Profile.load(tmp_path / "p.yaml", graph)
    assert np.array_equal(again["x"].channels[1].sum, ch.sum)
    assert np.array_equal(again["x"].channels[1].count, ch.count)


def _value(graph, batch, name):
    store = {}

    def keep(node, outputs):
        for v, a in zip(node.outputs, outputs, strict=False):
            if v.name == name:
                store[name] = np.asarray(a)

    Interpreter(graph, [keep])(batch)
    return store[name]


@pytest.mark.parametrize("rounding", ["nearest", "gptq"])
def test_corrected_bias_follows_the_formula(setup, rounding):
    """eps is computed from the codes the kernel uses: nearest rounding, or the codes
    error-compensating rounding picked (a float constant already on the grid)."""
    graph, _, prof = setup
    q = quantize(graph, prof, QuantConfig.from_dict({"default": {"weight_rounding": rounding}}))
    assert all("bias-corrected" in r.detail for r in q.summary.rows
               if r.op_type in ("Conv", "Gemm"))
    lowbit_graph = q.graph
    dw = next(n for n in lowbit_graph.nodes if n.name == "depthwise")
    wt, bt = dw.inputs[1].type, dw.inputs[2].type
    w = next(n for n in graph.nodes if n.name == "depthwise").inputs[1].const_value
    w = w.astype(np.float64)
    scale = wt.quant.scale.reshape(-1, 1, 1, 1)
    w_q = np.clip(np.rint(w.astype(np.float32) / scale.astype(np.float32)), -127, 127) * scale
    if rounding == "gptq":
        on_grid = dw.inputs[1].producer.inputs[0].const_value.astype(np.float64)
        codes = np.rint(on_grid / scale)
        assert np.allclose(codes * scale, on_grid, rtol=1e-6, atol=0)
        assert np.abs(codes - w_q / scale).max() == 1 and not np.array_equal(codes * scale, w_q)
        w_q = codes * scale
    eps = ((w_q - w).sum(axis=(1, 2, 3))) * prof["x"].channels[1].mean
    float_bias = dw.inputs[2].producer.inputs[0].const_value
    assert np.allclose(float_bias, -eps, rtol=1e-6, atol=1e-7)
    s_x = float(dw.inputs[0].type.quant.scale)
    assert np.allclose(bt.quant.scale, s_x * wt.quant.scale)
    assert np.max(np.abs(eps)) > 0.05  # the cancelling taps make the shift visible


def test_correction_removes_the_mean_shift_and_can_be_turned_off(setup):
    graph, batches, prof = setup
    # min-max ranges: no clipping, so the output's mean error is the weights' rounding alone
    on = QuantConfig.from_dict({"default": {"calibration": "minmax",
                                            "weight_rounding": "nearest"}})
    off = on.with_default(bias_correction=False)
    shifts = {}
    for label, config in (("on", on), ("off", off)):
        q = quantize(graph, prof, config).graph
        err = [_real(q, batch, "a") - _value(graph, batch, "a") for batch in batches[4:]]
        e = np.concatenate(err)[:, :, 1:-1, 1:-1]  # held out, away from the padded border
        shifts[label] = np.abs(e.mean(axis=(0, 2, 3))).max()
        if label == "off":
            assert all("bias-corrected" not in r.detail for r in quantize(
                graph, prof, config).summary.rows)
    assert shifts["on"] < shifts["off"] / 5, shifts


def _real(graph, batch, name):
    v = next(v for n in graph.nodes for v in n.outputs if v.name == name)
    codes = _value(graph, batch, name).astype(np.float64)
    qp = v.type.quant
    return (codes - float(qp.zero_point)) * float(qp.scale)


def test_profile_without_means_is_reported_not_silently_skipped(setup, tmp_path):
    graph, _, prof = setup
    prof.save(tmp_path / "p.yaml")
    old = Profile.load(tmp_path / "p.yaml", graph)  # as a profile written before sums were kept
    for stats in old.stats.values():
        for ch in stats.channels.values():
            ch.sum = ch.count = None
    q = quantize(graph, old)
    details = [r.detail for r in q.summary.rows if r.op_type in ("Conv", "Gemm")]
    assert details and all("no bias correction (the profile has no channel means" in d
                           for d in details)
