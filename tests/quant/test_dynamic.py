"""Dynamic quantization: the run-time parameter formula, the integer product, config rules, the
ONNX Runtime export, and MiniLM accuracy."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.errors import LowbitError
from lowbit.numerics.dynamic_params import dynamic_params
from lowbit.quant.config import QuantConfig, Rule
from lowbit.quant.dynamic import quantize_dynamic


def _reference_row(row: np.ndarray, symmetric: bool, top: int):
    """The formula written out element by element (independent of the vectorised kernel)."""
    f = np.float32
    if symmetric:
        m = f(max(abs(float(v)) for v in row))
        scale = f(1) if m == 0 else f(m / f(top))
        codes = [int(np.clip(np.rint(f(v) / scale), -top, top)) for v in row]
        return codes, scale, 0
    lo = f(min(min(float(v) for v in row), 0.0))
    hi = f(max(max(float(v) for v in row), 0.0))
    scale = f(1) if hi == lo else f(f(hi - lo) / f(top))
    zero = int(np.rint(np.clip(f(0) - f(lo / scale), 0, top)))
    codes = [int(np.clip(np.rint(f(v) / scale) + zero, 0, top)) for v in row]
    return codes, scale, zero


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("reduce_range", [False, True])
def test_per_row_parameters_follow_the_formula_with_all_zero_rows(symmetric, reduce_range):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4, 17)) * rng.uniform(0.01, 20, (3, 4, 1))).astype(np.float32)
    x[0, 1] = 0.0          # an all-zero row (a padded token)
    x[2, 3] = np.abs(x[2, 3])  # a row that is never negative
    q, scale, zero = dynamic_params(x, [-1], symmetric, reduce_range)
    top = (63 if reduce_range else 127) if symmetric else (127 if reduce_range else 255)
    assert q.dtype == (np.int8 if symmetric else np.uint8) and scale.shape == (3, 4, 1)
    for i in range(3):
        for j in range(4):
            codes, s, z = _reference_row(x[i, j], symmetric, top)
            assert q[i, j].tolist() == codes and scale[i, j, 0] == s and zero[i, j, 0] == z
    assert scale[0, 1, 0] == 1.0 and np.all(q[0, 1] == zero[0, 1, 0])
    real = (q.astype(np.float64) - zero) * scale
    assert np.all(np.abs(real - x) <= scale / 2 + 1e-6 * np.abs(x))


def test_per_tensor_uint8_equals_dynamic_quantize_linear():
    from lowbit.backends.reference.kernels.quantized import dynamic_quantize_linear

    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype(np.float32) * 4
    q, s, z = dynamic_params(x, [0, 1, 2], False, False)
    q2, s2, z2 = dynamic_quantize_linear(None, [x])
    assert np.array_equal(q, q2) and s.item() == s2.item() and z.item() == z2.item()
    q0, s0, _ = dynamic_params(np.zeros((2, 3), np.float32), [0, 1], False, False)
    assert s0.item() == 1.0 and np.all(q0 == 0)


def _model(path, k=24, n=8, gemm=False, attention=False, zero_rows=()):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(n, k) if gemm else (k, n)).astype(np.float32)
    w[list(zero_rows)] = 0
    b = rng.normal(size=(n,)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    if gemm:
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc")]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", k])
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
                 helper.make_node("Add", ["h", "b"], ["y0"], name="bias")]
        last = "y0"
        if attention:
            nodes += [helper.make_node("Transpose", ["y0"], ["t"], perm=[0, 2, 1], name="tr"),
                      helper.make_node("MatMul", ["y0", "t"], ["y"], name="scores")]
        else:
            nodes += [helper.make_node("Identity", [last], ["y"], name="out")]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                          None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), path)
    return w, b


def test_integer_product_equals_an_int64_computation(tmp_path):
    w, b = _model(tmp_path / "m.onnx")
    x = np.random.default_rng(4).normal(size=(2, 5, 24)).astype(np.float32)
    x[1, 2] = 0
    q = quantize_dynamic(lowbit.load(tmp_path / "m.onnx")).graph
    y = lowbit.run(q, {"x": x})["y"]
    codes, s_a, z_a = dynamic_params(x, [-1], False, False)
    s_w = np.abs(w.astype(np.float64)).max(axis=0) / 127
    wq = np.clip(np.rint(w / s_w.astype(np.float32)), -127, 127).astype(np.int64)
    acc = (codes.astype(np.int64) - z_a.astype(np.int64)) @ wq
    expect = (acc * (s_a.astype(np.float64) * s_w.astype(np.float32))).astype(np.float32) + b
    np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-6)
    assert np.allclose(y[1, 2], b)  # an all-zero token gives exactly the bias


def test_activation_products_and_config_rules(tmp_path):
    _model(tmp_path / "m.onnx", attention=True)
    g = lowbit.load(tmp_path / "m.onnx")
    x = np.random.default_rng(5).normal(size=(2, 6, 24)).astype(np.float32)
    ref = lowbit.run(g, {"x": x})["y"]
    full = quantize_dynamic(g)
    modes = {r.name: r.mode for r in full.summary.rows}
    assert modes == {"proj": "int8", "scores": "int8"}
    no_act = quantize_dynamic(g, QuantConfig(rules=(Rule(name="scores",
                                                         activation_products=False),)))
    assert {r.name: r.mode for r in no_act.summary.rows} == {"proj": "int8", "scores": "float"}
    outs = {}
    for label, cfg in [("row", QuantConfig()),
                       ("head", QuantConfig().with_default(granularity="head")),
                       ("float proj", QuantConfig(rules=(Rule(name="proj", precision="float"),
                                                         Rule(name="scores",
                                                              precision="float"))))]:
        outs[label] = lowbit.run(quantize_dynamic(g, cfg).graph, {"x": x})["y"]
    assert np.array_equal(outs["float proj"], ref)
    assert not np.array_equal(outs["row"], outs["head"])
    for label in ("row", "head"):
        assert np.abs(outs[label] - ref).max() < 0.05 * np.abs(ref).max()


def test_bad_settings_are_refused(tmp_path):
    _model(tmp_path / "m.onnx")
    g = lowbit.load(tmp_path / "m.onnx")
    with pytest.raises(LowbitError, match="8 bits"):
        quantize_dynamic(g, QuantConfig().with_default(precision="int16"))
    with pytest.raises(LowbitError, match="granularity"):
        QuantConfig.from_yaml_text("default:\n  granularity: token\n")


@pytest.mark.parametrize("settings", [{}, {"granularity": "tensor"},
                                      {"scheme": "symmetric", "granularity": "head"},
                                      {"reduce_range": True, "weight_scheme": "asymmetric",
                                       "per_channel": False}])
def test_onnxruntime_runs_the_export_and_agrees(tmp_path, settings):
    import onnxruntime as ort
    _model(tmp_path / "m.onnx", attention=True)
    _model(tmp_path / "g.onnx", gemm=True)
    rng = np.random.default_rng(6)
    for name, x in (("m", rng.normal(size=(2, 6, 24))), ("g", rng.normal(size=(5, 24)))):
        x = (x * 3).astype(np.float32)
        x[0, 1] = 0
        q = quantize_dynamic(lowbit.load(tmp_path / f"{name}.onnx"),
                             QuantConfig().with_default(**settings)).graph
        lowbit.save(q, tmp_path / "q.onnx")
        model = onnx.load(tmp_path / "q.onnx")
        if settings.get("granularity", "group") == "group":  # QDQ form, int8 weights in file
            big = [t.data_type for t in model.graph.initializer if np.prod(t.dims) >= 24 * 8]
            assert big == [TensorProto.INT8]
        else:
            assert "MatMulInteger" in {n.op_type for n in model.graph.node}
        got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
        want = lowbit.run(q, {"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def _layernorm_model(path, k=16, n=6):
    rng = np.random.default_rng(7)
    gamma = rng.uniform(0.5, 1.5, k).astype(np.float32)
    gamma[3] = 25.0  # an outlier channel, as transformer LayerNorms have
    inits = [numpy_helper.from_array(gamma, "gamma"),
             numpy_helper.from_array(rng.normal(size=k).astype(np.float32) * 0.1, "beta"),
             numpy_helper.from_array(rng.normal(size=(k, n)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(size=(k, n)).astype(np.float32), "w2")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1,
                              name="ln"),
             helper.make_node("MatMul", ["ln", "w"], ["y1"], name="q"),
             helper.make_node("MatMul", ["ln", "w2"], ["y2"], name="k"),
             helper.make_node("Add", ["y1", "y2"], ["y"], name="sum")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                          None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), path)


def test_layernorm_smoothing_is_exact_in_float_and_reduces_error(tmp_path):
    from lowbit.quant.smoothing import layernorm_ranges, smoothing_factors

    _layernorm_model(tmp_path / "ln.onnx")
    g = lowbit.load(tmp_path / "ln.onnx")
    ln = next(n for n in g.nodes if n.op_type == "LayerNormalization")
    ranges = layernorm_ranges(ln.outputs[0])
    gamma, beta = (np.abs(ln.inputs[i].const_value.astype(np.float64)) for i in (1, 2))
    np.testing.assert_allclose(ranges, gamma + beta)
    ws = [n.inputs[1].const_value for n in g.nodes if n.op_type == "MatMul"]
    t = smoothing_factors(ranges, ws, 0.5)
    w_max = np.maximum(np.abs(ws[0]).max(1), np.abs(ws[1]).max(1)).astype(np.float64)
    np.testing.assert_allclose(t, np.sqrt(np.maximum(ranges, 1e-5) / w_max), rtol=1e-6)
    own = np.sqrt(np.maximum(ranges, 1e-5) / np.abs(ws[0]).max(1))
    x = np.random.default_rng(8).normal(size=(3, 9, 16)).astype(np.float32)
    ref = lowbit.run(g, {"x": x})["y"]
    smoothed = quantize_dynamic(g)
    assert sum("LayerNorm-smoothed" in r.detail for r in smoothed.summary.rows) == 2
    dq = [n for n in smoothed.graph.nodes if n.op_type == "DynamicQuantize"]
    assert len(dq) == 2  # q and k each divide by their own factors
    q_node = next(n for n in smoothed.graph.nodes if n.name == "q")
    q_dq = q_node.inputs[0].producer
    np.testing.assert_allclose(q_dq.inputs[1].const_value, own, rtol=1e-6)
    errors = {}
    for alpha in (0.5, 0.0):
        q = quantize_dynamic(g, QuantConfig().with_default(smoothing=alpha)).graph
        errors[alpha] = np.abs(lowbit.run(q, {"x": x})["y"] - ref).mean()
    assert errors[0.5] < 0.7 * errors[0.0]
    import onnxruntime as ort

    lowbit.save(smoothed.graph, tmp_path / "q.onnx")
    got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    want = lowbit.run(smoothed.graph, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def test_decomposed_layernorm_is_smoothed_too(tmp_path):
    """Opset-14 exporters write LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add; `lowbit.load`
    fuses it into one LayerNormalization, whose reader is smoothed as usual."""
    rng = np.random.default_rng(9)
    k = 8
    gamma = rng.uniform(0.5, 2, k).astype(np.float32)
    beta = rng.normal(size=k).astype(np.float32)
    inits = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(rng.normal(size=(k, 4)).astype(np.float32), "w")]
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "gamma"], ["ng"]),
             helper.make_node("Add", ["ng", "beta"], ["ln"]),
             helper.make_node("MatMul", ["ln", "w"], ["y"], name="proj")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", k])
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                          None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]),
              tmp_path / "d.onnx")
    q = quantize_dynamic(lowbit.load(tmp_path / "d.onnx"))
    assert "LayerNorm-smoothed" in q.summary.rows[0].detail
    scale = next(n for n in q.graph.nodes if n.op_type == "DynamicQuantize").inputs[1]
    w = lowbit.load(tmp_path / "d.onnx").nodes[-1].inputs[1].const_value
    expect = np.sqrt((np.abs(gamma) + np.abs(beta)) / np.abs(w).max(1))
    np.testing.assert_allclose(scale.const_value, expect, rtol=1e-6)


def _ffn_model(path, k=12, hidden=24, n=6):
    """LayerNorm -> up projection (+bias) -> Gelu -> down projection, with one LayerNorm
    channel large and one up-projection weight driving a massive GELU channel from it."""
    rng = np.random.default_rng(10)
    gamma = rng.uniform(0.5, 1.5, k).astype(np.float32)
    gamma[2] = 20.0
    w_up = (rng.normal(size=(k, hidden)) * 0.1).astype(np.float32)
    w_up[2, 5] = 2.0  # neuron 5 follows LayerNorm channel 2: massive
    inits = [numpy_helper.from_array(gamma, "gamma"),
             numpy_helper.from_array(np.zeros(k, np.float32), "beta"),
             numpy_helper.from_array(w_up, "w_up"),
             numpy_helper.from_array(rng.normal(size=hidden).astype(np.float32) * 0.1, "b_up"),
             numpy_helper.from_array(rng.normal(size=(hidden, n)).astype(np.float32), "w_down")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "w_up"], ["u0"], name="up"),
             helper.make_node("Add", ["u0", "b_up"], ["u"]),
             helper.make_node("Gelu", ["u"], ["h"]),
             helper.make_node("MatMul", ["h", "w_down"], ["y"], name="down")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                          None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), path)
    return gamma, w_up


def test_gelu_outlier_channels_get_their_own_integer_product(tmp_path):
    import onnxruntime as ort

    from lowbit.quant.smoothing import gelu_outlier_channels

    gamma, w_up = _ffn_model(tmp_path / "ffn.onnx")
    g = lowbit.load(tmp_path / "ffn.onnx")
    gelu = next(n for n in g.nodes if n.op_type == "Gelu")
    e = (np.abs(w_up.astype(np.float64)) * gamma[:, None]).max(0)
    expect = np.sort(np.argsort(-e)[:2])
    assert gelu_outlier_channels(gelu.outputs[0], 2).tolist() == expect.tolist()
    assert 5 in expect
    x = np.random.default_rng(11).normal(size=(2, 7, 12)).astype(np.float32)
    ref = lowbit.run(g, {"x": x})["y"]
    split = quantize_dynamic(g)
    down = next(r for r in split.summary.rows if r.name == "down")
    assert f"GELU channels {expect.tolist()}" in down.detail and down.mode == "int8"
    ops = [n.op_type for n in split.graph.nodes]
    assert ops.count("DynamicMatMul") == 3 and "Gather" in ops
    errors = {}
    for count in (2, 0):
        q = quantize_dynamic(g, QuantConfig().with_default(outlier_channels=count)).graph
        errors[count] = np.abs(lowbit.run(q, {"x": x})["y"] - ref).mean()
    assert errors[2] < 0.7 * errors[0]
    lowbit.save(split.graph, tmp_path / "q.onnx")
    got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    want = lowbit.run(split.graph, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("activation", ["Relu", "Clip"])
def test_a_fused_relu_or_clip_stays_after_the_integer_product(tmp_path, activation):
    """The optimizer fuses MatMul + Relu/Clip into one MatMul with an output clamp; the integer
    product replacing it must keep the clamp (a separate float Clip), in lowbit and in the
    ONNX Runtime export."""
    import onnxruntime as ort

    rng = np.random.default_rng(9)
    w1 = rng.normal(size=(16, 32)).astype(np.float32)
    w2 = rng.normal(size=(32, 8)).astype(np.float32)
    clip_args = ["h"] if activation == "Relu" else ["h", "lo", "hi"]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
             helper.make_node(activation, clip_args, ["r"], name="act"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="second")]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(2.5, np.float32), "hi")]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]),
              tmp_path / "mlp.onnx")
    graph = lowbit.load(tmp_path / "mlp.onnx")
    assert [n.op_type for n in graph.nodes if n.op_type != "Constant"] == ["MatMul", "MatMul"]
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    h = x @ w1
    r = np.maximum(h, 0) if activation == "Relu" else np.clip(h, -1.0, 2.5)
    want = r @ w2
    q = quantize_dynamic(graph).graph
    clamps = [n for n in q.nodes if n.op_type == "Clip"]
    assert len(clamps) == 1 and clamps[0].outputs[0].name == "r"
    got = lowbit.run(q, {"x": x})["y"]
    assert 10 * np.log10((want ** 2).sum() / ((got - want) ** 2).sum()) > 35
    lowbit.save(q, tmp_path / "q.onnx")
    ort_y = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(ort_y, got, rtol=1e-5, atol=1e-4 * np.abs(got).max())


@pytest.mark.parametrize("symmetric", [False, True])
def test_grouped_parameters_follow_the_formula_group_by_group(symmetric):
    """Groups of 16 along a row of 40 (16, 16 and a short last group of 8), each coded by the
    per-row formula on its own elements; a zero group gets scale 1."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=(2, 3, 40)).astype(np.float32)
    x[..., :16] *= 30  # one loud group: without groups it would set every element's scale
    x[1, 2, 16:32] = 0
    q, scale, zero = dynamic_params(x, [-1], symmetric, False, group_size=16)
    top = 127 if symmetric else 255
    assert q.shape == x.shape and scale.shape == (2, 3, 3) and zero.shape == (2, 3, 3)
    for i in range(2):
        for j in range(3):
            for k, (start, stop) in enumerate(((0, 16), (16, 32), (32, 40))):
                codes, s, z = _reference_row(x[i, j, start:stop], symmetric, top)
                assert q[i, j, start:stop].tolist() == codes
                assert scale[i, j, k] == s and zero[i, j, k] == z
    assert scale[1, 2, 1] == 1.0
    whole = dynamic_params(x, [-1], symmetric, False)
    quiet = np.s_[..., 16:]
    err = {}
    for label, (qq, ss, zz) in (("group", (q, np.repeat(scale, 16, -1)[..., :40],
                                           np.repeat(zero, 16, -1)[..., :40])),
                                ("row", whole)):
        err[label] = np.abs((qq.astype(np.float64) - zz) * ss - x)[quiet].mean()
    assert err["group"] < err["row"] / 10


