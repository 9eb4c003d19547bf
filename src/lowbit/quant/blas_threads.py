"""Profiling and quantizing run numpy's BLAS and LAPACK on one thread.

Their work is a long sequence of small and middle-sized products and factorisations: input
moments of depthwise convolutions are [G, 9, P] x [G, P, 9] products batched over hundreds of
groups, GPTQ factorises K x K matrices with K from 27 to 1280, the reference convolutions of a
calibration batch are GEMMs of a few million multiply-adds each. OpenBLAS's threads synchronise
on every call (busy-waiting, then yielding), which costs more than the threads gain at these
sizes, and far more when other processes hold the cores: measured on the shared 2-core
machine at load 6 to 8, EfficientNet-Lite0's `lowbit.profile` on 10 photos took 3.7 to 5.0 s
with one BLAS thread against 12.8 to 20.7 s with OpenBLAS's default two (interleaved runs), and
a 144 x 144 Cholesky factorisation 0.16 ms against 328 ms (benchmarks/quantize_time.py has the
figures against ONNX Runtime and NNCF).

`one_blas_thread` limits the BLAS libraries loaded in the process (threadpoolctl) for the call
and restores their settings afterwards. Set LOWBIT_BLAS_THREADS to a number to choose another
count (0: leave the libraries' own setting).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from lowbit.errors import InputError

P = ParamSpec("P")
R = TypeVar("R")


def blas_threads() -> int:
    """The number of BLAS threads profiling and quantizing use: LOWBIT_BLAS_THREADS, default 1
    (0 leaves the libraries' own setting)."""
    text = os.environ.get("LOWBIT_BLAS_THREADS", "1").strip()
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise InputError(f"LOWBIT_BLAS_THREADS is '{text}'; set it to a whole number of threads "
                         f"(0 leaves numpy's BLAS with its own setting) or unset it")
    return count


def one_blas_thread(function: Callable[P, R]) -> Callable[P, R]:
    """Run `function` with numpy's BLAS limited to `blas_threads()` threads."""

    @functools.wraps(function)
    def limited(*args: P.args, **kwargs: P.kwargs) -> R:
        count = blas_threads()
        if count == 0:
            return function(*args, **kwargs)
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=count, user_api="blas"):
            return function(*args, **kwargs)

    return limited
