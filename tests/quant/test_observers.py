"""Streaming observers: exact re-binning, non-finite counts, channel ranges, merging."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.quant.observers import DEFAULT_BINS, Histogram, StatsObserver


def reference_counts(hist: Histogram, data: np.ndarray) -> np.ndarray:
    """Bin `data` on `hist`'s grid directly: bin k holds floor(x / width) == k."""
    k = np.floor(data.astype(np.float64) / hist.width).astype(np.int64) - hist.offset
    assert k.min() >= 0 and k.max() < hist.bins
    return np.bincount(k, minlength=hist.bins)


def growing_batches(rng: np.random.Generator) -> list[np.ndarray]:
    """Batches whose range keeps widening, on both sides, by irregular factors."""
    out = []
    for i in range(30):
        scale = 0.01 * 1.7**i
        out.append((rng.normal(size=2000) * scale + 0.3 * scale * (-1) ** i).astype(np.float32))
    return out


def test_rebinning_keeps_counts_and_matches_one_shot_histogram():
    rng = np.random.default_rng(0)
    batches = growing_batches(rng)
    streamed = StatsObserver("x")
    for b in batches:
        streamed.observe(b)
    everything = np.concatenate(batches)
    once = StatsObserver("x")
    once.observe(everything)

    h, h_once = streamed.histogram, once.histogram
    assert h.total == streamed.count == everything.size
    assert (h.exponent, h.offset) == (h_once.exponent, h_once.offset)
    np.testing.assert_array_equal(h.counts, h_once.counts)
    np.testing.assert_array_equal(h.counts, reference_counts(h, everything))
    assert streamed.min == float(everything.min()) and streamed.max == float(everything.max())


def test_histogram_agrees_with_numpy_histogram_on_its_edges():
    rng = np.random.default_rng(1)
    obs = StatsObserver("x")
    data = [rng.standard_t(3, size=5000).astype(np.float32) * (i + 1) for i in range(10)]
    for d in data:
        obs.observe(d)
    h = obs.histogram
    ref, _ = np.histogram(np.concatenate(data), bins=h.edges)
    np.testing.assert_array_equal(h.counts, ref)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-1e4, 1e4), st.floats(1e-3, 1e4), st.integers(1, 300)),
        min_size=1, max_size=8),
    st.integers(0, 2**32 - 1),
)
def test_streaming_equals_all_at_once(parts, seed):
    rng = np.random.default_rng(seed)
    batches = [(rng.normal(size=n) * s + c).astype(np.float32) for c, s, n in parts]
    streamed, once = StatsObserver("x", bins=256), StatsObserver("x", bins=256)
    for b in batches:
        streamed.observe(b)
    everything = np.concatenate(batches)
    once.observe(everything)
    h, h_once = streamed.histogram, once.histogram
    assert (h.exponent, h.offset) == (h_once.exponent, h_once.offset)
    np.testing.assert_array_equal(h.counts, h_once.counts)
    np.testing.assert_array_equal(h.counts, reference_counts(h, everything))


def test_memory_is_fixed_and_resolution_guaranteed():
    rng = np.random.default_rng(2)
    obs = StatsObserver("x")
    for b in growing_batches(rng):
        obs.observe(b)
        assert obs._counts.size == DEFAULT_BINS
        # the smallest exponent that fits: the data span more than half the capacity
        assert obs.histogram.bins > DEFAULT_BINS // 2 - 1
        assert math.floor(obs.max / obs.histogram.width) - math.floor(
            obs.min / obs.histogram.width) + 1 <= DEFAULT_BINS


def test_constant_then_wide_data():
    obs = StatsObserver("x")
    obs.observe(np.zeros(100, np.float32))
    assert (obs.min, obs.max, obs.count, obs.zeros) == (0.0, 0.0, 100, 100)
    assert obs.histogram.total == 100
    obs.observe(np.float32([5.0, -3.0, 0.5]))
    h = obs.histogram
    assert h.total == 103 and obs.zeros == 100
    assert h.counts[h.bin_of(0.0) - h.offset] == 100
    assert h.counts[h.bin_of(5.0) - h.offset] == 1
    assert h.counts[h.bin_of(-3.0) - h.offset] == 1