def _grouped_reference(x, w, b, group, per_channel=True, asymmetric_weights=False):
    """The grouped product computed independently: loops over groups, int64 sums."""
    k, n = w.shape
    y = np.zeros(x.shape[:-1] + (n,), np.float64)
    for start in range(0, k, group):
        xs, ws = x[..., start:start + group], w[start:start + group].astype(np.float64)
        codes, s_a, z_a = dynamic_params(xs, [-1], False, False)
        if asymmetric_weights:
            lo = np.minimum(ws.min(0 if per_channel else None), 0)
            hi = np.maximum(ws.max(0 if per_channel else None), 0)
            s_w = ((hi - lo) / 255).astype(np.float32)
            z_w = np.clip(np.rint(-128 - lo / s_w), -128, 127)
        else:
            s_w = (np.abs(ws).max(0 if per_channel else None) / 127).astype(np.float32)
            z_w = np.zeros_like(s_w)
        wq = np.clip(np.rint(w[start:start + group] / s_w) + z_w, -128, 127)
        acc = (codes.astype(np.int64) - z_a.astype(np.int64)) @ (wq - z_w).astype(np.int64)
        y += acc * (s_a.astype(np.float64) * s_w.astype(np.float64))
    return (y.astype(np.float32) + b).astype(np.float32)


