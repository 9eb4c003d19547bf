"""Static quantization end to end on small graphs: decisions, integer execution, config rules,
ONNX export agreement with ONNX Runtime, and refusals."""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.errors import ConfigError, InputError
from lowbit.frontends.onnx_import import import_model
from lowbit.passes import optimize
from lowbit.passes.verifier import verify
from lowbit.quant.config import QuantConfig
from lowbit.quant.static import QuantizationError, quantize

RNG = np.random.default_rng(7)


def _reseed(name: str) -> None:
    """Draws restart from a generator of their own (tests/conftest.py does so before each
    test; the module's fixture does it too, so its data does not depend on the test that
    creates it)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(name.encode()))


def _init(name, shape, scale=0.3):
    return numpy_helper.from_array((RNG.normal(size=shape) * scale).astype(np.float32), name)


def small_cnn() -> lowbit.Graph:
    """conv(3->8) + BN + relu -> depthwise conv + relu6 -> maxpool -> conv -> add skip ->
    GAP -> flatten-free Gemm via Reshape-free path (GAP output squeezed by a MatMul)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["bn1"],
                         name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="dw", group=8,
                         pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"], name="relu6"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p", "w3"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "p"], ["s"], name="skip"),
        helper.make_node("Sigmoid", ["s"], ["sg"], name="gate"),
        helper.make_node("Mul", ["s", "sg"], ["sw"], name="swish"),
        helper.make_node("GlobalAveragePool", ["sw"], ["gap"], name="gap"),
        helper.make_node("Conv", ["gap", "w4", "b4"], ["logits"], name="head"),
    ]
    inits = [
        _init("w1", (8, 3, 3, 3)), _init("b1", (8,)),
        numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "g"),
        _init("beta", (8,)), _init("mu", (8,), 0.1),
        numpy_helper.from_array(RNG.uniform(0.5, 2, 8).astype(np.float32), "var"),
        _init("w2", (8, 1, 3, 3)), _init("b2", (8,)),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
        _init("w3", (8, 8, 1, 1)), _init("w4", (10, 8, 1, 1)), _init("b4", (10,)),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        ["N", 3, 12, 12])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    return optimize(import_model(model, "cnn"))


