"""Shared by the budget tests: the bundled MNISTNet and a coarse config."""

from __future__ import annotations

import lowbit
from lowbit.cli.demo import bundled

MODEL = bundled("mnistnet.onnx")

COARSE = lowbit.QuantConfig().with_default(weight_rounding="nearest", calibration="minmax",
                                           per_channel=False, bias_correction=False)
"""Per-tensor weights rounded to nearest: errors large enough for budgets to need raising."""
