"""The C thread pool: every task runs exactly once, on a worker index below the thread count,
whatever the number of threads; contexts choose the ISA asked for or refuse it."""

from __future__ import annotations

import ctypes as C
import os
import sys
import time

import numpy as np
import pytest

from lowbit.backends.cpu import library as L
from lowbit.errors import LowbitError

TASK = C.CFUNCTYPE(None, C.c_void_p, C.c_int64, C.c_int)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_parallel_for_runs_each_task_once(threads):
    ctx = L.Context(threads)
    fn = L.lib().lb_parallel_for
    fn.argtypes = [C.POINTER(L.Ctx), C.c_int64, TASK, C.c_void_p]
    fn.restype = None
    for ntasks in (0, 1, 2, 7, 100):
        counts = np.zeros(ntasks, np.int64)
        workers = np.full(ntasks, -1, np.int64)

        def task(_arg, t, worker, counts=counts, workers=workers):
            counts[t] += 1
            workers[t] = worker

        callback = TASK(task)
        for _ in range(3):
            counts[:] = 0
            fn(ctx.handle, ntasks, callback, None)
            assert (counts == 1).all()
            assert ((workers >= 0) & (workers < threads)).all()
    assert ctx.threads == threads


def test_isa_choice_and_refusal(monkeypatch):
    best = L.best_isa()
    for isa in L.supported_isas():
        monkeypatch.setenv(L.ISA_ENV, isa)
        ctx = L.Context(1)
        assert ctx.isa == isa
        # an amx context runs the vnni kernels, with its int8 products on AMX tiles
        want = ("vnni", 1) if isa == "amx" else (isa, 0)
        assert (L.ISAS[ctx.handle.contents.isa], ctx.handle.contents.amx) == want
    assert ("amx" in L.supported_isas()) == (best == "amx")
    other = "neon" if best in ("scalar", "avx2", "vnni", "amx") else "avx2"  # the other arch
    monkeypatch.setenv(L.ISA_ENV, other)
    with pytest.raises(LowbitError, match=f"cannot run the {other} kernels"):
        L.Context(1)
    monkeypatch.setenv(L.ISA_ENV, "sse9")
    with pytest.raises(LowbitError, match="unknown cpu ISA 'sse9'"):
        L.Context(1)
    monkeypatch.delenv(L.ISA_ENV)
    assert L.Context(1).isa == best
    assert 1 <= L.physical_cores() <= (os.cpu_count() or 1)


def test_workers_are_kept_off_the_callers_cpu():
    """On Linux with two CPUs or more, the pool's workers may run on every CPU of the process
    but the one its caller runs on while the caller works (else the kernel may wake a worker
    onto the caller's CPU, where the two take turns: one thread's speed), and anywhere again
    while the caller sleeps waiting for them; the caller's own CPUs stay as they were."""
    allowed = os.sched_getaffinity(0)
    ctx = L.Context(2)
    fn = L.lib().lb_parallel_for
    fn.argtypes = [C.POINTER(L.Ctx), C.c_int64, TASK, C.c_void_p]
    fn.restype = None
    seen: list[set[int]] = []

    def task(_arg, _t, worker):
        if worker:
            seen.append(os.sched_getaffinity(0))
        time.sleep(0.002)  # leaves the GIL and the other tasks to the worker

    callback = TASK(task)
    kept_off = sys.platform == "linux" and len(allowed) >= 2
    for _ in range(300):
        fn(ctx.handle, 4, callback, None)
        if any(len(m) < len(allowed) for m in seen) or (seen and not kept_off):
            break
    assert seen, "the worker never ran a task"
    assert os.sched_getaffinity(0) == allowed
    for mask in seen:  # kept off one CPU, or let go
        assert mask == allowed or (len(mask) == len(allowed) - 1 and mask < allowed)
    assert any(len(m) == len(allowed) - 1 for m in seen) == kept_off
    ctx.close()


def test_default_thread_count_comes_from_the_environment(monkeypatch):
    """LOWBIT_THREADS sets the thread count of executables that name none (the test suite's
    workers set it to their share of the cores); unset, the physical cores; a bad value is
    refused, naming the variable."""
    monkeypatch.setenv("LOWBIT_THREADS", "3")
    assert L.default_threads() == 3
    assert L.context().threads == 3
    monkeypatch.delenv("LOWBIT_THREADS")
    assert L.default_threads() == L.physical_cores()
    for bad in ("0", "two"):
        monkeypatch.setenv("LOWBIT_THREADS", bad)
        with pytest.raises(LowbitError, match="LOWBIT_THREADS"):
            L.default_threads()


POOL_FIELDS = ("jobs", "tasks", "caller_tasks", "alone_jobs", "job_ns", "wait_ns", "inline",
               "step_ns", "worker_ns", "join_ns", "asleep_jobs", "worker_tail_ns")


def test_pool_counters_count_each_step_only_while_attached():
    ctx = L.Context(2)
    run = L.lib().lb_parallel_for
    run.argtypes = [C.POINTER(L.Ctx), C.c_int64, TASK, C.c_void_p]
    run.restype = None
    step = L.lib().lb_pool_step
    step.argtypes, step.restype = [C.POINTER(L.Ctx), C.c_int64], None
    callback = TASK(lambda _arg, _t, _worker: time.sleep(0.001))
    counters = np.zeros((3, len(POOL_FIELDS)), np.int64)
    one = L.Context(1)  # no pool: nothing to attach
    assert L.lib().lb_pool_stats_attach(one.handle, counters.ctypes.data, 3) == 0
    assert L.lib().lb_pool_stats_attach(ctx.handle, counters.ctypes.data, 3) == 1
    run(ctx.handle, 5, callback, None)  # outside a step: not counted
    for _ in range(2):
        step(ctx.handle, 0)
        run(ctx.handle, 7, callback, None)
        run(ctx.handle, 3, callback, None)
        step(ctx.handle, -1)
        step(ctx.handle, 2)
        run(ctx.handle, 1, callback, None)  # one task: inline
        step(ctx.handle, -1)
    assert L.lib().lb_pool_stats_attach(ctx.handle, None, 0) == 0
    seen = counters.copy()
    step(ctx.handle, 0)
    run(ctx.handle, 7, callback, None)
    step(ctx.handle, -1)
    assert (counters == seen).all()  # detached
    c = dict(zip(POOL_FIELDS, seen.T, strict=True))
    assert list(c["jobs"]) == [4, 0, 0] and list(c["tasks"]) == [20, 0, 0]
    assert list(c["inline"]) == [0, 0, 2] and (seen[1] == 0).all()
    assert 0 < c["caller_tasks"][0] <= 20 and 0 <= c["alone_jobs"][0] <= 4
    assert (c["worker_ns"][0] > 0) == (c["caller_tasks"][0] < 20)
    assert (c["join_ns"][0] > 0) <= (c["caller_tasks"][0] < 20)
    assert c["job_ns"][0] >= 20 * 1_000_000 / 2 * 0.9  # 20 tasks of 1 ms on 2 threads at most
    assert 0 <= c["wait_ns"][0] <= c["job_ns"][0] <= c["step_ns"][0]
    assert c["step_ns"][2] >= 2 * 1_000_000 and c["job_ns"][2] == 0
    assert 0 <= c["asleep_jobs"][0] <= 4
    assert 0 <= c["worker_tail_ns"][0] <= c["job_ns"][0]
    assert (c["worker_tail_ns"][0] > 0) <= (c["caller_tasks"][0] < 20)