def batches(n=6, batch=4):
    return [{"x": RNG.normal(size=(batch, 3, 12, 12)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def cnn():
    _reseed("cnn")
    graph = small_cnn()
    data = batches()
    return graph, data, lowbit.profile(graph, data, progress=False)


def _cos(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_every_node_computes_in_integers_and_tracks_float(cnn):
    graph, _, prof = cnn
    result = quantize(graph, prof, assert_all_quantized=True)
    q = result.graph
    verify(q)
    ops = {r.op_type: r.mode for r in result.summary.rows}
    assert ops == {"Conv": "int8", "MaxPool": "int8", "Add": "int8", "Sigmoid": "int8",
                   "Mul": "int8", "GlobalAveragePool": "int8"}
    assert "BatchNormalization" not in q.op_histogram()
    x = batches(1)[0]
    ref = lowbit.run(graph, x)["logits"]
    got = lowbit.run(q, x)["logits"]
    assert _cos(ref, got) > 0.995
    # The conv weights are per-channel int8 and the biases int32 at s_in * s_w.
    conv = next(n for n in q.nodes if n.name == "conv1")
    w_t, b_t = conv.inputs[1].type, conv.inputs[2].type
    assert w_t.dtype.name == "int8" and w_t.quant.axis == 0 and w_t.quant.channels == 8
    assert b_t.dtype.name == "int32" and np.all(b_t.quant.zero_point == 0)
    np.testing.assert_allclose(b_t.quant.scale, (conv.inputs[0].type.quant.scale *
                                                 w_t.quant.scale).astype(np.float32))


def test_fused_relu6_becomes_the_output_range(cnn):
    graph, _, prof = cnn
    q = quantize(graph, prof).graph
    dw = next(n for n in q.nodes if n.name == "dw")
    lo, hi = dw.outputs[0].type.quant.real_range(dw.outputs[0].type.dtype)
    assert lo == 0.0 and 5.0 < hi <= 6.05


@pytest.mark.parametrize("wide", [False, True], ids=["int8", "conv3 int16"])
@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_exported_model_agrees_with_onnxruntime(cnn, tmp_path, form, wide):
    """Both forms run in ONNX Runtime to lowbit's result, also with an int16 layer (whose
    nodes QOperator writes in QDQ form: ONNX Runtime's integer operators take 8 bits)."""
    graph, _, prof = cnn
    config = QuantConfig.from_dict({"rules": [{"name": "conv3", "precision": "int16"}]}
                                   if wide else {})
    q = quantize(graph, prof, config).graph
    path = tmp_path / f"m_{form}.onnx"
    lowbit.save(q, path, format=form)
    onnx.checker.check_model(onnx.load(path))
    x = batches(1, batch=8)[0]
    ours = lowbit.run(q, x)["logits"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = session.run(None, x)[0]
    # The head returns float straight from its accumulator: one unit of its int8 input moves
    # an output by at most s_in * max|w|.
    head = next(n for n in q.nodes if n.name == "head")
    assert head.outputs[0].type.quant is None and head.inputs[0].type.quant is not None
    w_q = head.inputs[1].producer.inputs[0].const_value
    unit = float(head.inputs[0].type.quant.scale) * float(np.abs(w_q).max())
    ulps = np.abs(ours - theirs) / unit
    assert np.mean(ulps <= 1.0 + 1e-3) >= 0.99, np.max(ulps)
    if form == "qoperator":
        ops = {n.op_type for n in onnx.load(path).graph.node}
        assert {"QLinearConv", "QLinearMul", "QLinearSigmoid", "QLinearGlobalAveragePool"} <= ops
        assert ("QLinearAdd" in ops) != wide  # the skip Add reads conv3's int16 result
        if wide:
            conv3 = next(n for n in onnx.load(path).graph.node if n.name == "conv3")
            assert conv3.op_type == "Conv"


def test_config_rules_change_the_result(cnn):
    graph, _, prof = cnn
    first_float = QuantConfig.from_dict({"rules": [{"name": "conv1", "precision": "float"}]})
    res = quantize(graph, prof, first_float)
    row = next(r for r in res.summary.rows if r.name == "conv1")
    assert row.mode == "float" and "config" in row.detail
    conv1 = next(n for n in res.graph.nodes if n.name == "conv1")
    assert conv1.outputs[0].type.dtype.name == "float32"

    wide = QuantConfig.from_dict({"rules": [{"name": "conv3", "precision": "int16"}]})
    res = quantize(graph, prof, wide)
    conv3 = next(n for n in res.graph.nodes if n.name == "conv3")
    assert conv3.outputs[0].type.dtype.name == "int16"
    assert int(conv3.outputs[0].type.quant.zero_point) == 0

    by_regex = QuantConfig.from_dict({"rules": [{"regex": "conv[0-9]", "per_channel": False}]})
    res = quantize(graph, prof, by_regex)
    for n in res.graph.nodes:
        if n.name in ("conv1", "conv3"):
            assert n.inputs[1].type.quant.axis is None
        if n.name == "head":
            assert n.inputs[1].type.quant.axis == 0
    with pytest.raises(QuantizationError, match="conv1"):
        quantize(graph, prof, first_float, assert_all_quantized=True)


def test_int16_layer_is_more_accurate_than_int8(cnn):
    graph, data, prof = cnn
    x = data[0]  # calibrated inputs: no clipping, so the error is all rounding
    ref = lowbit.run(graph, x)["logits"]
    all16 = QuantConfig.from_dict({"default": {"precision": "int16", "weight_precision": "int16"}})
    err8 = np.abs(lowbit.run(quantize(graph, prof).graph, x)["logits"] - ref).max()
    err16 = np.abs(lowbit.run(quantize(graph, prof, all16).graph, x)["logits"] - ref).max()
    assert err16 < err8 / 20


def test_fp16_rule_computes_the_layer_in_half_precision(cnn, tmp_path):
    graph, data, prof = cnn
    x = data[0]
    ref = lowbit.run(graph, x)["logits"]
    config = QuantConfig.from_dict({"default": {"precision": "fp16"}})
    result = quantize(graph, prof, config)
    modes = {r.op_type: r.mode for r in result.summary.rows}
    assert modes["Conv"] == "fp16"
    conv = next(n for n in result.graph.nodes if n.op_type == "Conv")
    assert str(conv.inputs[0].type).startswith("f16")
    assert str(conv.outputs[0].type).startswith("f16")
    got = lowbit.run(result.graph, x)["logits"]
    assert got.dtype == np.float32
    err16 = np.abs(got - ref).max()
    err8 = np.abs(lowbit.run(quantize(graph, prof).graph, x)["logits"] - ref).max()
    assert 0 < err16 < err8 / 5  # measured 9.8x (int8 with bias correction)
    path = tmp_path / "fp16.onnx"
    lowbit.save(result.graph, path)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(theirs, got, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


def test_bias_never_saturates():
    w = np.full((2, 1, 1, 1), 1e-3, np.float32)
    b = np.array([1e6, -1.0], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c")]
    g = helper.make_graph(nodes, "b", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 1, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "b")
    x = [{"x": RNG.uniform(-1e-3, 1e-3, (1, 1, 2, 2)).astype(np.float32)}]
    q = quantize(graph, lowbit.profile(graph, x, progress=False)).graph
    conv = next(n for n in q.nodes if n.op_type == "Conv")
    s = conv.inputs[2].type.quant.scale.astype(np.float64)
    assert np.all(np.abs(b / s) <= 2**30)
    got = lowbit.run(q, x[0])["y"]
    ref = lowbit.run(graph, x[0])["y"]
    np.testing.assert_allclose(got[0, 0], ref[0, 0], rtol=1e-2)


def test_zero_weights_get_a_valid_scale():
    w = np.zeros((3, 2, 1, 1), np.float32)
    w[1] = 0.5
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c")]
    g = helper.make_graph(nodes, "z", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 2, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "z")
    x = [{"x": np.zeros((1, 2, 2, 2), np.float32)}]
    q = quantize(graph, lowbit.profile(graph, x, progress=False)).graph
    for v in q.values():
        if v.type is not None and v.type.quant is not None:
            s = v.type.quant.scale
            assert np.all(np.isfinite(s)) and np.all(s > 0)
    assert np.all(lowbit.run(q, x[0])["y"] == 0)


def test_profile_of_another_graph_is_refused(cnn):
    graph, data, _ = cnn
    other = small_cnn()
    other.nodes[-1].attrs["group"] = 1
    other_profile = lowbit.profile(other, data[:1], progress=False)
    other_profile.graph_hash = "0" * 64
    with pytest.raises(InputError, match="different graph"):
        quantize(graph, other_profile)


def test_rule_naming_a_missing_node_is_refused(cnn):
    graph, _, prof = cnn
    config = QuantConfig.from_dict({"rules": [{"name": "conv_missing", "precision": "float"}]})
    with pytest.raises(ConfigError, match="conv_missing"):
        quantize(graph, prof, config)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
])
def test_integer_average_pool_matches_float_and_onnxruntime(attrs, tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("AveragePool", ["c"], ["p"], name="avg", **attrs),
             helper.make_node("Relu", ["p"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "a", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [2, 3, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_init("w", (4, 3, 1, 1))])
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "a")
    data = [{"x": RNG.normal(size=(2, 3, 7, 7)).astype(np.float32)} for _ in range(4)]
    q = quantize(graph, lowbit.profile(graph, data, progress=False),
                 assert_all_quantized=True).graph
    pool = next(n for n in q.nodes if n.name == "avg")
    step = float(pool.outputs[0].type.quant.scale)
    ours = lowbit.run(q, data[0])["y"]
    assert np.abs(ours - lowbit.run(graph, data[0])["y"]).max() < 3 * step
    path = tmp_path / "a.onnx"
    lowbit.save(q, path, format="qdq")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = session.run(None, data[0])[0]
    assert np.mean(np.abs(ours - theirs) <= step * 1.001) >= 0.99


def test_requant_encoding_is_selectable_and_both_stay_close(cnn):
    graph, data, prof = cnn
    results = {}
    for method in ("q31", "prescale"):
        q = quantize(graph, prof, QuantConfig.from_dict({"default": {"requant": method}})).graph
        assert {n.attrs.get("requant") for n in q.nodes if n.op_type == "Conv"} == {method}
        results[method] = lowbit.run(q, data[0])["logits"]
    default = lowbit.run(quantize(graph, prof).graph, data[0])["logits"]
    np.testing.assert_array_equal(default, results["prescale"])  # the 8-bit default
    assert np.abs(results["q31"] - results["prescale"]).max() < 0.05


def test_softmax_output_uses_its_fixed_range():
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="sm", axis=-1),
             helper.make_node("MatMul", ["p", "w"], ["y"], name="mm")]
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [2, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_init("w", (6, 3))])
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "s")
    data = [{"x": RNG.normal(size=(2, 6)).astype(np.float32)}]
    res = quantize(graph, lowbit.profile(graph, data, progress=False))
    mm = next(n for n in res.graph.nodes if n.name == "mm")
    assert mm.inputs[0].type.quant.real_range(mm.inputs[0].type.dtype) == pytest.approx(
        (0.0, 1.0), abs=1e-6)
    assert next(r for r in res.summary.rows if r.name == "sm").mode == "float"


def test_quantize_dequantize_simplification():
    from lowbit.ir import dtypes
    from lowbit.ir.graph import Graph
    from lowbit.ir.types import QuantParams, TensorType
    from lowbit.passes.quant_cleanup import simplify_quantize

    g = Graph("q")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, (4,)))
    t8 = TensorType(dtypes.INT8, (4,), QuantParams(0.1, 0))
    t8b = TensorType(dtypes.INT8, (4,), QuantParams(0.2, 3))
    q = g.make_node("Quantize", [x], domain="lowbit", output_types=[t8]).output
    dq = g.make_node("Dequantize", [q], domain="lowbit",
                     output_types=[TensorType(dtypes.FLOAT32, (4,))]).output
    q_again = g.make_node("Quantize", [dq], domain="lowbit", output_types=[t8b]).output
    r1 = g.make_node("Requantize", [q_again], domain="lowbit", output_types=[t8]).output
    back = g.make_node("Dequantize", [r1], domain="lowbit",
                       output_types=[TensorType(dtypes.FLOAT32, (4,))]).output
    total = g.make_node("Add", [back, dq], output_types=[TensorType(dtypes.FLOAT32, (4,))])
    g.outputs.append(total.output)
    simplify_quantize(g)
    verify(g)
    # Q(DQ(q)) becomes Requantize(q); the Requantize chain back to q's own type disappears,
    # leaving DQ(q) = DQ(Q(x)), which becomes x like the Add's other operand.
    assert [n.op_type for n in g.nodes] == ["Add"]
    assert g.nodes[0].inputs == [x, x]