@pytest.mark.parametrize("settings", [{}, {"per_channel": False},
                                      {"weight_scheme": "asymmetric"}])
def test_grouped_integer_product_and_its_onnxruntime_export(tmp_path, settings):
    """K = 40 in groups of 16: lowbit's kernel equals the group-by-group int64 computation, and
    ONNX Runtime runs the export (QDQ form, the weights int8 in the file) to the same result."""
    import onnxruntime as ort

    w, b = _model(tmp_path / "m.onnx", k=40, n=8)
    x = np.random.default_rng(13).normal(size=(2, 5, 40)).astype(np.float32)
    x[..., 20:30] *= 40
    x[1, 2] = 0
    cfg = QuantConfig().with_default(group_size=16, smoothing=0.0, outlier_channels=0,
                                     activation_products=False, **settings)
    result = quantize_dynamic(lowbit.load(tmp_path / "m.onnx"), cfg)
    row = next(r for r in result.summary.rows if r.name == "proj")
    assert "per group of 16" in row.detail and row.mode == "int8"
    q = result.graph
    y = lowbit.run(q, {"x": x})["y"]
    expect = _grouped_reference(x, w, b, 16, settings.get("per_channel", True),
                                settings.get("weight_scheme") == "asymmetric")
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-5 * np.abs(expect).max())
    assert np.allclose(y[1, 2], b)
    lowbit.save(q, tmp_path / "q.onnx")
    model = onnx.load(tmp_path / "q.onnx")
    weights = [t for t in model.graph.initializer if t.data_type == TensorProto.INT8]
    assert [list(t.dims) for t in weights] == [[3, 16, 8]]  # [G, g, N], K padded to 48
    got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5 * np.abs(y).max())


