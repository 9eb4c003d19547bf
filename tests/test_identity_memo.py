"""IdentityMemo: one computation per live object, none reused for another object (even one
equal to it), entries gone with their objects."""

from __future__ import annotations

import gc

import numpy as np

from lowbit.identity_memo import IdentityMemo, SameObject


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


def test_same_object_equal_only_to_the_same_live_object():
    a, b = np.zeros(3), np.zeros(3)
    key = SameObject(a)
    assert key == SameObject(a) and hash(key) == hash(SameObject(a))
    assert key != SameObject(b) and key != a
    stale = SameObject(b)
    del b
    gc.collect()
    assert stale != stale  # its object is gone: never equal, even to itself
    assert {key: 1}.get(SameObject(a)) == 1
