"""packed_ints: int64 arrays packed to the bytes their values need come back equal, element for
element, dense or sparse, at every width; exact sums pickle through it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.numerics import packed_ints
from lowbit.numerics.exact_sum import GridSum

I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("bits", [1, 7, 8, 9, 23, 35, 40, 56, 62, 63])
@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_round_trip_at_every_width_and_density(bits, density):
    rng = np.random.default_rng(bits)
    a = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(37, 41), dtype=np.int64)
    a[rng.random(a.shape) >= density] = 0
    packed = packed_ints.pack(a)
    assert np.array_equal(packed_ints.unpack(packed).reshape(a.shape), a)
    assert packed.width == packed_ints.byte_width(int(a.min()), int(a.max()))
    assert packed.nbytes <= a.size * packed.width
    if density <= 0.01:
        assert packed.where is not None  # sparse: positions and values only


def test_extremes_and_empty():
    a = np.array([I64.min, I64.max, 0, -1, 1], np.int64)
    assert np.array_equal(packed_ints.unpack(packed_ints.pack(a)), a)
    assert packed_ints.pack(a).width == 8
    assert packed_ints.unpack(packed_ints.pack(np.zeros(0, np.int64))).size == 0
    assert [packed_ints.byte_width(lo, hi) for lo, hi in
            ((-128, 127), (-129, 0), (0, 128), (0, 0), (-(1 << 39), (1 << 39) - 1))] == \
        [1, 2, 2, 1, 5]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=I64.min, max_value=I64.max), max_size=60))
def test_property_round_trip(values):
    a = np.array(values, np.int64)
    assert np.array_equal(packed_ints.unpack(packed_ints.pack(a)), a)


def test_a_grid_sum_pickles_compactly_and_exactly():
    rng = np.random.default_rng(3)
    g = GridSum((64, 300))
    for _ in range(20):
        g.add((rng.standard_normal((64, 300)) * 8).astype(np.float32))
    data = pickle.dumps(g)
    back = pickle.loads(data)
    assert back.equals(g) and back.adds == g.adds and back.shape == g.shape
    assert np.array_equal(back.value(), g.value())
    assert len(data) < g.limbs.nbytes / 2  # float32 data fill few of the limbs' bits
