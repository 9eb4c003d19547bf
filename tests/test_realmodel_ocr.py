"""PaddleOCR's PP-OCRv4 models, quantized as a new user would (defaults, a few dozen calibration
inputs), against ONNX Runtime's quantize_static (per channel, QDQ) in the same test.

The models come from Paddle2ONNX: they declare inputs [-1, 3, "?", "?"], spell batch norm as
Mul and Add and HardSwish as Add, Clip, Mul and Div. lowbit reads them, folds the spelled-out
batch norms into the convolutions and fuses each HardSwish into one lookup table.
Data: text lines rendered from real sentences (recognizer, direction classifier, half of them
upside down) and the real photos (detector)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from shared_profiles import shared_profile, shared_result

import lowbit
from realmodels import (
    ctc_strings,
    edit_distance,
    ocr_characters,
    ocr_model,
    ocr_photos,
    ocr_quantized,
    ocr_text_lines,
    ocr_texts,
    onnxruntime_outputs,
    sqnr,
)

pytestmark = pytest.mark.realmodel


def _quantized(name: str, data: np.ndarray, tmp_path, *configs: dict):
    """(float outputs, lowbit W8A8 outputs for each config (defaults when none is given),
    ONNX Runtime per-channel QDQ outputs), all calibrated on every third input. The profile
    and ONNX Runtime's outputs are computed once for every run of the same inputs, lowbit and
    ONNX Runtime (tests/shared_profiles.py); lowbit's quantized models never are."""
    ours, peer = ocr_quantized(name, data, tmp_path, list(configs or ({},)),
                               profile=shared_profile, cache=shared_result)
    model = ocr_model(name)
    ref = shared_result(lambda: onnxruntime_outputs(model, data), "float outputs",
                        ort.__version__, model, data)
    return ref, ours, peer


# HardSwish nodes each model spells out in elementwise ops.
HARD_SWISH = {"det": 24, "rec": 28, "cls": 18}


@pytest.mark.parametrize("name", ["det", "rec", "cls"])
def test_pp_ocr_loads_folds_and_runs_as_onnxruntime(name):
    graph = lowbit.load(ocr_model(name))
    ops = [n.op_type for n in graph.nodes]
    assert ops.count("HardSwish") == HARD_SWISH[name]
    assert "Div" not in ops  # every x * relu6(x + 3) / 6 became a HardSwish
    users = graph.users()
    for node in graph.nodes:  # no Mul or Add of a constant and a Conv's result it alone reads
        if node.op_type in ("Mul", "Add"):
            after_conv = any(v.producer is not None and v.producer.op_type == "Conv"
                             and len(users[v]) == 1 for v in node.inputs)
            assert not (after_conv and any(v.is_constant for v in node.inputs)), node.name
    shape = {"det": (2, 3, 320, 320), "rec": (2, 3, 48, 320), "cls": (2, 3, 48, 192)}[name]
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    ref = ort.InferenceSession(str(ocr_model(name))).run(None, {"x": x})[0]
    got = lowbit.run(graph, {"x": x})[graph.outputs[0].name]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_pp_ocr_direction_classifier_int8(tmp_path):
    """Measured (45 lines): lowbit 26.6 dB (28.9 with channel equalization off), ONNX Runtime
    21.9 dB; every decision the float model makes with probability >= 0.9 is kept (one line it
    calls 0.67 / 0.33 flips)."""
    lines = ocr_text_lines(45, width=192)
    lines[1::2] = lines[1::2, :, ::-1, ::-1]  # every other line upside down
    ref, (got, plain), peer = _quantized("cls", lines, tmp_path, {},
                                         {"default": {"equalization": 0}})
    assert (ref.argmax(1) == np.arange(len(lines)) % 2).mean() >= 0.9  # the float model reads it
    figures = [round(sqnr(ref, v), 2) for v in (got, plain, peer)]
    sure = ref.max(1) >= 0.9
    assert sure.sum() >= 40 and (got.argmax(1) == ref.argmax(1))[sure].all(), figures
    assert figures[0] >= 24.0 and figures[0] >= figures[2] + 3.0, figures


def test_pp_ocr_recognizer_int8_reads_nearly_what_float_reads(tmp_path):
    """The recognizer is the hard one: its PP-LCNetV3 convolutions read tensors whose largest
    channel reaches 10-45 where the median one stays below 0.5 (after HardSwish and the
    learnable affine), so one 8-bit scale per tensor leaves most channels a few codes; channel
    equalization (`lowbit.quant.equalization`) gives them their range back. Measured on 90
    lines, each calibration third (benchmarks/ocr_vs_onnxruntime.py): character error rate
    against the rendered texts float 10.6 %, lowbit 10.3-13.4 %, channel equalization off
    12.2-19.1 %, ONNX Runtime 36.6-40.8 %."""
    lines, truth = ocr_text_lines(45), ocr_texts(45)
    ref, (got, plain), peer = _quantized("rec", lines, tmp_path, {},
                                         {"default": {"equalization": 0}})
    chars = ocr_characters()

    def strings(probs):
        return ["".join(chars[c] for c in s) for s in ctc_strings(probs)]

    def cer(probs):
        errors = sum(edit_distance(a, b) for a, b in zip(strings(probs), truth, strict=True))
        return errors / sum(len(t) for t in truth)

    def same(probs):
        return np.mean([a == b for a, b in zip(strings(probs), strings(ref), strict=True)])

    figures = {k: (round(cer(v), 4), round(same(v), 4), round(sqnr(ref, v), 2))
               for k, v in (("float", ref), ("lowbit", got), ("off", plain), ("ort", peer))}
    assert figures["float"][0] <= 0.12, figures  # the float model reads the lines
    assert figures["lowbit"][0] <= figures["float"][0] + 0.03, figures
    assert figures["lowbit"][0] <= figures["off"][0] - 0.03, figures
    assert figures["lowbit"][1] >= 0.6 and figures["ort"][1] <= 0.1, figures
    assert figures["lowbit"][2] >= figures["off"][2] + 1.5, figures


def test_pp_ocr_detector_int8(tmp_path):
    """The probability map thresholded at 0.3 (rapidocr's setting) keeps its shape. Measured
    (87 photos, each calibration third): lowbit IoU 0.87-0.91, with channel equalization off
    0.71-0.85; ONNX Runtime 0.72-0.78."""
    photos = ocr_photos()
    ref, (got, plain), peer = _quantized("det", photos, tmp_path, {},
                                         {"default": {"equalization": 0}})

    def iou(a, b):
        return ((a > 0.3) & (b > 0.3)).sum() / ((a > 0.3) | (b > 0.3)).sum()

    figures = [round(iou(ref, v), 3) for v in (got, plain, peer)]
    assert figures[0] >= 0.85, figures
    assert figures[0] >= figures[1] + 0.03, figures  # channel equalization
    assert figures[0] >= figures[2] + 0.05, figures  # ONNX Runtime
