"""Test-wide settings: the IR verifier runs after every pass, and a test module's random
generator `RNG` restarts for each test from a seed of the test's own, so what a test draws
does not depend on which tests ran before it (a `-k` selection, another order).

Under pytest-xdist (`-n`), each worker is one of several processes sharing the cores: compiled
models that name no thread count get the worker's share (LOWBIT_THREADS, at least 1), and
numpy's BLAS runs on that many threads, so workers do not oversubscribe the cores with
spinning thread pools; the same variables reach the subprocesses tests start (CLI runs,
Dask workers). Tests of threading pass their thread counts explicitly."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

os.environ.setdefault("LOWBIT_VERIFY", "1")


def _worker_share() -> int | None:
    """Cores per xdist worker (None outside xdist)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    from lowbit.backends.cpu.library import physical_cores

    return max(1, physical_cores() // max(1, int(workers)))


def pytest_configure(config) -> None:
    share = _worker_share()
    if share is None:
        return
    # the variables reach subprocesses too (CLI tests, Dask workers); BLAS is already loaded
    # here, so it is limited directly as well
    for name in ("LOWBIT_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(share))
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=share, user_api="blas")


@pytest.fixture(autouse=True)
def _own_draws(request):
    if isinstance(getattr(request.module, "RNG", None), np.random.Generator):
        request.module.RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))