def test_groups_keep_a_quiet_part_of_the_row_accurate(tmp_path):
    """With a loud input channel (whose weights are 0, so the output is made of quiet ones),
    per-row parameters code the quiet channels with a handful of levels; groups of 8 spoil
    only the loud channel's own group."""
    _model(tmp_path / "m.onnx", k=40, n=8, zero_rows=[3])
    g = lowbit.load(tmp_path / "m.onnx")
    x = np.random.default_rng(14).normal(size=(4, 6, 40)).astype(np.float32)
    x[..., 3] *= 100
    ref = lowbit.run(g, {"x": x})["y"]
    err = {}
    for label, cfg in (("row", {"granularity": "row"}), ("group", {"group_size": 8})):
        q = quantize_dynamic(g, QuantConfig().with_default(**cfg)).graph
        err[label] = np.abs(lowbit.run(q, {"x": x})["y"] - ref).mean()
    assert err["group"] < err["row"] / 2, err


def test_group_size_must_be_a_positive_whole_number():
    for bad in (0, -4, 2.5, True):
        with pytest.raises(LowbitError, match="group_size"):
            QuantConfig().with_default(group_size=bad)
    assert QuantConfig.from_yaml_text("default:\n  group_size: 64\n").default.group_size == 64


def _attention_model(path, k=24, d=8):
    """h = x W; P = Softmax(h hᵀ); y = P h: P·V's inner dimension is the sequence (symbolic)."""
    rng = np.random.default_rng(15)
    inits = [numpy_helper.from_array(rng.normal(size=(k, d)).astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1], name="tr"),
             helper.make_node("MatMul", ["h", "ht"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "h"], ["y"], name="mix")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                          None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), path)


