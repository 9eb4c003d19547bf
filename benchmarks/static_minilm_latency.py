"""What lowbit's static MiniLM exports cost in ONNX Runtime, as ratios to the float model.

all-MiniLM-L6-v2 statically quantized with lowbit (calibrated on the 24 texts of
tests/realmodels.py MINILM_CALIBRATION_TEXTS), exported as QDQ and QOperator, with the defaults
and with `int16_before_bias` and `int16_before_table` on (the more accurate setting: int16
results before bias Adds and lookup tables), next to ONNX Runtime's own quantize_static
(per channel, same calibration texts). Latency as in benchmarks/dynamic_vs_peers.py: batch 1,
sequence length 128, 2 threads, in the same run as the float model.

    python benchmarks/static_minilm_latency.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

from dynamic_vs_peers import latency, ort_session  # noqa: E402
from static_vs_onnxruntime import ort_quantize  # noqa: E402

import lowbit  # noqa: E402
from lowbit.quant.config import QuantConfig  # noqa: E402
from realmodels import MINILM_CALIBRATION_TEXTS, minilm, minilm_tokens  # noqa: E402

SETTINGS = {
    "lowbit defaults": {},
    "lowbit int16 before bias and table": {
        "default": {"int16_before_bias": True, "int16_before_table": True}},
}


def main() -> None:
    src = minilm("eager", "dynamo")
    graph = lowbit.load(src)
    calib = [minilm_tokens([t]) for t in MINILM_CALIBRATION_TEXTS]
    prof = lowbit.profile(graph, calib, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"float": src}
        for label, settings in SETTINGS.items():
            q = lowbit.quantize(graph, prof, QuantConfig.from_dict(settings))
            for form in ("qdq", "qoperator"):
                paths[f"{label} ({form})"] = Path(tmp) / f"{len(paths)}.onnx"
                lowbit.save(q, paths[f"{label} ({form})"], format=form)
        paths["ORT quantize_static per-channel"] = Path(tmp) / "ort.onnx"
        ort_quantize(src, paths["ORT quantize_static per-channel"], calib, True)
        times = {label: latency(ort_session(path)) for label, path in paths.items()}
    print("ONNX Runtime, batch 1, sequence 128, 2 threads (ratio to float):")
    for label, t in times.items():
        print(f"  {label:<46} {t * 1e3:7.2f} ms  x{t / times['float']:.2f}")


if __name__ == "__main__":
    main()