def _x_to_y(nodes, inits, name: str, x_shape: list, opset: int) -> lowbit.Graph:
    """The optimized lowbit graph of ONNX `nodes` from float input x (`x_shape`) to output y."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x_shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return optimize(import_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", opset)]), name))


def _post_ln_block() -> lowbit.Graph:
    """A post-LayerNorm transformer layer's feed-forward half whose output has an outlier
    channel, as BERT's do: x -> MatMul(W1) + b1 -> Relu -> MatMul(W2) + b2 -> Add(x) ->
    LayerNorm."""
    d, f = 16, 32
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="up_bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="act"),
        helper.make_node("MatMul", ["r", "w2"], ["o"], name="down"),
        helper.make_node("Add", ["o", "b2"], ["ob"], name="down_bias"),
        helper.make_node("Add", ["ob", "x"], ["s"], name="residual"),
        helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], name="norm",
                         axis=-1),
    ]
    w2 = RNG.normal(size=(f, d)) * 0.3
    w2[:, 3] *= 60
    inits = [_init("w1", (d, f)), _init("b1", (f,)),
             numpy_helper.from_array(w2.astype(np.float32), "w2"), _init("b2", (d,)),
             numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(d, np.float32), "beta")]
    return _x_to_y(nodes, inits, "ffn", ["N", 5, d], 17)


def _residual_stream(n):
    return {"x": RNG.normal(size=(n, 5, 16)).astype(np.float32)}


def test_nodes_only_float_nodes_read_stay_float():
    """Integers pay only where an integer node reads the result: the residual Add and the bias
    Add before it feed a LayerNorm (float), so they stay float and say why, and the product
    before them returns float from its accumulator instead of rounding its result to 8 bits
    with a range the outlier channel sets. The first product's bias Add and the Relu feed the
    second product, so they compute in integers. Measured: cosine 0.9995 to float (0.9941 with
    every node in integers)."""
    graph = _post_ln_block()
    calib = [_residual_stream(4) for _ in range(4)]
    result = quantize(graph, lowbit.profile(graph, calib, progress=False))
    rows = {r.name: r for r in result.summary.rows}
    for name in ("up", "down"):
        assert rows[name].mode == "int8"
    assert rows["up_bias"].mode == "int8"
    assert "float output from the int32 accumulator (only float nodes read it)" in \
        rows["down"].detail
    for name in ("down_bias", "residual"):
        assert rows[name].mode == "float"
        assert "only float nodes read its result" in rows[name].detail
    down = next(n for n in result.graph.nodes if n.name == "down")
    assert down.inputs[0].type.quant is not None and down.outputs[0].type.quant is None
    x = _residual_stream(8)
    ref, got = lowbit.run(graph, x)["y"], lowbit.run(result.graph, x)["y"]
    assert _cos(ref, got) > 0.999


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_product_before_its_bias_add_keeps_an_int16_result(tmp_path, form):
    """ONNX has no MatMul with bias: with `int16_before_bias` (the default), the up
    projection's result, read only by the Add of its bias, is rounded to int16 (an int8 x int8
    product still), so the 8-bit rounding happens once, after the bias. That Add's result is
    closer to float than with two 8-bit roundings (the setting off). Both exports run in ONNX
    Runtime to lowbit's result, with the product computed in integers: the export writes its
    result as float straight into the bias Add, which ONNX Runtime fuses."""
    graph = _post_ln_block()
    calib = [_residual_stream(4) for _ in range(4)]
    prof = lowbit.profile(graph, calib, progress=False)
    result = quantize(graph, prof)
    up = next(n for n in result.graph.nodes if n.name == "up")
    assert up.outputs[0].type.dtype.name == "int16" and up.inputs[0].type.dtype.name == "int8"
    row = next(r for r in result.summary.rows if r.name == "up")
    assert row.mode == "int8" and "int16 result (its only reader adds a constant bias" in \
        row.detail
    bias = next(n for n in result.graph.nodes if n.name == "up_bias")
    assert bias.outputs[0].type.dtype.name == "int8"
    off = quantize(graph, prof, QuantConfig.from_dict({"default": {"int16_before_bias": False}}))
    assert next(n for n in off.graph.nodes if n.name == "up").outputs[0].type.dtype.name == \
        "int8"
    data = [_residual_stream(16) for _ in range(8)]
    value = bias.outputs[0].name
    # measured over 4 seeds of this block: +0.4 to +2.0 dB
    assert _sqnr(graph, result.graph, data, value) > _sqnr(graph, off.graph, data, value)
    _check_onnxruntime_agrees(result.graph, tmp_path, form, data[0])
    model = onnx.load(tmp_path / "m.onnx")
    up = next(n for n in model.graph.node if n.name == "up")
    assert [n.op_type for n in model.graph.node if up.output[0] in n.input] == ["Add"]
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(tmp_path / "m.onnx"), options, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node]
    assert "MatMul" not in ops and ops.count("MatMulIntegerToFloat") == 2, ops


def _sqnr(graph, quantized, data, value: str) -> float:
    """SQNR of `value` in `quantized` against `graph` over `data` (lowbit.compare)."""
    return next(s for s in lowbit.compare(graph, quantized, data).layers if s.name == value).sqnr


def _check_onnxruntime_agrees(quantized, tmp_path, form: str, x, cos: float = 0.99999) -> None:
    path = tmp_path / "m.onnx"
    lowbit.save(quantized, path, format=form)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert _cos(session.run(None, x)[0], lowbit.run(quantized, x)["y"]) > cos


def _gelu_block() -> lowbit.Graph:
    """x -> MatMul(W1) + b1 -> Gelu -> MatMul(W2) -> y, the GELU's input with an outlier
    neuron 8x the others, as BERT's feed-forward layers have."""
    d, f = 16, 32
    w1 = RNG.normal(size=(d, f)) * 0.3
    w1[:, 7] *= 15
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="up_bias"),
             helper.make_node("Gelu", ["hb"], ["g"], name="gelu"),
             helper.make_node("MatMul", ["g", "w2"], ["y"], name="down")]
    inits = [numpy_helper.from_array(w1.astype(np.float32), "w1"), _init("b1", (f,)),
             _init("w2", (f, d))]
    return _x_to_y(nodes, inits, "gelu", ["N", 5, d], 20)


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_lookup_table_input_is_int16(tmp_path, form):
    """With `int16_before_table` (the default), the GELU's input, which only the GELU (a
    lookup table) reads, is rounded to int16 and the table has 65536 entries; its output, read
    by a product, is int8. With an outlier neuron setting the input's range, the GELU's result
    is closer to float than with an 8-bit input (the setting off; both with
    `int16_before_bias`), and both exports run in ONNX Runtime to lowbit's."""
    graph = _gelu_block()
    prof = lowbit.profile(graph, [_residual_stream(4) for _ in range(4)], progress=False)
    result = quantize(graph, prof)
    nodes = {n.name: n for n in result.graph.nodes}
    assert nodes["up_bias"].outputs[0].type.dtype.name == "int16"
    assert nodes["gelu"].inputs[0].type.dtype.name == "int16"
    assert nodes["gelu"].outputs[0].type.dtype.name == "int8"
    assert nodes["down"].inputs[0].type.dtype.name == "int8"
    row = next(r for r in result.summary.rows if r.name == "up_bias")
    assert row.mode == "int16" and "only lookup tables read it" in row.detail
    off = quantize(graph, prof, QuantConfig.from_dict({"default": {"int16_before_table": False}}))
    assert next(n for n in off.graph.nodes if n.name == "up_bias").outputs[0].type.dtype.name \
        == "int8"
    data = [_residual_stream(16) for _ in range(8)]

    # measured over 8 seeds of this block: the table's input +1.7 to +20.8 dB (its error is now
    # the product's and its input's); its result +0.25 to +2.8 dB (the table's own 8-bit
    # rounding is left)
    assert _sqnr(graph, result.graph, data, "hb") > _sqnr(graph, off.graph, data, "hb") + 1
    assert _sqnr(graph, result.graph, data, "g") > _sqnr(graph, off.graph, data, "g") + 0.1
    # the exports compute the int16 input in float (no int16 rounding): the GELU's int8 codes
    # differ from lowbit's by one on 0.1-0.3 % of values (measured over 3 seeds), the output's
    # cosine is 0.99999 less a few millionths (tests/frontends/test_quantized_export.py)
    _check_onnxruntime_agrees(result.graph, tmp_path, form, data[0], cos=0.9999)


