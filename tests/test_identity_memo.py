"""IdentityMemo: one computation per live object, none reused for another object (even one
equal to it), entries gone with their objects."""

from __future__ import annotations

import gc

import numpy as np

from lowbit.identity_memo import IdentityMemo


def _sum(memo: IdentityMemo, array: np.ndarray, extra: str, calls: list) -> int:
    def compute() -> int:
        calls.append(extra)
        return int(array.sum())

    return memo((array,), extra, compute)


def test_computed_once_per_object_and_dropped_with_it():
    memo = IdentityMemo()
    calls: list = []
    arrays = [np.arange(4), np.arange(4)]
    assert _sum(memo, arrays[0], "s", calls) == 6
    assert _sum(memo, arrays[0], "s", calls) == 6
    assert len(calls) == 1
    _sum(memo, arrays[1], "s", calls)  # equal, but another object
    _sum(memo, arrays[0], "other", calls)  # another extra key
    assert len(calls) == 3 and len(memo) == 3
    arrays.clear()
    gc.collect()
    assert len(memo) == 0
