"""PaddleOCR's PP-OCRv4 models quantized by lowbit (defaults, and with channel equalization
off) and by ONNX Runtime's quantize_static (QDQ, per channel, int8), same calibration data, in
one run: calibrated on each third of the inputs in turn, measured on all of them.

- recognizer: 90 text lines rendered from the polarity sentences (tests/realmodels.py);
  character error rate against the rendered texts, lines decoded as float decodes them, output
  SQNR;
- detector: the real photos at 320 x 320; IoU of the probability map above 0.3 (rapidocr's
  threshold) with float's, SQNR of the map;
- direction classifier: 90 lines at 48 x 192, every other one upside down; decisions kept,
  SQNR of the probabilities.

    python benchmarks/ocr_vs_onnxruntime.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests")]

import onnxruntime as ort  # noqa: E402

from realmodels import (  # noqa: E402
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

SETTINGS = {"lowbit defaults": {}, "lowbit, equalization off": {"default": {"equalization": 0}}}


def outputs(name: str, data: np.ndarray, third: int, tmp: Path) -> dict[str, np.ndarray]:
    """Each method's outputs on all of `data`, calibrated on data[third::3]."""
    ours, peer = ocr_quantized(name, data, tmp, list(SETTINGS.values()), third)
    return {**dict(zip(SETTINGS, ours, strict=True)), "ORT quantize_static per-channel": peer}


def main() -> None:
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's warnings on bias inputs
    ort.set_default_logger_severity(3)
    chars = ocr_characters()
    lines, texts = ocr_text_lines(90), ocr_texts(90)
    flipped = ocr_text_lines(90, width=192)
    flipped[1::2] = flipped[1::2, :, ::-1, ::-1]
    photos = ocr_photos()

    def strings(probs):
        return ["".join(chars[c] for c in s) for s in ctc_strings(probs)]

    def cer(probs):
        wrong = sum(edit_distance(a, b) for a, b in zip(strings(probs), texts, strict=True))
        return wrong / sum(len(t) for t in texts)

    def iou(ref, got):
        return ((ref > 0.3) & (got > 0.3)).sum() / ((ref > 0.3) | (got > 0.3)).sum()

    rec_float = onnxruntime_outputs(ocr_model("rec"), lines)
    det_float = onnxruntime_outputs(ocr_model("det"), photos)
    cls_float = onnxruntime_outputs(ocr_model("cls"), flipped)
    print(f"recognizer float: character error rate {cer(rec_float):.2%} on {len(lines)} lines")
    with tempfile.TemporaryDirectory() as tmp:
        for third in range(3):
            print(f"\ncalibrated on inputs {third}, {third + 3}, ... (every third)")
            rec = outputs("rec", lines, third, Path(tmp))
            det = outputs("det", photos, third, Path(tmp))
            cls = outputs("cls", flipped, third, Path(tmp))
            for label in rec:
                same = np.mean([a == b for a, b in zip(strings(rec[label]), strings(rec_float),
                                                       strict=True)])
                kept = (cls[label].argmax(1) == cls_float.argmax(1)).mean()
                print(f"  {label:<32} rec CER {cer(rec[label]):6.2%} same {same:6.2%} "
                      f"{sqnr(rec_float, rec[label]):5.2f} dB | det IoU "
                      f"{iou(det_float, det[label]):.3f} {sqnr(det_float, det[label]):5.2f} dB"
                      f" | cls kept {kept:6.2%} {sqnr(cls_float, cls[label]):5.2f} dB")


if __name__ == "__main__":
    main()
