"""lowbit dump: the tensors and statistics it reports are the interpreter's, and the integer
parameters it prints reproduce a quantized Conv's output codes by hand."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from params_check import check_dump_matches_kernels

import lowbit
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.cli.demo import bundled
from lowbit.errors import InputError
from lowbit.tools.dump import dump, render

MODEL = bundled("mnistnet.onnx")


@pytest.fixture(scope="module")
def quantized(mnist_profiled):
    graph, prof, x = mnist_profiled
    return lowbit.quantize(graph, prof), x[300:303]


def _all_values(graph, inputs):
    store = {}

    def keep(node, outputs):
        for v, a in zip(node.outputs, outputs, strict=False):
            store[v.name] = np.asarray(a)

    Interpreter(graph, [keep])(inputs)
    return store


def test_tensors_and_statistics_are_the_interpreters(quantized):
    q, x = quantized
    records, tensors = dump(q, {"input": x}, keep=True)
    values = _all_values(q, {"input": x})
    assert {r.name for r in records} == {n.name for n in q.nodes if n.op_type != "Constant"}
    for name, a in values.items():
        assert np.array_equal(tensors[name], a) and tensors[name].dtype == a.dtype
    conv = next(r for r in records if r.op_type == "Conv")
    out = conv.outputs[0]
    a = values[out.name]
    t = next(n for n in q.nodes if n.name == conv.name).outputs[0].type
    assert (out.min, out.max, out.mean) == (a.min(), a.max(), pytest.approx(a.mean()))
    assert out.std == pytest.approx(a.std())
    s, z = float(t.quant.scale), int(t.quant.zero_point)
    assert out.real_min == pytest.approx(s * (int(a.min()) - z))
    assert out.real_max == pytest.approx(s * (int(a.max()) - z))
    assert out.at_qmin == pytest.approx((a == -128).mean())
    assert out.at_qmax == pytest.approx((a == 127).mean())
    assert out.range_use == pytest.approx((int(a.max()) - int(a.min())) / 255)
    text = render(records)
    assert f"%{out.name}: i8[S:{s:.9f} O:{z}]" in text


def _conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Stride 1, padding 1 (centred codes: the zero point pads as 0), written out over the 9
    taps, independent of lowbit's kernels."""
    n, _, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((n, w.shape[0], h, wd), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return acc


def test_printed_integer_parameters_reproduce_a_conv_by_hand(quantized):
    q, x = quantized
    conv = next(n for n in q.nodes if n.op_type == "Conv" and n.name.endswith("features.3/Conv"))
    records, tensors = dump(q, {"input": x}, nodes=r"features\.3/Conv|_quantize$", keep=True)
    x_codes = _all_values(q, {"input": x})[conv.inputs[0].name].astype(np.int64)
    w_codes = tensors[conv.inputs[1].name].astype(np.int64)
    b_codes = tensors[conv.inputs[2].name].astype(np.int64)
    tx = conv.inputs[0].type
    z_x = int(tx.quant.zero_point)
    acc = _conv3x3(x_codes - z_x, w_codes) + b_codes.reshape(1, -1, 1, 1)
    p = {k.removeprefix(conv.name + "."): v for k, v in tensors.items()
         if k.startswith(conv.name + ".")}
    ch = (1, -1, 1, 1)
    t = np.clip(acc >> p["prescale_pre"].reshape(ch), -p["prescale_clip"].reshape(ch),
                p["prescale_clip"].reshape(ch))
    y = (t * p["prescale_scale"].reshape(ch) + (1 << (p["prescale_post"].reshape(ch) - 1))) \
        >> p["prescale_post"].reshape(ch)
    z_y = int(conv.outputs[0].type.quant.zero_point)
    by_hand = np.clip(y + z_y, -128, 127)
    got = tensors[conv.outputs[0].name]
    assert np.array_equal(by_hand, got)
    # the alternative Q31 encoding, also by hand: within one code of the prescale result
    h = (acc * p["q31_multiplier"].reshape(ch) << p["q31_left_shift"].reshape(ch)) + (1 << 30)
    h >>= 31
    r = p["q31_right_shift"].reshape(ch)
    y31 = (h + (np.int64(1) << np.maximum(r - 1, 0)) * (r > 0) - ((h < 0) & (r > 0))) >> r
    assert np.abs(np.clip(y31 + z_y, -128, 127) - got).max() <= 1
    assert np.allclose(p["M"], tx.quant.scale * conv.inputs[1].type.quant.scale
                       / conv.outputs[0].type.quant.scale)
    text = render([r for r in records if r.name == conv.name])
    assert "prescale (used)" in text and "q31 (alternative)" in text
    assert f"z_x {z_x}" in text


def test_tables_and_float_outputs_are_described(quantized):
    q, x = quantized
    records, tensors = dump(q, {"input": x}, nodes="Gemm", keep=True)
    last = records[-1]
    assert last.outputs[0].dtype == "float32" and last.outputs[0].real_min is None
    assert any(line.startswith("float output: y = float32(acc) * (s_x * s_w)")
               for line in last.integer)
    gemm = next(n for n in q.nodes if n.name == last.name)
    want = gemm.inputs[0].type.quant.scale * gemm.inputs[1].type.quant.scale
    assert np.allclose(tensors[f"{last.name}.dequantize_scale"], want)


def test_dump_prints_the_parameters_every_kernel_computes_with(quantized, mnist_profiled,
                                                               monkeypatch):
    """On every quantized node of MNISTNet (default int8, and int16 activations with int16
    weights, whose wide accumulators narrow by a shift that depends on the bias), the
    parameters `lowbit dump` prints are, number by number, the ones the reference kernel
    computed with."""
    q, x = quantized
    compared = check_dump_matches_kernels(q, {"input": x}, monkeypatch)
    assert compared == {"Conv": 2, "Gemm": 2}
    graph, prof, _ = mnist_profiled
    wide = lowbit.quantize(graph, prof, lowbit.QuantConfig.from_dict(
        {"default": {"precision": "int16", "weight_precision": "int16"}}))
    compared = check_dump_matches_kernels(wide, {"input": x}, monkeypatch)
    assert compared == {"Conv": 2, "Gemm": 2}
    records, _ = dump(wide, {"input": x}, nodes="Conv")
    assert all(any(line.startswith("wide operands: acc = (acc + 2**") for line in r.integer)
               for r in records)


def test_bad_node_patterns_are_refused(quantized):
    q, x = quantized
    with pytest.raises(InputError, match="matches no node"):
        dump(q, {"input": x}, nodes="Softmax")
    with pytest.raises(InputError, match="not a valid regular expression"):
        dump(q, {"input": x}, nodes="(")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lowbit", "dump", *map(str, args)],
                          capture_output=True, text=True)


