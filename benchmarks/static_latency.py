"""What lowbit's static exports cost in ONNX Runtime, as ratios to the float model.

EfficientNet-Lite0 (calibrated on every third real photo of ../shared/EVAL.md, one photo of
224 x 224 a run) and all-MiniLM-L6-v2 (calibrated on the 24 texts of tests/realmodels.py
MINILM_CALIBRATION_TEXTS; batch 1, sequence length 128, as in benchmarks/dynamic_vs_peers.py),
statically quantized with lowbit and exported as QDQ and QOperator, next to ONNX Runtime's own
quantize_static (QDQ, per channel, same calibration data). For MiniLM also with
`int16_before_bias` and `int16_before_table` off (8-bit results before bias Adds and lookup
tables; both are on by default). PaddleOCR's PP-OCRv4 models (tests/realmodels.py: the
direction classifier on a 48 x 192 text line, the recognizer on 48 x 320, the detector on a
320 x 320 photo; calibrated on 15 lines or 29 photos). 2 threads, every model timed in the same
run as its float model, taking turns with it (median per run, threads not spinning between
runs: `dynamic_vs_peers.interleaved`).

    python benchmarks/static_latency.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

from dynamic_vs_peers import interleaved, ort_session  # noqa: E402

import lowbit  # noqa: E402
from lowbit.quant.config import QuantConfig  # noqa: E402
from realmodels import (  # noqa: E402
    MINILM_CALIBRATION_TEXTS,
    efficientnet,
    load_photos,
    minilm,
    minilm_tokens,
    ocr_model,
    ocr_photos,
    ocr_text_lines,
    ort_quantize,
)

MINILM_SETTINGS = {
    "lowbit defaults": {},
    "lowbit, int16 before bias and table off": {
        "default": {"int16_before_bias": False, "int16_before_table": False}},
}


def exports(src: Path, calib: list[dict], settings: dict[str, dict], tmp: Path
            ) -> dict[str, Path]:
    """The float model, lowbit's exports for each of `settings`, and ONNX Runtime's."""
    graph = lowbit.load(src)
    prof = lowbit.profile(graph, calib, progress=False)
    paths = {"float": src}
    for label, config in settings.items():
        q = lowbit.quantize(graph, prof, QuantConfig.from_dict(config))
        for form in ("qdq", "qoperator"):
            paths[f"{label} ({form})"] = tmp / f"{src.stem}_{len(paths)}.onnx"
            lowbit.save(q, paths[f"{label} ({form})"], format=form)
    paths["ORT quantize_static per-channel"] = tmp / f"{src.stem}_ort.onnx"
    ort_quantize(src, paths["ORT quantize_static per-channel"], calib, True)
    return paths


def table(title: str, paths: dict[str, Path], feed: dict, repeats: int) -> None:
    times = interleaved({label: ort_session(path, spinning=False)
                         for label, path in paths.items()}, feed, repeats)
    print(f"{title} (ratio to float):")
    for label, t in times.items():
        print(f"  {label:<52} {t * 1e3:7.2f} ms  x{t / times['float']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    photos = load_photos()
    with tempfile.TemporaryDirectory() as tmp:
        calib = [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)]
        paths = exports(efficientnet(True), calib, {"lowbit defaults": {}}, Path(tmp))
        table("EfficientNet-Lite0 in ONNX Runtime, batch 1, 2 threads", paths,
              {"input": np.ascontiguousarray(photos[1:2])}, args.repeats)
        calib = [minilm_tokens([t]) for t in MINILM_CALIBRATION_TEXTS]
        paths = exports(minilm("eager", "dynamo"), calib, MINILM_SETTINGS, Path(tmp))
        table("all-MiniLM-L6-v2 in ONNX Runtime, batch 1, sequence 128, 2 threads", paths,
              minilm_tokens([" ".join(["word"] * 126)]), args.repeats)
        inputs = {"cls": ocr_text_lines(45, width=192), "rec": ocr_text_lines(45),
                  "det": ocr_photos()}
        for name, data in inputs.items():
            calib = [{"x": data[i:i + 1]} for i in range(0, len(data), 3)]
            paths = exports(ocr_model(name), calib, {"lowbit defaults": {}}, Path(tmp))
            table(f"PP-OCR {name} {tuple(data.shape[2:])} in ONNX Runtime, batch 1, 2 threads",
                  paths, {"x": np.ascontiguousarray(data[1:2])}, args.repeats)


if __name__ == "__main__":
    main()
