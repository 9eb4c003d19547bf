"""Why EfficientNet-Lite0 W8A8 top-1 agreement stops near 90 % on the real photos.

For each precision setting, lowbit quantizes EfficientNet-Lite0 calibrated on every third photo
and reports top-1 agreement with float (all photos, and the held-out two thirds) and the SQNR
of the logits. It also prints the float model's own top-1/top-2 logit margins: photos whose
margin is below the quantization error of the logits flip whatever the method.

    python benchmarks/efficientnet_precision.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests")]

import lowbit  # noqa: E402
from lowbit.quant.config import QuantConfig  # noqa: E402
from realmodels import efficientnet, load_photos  # noqa: E402

# The first block's layers (stem conv, depthwise conv with weights up to 17.7 whose taps cancel,
# projection) and the next most sensitive ones, found by quantizing one layer at a time.
FIRST_BLOCK = r"node_Conv_(877|878|799)"
SEVEN_MOST_SENSITIVE = r"node_Conv_(877|878|799|804|879|854|824)"
SETTINGS = {
    "W8A8 (defaults)": {},
    "W8A8 without bias correction": {"default": {"bias_correction": False}},
    "W8A8 calibration minmax": {"default": {"calibration": "minmax"}},
    "W8A16": {"default": {"precision": "int16"}},
    "W16A8": {"default": {"weight_precision": "int16"}},
    "W8A8, first block W16A16": {"rules": [{"regex": FIRST_BLOCK, "precision": "int16",
                                            "weight_precision": "int16"}]},
    "W8A8, 7 most sensitive W16A16": {"rules": [{"regex": SEVEN_MOST_SENSITIVE,
                                                 "precision": "int16",
                                                 "weight_precision": "int16"}]},
    "W16A16": {"default": {"precision": "int16", "weight_precision": "int16"}},
    "fp16": {"default": {"precision": "fp16"}},
}


def sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10((ref.astype(np.float64) ** 2).sum()
                               / ((got.astype(np.float64) - ref) ** 2).sum()))


def main() -> None:
    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib_idx = np.arange(0, len(photos), 3)
    held_out = np.setdiff1d(np.arange(len(photos)), calib_idx)
    prof = lowbit.profile(graph, [{"input": photos[i:i + 1]} for i in calib_idx],
                          progress=False)
    run_float = lowbit.compile(graph)
    ref = np.concatenate([run_float({"input": p[None]})["logits"] for p in photos])
    top2 = np.sort(ref, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    print(f"{len(photos)} photos; float top-1/top-2 logit margin below 0.05: "
          f"{(margin < 0.05).sum()}, below 0.1: {(margin < 0.1).sum()}, below 0.2: "
          f"{(margin < 0.2).sum()} (top logit median {np.median(top2[:, 1]):.2f})")
    decisive = margin >= 0.2
    print(f"{'setting':<34} {'agree all':>10} {'held-out':>9} {'margin>=0.2':>12} "
          f"{'logits SQNR dB':>15}")
    for label, settings in SETTINGS.items():
        q = lowbit.quantize(graph, prof, QuantConfig.from_dict(settings))
        run = lowbit.compile(q)
        got = np.concatenate([run({"input": p[None]})["logits"] for p in photos])
        same = got.argmax(1) == ref.argmax(1)
        print(f"{label:<34} {same.mean():10.2%} {same[held_out].mean():9.2%} "
              f"{same[decisive].mean():12.2%} {sqnr(ref, got):15.2f}", flush=True)


if __name__ == "__main__":
    main()