def _dump_saved(quantized, tmp_path, form: str, nodes: str):
    """Save the quantized MNISTNet as `form`, dump `nodes` of the file into v.npz; (result, x)."""
    q, x = quantized
    lowbit.save(q, tmp_path / "q.onnx", format=form)
    np.save(tmp_path / "x.npy", x)
    r = _cli(tmp_path / "q.onnx", "--input", f"input={tmp_path / 'x.npy'}", "--nodes", nodes,
             "--npz", tmp_path / "v.npz")
    assert r.returncode == 0, r.stderr
    return r, x


def test_cli_on_a_qoperator_file_reproduces_qlinearconv_by_hand(quantized, tmp_path):
    r, x = _dump_saved(quantized, tmp_path, "qoperator", "QLinearConv|QuantizeLinear")
    assert r.stdout.count("  QLinearConv\n") == 2 and "(ONNX Runtime, float32)" in r.stdout
    loaded = lowbit.load(tmp_path / "q.onnx")
    values = _all_values(loaded, {"input": x})
    conv = next(n for n in loaded.nodes if n.op_type == "QLinearConv")
    with np.load(tmp_path / "v.npz") as saved:
        assert np.array_equal(saved[conv.outputs[0].name], values[conv.outputs[0].name])
        x_codes = saved[conv.inputs[0].name].astype(np.int64)
        M = saved[f"{conv.name}.M"]
        got = saved[conv.outputs[0].name]
    assert M.dtype == np.float32
    const = [None if v is None else v.const_value for v in conv.inputs]
    acc = _conv3x3(x_codes - int(const[2]), const[3].astype(np.int64))
    acc += const[8].astype(np.int64).reshape(1, -1, 1, 1)
    z_y = int(const[7])
    v = acc.astype(np.float32) * M.reshape(1, -1, 1, 1)
    assert got.dtype == np.uint8  # QOperator activations are uint8 (ONNX Runtime's fast path)
    by_hand = np.clip(np.rint(v.astype(np.float64)), 0 - z_y, 255 - z_y) + z_y
    assert np.array_equal(by_hand, got)
    assert f"z_y {z_y}" in r.stdout


