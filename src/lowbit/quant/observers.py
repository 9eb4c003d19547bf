"""Streaming statistics of one tensor value: range, non-finite counts, histogram, channel ranges.

`StatsObserver.observe(array)` is called once per calibration batch; its memory does not grow
with the number of batches. The histogram lives on an absolute grid of power-of-two bin widths:

    bin k covers [k * 2**exponent, (k + 1) * 2**exponent)

and holds at most `bins` (default 8192) counters. When data falls outside the current window the
exponent grows by the smallest amount that makes the whole observed range fit, and old bins merge
into new ones by integer index arithmetic (`k >> d`): every new bin is exactly the union of
2**d old bins, so no count is ever split, interpolated or re-sampled, and the result equals
(bin for bin) a histogram of all the data computed at once with the final exponent.

Because the exponent is the smallest that fits, the observed range always spans more than
`bins / 2 - 1` bins (at least 4095 with the default), and since 0 is always a bin edge the
histogram of |x| (`Histogram.fold`) is exact too, with at least 2047 bins over [0, max|x|] for
any tensor. Two histograms on the grid merge exactly as well (`StatsObserver.merge`).

Bins are never narrower than max|x| * 2**-40 nor 2**-126 (the resolution floor, which only a
range that narrow relative to its magnitude reaches, e.g. a constant tensor): the bin index of
every value then stays below 2**41 in magnitude and is computed exactly in float32 arithmetic
(a power-of-two scaling and a floor).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from lowbit.numerics import packed_ints
from lowbit.numerics.exact_sum import ExactSum

DEFAULT_BINS = 8192
"""Histogram capacity. Twice the promised resolution, because widening doubles bin widths."""

_MAX_INDEX_BITS = 40
_MIN_EXPONENT = -126
_CHUNK = 1 << 20
"""Elements binned per step, bounding the temporary index arrays (8 MiB) of large tensors."""


@dataclass(frozen=True, eq=False)
class Histogram:
    """Counts of values in the bins `offset .. offset + len(counts) - 1` of width `2**exponent`.

    Bin k covers `[k * width, (k + 1) * width)`. `counts` is int64 and read-only.
    """

    counts: np.ndarray
    offset: int
    exponent: int

    def __post_init__(self) -> None:
        counts = np.array(self.counts, dtype=np.int64, copy=True).reshape(-1)
        counts.setflags(write=False)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "offset", int(self.offset))
        object.__setattr__(self, "exponent", int(self.exponent))

    @property
    def width(self) -> float:
        return math.ldexp(1.0, self.exponent)

    @property
    def bins(self) -> int:
        return int(self.counts.size)

    @property
    def start(self) -> float:
        """Left edge of the first bin."""
        return math.ldexp(float(self.offset), self.exponent)

    @property
    def stop(self) -> float:
        """Right edge of the last bin."""
        return math.ldexp(float(self.offset + self.bins), self.exponent)

    @property
    def edges(self) -> np.ndarray:
        """The `bins + 1` bin edges (float64, exact)."""
        return np.ldexp(np.arange(self.offset, self.offset + self.bins + 1, dtype=np.float64),
                        self.exponent)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def trimmed(self) -> Histogram:
        """The same histogram without empty bins at either end."""
        nz = np.flatnonzero(self.counts)
        if nz.size == 0:
            return Histogram(np.zeros(0, np.int64), self.offset, self.exponent)
        return Histogram(self.counts[nz[0]:nz[-1] + 1], self.offset + int(nz[0]), self.exponent)

    def covering(self, lo_bin: int, hi_bin: int) -> Histogram:
        """The same counts padded with empty bins so that bins `lo_bin .. hi_bin` are included."""
        lo = min(lo_bin, self.offset)
        hi = max(hi_bin, self.offset + self.bins - 1)
        counts = np.zeros(hi - lo + 1, np.int64)
        counts[self.offset - lo:self.offset - lo + self.bins] = self.counts
        return Histogram(counts, lo, self.exponent)

    def coarsened(self, shift: int) -> Histogram:
        """Merge aligned groups of `2**shift` bins: bin k goes to bin `k >> shift` (exact)."""
        if shift < 0:
            raise ValueError(f"cannot refine a histogram (shift {shift})")
        if shift == 0 or self.bins == 0:
            return self if shift == 0 else Histogram(self.counts, self.offset >> shift,
                                                     self.exponent + shift)
        # Indices stay below 2**62 in magnitude, so a shift of 62 already maps them to 0 or -1.
        new = (np.arange(self.bins, dtype=np.int64) + self.offset) >> min(shift, 62)
        starts = np.concatenate(([0], np.flatnonzero(np.diff(new)) + 1))
        sums = np.add.reduceat(self.counts, starts)
        first = int(new[0])
        counts = np.zeros(int(new[-1]) - first + 1, np.int64)
        counts[new[starts] - first] = sums
        return Histogram(counts, first, self.exponent + shift)

    def fold(self) -> Histogram:
        """The histogram of |x|, on the same grid, trimmed (exact: 0 is a bin edge; bin k < 0
        holds values in [k w, (k+1) w), whose magnitudes lie in bin -k-1, up to values exactly
        on an edge)."""
        last = self.offset + self.bins - 1
        if self.offset >= 0:
            return self.trimmed()
        if last < 0:
            return Histogram(self.counts[::-1], -last - 1, self.exponent).trimmed()
        neg = self.counts[:-self.offset][::-1]
        pos = self.counts[-self.offset:]
        counts = np.zeros(max(neg.size, pos.size), np.int64)
        counts[:pos.size] += pos
        counts[:neg.size] += neg
        return Histogram(counts, 0, self.exponent).trimmed()

    def bin_of(self, x: float) -> int:
        """Index k of the bin holding the real value `x`."""
        return math.floor(math.ldexp(x, -self.exponent))


def _index_exponent_floor(maxabs: float) -> int:
    if maxabs == 0.0:
        return _MIN_EXPONENT
    return max(math.frexp(maxabs)[1] - _MAX_INDEX_BITS, _MIN_EXPONENT)


def fit_exponent(lo: float, hi: float, bins: int, at_least: int | None = None) -> int:
    """The smallest exponent e (not below `at_least` nor the resolution floor) such that
    bins `floor(lo / 2**e) .. floor(hi / 2**e)` number at most `bins`."""
    floor_e = _index_exponent_floor(max(abs(lo), abs(hi)))
    if at_least is not None:
        floor_e = max(floor_e, at_least)
    if hi <= lo:
        return floor_e
    e = max(math.ceil(math.log2((hi - lo) / (bins - 1))) - 1, floor_e)
    while math.floor(math.ldexp(hi, -e)) - math.floor(math.ldexp(lo, -e)) + 1 > bins:
        e += 1
    return e


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """a + b, or None when either is unknown (a profile written before sums were kept)."""
    return None if a is None or b is None else a + b


@dataclass
class ChannelRange:
    """Per-channel minimum and maximum along one axis (NaN where a channel had no finite
    value), and the sum and number of the finite values of each channel (float64; None in
    profiles written before they were recorded), whose ratio is the channel mean that bias
    correction uses."""

    axis: int
    min: np.ndarray
    max: np.ndarray
    sum: np.ndarray | None = None
    count: np.ndarray | None = None
    exact: ExactSum | None = field(default=None, repr=False, compare=False)
    """The sums as an order-independent exact sum (`lowbit.numerics.exact_sum`) while
    profiling: `sum` is its value, so a profile taken in shards and merged in any order has the
    sums one pass has, bit for bit. None in profiles read from files (then sums add in
    float64)."""

    def add_sums(self, total: np.ndarray, count: np.ndarray) -> None:
        """Add one array's per-channel sums and counts."""
        if self.exact is not None and np.all(np.isfinite(total)):
            if _native():
                from lowbit.backends.cpu import stats

                stats.exactsum_add(self.exact, total)
            else:
                self.exact.add(total)
            self._sum_stale = True  # its value when next read (not on every batch)
        else:
            current = self.sum  # read before the exact sum is dropped
            self.exact = None
            self.sum = _add(current, total)
        self.count = _add(self.count, count)

    def merge_sums(self, other: ChannelRange) -> None:
        """Add another range's sums and counts (exactly when both keep exact sums)."""
        if self.exact is not None and other.exact is not None:
            self.exact.merge(other.exact)
            self._sum_stale = True
        else:
            current = self.sum
            self.exact = None
            self.sum = _add(current, other.sum)
        self.count = _add(self.count, other.count)

    @property
    def mean(self) -> np.ndarray | None:
        """sum / count per channel (NaN for a channel with no finite value), or None."""
        if self.sum is None or self.count is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.sum / np.maximum(self.count, 1), np.nan)


