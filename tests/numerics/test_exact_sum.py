"""ExactSum: the same limbs, hence the same float64 result, in any order and grouping of the
additions, and a result as close to the true sum as float64 can hold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.numerics.exact_sum import NONE, ExactSum, GridSum


def _parts(rng, n, shape, spread):
    """Arrays whose magnitudes span `spread` binary orders, signs mixed."""
    return [rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
            for _ in range(n)]


def _sum(parts, shape) -> ExactSum:
    s = ExactSum(shape)
    for p in parts:
        s.add(p)
    return s


@pytest.mark.parametrize("spread", [0, 8, 60, 300])
def test_any_order_and_grouping_gives_the_same_limbs(spread):
    rng = np.random.default_rng(spread)
    shape = (7, 5)
    parts = _parts(rng, 23, shape, spread)
    one = _sum(parts, shape)
    for seed in range(4):
        order = np.random.default_rng(seed).permutation(len(parts))
        cuts = sorted(np.random.default_rng(seed + 10).choice(len(parts), 3, replace=False))
        shards = [_sum([parts[i] for i in chunk], shape)
                  for chunk in np.split(order, cuts)]
        merged = ExactSum(shape)
        for shard in reversed(shards):
            merged.merge(shard)
        assert merged.equals(one)
        assert np.array_equal(merged.value(), one.value())
        assert merged.adds == one.adds == len(parts)


def test_the_value_is_the_true_sum_rounded_when_the_terms_are_alike():
    rng = np.random.default_rng(0)
    parts = _parts(rng, 200, (50,), 4)
    got = _sum(parts, (50,)).value()
    exact = np.array([math.fsum(p[i] for p in parts) for i in range(50)])
    assert np.allclose(got, exact, rtol=2 ** -52, atol=0)


def test_large_and_tiny_values_together():
    s = ExactSum((2,))
    s.add(np.array([1e-300, 1.0]))
    s.add(np.array([1e300, 2.0 ** -60]))
    s.add(np.array([-1e300, 0.0]))
    # 1e-300 lies 2000 bits below 1e300's windows: dropped; 1 + 2**-60 keeps its low bit
    assert s.value()[0] == 0.0
    assert s.value()[1] == 1.0 + 2.0 ** -60


def test_float32_values_and_zeros():
    s = ExactSum(3)
    s.add(np.zeros(3, np.float32))
    assert np.all(s.top == NONE) and np.array_equal(s.value(), np.zeros(3))
    s.add(np.array([1.5, -2.25, 0.0], np.float32))
    assert np.array_equal(s.value(), [1.5, -2.25, 0.0])


def test_refusals():
    s = ExactSum(2)
    with pytest.raises(ValueError, match="shape"):
        s.add(np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        s.add(np.array([np.inf, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        s.merge(ExactSum(3))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64,
                          min_value=-1e30, max_value=1e30), min_size=1, max_size=30),
       st.randoms())
def test_property_order_independent(values, random):
    a = ExactSum()
    for v in values:
        a.add(np.float64(v))
    shuffled = list(values)
    random.shuffle(shuffled)
    b = ExactSum()
    for v in shuffled:
        part = ExactSum()
        part.add(np.float64(v))
        b.merge(part)
    assert a.equals(b)
    assert a.value() == b.value()


@pytest.mark.parametrize("spread", [0, 30, 200])
def test_grid_sum_any_order_and_grouping_gives_the_same_limbs(spread):
    rng = np.random.default_rng(spread)
    parts = _parts(rng, 9, (4, 5), spread)
    one = GridSum((4, 5))
    for p in parts:
        one.add(p)
    backwards = GridSum((4, 5))
    for p in parts[::-1]:
        backwards.add(p)
    halves = [GridSum((4, 5)), GridSum((4, 5))]
    for i, p in enumerate(parts):
        halves[i % 2].add(p)
    halves[1].merge(halves[0])
    assert one.equals(backwards) and one.equals(halves[1])
    assert np.array_equal(one.value(), halves[1].value())
    # as close as the grid allows (64 bits below the largest value's leading bit, truncated
    # per addition), then one float64 rounding
    exact = np.array([math.fsum(float(p[i, j]) for p in parts) for i in range(4)
                      for j in range(5)])
    largest = max(float(np.abs(p).max()) for p in parts)
    error = np.abs(one.value().reshape(-1) - exact)
    assert np.all(error <= 9 * largest * 2.0 ** -63 + np.spacing(np.abs(exact)))


def test_grid_sum_of_the_smallest_and_largest_floats():
    for value in (5e-324, 2.0 ** -1022, 1.7e308):
        g = GridSum(2)
        g.add(np.array([value, -value]))
        g.add(np.array([value, 0.0]))
        assert g.value().tolist() == [2 * value if value < 1e308 else np.inf, -value]


def test_grid_sum_of_many_elements_equals_its_parts():
    """GridSum.add converts GRID_BLOCK elements at a time: an array spanning several blocks
    gets the limbs that separate sums of its pieces get (each piece holds the largest value,
    so every sum has the same top window)."""
    from lowbit.numerics.exact_sum import GRID_BLOCK

    rng = np.random.default_rng(5)
    size = 2 * GRID_BLOCK + 37
    parts = _parts(rng, 4, (size,), 40)
    for p in parts:
        p[[0, GRID_BLOCK, 2 * GRID_BLOCK]] = 2.0 ** 45
    whole = GridSum((size,))
    pieces = [GridSum((n,)) for n in (GRID_BLOCK, GRID_BLOCK, 37)]
    for p in parts:
        whole.add(p)
        for s, chunk in zip(pieces, np.split(p, [GRID_BLOCK, 2 * GRID_BLOCK]), strict=True):
            s.add(chunk)
    assert all(s.top == whole.top for s in pieces)
    assert np.array_equal(whole.limbs, np.concatenate([s.limbs for s in pieces], axis=1))
    assert np.array_equal(whole.value(), np.concatenate([s.value() for s in pieces]))