def test_cli_on_a_qdq_file_reproduces_each_conv_from_its_printed_kernel(quantized, tmp_path):
    """lowbit's default export (QDQ) computes each Conv in float between DequantizeLinear and
    QuantizeLinear; dump gives the integer kernel ONNX Runtime fuses that into, and its .npz the
    codes, scales and M, from which the QuantizeLinear's codes are redone by hand."""
    r, _ = _dump_saved(quantized, tmp_path, "qdq", "Conv|QuantizeLinear")
    assert r.stdout.count("QDQ form: DequantizeLinear -> Conv -> QuantizeLinear") == 2
    loaded = lowbit.load(tmp_path / "q.onnx")
    users = loaded.users()
    convs = [n for n in loaded.nodes if n.op_type == "Conv"]
    assert len(convs) == 2
    with np.load(tmp_path / "v.npz") as saved:
        for conv in convs:
            x_codes = saved[conv.inputs[0].producer.inputs[0].name].astype(np.int64)
            (quantize, _), = users[conv.outputs[0]]
            got = saved[quantize.outputs[0].name]
            info = np.iinfo(got.dtype)
            got = got.astype(np.int64)
            p = {k: saved[f"{conv.name}.{k}"] for k in ("z_x", "w_codes", "z_w", "bias_codes",
                                                        "M")}
            assert p["M"].dtype == np.float32 and p["w_codes"].dtype == np.int8
            assert not p["z_w"].any()
            acc = _conv3x3(x_codes - int(p["z_x"]), p["w_codes"].astype(np.int64))
            acc += p["bias_codes"].astype(np.int64).reshape(1, -1, 1, 1)
            z_y = int(quantize.inputs[2].const_value)
            v = np.rint((acc.astype(np.float32) * p["M"].reshape(1, -1, 1, 1)).astype(np.float64))
            # the fused Relu: real values >= 0, codes >= z_y
            by_hand = np.clip(v + z_y, max(info.min, z_y), info.max)
            # the file computes the Conv in float before quantizing: codes agree but for rare
            # rounding ties of the float32 sums
            assert np.abs(by_hand - got).max() <= 1
            assert (by_hand == got).mean() > 0.99
    assert "fused clip: real values limited to [0, inf]" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--input", "nope={x}"], "nope"),
    (["--input", "input={bad}"], "shape"),
    (["--input", "input={x}", "--nodes", "Softmax"], "matches no node"),
    (["--input", "input={x}", "--nodes", "("], "not a valid regular expression"),
])
def test_cli_errors_name_the_problem_and_write_nothing(quantized, tmp_path, args, message):
    q, x = quantized
    lowbit.save(q, tmp_path / "q.onnx", format="qoperator")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "bad.npy", x[:, :, :5])
    args = [a.format(x=tmp_path / "x.npy", bad=tmp_path / "bad.npy") for a in args]
    r = _cli(tmp_path / "q.onnx", *args, "--npz", tmp_path / "v.npz")
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "v.npz").exists()


def test_a_grouped_dynamic_product_reproduces_from_the_dump(tmp_path):
    """For a dynamically quantized MatMul in groups, dump prints the group formula and keeps the
    run-time codes and parameters and the weights' [G, N] scales: enough to redo it by hand."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    w = rng.normal(size=(48, 5)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                          [numpy_helper.from_array(w, "w")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), tmp_path / "m.onnx")
    q = lowbit.quantize_dynamic(lowbit.load(tmp_path / "m.onnx"))
    x = rng.normal(size=(3, 48)).astype(np.float32)
    records, tensors = dump(q, {"x": x}, keep=True)
    fc = next(r for r in records if r.name == "fc")
    assert any(line.startswith("per group j of 32 along K") for line in fc.integer)
    assert any(line.startswith("B_scale [2, 5]") for line in fc.integer)
    node = next(n for n in q.nodes if n.name == "fc")
    codes, s_a, z_a = (tensors[v.name] for v in node.inputs[:3])
    w_codes = node.inputs[3].const_value.astype(np.int64)
    s_w = tensors["fc.B_scale"]
    assert s_a.shape == (3, 2) and s_w.shape == (2, 5)
    by_hand = np.zeros((3, 5))
    for j, part in enumerate((slice(0, 32), slice(32, 48))):
        acc = (codes[:, part].astype(np.int64) - z_a[:, j:j + 1]) @ w_codes[part]
        by_hand += acc * s_a[:, j:j + 1].astype(np.float64) * s_w[j].astype(np.float64)
    np.testing.assert_allclose(tensors["y"], by_hand.astype(np.float32), rtol=1e-6)
    assert "per group j of 32" in render(records)


def test_onnx_runtimes_dynamic_file_shows_its_integer_product(tmp_path):
    """ONNX Runtime's quantize_dynamic writes DynamicQuantizeLinear + MatMulInteger: dump prints
    the run-time parameter formula and the zero points the int32 product subtracts."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    import onnx

    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "f.onnx")
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"),
                     weight_type=QuantType.QInt8)
    x = rng.normal(size=(4, 16)).astype(np.float32)
    x[0, 0] = -3.0
    loaded = lowbit.load(tmp_path / "q.onnx")
    records, tensors = dump(loaded, {"x": x}, nodes="MatMulInteger|DynamicQuantizeLinear",
                            keep=True)
    text = render(records)
    assert "computed at run time: y_scale = (max(0, max(x)) - min(0, min(x))) / 255" in text
    product = next(n for n in loaded.nodes if n.op_type == "MatMulInteger")
    zero = int(np.asarray(product.inputs[3].const_value))
    assert f"b_zero_point {zero}" in text and "a_zero_point %" in text
    # the printed formula is what the run computed
    y_scale = (max(0.0, x.max()) - min(0.0, x.min())) / 255
    dq = next(n for n in loaded.nodes if n.op_type == "DynamicQuantizeLinear")
    assert tensors[dq.outputs[1].name] == pytest.approx(y_scale, rel=1e-6)
    assert int(tensors[dq.outputs[2].name]) == int(np.rint(-min(0.0, x.min()) / y_scale))
