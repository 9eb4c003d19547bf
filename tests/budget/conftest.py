"""The bundled MNISTNet and its digits: profiled on digits 0-199, evaluated on others."""

from __future__ import annotations

import numpy as np
import pytest
from mnist_budget import MODEL
from shared_profiles import shared_profile

import lowbit
from lowbit.cli.demo import bundled


@pytest.fixture(scope="session")
def mnist():
    """(float graph, profile on digits 0-199, evaluation batches of digits 200-299)."""
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(MODEL)
    prof = shared_profile(graph, [{"input": x[i:i + 50]} for i in range(0, 200, 50)],
                          moments=False)
    return graph, prof, [{"input": x[i:i + 10]} for i in range(200, 300, 10)]