def _layernorm_product() -> lowbit.Graph:
    """x -> LayerNorm (one channel's scale 30x the rest, as transformers' LayerNorms have) ->
    MatMul(W) -> y."""
    d, n = 16, 12
    gamma = np.ones(d, np.float32)
    gamma[5] = 30.0
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="norm",
                              axis=-1),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="proj")]
    inits = [numpy_helper.from_array(gamma, "gamma"), _init("beta", (d,), 0.1),
             _init("w", (d, n))]
    return _x_to_y(nodes, inits, "ln", ["N", 4, d], 17)


def test_products_reading_a_layernorm_are_smoothed():
    """SmoothQuant: the product's input is divided by t in a float Mul before its Quantize and
    the weight multiplied by t, so the outlier channel no longer sets the int8 step of the
    others; the statistics of x / t carried over from the profile are those of x / t itself,
    and the error is lower than without smoothing (measured: 7x and 19x lower mean square error,
    depending on the weights drawn)."""
    rng = np.random.default_rng(5)
    graph = _layernorm_product()
    calib = [{"x": rng.normal(size=(4, 4, 16)).astype(np.float32)} for _ in range(4)]
    prof = lowbit.profile(graph, calib, progress=False)
    result = quantize(graph, prof)
    detail = next(r.detail for r in result.summary.rows if r.name == "proj")
    assert "smoothed (alpha 0.5" in detail and "min-max range of the smoothed input" in detail
    q = result.graph
    proj = next(n for n in q.nodes if n.name == "proj")
    quant = proj.inputs[0].producer
    mul = quant.inputs[0].producer
    assert quant.op_type == "Quantize" and mul.op_type == "Mul"
    inverse = mul.inputs[1].const_value.astype(np.float64)
    assert np.argmax(1 / inverse) == 5  # the outlier channel is divided most
    # the smoothed input's range is the range of x / t over the calibration data
    smoothed = np.concatenate([_layernorm_out(graph, b) for b in calib]) * inverse.astype(
        np.float32)
    t = quant.outputs[0].type
    lo, hi = t.quant.real_range(t.dtype)
    step = float(t.quant.scale)  # the zero point's rounding moves the range by under a step
    assert abs(lo - smoothed.min()) < step and abs(hi - smoothed.max()) < step
    x = {"x": rng.normal(size=(8, 4, 16)).astype(np.float32)}
    ref = lowbit.run(graph, x)["y"].astype(np.float64)
    plain = quantize(graph, prof, QuantConfig.from_dict({"default": {"smoothing": 0}}))
    assert "smoothed" not in next(r.detail for r in plain.summary.rows if r.name == "proj")
    errors = [((lowbit.run(g, x)["y"] - ref) ** 2).mean() for g in (q, plain.graph)]
    assert errors[0] < errors[1] / 2, errors


