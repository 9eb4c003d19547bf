"""The bundled MNISTNet, its bundled digits and a profile on the first 200 of them, shared by
the tools' tests (each takes its evaluation digits from 200 on)."""

from __future__ import annotations

import numpy as np
import pytest
from shared_profiles import shared_profile

import lowbit
from lowbit.cli.demo import bundled

MODEL = bundled("mnistnet.onnx")


@pytest.fixture(scope="session")
def mnist_profiled():
    """(float graph, profile on digits 0-199, all 500 digits)."""
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(MODEL)
    prof = shared_profile(graph, [{"input": x[i:i + 50]} for i in range(0, 200, 50)])
    return graph, prof, x
