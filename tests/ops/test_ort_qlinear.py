"""ONNX Runtime's QLinear element-wise, pooling and activation ops (com.microsoft): lowbit's
kernels against ONNX Runtime on random one-node models, for uint8 and int8 codes, and whole
QOperator models (lowbit's own export, ONNX Runtime's quantize_static) loaded and run by
lowbit."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import helper
from ort_compare import run_lowbit, run_ort

import lowbit
from realmodels import calibration_reader

RNG = np.random.default_rng(23)


def _model(op_type: str, inputs: dict[str, np.ndarray], attrs: dict | None = None
           ) -> onnx.ModelProto:
    node = helper.make_node(op_type, list(inputs), ["y"], domain="com.microsoft",
                            **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                  a.shape) for n, a in inputs.items()]
    graph = helper.make_graph([node], op_type, graph_inputs,
                              [helper.make_value_info("y", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model


def _codes(dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _params(dtype, lo=0.005, hi=0.05) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype)
    return (np.array(RNG.uniform(lo, hi), np.float32),
            np.array(RNG.integers(info.min // 2, info.max // 2), dtype))


def _cases(dtype):
    x = _codes(dtype, (2, 6, 5, 7))
    sx, zx = _params(dtype)
    sy, zy = _params(dtype, 0.01, 0.08)
    b = _codes(dtype, (6, 1, 7))  # broadcasts against x
    sb, zb = _params(dtype)
    binary = {"A": x, "A_scale": sx, "A_zero_point": zx, "B": b, "B_scale": sb,
              "B_zero_point": zb, "C_scale": sy, "C_zero_point": zy}
    unary = {"X": x, "X_scale": sx, "X_zero_point": zx, "Y_scale": sy, "Y_zero_point": zy}
    mul_out = {**binary, "C_scale": np.array(float(sx) * float(sb) * 37.3, np.float32)}
    other = _codes(dtype, (2, 3, 5, 7))
    so, zo = _params(dtype)
    concat = {"Y_scale": sy, "Y_zero_point": zy, "X0": x, "X0_scale": sx, "X0_zero_point": zx,
              "X1": other, "X1_scale": so, "X1_zero_point": zo, "X2": x, "X2_scale": sy,
              "X2_zero_point": zy}
    return [("QLinearAdd", binary, {}), ("QLinearMul", mul_out, {}),
            ("QLinearSigmoid", {**unary, "Y_scale": np.array(1 / 256, np.float32)}, {}),
            ("QLinearLeakyRelu", unary, {"alpha": 0.1}),
            ("QLinearGlobalAveragePool", {**unary, "Y_scale": sx}, {"channels_last": 0}),
            ("QLinearGlobalAveragePool", {**unary, "Y_scale": sx}, {"channels_last": 1}),
            ("QLinearConcat", concat, {"axis": 1})]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["uint8", "int8"])
def test_kernels_agree_with_onnxruntime(dtype):
    """Every code within one of ONNX Runtime's, and all but a few exactly equal (ONNX
    Runtime's vector kernels round through fixed-point multipliers or a faster logistic)."""
    for op_type, inputs, attrs in _cases(dtype):
        model = _model(op_type, inputs, attrs)
        ours, theirs = run_lowbit(model, inputs)[0], run_ort(model, inputs)[0]
        assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape, op_type
        diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.99, (op_type, attrs,
                                                                 (diff == 0).mean())


def test_bad_operands_are_refused_with_the_node_named():
    inputs = {"A": _codes(np.uint8, (3,)), "A_scale": np.array(0.1, np.float32),
              "A_zero_point": np.array(3, np.uint8), "B": _codes(np.int8, (3,)),
              "B_scale": np.array(0.1, np.float32), "B_zero_point": np.array(0, np.int8),
              "C_scale": np.array(0.1, np.float32), "C_zero_point": np.array(0, np.uint8)}
    with pytest.raises(lowbit.LowbitError, match=r"QLinearAdd.*one 8-bit type"):
        run_lowbit(_model("QLinearAdd", inputs), inputs)


def test_lowbit_reloads_its_own_qoperator_export_and_agrees_with_onnxruntime(tmp_path):
    """A quantized CNN with a skip Add, a Mul, a Sigmoid and global average pooling, exported
    in QOperator form (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearGlobalAveragePool), loads
    back into lowbit (it did not: those ops were refused), computes what ONNX Runtime does on
    the file, and `dump` prints each such op's formula and parameters."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "quant"))
    from test_static import batches, small_cnn

    graph = small_cnn()
    q = lowbit.quantize(graph, lowbit.profile(graph, batches(4), progress=False))
    path = tmp_path / "q.onnx"
    lowbit.save(q, path, format="qoperator")
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearGlobalAveragePool"} <= ops
    loaded = lowbit.load(path)
    x = batches(1, batch=8)[0]
    ours = lowbit.run(loaded, x)["logits"]
    theirs = run_ort(onnx.load(path), x)[0]
    original = lowbit.run(q, x)["logits"]
    scale = np.abs(original).max()
    assert np.abs(ours - theirs).max() <= 0.05 * scale, np.abs(ours - theirs).max() / scale
    assert np.abs(ours - original).max() <= 0.05 * scale
    from lowbit.tools.dump import dump

    records, _ = dump(loaded, x)
    add = next(r for r in records if r.op_type == "QLinearAdd")
    assert add.integer[0].startswith("C = saturate(round_half_even((A_scale (A - A_zp)")
    assert "C_zero_point" in add.integer[1]


def test_models_quantized_by_onnxruntime_in_qoperator_form_load(tmp_path):
    """onnxruntime.quantization.quantize_static in QOperator form writes QLinearAdd,
    QLinearConcat, QLinearGlobalAveragePool and QLinearSigmoid for a CNN with those ops; lowbit
    loads the model and its logits follow ONNX Runtime's."""
    from onnxruntime.quantization import QuantFormat, quantize_static

    w = {n: onnx.numpy_helper.from_array((RNG.normal(size=s) * 0.3).astype(np.float32), n)
         for n, s in (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("wm", (16, 4)))}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["g"]),
             helper.make_node("Concat", ["g", "r1"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", onnx.TensorProto.FLOAT, [1, 4])], list(w.values()))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = [RNG.normal(size=(1, 3, 8, 8)).astype(np.float32) for _ in range(12)]

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, calibration_reader([{"x": d} for d in data[:8]]),
                        quant_format=QuantFormat.QOperator,
                        per_channel=True, reduce_range=True)
        quantized = onnx.load(dst)
        loaded = lowbit.load(dst)
    ops = {n.op_type for n in quantized.graph.node}
    assert {"QLinearAdd", "QLinearConcat", "QLinearGlobalAveragePool",
            "QLinearSigmoid"} <= ops, ops
    for x in data[8:]:
        ours = lowbit.run(loaded, {"x": x})["y"]
        theirs = run_ort(quantized, {"x": x})[0]
        assert np.abs(ours - theirs).max() <= 0.05 * np.abs(theirs).max() + 1e-6