def _layernorm_out(graph, batch):
    from lowbit.backends.reference.interpreter import Interpreter

    seen = {}

    def keep(node, outputs):
        if node.name == "norm":
            seen["h"] = np.asarray(outputs[0])

    Interpreter(graph, [keep])(batch)
    return seen["h"]


def test_explicit_pad_on_the_input_computes_in_integers():
    """Legacy exporters put 'same' padding in a Pad before the first Conv: the Pad's float
    input (the graph input) is quantized with its profile statistics and the Pad moves codes,
    so the model is integer end to end (before, it stayed float and failed
    --assert-all-quantized); zeros are exact, so the result is the same."""
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
             helper.make_node("Conv", ["p", "w", "b"], ["y"], name="conv", strides=[2, 2])]
    inits = [numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
             _init("w", (4, 3, 3, 3)), _init("b", (4,))]
    graph = _x_to_y(nodes, inits, "pad", ["N", 3, 8, 8], 17)
    data = [{"x": RNG.normal(size=(2, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
    result = quantize(graph, lowbit.profile(graph, data, progress=False),
                      assert_all_quantized=True)
    row = next(r for r in result.summary.rows if r.name == "pad")
    assert row.mode == "int8" and row.detail == "keeps its input's parameters"
    ref = lowbit.run(graph, data[0])["y"]
    assert _cos(ref, lowbit.run(result.graph, data[0])["y"]) > 0.999
