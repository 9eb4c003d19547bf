"""Profiling and quantizing limit numpy's BLAS threads for the call only."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from lowbit.errors import InputError
from lowbit.quant.blas_threads import blas_threads, one_blas_thread


def blas_counts() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_blas_runs_on_one_thread_inside_and_as_before_after(monkeypatch):
    monkeypatch.delenv("LOWBIT_BLAS_THREADS", raising=False)
    np.ones((2, 2)) @ np.ones((2, 2))  # BLAS loaded
    assert blas_counts()

    @one_blas_thread
    def inside() -> list[int]:
        return blas_counts()

    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_counts()
        assert inside() == [1] * len(before)
        assert blas_counts() == before


def test_the_thread_count_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("LOWBIT_BLAS_THREADS", "0")
    assert blas_threads() == 0
    monkeypatch.setenv("LOWBIT_BLAS_THREADS", " 3 ")
    assert blas_threads() == 3
    for bad in ("two", "-1", "1.5"):
        monkeypatch.setenv("LOWBIT_BLAS_THREADS", bad)
        with pytest.raises(InputError, match="LOWBIT_BLAS_THREADS is"):
            blas_threads()
