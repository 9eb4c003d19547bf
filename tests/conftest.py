"""Test-wide settings: the IR verifier runs after every pass, and a test module's random
generator `RNG` restarts for each test from a seed of the test's own, so what a test draws
does not depend on which tests ran before it (a `-k` selection, another order)."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

os.environ.setdefault("LOWBIT_VERIFY", "1")


@pytest.fixture(autouse=True)
def _own_draws(request):
    if isinstance(getattr(request.module, "RNG", None), np.random.Generator):
        request.module.RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))
