"""The bundled MNISTNet and its digits: profiled on digits 0-199, evaluated on others."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from lowbit.cli.demo import bundled

MODEL = bundled("mnistnet.onnx")

COARSE = lowbit.QuantConfig().with_default(weight_rounding="nearest", calibration="minmax",
                                           per_channel=False, bias_correction=False)
"""Per-tensor weights rounded to nearest: errors large enough for budgets to need raising."""


@pytest.fixture(scope="session")
def mnist():
    """(float graph, profile on digits 0-199, evaluation batches of digits 200-299)."""
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(MODEL)
    prof = lowbit.profile(graph, [{"input": x[i:i + 50]} for i in range(0, 200, 50)],
                          progress=False, moments=False)
    return graph, prof, [{"input": x[i:i + 10]} for i in range(200, 300, 10)]
