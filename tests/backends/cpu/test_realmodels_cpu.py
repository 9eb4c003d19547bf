"""Real models on the cpu backend, bit for bit against the reference interpreter on every ISA
path: EfficientNet-Lite0 quantized with lowbit's defaults (the efficientnet_int8 fixture of
conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS
from shared_profiles import shared_profile

import lowbit
from lowbit.backends import cpu

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def efficientnet_reference(efficientnet_int8):
    q, photos = efficientnet_int8
    pick = photos[[1, 40]]
    return pick, [lowbit.run(q, {"input": p[None]})["logits"] for p in pick]


@pytest.mark.parametrize("isa", ISAS)
def test_efficientnet_lite0_int8_is_bit_exact(efficientnet_int8, efficientnet_reference, isa):
    q, _ = efficientnet_int8
    pick, refs = efficientnet_reference
    exe = cpu.compile(q, isa=isa, threads=2)
    for p, ref in zip(pick, refs, strict=True):
        np.testing.assert_array_equal(exe({"input": p[None]})["logits"], ref)
    steps = exe.compiled()[0].steps
    assert sum("+ node_add" in s for s in steps) == 9  # every residual Add fused
    assert not any("quantized Add" in s for s in steps)


def test_float_models_match_the_reference():
    """EfficientNet-Lite0 and PP-OCR's direction classifier (unknown height and width,
    compiled for the sizes of the call) in float: convolutions, depthwise ones, HardSwish,
    HardSigmoid, averages, Softmax."""
    from realmodels import efficientnet, load_photos, ocr_model, ocr_text_lines

    cases = [(lowbit.load(efficientnet(True)), {"input": load_photos()[:1]}),
             (lowbit.load(ocr_model("cls")), {"x": ocr_text_lines(2, width=192)})]
    for graph, feeds in cases:
        exe = cpu.compile(graph)
        ref = lowbit.run(graph, feeds)
        for name, want in ref.items():
            np.testing.assert_allclose(exe(feeds)[name], want, rtol=1e-5,
                                       atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("name", ["cls", "rec", "det"])
def test_pp_ocr_int8_and_float_on_the_cpu_backend(name):
    """PaddleOCR's three models (Paddle2ONNX: unknown batch, height and width; attention in
    the recognizer, ConvTransposes (their BatchNormalization folded; upsampling, so 1x1 Conv
    and DepthToSpace: passes.upsampling_conv) and nearest Resize in the detector), quantized
    with lowbit's defaults: bit-exact with the reference on every ISA path, at batch 1 and 2
    of one compiled program; in float within 1e-5."""
    from realmodels import ocr_model, ocr_photos, ocr_text_lines

    graph = lowbit.load(ocr_model(name))
    data = ocr_photos()[:4] if name == "det" else \
        ocr_text_lines(6, width=192 if name == "cls" else 320)
    q = lowbit.quantize(graph, shared_profile(graph, [{"x": data[i:i + 1]}
                                                      for i in range(0, len(data), 2)]))
    feeds = [{"x": data[:1]}, {"x": data[1:3]}]
    refs = [lowbit.run(q, f) for f in feeds]
    for isa in ISAS:
        exe = cpu.compile(q, isa=isa)
        for f, ref in zip(feeds, refs, strict=True):
            for k, want in ref.items():
                np.testing.assert_array_equal(exe(f)[k], want, err_msg=f"{name} {isa}")
        assert len(exe.compiled()) == 1
    exe = cpu.compile(graph)
    for k, want in lowbit.run(graph, feeds[1]).items():
        np.testing.assert_allclose(exe(feeds[1])[k], want, rtol=1e-5,
                                   atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("name", ["mnist", "effnet", "cls"])
def test_onnxruntime_quantize_static_files_match_the_reference(name, tmp_path):
    """ONNX Runtime's quantize_static files (per channel) as lowbit imports them: QDQ (float
    ops between QuantizeLinear/DequantizeLinear, constant ones folded by the reference kernels)
    and QOperator (QLinearConv, QGemm, QLinearAdd, ... with ONNX Runtime's float32
    requantization): the same outputs as the reference on every ISA path."""
    import contextlib

    from onnxruntime.quantization import QuantFormat, quantize_static

    from lowbit.cli.demo import bundled
    from realmodels import calibration_reader, efficientnet, load_photos, ocr_model, ocr_text_lines

    if name == "mnist":
        with np.load(bundled("digits.npz")) as d:
            src, feed, data = bundled("mnistnet.onnx"), "input", d["images"][:60]
    elif name == "effnet":
        src, feed, data = efficientnet(True), "input", load_photos()[:12]
    else:
        src, feed, data = ocr_model("cls"), "x", ocr_text_lines(6, width=192)
    forms = [QuantFormat.QDQ] if name == "cls" else [QuantFormat.QDQ, QuantFormat.QOperator]
    for form in forms:  # (cls in QOperator form needs QLinearSoftmax, which import refuses)
        dst = tmp_path / f"{name}_{form.name}.onnx"
        with contextlib.chdir(tmp_path):
            quantize_static(str(src), str(dst), calibration_reader(
                [{feed: data[i:i + 1]} for i in range(0, len(data), 3)]), quant_format=form,
                per_channel=True)
        graph = lowbit.load(dst)
        x = data[:1]
        ref = lowbit.run(graph, {feed: x})
        for isa in ISAS:
            got = cpu.compile(graph, isa=isa)({feed: x})
            for k, want in ref.items():
                np.testing.assert_array_equal(got[k], want, err_msg=f"{name} {form} {isa}")