def test_narrow_range_far_from_zero_uses_resolution_floor():
    data = np.float64(1000.0) + np.arange(10) * 1e-13
    obs = StatsObserver("x")
    obs.observe(data)
    h = obs.histogram
    assert h.total == 10
    assert h.width >= 1000.0 * 2.0**-40
    assert abs(h.offset) < 2**41


def test_nonfinite_values_are_counted_not_binned():
    obs = StatsObserver("x")
    obs.observe(np.float32([1.0, np.nan, np.inf, -np.inf, -np.inf, 2.0]))
    assert (obs.nan, obs.posinf, obs.neginf, obs.count) == (1, 1, 2, 2)
    assert (obs.min, obs.max) == (1.0, 2.0)
    assert obs.histogram.total == 2
    obs.observe(np.float32([np.nan]))
    assert obs.nan == 2 and obs.count == 2


def test_only_nonfinite_leaves_no_histogram():
    obs = StatsObserver("x")
    obs.observe(np.float32([np.nan, np.inf]))
    assert obs.min is None and obs.histogram is None and obs.nonfinite == 2


def test_per_channel_ranges():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(4, 3, 5)).astype(np.float32)
    b = rng.normal(size=(2, 3, 5)).astype(np.float32) * 3
    obs = StatsObserver("x", channel_axes=(1, -1))
    obs.observe(a)
    obs.observe(b)
    both = np.concatenate([a, b])
    np.testing.assert_array_equal(obs.channel_range(1).min, both.min(axis=(0, 2)))
    np.testing.assert_array_equal(obs.channel_range(1).max, both.max(axis=(0, 2)))
    np.testing.assert_array_equal(obs.channel_range(-1).max, both.max(axis=(0, 1)))
    with pytest.raises(KeyError, match="axis 0"):
        obs.channel_range(0)


def test_per_channel_ranges_skip_nonfinite():
    x = np.float32([[1.0, np.nan], [np.inf, np.nan], [-2.0, np.nan]])
    obs = StatsObserver("x", channel_axes=(1,))
    obs.observe(x)
    ch = obs.channel_range(1)
    assert ch.min[0] == -2.0 and ch.max[0] == 1.0
    assert np.isnan(ch.min[1]) and np.isnan(ch.max[1])


def test_channel_count_change_is_refused():
    obs = StatsObserver("x", channel_axes=(1,))
    obs.observe(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="3 before"):
        obs.observe(np.zeros((2, 4), np.float32))


def test_merge_equals_observing_everything():
    rng = np.random.default_rng(4)
    a = (rng.normal(size=3000) * 0.1).astype(np.float32)
    b = (rng.normal(size=3000) * 50 + 20).astype(np.float32)
    left, right, both = (StatsObserver("x", channel_axes=(0,)) for _ in range(3))
    left.observe(a)
    right.observe(b)
    both.observe(a)
    both.observe(b)
    left.merge(right)
    assert (left.count, left.min, left.max, left.zeros) == (both.count, both.min, both.max,
                                                              both.zeros)
    assert left.histogram.exponent == both.histogram.exponent
    np.testing.assert_array_equal(left.histogram.counts, both.histogram.counts)


@pytest.mark.parametrize("bins", [1024, 2048, 4096])
def test_merging_into_fewer_bins_equals_observing_with_fewer_bins(bins):
    """What the entropy-calibration tests rely on to compare resolutions from one profile."""
    rng = np.random.default_rng(bins)
    batches = [(rng.gamma(1.5, 0.3, size=5000) * (1 + i)).astype(np.float32) - 0.2
               for i in range(4)]
    fine, coarse = StatsObserver("x"), StatsObserver("x", bins)
    for b in batches:
        fine.observe(b)
        coarse.observe(b)
    derived = StatsObserver("x", bins)
    derived.merge(fine)
    assert (derived.histogram.exponent, derived.histogram.offset) == (
        coarse.histogram.exponent, coarse.histogram.offset)
    np.testing.assert_array_equal(derived.histogram.counts, coarse.histogram.counts)
    assert (derived.min, derived.max, derived.count, derived.zeros) == (
        coarse.min, coarse.max, coarse.count, coarse.zeros)


