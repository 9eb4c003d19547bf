"""Test-wide settings: the IR verifier runs after every pass, and a test module's random
generator `RNG` restarts for each test from a seed of the test's own, so what a test draws
does not depend on which tests ran before it (a `-k` selection, another order).

Under pytest-xdist (`-n`), each worker is one of several processes sharing the cores: compiled
models that name no thread count get the worker's share (LOWBIT_THREADS, at least 1), and
numpy's BLAS runs on that many threads, so workers do not oversubscribe the cores with
spinning thread pools; the same variables reach the subprocesses tests start (CLI runs,
Dask workers). Tests of threading pass their thread counts explicitly.

Hypothesis runs without its per-example deadline: a time limit is a timed assertion, and on a
shared machine an example's first call (imports, a compile) can take longer than 200 ms
without anything being wrong."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from hypothesis import settings

os.environ.setdefault("LOWBIT_VERIFY", "1")
settings.register_profile("lowbit", deadline=None)
settings.load_profile("lowbit")


def _worker_share() -> int | None:
    """Cores per xdist worker (None outside xdist)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    from lowbit.backends.cpu.library import physical_cores

    return max(1, physical_cores() // max(1, int(workers)))


def pytest_configure(config) -> None:
    # `--dist loadfile` hands out whole files; by default pytest-xdist hands out the files with
    # the most tests first, which puts the real-model files (few tests, minutes each) last, where
    # one of them runs alone while the other workers are idle. Files go out in the order of
    # pytest_collection_modifyitems below instead: the real-model files first.
    if getattr(config.option, "dist", "no") in ("loadfile", "loadscope"):
        config.option.loadscopereorder = False
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


def pytest_collection_modifyitems(config, items) -> None:
    """Files with real-model tests first (see pytest_configure), each file's tests together and
    in their order; the others keep the collection's order after them."""
    realmodel = {item.path for item in items if item.get_closest_marker("realmodel")}
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.path, i)
    items.sort(key=lambda item: (item.path not in realmodel, first[item.path]))


@pytest.fixture(autouse=True)
def _own_draws(request):
    if isinstance(getattr(request.module, "RNG", None), np.random.Generator):
        request.module.RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


# -- per-test CPU time (`--cpu-durations FILE`) ---------------------------------------------------
# Wall-clock durations on a shared machine say more about the neighbours than about the test:
# this records each test's CPU seconds (this process, its threads, and the subprocesses it waited
# for: compilers, CLI runs) per phase, one JSON line per test appended to FILE by every worker.
def pytest_addoption(parser) -> None:
    parser.addoption("--cpu-durations", metavar="FILE", default=None,
                     help="append each test's CPU seconds (self + waited-for children) to FILE")


def _cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import json
    import time

    path = item.config.getoption("--cpu-durations")
    if not path:
        yield
        return
    cpu, wall = _cpu_seconds(), time.perf_counter()
    yield
    line = {"test": item.nodeid, "cpu": round(_cpu_seconds() - cpu, 3),
            "wall": round(time.perf_counter() - wall, 3),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