@pytest.mark.parametrize("seq", [40, 5])
def test_grouped_products_of_two_activations_and_their_export(tmp_path, seq):
    """P·V in groups of 16 keys (ragged for 40: 16, 16, 8): lowbit's product equals a group-by-
    group computation from its own codes, and the ONNX export, whose padding is computed at run
    time from the sequence length, agrees in ONNX Runtime."""
    import onnxruntime as ort

    from lowbit.backends.reference.interpreter import Interpreter

    _attention_model(tmp_path / "a.onnx")
    x = np.random.default_rng(16).normal(size=(2, seq, 24)).astype(np.float32) * 0.3
    result = quantize_dynamic(lowbit.load(tmp_path / "a.onnx"),
                              QuantConfig().with_default(group_size=16))
    row = next(r for r in result.summary.rows if r.name == "mix")
    assert row.detail.startswith("two activations (right operand per group of a column)")
    assert row.detail.endswith("per group of 16")
    q = result.graph
    mix = next(n for n in q.nodes if n.name == "mix")
    assert mix.attrs["group_size"] == 16
    seen = {}

    def keep(node, outputs):
        for v, arr in zip(node.outputs, outputs, strict=False):
            seen[v.name] = np.asarray(arr)

    y = Interpreter(q, [keep])({"x": x})["y"]
    a, s_a, z_a, b, s_b, z_b = (seen[v.name] for v in mix.inputs[:6])
    assert s_a.shape == (2, seq, -(-seq // 16)) and s_b.shape == (2, -(-seq // 16), 8)
    by_hand = np.zeros((2, seq, 8))
    for j, start in enumerate(range(0, seq, 16)):
        part = slice(start, start + 16)
        ca = a[..., part].astype(np.int64) - z_a[..., j:j + 1]
        cb = b[:, part].astype(np.int64) - z_b[:, j:j + 1]
        by_hand += (ca @ cb) * s_a[..., j:j + 1].astype(np.float64) * s_b[:, j:j + 1]
    np.testing.assert_allclose(y, by_hand.astype(np.float32), rtol=1e-6, atol=1e-7)
    lowbit.save(q, tmp_path / "q.onnx")
    got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5 * np.abs(y).max())


def test_groups_keep_small_probabilities_beside_an_attention_sink(tmp_path):
    """A probability row with one key at 0.3 and 255 near-equal keys sharing the rest: per row,
    uint8 codes give the small ones a level or two, all rounded the same way, so P·V is off by
    a sizeable share of the mass; in groups of 32 only the sink's own group is coarse."""
    nodes = [helper.make_node("MatMul", ["p", "v"], ["y"], name="mix")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("p", TensorProto.FLOAT,
                                                                     [1, 4, 256]),
                                       helper.make_tensor_value_info("v", TensorProto.FLOAT,
                                                                     [1, 256, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]),
              tmp_path / "pv.onnx")
    rng = np.random.default_rng(17)
    p = rng.uniform(0.9, 1.1, (1, 4, 256))
    p[..., 0] = p[..., 1:].sum(-1) * 0.3 / 0.7  # the others get 2.1-2.6 steps of 0.3 / 255
    p = (p / p.sum(-1, keepdims=True)).astype(np.float32)
    v = (1 + 0.1 * rng.normal(size=(1, 256, 4))).astype(np.float32)
    graph = lowbit.load(tmp_path / "pv.onnx")
    want = lowbit.run(graph, {"p": p, "v": v})["y"]
    err = {}
    for label, cfg in (("row", {"granularity": "row"}), ("group", {})):
        q = quantize_dynamic(graph, QuantConfig().with_default(**cfg)).graph
        err[label] = np.abs(lowbit.run(q, {"p": p, "v": v})["y"] - want).max()
    assert err["row"] > 0.02 and err["group"] < err["row"] / 5, err


def _embedding_model(path, rows):
    rng = np.random.default_rng(11)
    table = (rng.standard_normal((rows, 8)) * rng.uniform(0.01, 3, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
         helper.make_node("MatMul", ["e", "w"], ["y"], name="proj")], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["B", "S", 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 4])],
        [numpy_helper.from_array(table, "table"),
         numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return table


def test_embedding_tables_are_int8_per_column_and_exact_through_gather(tmp_path):
    """A Gather of a table of >= EMBEDDING_ROWS rows reads int8 codes, one scale per column:
    its output is exactly dequantize(quantize(table))[ids]; the export holds int8 and ONNX
    Runtime gives the same rows; a float rule or a small table keeps the float table."""
    from lowbit.ir.types import QuantParams, TensorType
    from lowbit.numerics import arith
    from lowbit.quant import calibration
    from lowbit.quant.dynamic import EMBEDDING_ROWS

    table = _embedding_model(tmp_path / "m.onnx", EMBEDDING_ROWS)
    g = lowbit.load(tmp_path / "m.onnx")
    ids = np.array([[0, 5, EMBEDDING_ROWS - 1], [7, 7, 3]], np.int64)
    q = quantize_dynamic(g)
    assert {r.name: (r.mode, r.detail) for r in q.summary.rows}["embed"] == (
        "int8", f"int8 table per column ({EMBEDDING_ROWS} rows)")
    ops = [(n.op_type, n.domain) for n in q.graph.nodes if n.op_type != "Constant"]
    assert ops[:3] == [("Quantize", "lowbit"), ("Gather", ""),
                       ("Dequantize", "lowbit")], ops
    params = calibration.weight_params(table, dtype=lowbit.ir.dtypes.INT8, scheme="symmetric",
                                       axis=1)
    assert isinstance(params, QuantParams) and params.scale.shape == (8,)
    t = TensorType(lowbit.ir.dtypes.INT8, table.shape, params)
    expect = ((arith.quantize(table, t).astype(np.float32) - params.zero_point.astype(np.float32))
              * params.scale)[ids]
    assert np.array_equal(lowbit.run(q.graph, {"ids": ids})["e"], expect)
    assert np.abs(expect - table[ids]).max() <= params.scale.max() / 2 + 1e-6
    lowbit.save(q.graph, tmp_path / "q.onnx")
    saved = onnx.load(str(tmp_path / "q.onnx"))
    assert [i.data_type for i in saved.graph.initializer if list(i.dims) == [EMBEDDING_ROWS, 8]
            ] == [TensorProto.INT8]
    import onnxruntime as ort

    e_ort, y_ort = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=[
        "CPUExecutionProvider"]).run(None, {"ids": ids})
    assert np.array_equal(e_ort, expect)
    np.testing.assert_allclose(y_ort, lowbit.run(q.graph, {"ids": ids})["y"], rtol=1e-5,
                               atol=1e-5)
    kept = quantize_dynamic(g, QuantConfig(rules=(Rule(name="embed", precision="float"),)))
    assert {r.name: r.mode for r in kept.summary.rows}["embed"] == "float"
    assert not any(n.op_type == "Dequantize" for n in kept.graph.nodes)
    _embedding_model(tmp_path / "small.onnx", EMBEDDING_ROWS - 1)
    small = quantize_dynamic(lowbit.load(tmp_path / "small.onnx"))
    assert "embed" not in {r.name for r in small.summary.rows}