def test_fold_is_the_histogram_of_magnitudes():
    rng = np.random.default_rng(5)
    data = (rng.normal(size=20000) * 2 - 0.5).astype(np.float32)
    obs = StatsObserver("x")
    obs.observe(data)
    folded = obs.histogram.fold().covering(0, 0)
    assert folded.offset == 0 and folded.total == data.size
    # |x| of a negative x exactly on an edge k*w lands in the bin below (x was in [k w, (k+1) w))
    mag = np.abs(data.astype(np.float64)) / folded.width
    k = np.where(data < 0, np.ceil(mag) - 1, np.floor(mag)).astype(np.int64)
    np.testing.assert_array_equal(folded.counts, np.bincount(k, minlength=folded.bins))
    assert np.abs(folded.counts - reference_counts(folded, np.abs(data))).sum() <= 2 * np.sum(
        (data < 0) & (mag == np.round(mag)))


def test_coarsened_merges_aligned_groups():
    h = Histogram(np.arange(1, 11), offset=-3, exponent=-2)
    c = h.coarsened(2)
    assert c.exponent == 0 and c.total == h.total
    # bins -3..6 -> -3>>2 = -1 (bins -3,-2,-1 -> 1+2+3), 0 (bins 0..3 -> 4+5+6+7), 1 (8+9+10)
    assert c.offset == -1
    np.testing.assert_array_equal(c.counts, [6, 22, 27])


def test_integer_and_half_inputs_are_accepted():
    obs = StatsObserver("x")
    obs.observe(np.int8([-3, 4]))
    obs.observe(np.float16([0.5]))
    assert (obs.min, obs.max, obs.count) == (-3.0, 4.0, 3)


def test_fold_of_one_signed_data_far_from_zero_stays_small():
    obs = StatsObserver("x")
    obs.observe(-(67.0 + 1e-5 * np.random.default_rng(6).standard_normal(1000)))
    folded = obs.histogram.fold()
    assert folded.bins == obs.histogram.bins and folded.offset > 0
    np.testing.assert_array_equal(folded.counts, obs.histogram.counts[::-1])


def test_channel_sums_read_after_additions_equal_the_exact_sum():
    """The per-channel sum is the exact sum's value whenever it is read (rounded when first
    read after additions, not on each), and a non-finite total afterwards adds to that value."""
    from lowbit.numerics.exact_sum import ExactSum
    from lowbit.quant.observers import ChannelRange

    rng = np.random.default_rng(7)
    totals = [rng.standard_normal(5) * 10.0 ** rng.integers(-8, 8, 5) for _ in range(4)]
    ch = ChannelRange(1, np.zeros(5), np.ones(5), np.zeros(5), np.zeros(5), ExactSum((5,)))
    want = ExactSum((5,))
    for i, total in enumerate(totals):
        ch.add_sums(total, np.ones(5))
        want.add(total)
        if i % 2:
            np.testing.assert_array_equal(ch.sum, want.value())
    np.testing.assert_array_equal(ch.sum, want.value())
    np.testing.assert_array_equal(ch.mean, want.value() / 4)
    ch.add_sums(totals[0], np.ones(5))  # pending again, then a non-finite total drops it
    want.add(totals[0])
    bad = np.array([np.inf, 1.0, 2.0, 3.0, 4.0])
    ch.add_sums(bad, np.ones(5))
    assert ch.exact is None
    np.testing.assert_array_equal(ch.sum, want.value() + bad)
    other = ChannelRange(1, np.zeros(5), np.ones(5), np.zeros(5), np.zeros(5), ExactSum((5,)))
    other.add_sums(totals[1], np.ones(5))
    both = ChannelRange(1, np.zeros(5), np.ones(5), np.zeros(5), np.zeros(5), ExactSum((5,)))
    both.merge_sums(other)
    np.testing.assert_array_equal(both.sum, other.exact.value())
