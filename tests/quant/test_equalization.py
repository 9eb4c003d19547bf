"""Channel equalization of convolution inputs whose channels differ widely in range
(lowbit.quant.equalization): the model still computes what the float one does, the one 8-bit
rounding of the input comes after the equalizing Mul, and the error drops."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import optimize
from lowbit.quant.config import QuantConfig
from lowbit.quant.equalization import factors
from lowbit.quant.input_moments import InputMoments
from lowbit.quant.static import quantize

RNG = np.random.default_rng(3)


def _block(loud: float, depthwise: bool) -> lowbit.Graph:
    """conv1 (4 -> 8; channels 0 and 1 `loud` times the others) -> HardSwish -> * 0.7 + 0.1
    (PP-LCNetV3's learnable affine) -> conv2 (1x1, or 3x3 depthwise), which reads the loud
    channels with weights `loud` times smaller -> y."""
    w1 = RNG.normal(size=(8, 4, 3, 3)) * 0.3
    w1[:2] *= loud
    w2 = RNG.normal(size=(8, 1, 3, 3) if depthwise else (8, 8, 1, 1)) * 0.3
    if depthwise:  # the next layer reads the loud channels with small weights
        w2[:2] /= loud
    else:
        w2[:, :2] /= loud
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in [
        ("w1", w1), ("b1", RNG.normal(size=8) * 0.1), ("w2", w2), ("a", [0.7]), ("c", [0.1])]]
    conv2 = {"group": 8, "pads": [1, 1, 1, 1]} if depthwise else {}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["h"], name="hswish"),
             helper.make_node("Mul", ["h", "a"], ["m"], name="lab_scale"),
             helper.make_node("Add", ["m", "c"], ["z"], name="lab_bias"),
             helper.make_node("Conv", ["z", "w2"], ["y"], name="conv2", **conv2)]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 12, 12])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return optimize(import_model(model, "t"))


def _data(n):
    return [{"x": RNG.normal(size=(1, 4, 12, 12)).astype(np.float32)} for _ in range(n)]


def _sqnr(ref, got):
    return 10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((got - ref) ** 2).sum())


@pytest.mark.parametrize("depthwise", [False, True])
def test_wide_channel_spread_is_equalized_and_loses_less(depthwise, tmp_path):
    graph = _block(40.0, depthwise)
    calib, test = _data(8), _data(8)
    prof = lowbit.profile(graph, calib, progress=False)
    result = quantize(graph, prof)
    q = result.graph
    row = next(r for r in result.summary.rows if r.name == "conv2")
    assert "input channels equalized (alpha 0.3" in row.detail
    types = {v.name: v.type for v in q.values()}
    # the elementwise chain (HardSwish with the affine's Mul and Add folded in) keeps an
    # int16 result; the equalizing Mul rounds to 8 bits once
    assert types["z"].dtype.name == "int16" and "h" not in types and "m" not in types
    mul = next(n for n in q.nodes if n.name.startswith("conv2_equalize"))
    assert mul.outputs[0].type.dtype.name == "int8"
    assert mul.inputs[1].type.dtype.name == "int16"
    conv2 = next(n for n in q.nodes if n.name == "conv2")
    assert conv2.inputs[0] is mul.outputs[0]
    plain = quantize(graph, prof, QuantConfig.from_dict({"default": {"equalization": 0}}))
    assert "equalized" not in next(r.detail for r in plain.summary.rows if r.name == "conv2")
    ref = np.concatenate([lowbit.run(graph, b)["y"] for b in test])
    got = np.concatenate([lowbit.run(q, b)["y"] for b in test])
    before = np.concatenate([lowbit.run(plain.graph, b)["y"] for b in test])
    # measured: about 36-38 dB against 11-12 dB unequalized (1x1 and depthwise alike)
    assert _sqnr(ref, got) >= _sqnr(ref, before) + 10.0, (_sqnr(ref, got), _sqnr(ref, before))
    # the QDQ export computes the same model in ONNX Runtime
    lowbit.save(q, tmp_path / "m.onnx", format="qdq")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    exported = np.concatenate([session.run(None, b)[0] for b in test])
    assert _sqnr(got, exported) >= 35.0, _sqnr(got, exported)


def test_balanced_channels_are_left_alone():
    graph = _block(1.0, False)
    result = quantize(graph, lowbit.profile(graph, _data(4), progress=False))
    assert not any("equalized" in r.detail for r in result.summary.rows)
    assert not any(n.name.startswith("conv2_equalize") for n in result.graph.nodes)


def test_factors_move_range_by_alpha_and_need_a_spread():
    a, w = np.array([40.0, 1.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0])
    t = factors(a, w, 0.5)
    assert np.isclose(np.exp(np.mean(np.log(t))), 1.0)  # geometric mean 1
    assert np.isclose(t[0] / t[1], 40 ** 0.5)
    assert factors(np.array([3.0, 2.0, 1.0, 1.5]), w, 0.5) is None  # max <= 4 x median


def test_quiet_channels_are_not_amplified():
    """A channel dead or quiet on the calibration data gets the median channel's factor, not a
    tiny one that would make x / t saturate once the channel wakes on other inputs."""
    a = np.array([40.0, 1.0, 1.0, 2.0, 0.0, 0.01])
    t = factors(a, np.ones(6), 0.3)
    median = t[1]
    assert np.isclose(t[4], median) and np.isclose(t[5], median)
    assert np.isclose(t[0] / median, 40 ** 0.3) and np.isclose(t[3] / median, 2 ** 0.3)
    # the tensor range of x / t is then set by the loud channel alone, not by a woken dead one
    # reaching the median channel's extreme
    assert (1.0 / t[4]) <= (a / t).max()


def test_a_channel_dead_in_calibration_does_not_saturate_when_it_wakes():
    """conv1 -> Relu -> conv2 where conv1's channel 0 is 40x the others and channels 4 and 5
    (-x0 - 10) never fire on the calibration data; inputs with x0 near -12 wake them. Their
    factor is the median channel's, so x / t stays inside the equalized range (with the factor
    a dead channel's extreme alone gives, they saturated it). Measured: 27.3 dB, and 5.4 dB
    with that factor."""
    rng = np.random.default_rng(5)
    w1 = np.zeros((6, 4, 1, 1), np.float32)
    w1[[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 0, 0], 0, 0] = [40.0, 0.2, 1.0, 1.0, -1.0, -1.0]
    b1 = np.array([0, 0, 0, 0, -10.0, -10.5], np.float32)
    w2 = rng.normal(size=(3, 6, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("b1", b1), ("w2", w2))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    graph = optimize(import_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)]), "t"))
    spread = np.array([1.0, 5.0, 1.0, 1.0], np.float32)[None, :, None, None]
    calib = [{"x": (rng.normal(size=(1, 4, 6, 6)) * spread).astype(np.float32)}
             for _ in range(8)]
    prof = lowbit.profile(graph, calib, progress=False)
    assert prof["r"].channels[1].max[4:].max() == 0.0  # dead on the calibration data
    result = quantize(graph, prof)
    assert "input channels equalized" in next(r.detail for r in result.summary.rows
                                              if r.name == "conv2")
    awake = []
    for _ in range(4):
        x = (rng.normal(size=(1, 4, 6, 6)) * spread).astype(np.float32)
        x[:, 0] = -12.0 + 0.3 * rng.normal(size=(6, 6))
        awake.append({"x": x})
    ref = np.concatenate([lowbit.run(graph, b)["y"] for b in awake])
    got = np.concatenate([lowbit.run(result.graph, b)["y"] for b in awake])
    assert _sqnr(ref, got) >= 20.0, _sqnr(ref, got)


def test_config_refuses_equalization_outside_0_1():
    from lowbit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"equalization must be a number in \[0, 1\)"):
        QuantConfig.from_dict({"default": {"equalization": 1.5}})


def test_grouped_moments_scale_per_group():
    second = RNG.normal(size=(2, 3, 3))
    m = InputMoments("n", second, 5)
    f = np.array([[1.0, 2.0, 3.0], [0.5, 1.0, 4.0]])
    scaled = m.scaled(f)
    np.testing.assert_allclose(scaled.second, second * f[:, :, None] * f[:, None, :])


def test_factors_spread_is_bounded_for_the_int16_constant():
    a = np.array([1e9, 1.0, 1e-6, 1.0, 1.0])
    t = factors(a, np.ones(5), 0.9)
    assert t.max() / t.min() <= 4096 * (1 + 1e-9)
    from lowbit.quant.equalization import int16_constant

    inverse, _ = int16_constant(1.0 / t)
    assert np.all(inverse > 0)