def _channel_sum(self: ChannelRange) -> np.ndarray | None:
    """`sum`: with an exact sum, its value, rounded to float64 when first read after an
    addition (`ExactSum.value` costs more than the addition itself, and profiling adds once
    a batch and reads once at the end)."""
    if self.__dict__.get("_sum_stale", False):
        assert self.exact is not None
        self.__dict__["_sum"] = self.exact.value()
        self.__dict__["_sum_stale"] = False
    return self.__dict__.get("_sum")


def _set_channel_sum(self: ChannelRange, value: np.ndarray | None) -> None:
    self.__dict__["_sum"] = value
    self.__dict__["_sum_stale"] = False


ChannelRange.sum = property(_channel_sum, _set_channel_sum)  # type: ignore[assignment]
"""The dataclass's `sum` field, read through `_channel_sum` (its __init__, __eq__ and
__repr__ use it too)."""


@dataclass
class StatsObserver:
    """Streaming statistics of one value over many arrays.

    `count` is the number of finite elements seen, `zeros` how many of them are exactly 0 (they
    quantize without error under every scheme, which calibration takes into account); `nan`,
    `posinf`, `neginf` count the non-finite ones (they take no part in the range or histogram).
    `min`/`max` are the finite extremes (None before any finite value). `channel_axes` asks for
    per-channel ranges along those axes.
    """

    name: str = ""
    bins: int = DEFAULT_BINS
    channel_axes: tuple[int, ...] = ()
    count: int = 0
    zeros: int = 0
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    min: float | None = None
    max: float | None = None
    channels: dict[int, ChannelRange] = field(default_factory=dict)
    _counts: np.ndarray | None = field(default=None, repr=False)
    _offset: int = field(default=0, repr=False)
    _exponent: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.bins < 16:
            raise ValueError(f"a histogram needs at least 16 bins, got {self.bins}")

    # -- queries --------------------------------------------------------------------------------
    @property
    def nonfinite(self) -> int:
        return self.nan + self.posinf + self.neginf

    @property
    def histogram(self) -> Histogram | None:
        """The histogram trimmed to its occupied bins; None when no finite value was seen."""
        if self._counts is None:
            return None
        assert self._exponent is not None
        return Histogram(self._counts, self._offset, self._exponent).trimmed()

    def channel_range(self, axis: int) -> ChannelRange:
        try:
            return self.channels[axis]
        except KeyError:
            raise KeyError(f"no per-channel range along axis {axis} for '{self.name}'; "
                           f"observed axes: {sorted(self.channels)}") from None

    # -- updates --------------------------------------------------------------------------------
    def observe(self, array: np.ndarray) -> None:
        """Add every element of `array` to the statistics."""
        x = np.asarray(array)
        if x.dtype not in (np.float32, np.float64):
            x = x.astype(np.float64 if x.dtype.itemsize > 4 else np.float32)
        if x.size == 0:
            return
        if x.dtype == np.float32 and self._observe_native(x):
            return
        extremes = self._observe_channels(x)
        flat = x.reshape(-1)
        lo, hi = extremes if extremes is not None else (float(flat.min()), float(flat.max()))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = np.isfinite(flat)
            nan = int(np.count_nonzero(np.isnan(flat)))
            pos = int(np.count_nonzero(flat == np.inf))
            self.nan += nan
            self.posinf += pos
            self.neginf += int(flat.size - np.count_nonzero(finite)) - nan - pos
            flat = flat[finite]
            if flat.size == 0:
                return
            lo, hi = float(flat.min()), float(flat.max())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        self._ensure_window()
        self._add(flat)
        self.count += flat.size
        self.zeros += int(flat.size - np.count_nonzero(flat))

    def _observe_native(self, x: np.ndarray) -> bool:
        """`observe` of float32 `x` with the C kernels (`lowbit.backends.cpu.stats`: the same
        results as `channel_stats` and `_add`) when they load and `x` is finite; False (nothing
        changed) otherwise. Each requested channel axis is one pass of the kernel (a constant's
        statistics ask for every axis)."""
        if not _native():
            return False
        from lowbit.backends.cpu import stats

        requested = [a for a in self.channel_axes if -x.ndim <= a < x.ndim]
        found = [(a, stats.channel_stats(x, a % x.ndim)) for a in requested]
        if any(f is None for _, f in found):
            return False
        if not found:  # the whole tensor: no sum needed
            whole = stats.value_range(x)
            if whole is None:
                return False
            low, high, zeros = whole
        for a, (lo, hi, total, _) in found:  # type: ignore[misc]
            self._update_channel(a, lo, hi, total,
                                 np.full(lo.shape, x.size // max(lo.size, 1), np.float64))
        if found:
            zeros = found[-1][1][3]  # type: ignore[index]
            low, high = float(lo.min()), float(hi.max())
        self.min = low if self.min is None else min(self.min, low)
        self.max = high if self.max is None else max(self.max, high)
        self._ensure_window()
        assert self._exponent is not None and self._counts is not None
        offset = np.float32(self._offset)
        if float(offset) != self._offset:
            self._add(x.reshape(-1))
        else:
            stats.histogram_add(self._counts, x, float(np.float32(
                math.ldexp(1.0, -self._exponent))), float(offset))
        self.count += x.size
        self.zeros += zeros
        return True

    def _update_channel(self, axis: int, lo: np.ndarray, hi: np.ndarray, total: np.ndarray,
                        count: np.ndarray) -> None:
        current = self.channels.get(axis)
        if current is None:
            current = self.channels[axis] = ChannelRange(
                axis, lo, hi, np.zeros(lo.shape), np.zeros(lo.shape), ExactSum(lo.shape))
            current.add_sums(total, count)
        elif current.min.shape != lo.shape:
            raise ValueError(
                f"'{self.name}': axis {axis} has {lo.size} channels in this array but "
                f"{current.min.size} before")
        else:
            current.min = np.fmin(current.min, lo)
            current.max = np.fmax(current.max, hi)
            current.add_sums(total, count)

    def _ensure_window(self) -> None:
        """Move and widen the window so that [min, max] fits, merging bins exactly."""
        assert self.min is not None and self.max is not None
        if self._exponent is None or self._counts is None:
            e = fit_exponent(self.min, self.max, self.bins)
            self._counts = np.zeros(self.bins, np.int64)
            self._offset, self._exponent = math.floor(math.ldexp(self.min, -e)), e
            return
        e = self._exponent
        lo_k = math.floor(math.ldexp(self.min, -e))
        hi_k = math.floor(math.ldexp(self.max, -e))
        if lo_k >= self._offset and hi_k < self._offset + self.bins:
            return
        new_e = fit_exponent(self.min, self.max, self.bins, at_least=e)
        old = Histogram(self._counts, self._offset, e).trimmed().coarsened(new_e - e)
        offset = math.floor(math.ldexp(self.min, -new_e))
        counts = np.zeros(self.bins, np.int64)
        if old.bins:
            start = old.offset - offset
            counts[start:start + old.bins] = old.counts
        self._counts, self._offset, self._exponent = counts, offset, new_e

    def _add(self, flat: np.ndarray) -> None:
        """Count `flat`'s values (finite, inside the window) into their bins: bin index
        floor(x * 2**-exponent) - offset. The floor of a value scaled by a power of two and the
        offset (the floor of such a value too) are integers of `flat`'s dtype, and so is their
        difference (in [0, bins)), so it is computed exactly in that dtype; an offset the dtype
        cannot hold (a window set by float64 data) is subtracted in int64 instead."""
        assert self._exponent is not None and self._counts is not None
        kind = flat.dtype.type
        scale = kind(math.ldexp(1.0, -self._exponent))
        offset = kind(self._offset)
        exact = float(offset) == self._offset
        y = np.empty(min(flat.size, _CHUNK), flat.dtype)
        for start in range(0, flat.size, _CHUNK):
            part = y[:min(_CHUNK, flat.size - start)]
            np.multiply(flat[start:start + _CHUNK], scale, out=part)
            np.floor(part, out=part)
            if exact:
                part -= offset
                idx = part.astype(np.intp)
            else:
                idx = part.astype(np.int64)
                idx -= self._offset
            self._counts += np.bincount(idx, minlength=self.bins)

    def _observe_channels(self, x: np.ndarray) -> tuple[float, float] | None:
        """Per-channel ranges, sums and counts along each of `channel_axes`; returns the
        extremes of `x` when one axis's channel ranges give them (every value finite), else
        None."""
        extremes = None
        for axis in self.channel_axes:
            if not -x.ndim <= axis < x.ndim:
                continue
            ax = axis % x.ndim
            others = tuple(i for i in range(x.ndim) if i != ax)
            lo, hi = x.min(axis=others), x.max(axis=others)
            # NaN propagates through min and max, and an infinity is an extreme: all the
            # channel extremes are finite exactly when every value is
            finite = bool(np.isfinite(lo).all() and np.isfinite(hi).all())
            if finite:
                total = channel_sums(x, ax)
                count = np.full(lo.shape, x.size // max(lo.size, 1), np.float64)
                extremes = (float(lo.min()), float(hi.max()))
            else:
                src = np.where(np.isfinite(x), x, np.nan)
                with np.errstate(invalid="ignore"), _quiet_all_nan():
                    lo, hi = np.nanmin(src, axis=others), np.nanmax(src, axis=others)
                total = np.nansum(src, axis=others, dtype=np.float64)
                count = np.isfinite(x).sum(axis=others).astype(np.float64)
            self._update_channel(axis, lo.astype(np.float64), hi.astype(np.float64), total,
                                 count)
        return extremes

    def merge(self, other: StatsObserver) -> None:
        """Add the statistics of `other` (same value, other data) to this one, exactly."""
        for axis, ch in other.channels.items():
            mine = self.channels.get(axis)
            if mine is None:
                self.channels[axis] = ChannelRange(
                    axis, ch.min.copy(), ch.max.copy(),
                    None if ch.sum is None else ch.sum.copy(),
                    None if ch.count is None else ch.count.copy(),
                    None if ch.exact is None else ch.exact.copy())
            else:
                mine.min, mine.max = np.fmin(mine.min, ch.min), np.fmax(mine.max, ch.max)
                mine.merge_sums(ch)
        self.nan += other.nan
        self.posinf += other.posinf
        self.neginf += other.neginf
        theirs = other.histogram
        if theirs is None or other.min is None or other.max is None:
            return
        parts = [h for h in (self.histogram, theirs) if h is not None]
        self.min = other.min if self.min is None else min(self.min, other.min)
        self.max = other.max if self.max is None else max(self.max, other.max)
        e = max([fit_exponent(self.min, self.max, self.bins)] + [h.exponent for h in parts])
        self._offset = math.floor(math.ldexp(self.min, -e))
        self._exponent = e
        counts = np.zeros(self.bins, np.int64)
        for h in parts:
            c = h.coarsened(e - h.exponent)
            counts[c.offset - self._offset:c.offset - self._offset + c.bins] += c.counts
        self._counts = counts
        self.count += other.count
        self.zeros += other.zeros

    # -- persistence ----------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """Pickled (a partial profile moving to another process) with the histogram's counts
        packed to the bytes they need (`lowbit.numerics.packed_ints`: lossless; most of the
        8192 bins of a histogram are empty or small)."""
        state = dict(self.__dict__)
        if self._counts is not None:
            state["_counts"] = packed_ints.pack(self._counts)
        return state

    def __setstate__(self, state: dict) -> None:
        counts = state.get("_counts")
        if isinstance(counts, packed_ints.Packed):
            state = {**state, "_counts": packed_ints.unpack(counts)}
        self.__dict__.update(state)

    def restore_histogram(self, hist: Histogram | None) -> None:
        """Install a saved histogram (from `histogram`; used when loading a profile)."""
        if hist is None or hist.bins == 0:
            self._counts, self._exponent = None, None
            return
        if hist.bins > self.bins:
            raise ValueError(f"'{self.name}': saved histogram has {hist.bins} bins, more than "
                             f"the capacity {self.bins}")
        counts = np.zeros(self.bins, np.int64)
        counts[:hist.bins] = hist.counts
        self._counts, self._offset, self._exponent = counts, hist.offset, hist.exponent


def channel_sums(x: np.ndarray, axis: int) -> np.ndarray:
    """Per channel along `axis`, the sum of its values in float64, added one at a time in
    row-major order of the other axes (the definition the C kernel reproduces)."""
    moved = np.moveaxis(np.asarray(x, np.float64), axis, 0).reshape(x.shape[axis], -1)
    if moved.shape[1] == 0:
        return np.zeros(moved.shape[0])
    return np.cumsum(moved, axis=1)[:, -1]


@functools.cache
def _native() -> bool:
    """Whether the C forms of the observers are used (`lowbit.backends.cpu.stats`)."""
    from lowbit.backends.cpu import stats

    return stats.available()


def divided_stats(stats: StatsObserver, axis: int, t: np.ndarray, name: str) -> StatsObserver:
    """The statistics of x / t (t > 0 per channel along `axis`) from those of x: exact for the
    channel ranges, sums and the tensor's extremes; no histogram."""
    channel = stats.channels[axis]
    divided = ChannelRange(axis, channel.min / t, channel.max / t,
                           None if channel.sum is None else channel.sum / t, channel.count)
    return StatsObserver(name, stats.bins, (axis,), count=stats.count, zeros=stats.zeros,
                         min=float(np.nanmin(divided.min)), max=float(np.nanmax(divided.max)),
                         channels={axis: divided})


class _quiet_all_nan:
    """Silence numpy's RuntimeWarning for all-NaN slices (a channel with no finite value)."""

    def __enter__(self) -> None:
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)
