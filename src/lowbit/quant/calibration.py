"""Clipping ranges from observed statistics: min-max, percentile, entropy (KL) and MSE.

Every method takes a value's `StatsObserver` and returns the real range `(lo, hi)` to quantize,
always inside the observed finite range `[min, max]` (so the sign of the data stays visible to
the scheme, which then makes the range symmetric or makes it contain 0). Methods that model the
integer grid take two parameters that a scheme derives (`lowbit.quant.schemes.calibration_grid`):

- `symmetric`: the grid is symmetric around 0 and only a threshold t is searched; the range is
  `[-t, t]` intersected with the data range.
- `steps`: the number of quantization steps (integer levels minus one) that cover `[0, t]` when
  symmetric (127 for int8, 255 for a non-negative tensor in uint8), or the whole `[lo, hi]`
  otherwise (255 for 8 bits). The step size is therefore `t / steps` or `(hi - lo) / steps`.

In asymmetric mode the searched range always contains 0, as the final quantized range must.
`activation_params` and `weight_params` chain scheme, method and scheme into QuantParams.
Histogram-based methods work on the observer's exact power-of-two histogram, merged (exactly) down
to at most `MAX_SEARCH_BINS` bins over the searched interval; candidate ends are bin edges.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from lowbit.errors import InputError
from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.types import QuantParams
from lowbit.quant import schemes
from lowbit.quant.observers import Histogram, StatsObserver

MAX_SEARCH_BINS = 4096
"""Bins over the searched interval ([0, max|x|] when symmetric, [min(lo,0), max(hi,0)]
otherwise). At least 2048 whenever the data span that interval (see observers)."""

DEFAULT_PERCENTILE = 99.99

Range = tuple[float, float]


def _require_data(stats: StatsObserver) -> tuple[float, float]:
    if stats.min is None or stats.max is None:
        what = f"'{stats.name}'" if stats.name else "this value"
        extra = f" ({stats.nonfinite} non-finite values only)" if stats.nonfinite else ""
        raise InputError(f"{what} has no finite calibration values{extra}; it cannot be "
                         f"calibrated; check the calibration data or keep the node in float")
    return stats.min, stats.max


def _clamp(stats: StatsObserver, lo: float, hi: float) -> Range:
    assert stats.min is not None and stats.max is not None
    return max(lo, stats.min), min(hi, stats.max)


def minmax(stats: StatsObserver) -> Range:
    """The observed finite range `(min, max)`: nothing is clipped."""
    return _require_data(stats)


def percentile(stats: StatsObserver, percentile: float = DEFAULT_PERCENTILE,
               symmetric: bool = False) -> Range:
    """Clip the `100 - percentile` percent most extreme values.

    Symmetric: t is the `percentile`-th percentile of |x| and the range is `[-t, t]` (within the
    data range). Per tail (default): `(100 - percentile) / 2` percent are cut from each tail, so
    `lo` and `hi` are the `(100 - percentile) / 2` and `(100 + percentile) / 2` percentiles of x.
    Percentiles are read from the histogram's cumulative counts, interpolating linearly inside a
    bin (values assumed uniform within it; exact zeros, counted apart, at 0). `percentile=100`
    gives min-max.
    """
    lo, hi = _require_data(stats)
    if not 0.0 < percentile <= 100.0 or math.isnan(percentile):
        raise InputError(f"percentile must be in (0, 100], got {percentile}")
    if lo == hi or percentile == 100.0:
        return lo, hi
    hist = stats.histogram
    assert hist is not None
    if symmetric:
        t = _quantile(hist.fold(), percentile / 100.0, stats.zeros)
        return _clamp(stats, -t, t)
    cut = (100.0 - percentile) / 200.0
    return _clamp(stats, _quantile(hist, cut, stats.zeros),
                  _quantile(hist, 1.0 - cut, stats.zeros))


def _quantile(hist: Histogram, q: float, zeros: int = 0) -> float:
    """The value below which a fraction q of the histogram's mass lies: linear inside each bin,
    except that the `zeros` exact zeros of bin [0, w) sit at 0."""
    cum = np.cumsum(hist.counts, dtype=np.float64)
    target = q * cum[-1]
    i = min(int(np.searchsorted(cum, target, side="left")), hist.bins - 1)
    before = cum[i - 1] if i else 0.0
    inside = float(hist.counts[i])
    if hist.offset + i == 0 and zeros:
        if target <= before + zeros:
            return 0.0
        before, inside = before + zeros, inside - zeros
    frac = (target - before) / inside if inside > 0 else 1.0
    return float((hist.offset + i + min(max(frac, 0.0), 1.0)) * hist.width)


# -- searches over windows of a histogram ---------------------------------------------------------
def _search_histogram(stats: StatsObserver, symmetric: bool) -> tuple[Histogram, int]:
    """The histogram searched and the edge index of 0 in it.

    Symmetric: the histogram of |x| on [0, ...) (zero edge index 0). Otherwise the histogram
    padded so that 0 is one of its edges. Both merged down to at most MAX_SEARCH_BINS bins.
    Exact zeros are left out: every candidate grid represents 0 exactly, so they cost nothing
    in any candidate, while left in they would swamp the bin [0, w) (a ReLU output is often
    half zeros) and decide the search instead of the distribution of the other values.
    """
    hist = stats.histogram
    assert hist is not None
    if stats.zeros:
        counts = hist.covering(0, 0).counts.copy()
        counts[-min(hist.offset, 0)] -= stats.zeros
        hist = Histogram(counts, min(hist.offset, 0), hist.exponent)
    if symmetric:
        hist = hist.fold()
    last = hist.offset + hist.bins - 1
    span = max(last, -1) - min(hist.offset, 0) + 1
    if span > MAX_SEARCH_BINS:
        hist = hist.coarsened(math.ceil(math.log2(span / MAX_SEARCH_BINS)))
        last = hist.offset + hist.bins - 1
    hist = hist.covering(min(hist.offset, 0), max(last, -1))
    return hist, -hist.offset


def _edge(hist: Histogram, index: int) -> float:
    return math.ldexp(float(hist.offset + index), hist.exponent)


def _xlogx(x: np.ndarray) -> np.ndarray:
    """x log x, 0 at x = 0."""
    x = np.asarray(x, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)


SUBSTEPS = 2
"""Sub-bins per quantization cell at which entropy calibration compares the distributions."""
KL_TOLERANCE = 0.2
"""Entropy calibration takes windows whose divergence is within this fraction of the smallest
as equal and keeps the one that clips least."""


class _KL:
    """KL(P || Q) of entropy calibration for many windows [a, b) of one histogram (ends in bin
    units), by a measure that does not depend on the histogram's resolution.

    The window's grid has `levels` levels, `levels - 1` steps of width D = (b - a) / (levels - 1),
    shifted (by less than D / 2) so that the bin edge `zero` (the real 0) is a level, as the
    scheme's integer zero point makes it. Each level's cell is the interval that rounds to it,
    [level - D/2, level + D/2) (clamped to the histogram); values beyond the outer cells are
    clipped. s_j is the mass of cell j, read from the histogram's cumulative counts (linear
    inside a bin). P, the data, is compared with Q, its quantization, at SUBSTEPS = m equal
    sub-bins per cell:

    - P: inside cell j, a density linear in x whose values at the cell's edges are e_j and
      e_{j+1}, the density at an edge being the mean of the densities of the two cells that meet
      there (at the outer edges, that of the end cell). With r_j = (e_{j+1} - e_j) /
      (e_{j+1} + e_j), sub-bin k (t in [k/m, (k+1)/m) of the cell) holds
      s_j (1/m + r_j ((t1^2 - t1) - (t0^2 - t0))). The clipped mass is added to the first and
      last sub-bin.
    - Q: s_j / m in each sub-bin of cell j (quantization keeps a cell's mass, not where in the
      cell it lies), normalised by the mass I inside the outer cells. Where Q is 0 and P is not
      (clipped mass landing on an empty cell) Q is eps = 0.01 / N (N values): clipping a handful
      of outliers is cheap, clipping real mass is not.

    KL = sum over sub-bins of P log(P / Q) (P normalised to the whole histogram): a cell
    contributes s_j (psi(r_j) + log I), psi(r) = sum_k f_k log(m f_k) with f_k its sub-bin
    fractions, then the two end sub-bins are corrected for the clipped mass. O(levels) per
    window, so every candidate window is scored.

    The cause of the old dependence on resolution: how the candidate distributions were built.
    TensorRT's search (also MXNet's, TVM's and ONNX Runtime's) and Glow's (`optimizeKL`) both
    compare P and Q at the histogram's own bins: P is the histogram with the clipped mass on the
    window's end bins; Q splits the window into `levels` groups of consecutive bins and spreads
    each group's mass evenly over the group's non-empty bins. They differ in the details: TensorRT
    scores every threshold and smooths only the zero bins of Q with an epsilon; Glow gives each
    group floor(W / levels) bins with the remainder in the last group, "conditions" both P and Q
    (every empty bin gets 1e-4, taken evenly from the non-empty ones) and shrinks the window
    greedily from whichever end loses the least mass instead of scoring every window. lowbit used
    TensorRT's form with groups of floor(j W / levels) bins. In all of them a value that occurs
    many times (MNISTNet's background pixels give each channel of its first convolution one
    value, 60 % of its non-zero outputs) costs its mass times the log of the number of non-empty
    bins of its group: that grows with the number of histogram bins per quantization step and
    vanishes where the value sits alone in a group, so the search chased those alignments: on
    MNISTNet's first convolution it kept 0.17 / 0.31 / 0.50 / 1.29 of a 2.73 range with 8192 /
    4096 / 2048 / 1024 bins (accuracy 90.4 / 97.8 / 99.1 / 99.8 %). Here the comparison is at a
    fixed m sub-bins per quantization cell whatever the histogram's resolution, a cell's shape
    comes from its neighbours' masses (which even a coarse histogram gives), a repeated value
    costs the same wherever it lies, and the cells sit where the quantized grid puts them (a
    density that jumps at 0, common at a two-signed tensor's peak, always falls in the middle of
    the cell of 0, not wherever the window's end happens to put a group boundary). Measured now:
    2.73 / 2.72 / 2.71 / 2.71 at 1024 / 2048 / 4096 / 8192 bins on that convolution.
    """

    CHUNK = 256

    def __init__(self, counts: np.ndarray, levels: int, zero: int,
                 substeps: int = SUBSTEPS) -> None:
        total = float(counts.sum())
        self.total = total
        self.c = counts.astype(np.float64)
        self.cum = np.concatenate(([0.0], np.cumsum(self.c)))
        """In counts, not fractions: sums of integers are exact, so a cell over empty bins has
        mass exactly 0 (not a rounding residue that Q would take for real mass)."""
        self.log_eps = math.log(0.01 / total)
        self.levels, self.zero, self.m = levels, zero, substeps
        t0 = np.arange(substeps) / substeps
        t1 = t0 + 1.0 / substeps
        self.slope = (t1 * t1 - t1) - (t0 * t0 - t0)
        """Sub-bin k's fraction of its cell is 1/m + r * slope[k]."""

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(np.size(a))
        for s in range(0, out.size, self.CHUNK):
            out[s:s + self.CHUNK] = self._chunk(np.asarray(a[s:s + self.CHUNK], np.float64),
                                                np.asarray(b[s:s + self.CHUNK], np.float64))
        return out

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        """Count below x (bin units, clamped to the histogram), linear inside each bin."""
        x = np.clip(x, 0.0, float(self.c.size))
        k = np.minimum(x.astype(np.int64), self.c.size - 1)
        return self.cum[k] + (x - k) * self.c[k]

    def _psi(self, r: np.ndarray) -> np.ndarray:
        """sum_k f_k log(m f_k), f_k = 1/m + r * slope[k]: the KL of a cell's linear density
        from the uniform one, at m sub-bins."""
        m = self.m
        out = np.zeros_like(r)
        for d in self.slope:
            out += _xlogx(1.0 + m * r * d) / m
        return out

    def _chunk(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        levels, m = self.levels, self.m
        step = (b - a) / (levels - 1)
        origin = self.zero - np.clip(np.round((self.zero - a) / step), 0, levels - 1) * step
        edges = origin[:, None] + step[:, None] * (np.arange(levels + 1) - 0.5)
        below = self._cdf(edges)
        width = np.diff(np.clip(edges, 0.0, float(self.c.size)), axis=1)
        s = np.maximum(np.diff(below, axis=1), 0.0) / self.total  # cell masses
        left, right = below[:, 0] / self.total, (self.total - below[:, -1]) / self.total
        inside = (below[:, -1] - below[:, 0]) / self.total
        with np.errstate(divide="ignore", invalid="ignore"):
            density = np.where(width > 0, s / width, 0.0)
            edge = np.empty((s.shape[0], levels + 1))
            edge[:, 1:-1] = (density[:, 1:] + density[:, :-1]) / 2
            edge[:, 0], edge[:, -1] = density[:, 0], density[:, -1]
            total = edge[:, 1:] + edge[:, :-1]
            r = np.where(total > 0, (edge[:, 1:] - edge[:, :-1]) / total, 0.0)
            log_inside = np.log(inside)
            kl = (s * self._psi(r)).sum(axis=1) + inside * log_inside
            # the clipped mass in the end sub-bins
            for clipped, cell, k, rr in ((left, s[:, 0], 0, r[:, 0]),
                                         (right, s[:, -1], m - 1, r[:, -1])):
                p = cell * (1.0 / m + rr * self.slope[k])
                log_q = np.where(cell > 0, np.log(cell / m) - log_inside, self.log_eps)
                kl += _xlogx(p + clipped) - _xlogx(p) - clipped * log_q
        # a window whose cells hold no value (sparse data: [a, b) between two far-apart
        # values) clips everything: the worst cost, not log(0)'s NaN
        return np.where(inside > 0, kl, np.inf)


def _occupied(counts: np.ndarray) -> tuple[int, int]:
    """First and last non-empty bin. Windows must overlap them: a window [a, b) with
    b <= first or a > last would hold no value, and its range would miss the data entirely."""
    nz = np.flatnonzero(counts)
    return int(nz[0]), int(nz[-1])


def _widest(candidates: np.ndarray, cost: np.ndarray, upper: bool) -> int:
    """The candidate end that clips least (the largest when `upper`, else the smallest) among
    those whose cost is within KL_TOLERANCE of the smallest."""
    best = cost.min()  # finite: the caller's candidates include a window holding data
    near = candidates[cost <= best + KL_TOLERANCE * abs(best)]
    return int(near.max() if upper else near.min())


def _coordinate_descent(cost: Callable[[np.ndarray, np.ndarray], np.ndarray],
                        counts: np.ndarray, zero: int, min_width: int) -> tuple[int, int]:
    """Windows [a, b) with a <= zero <= b, b - a >= min_width and some data inside: from the
    full window, move one end at a time (each move an exhaustive 1-D search, keeping the end
    that clips least among the near-best, `_widest`) until neither end moves."""
    n = counts.size
    first, last = _occupied(counts)
    a, b = 0, n
    for _ in range(32):
        hi = np.arange(max(zero, a + min_width, first + 1), n + 1)
        b_new = _widest(hi, cost(np.full(hi.size, a), hi), upper=True)
        lo = np.arange(0, min(zero, b_new - min_width, last) + 1)
        a_new = _widest(lo, cost(lo, np.full(lo.size, b_new)), upper=False)
        if (a_new, b_new) == (a, b):
            break
        a, b = a_new, b_new
    return a, b


def entropy(stats: StatsObserver, steps: int = 255, symmetric: bool = False) -> Range:
    """The range whose quantization loses the least information, by KL divergence (`_KL`:
    TensorRT's entropy calibration, compared at a fixed number of sub-bins per step so that the
    result does not depend on the histogram's resolution; generalised to asymmetric ranges).

    The grid has `steps + 1` levels over the searched window (`[0, t]` when symmetric: 128 for
    int8, 256 for uint8 on a non-negative tensor; `[lo, hi]` otherwise). Each candidate window
    of bins [a, b) is scored by `_KL`; of the windows within KL_TOLERANCE (20 %) of the smallest
    divergence the one that clips least wins: the divergence of a sparse tail is flat to within
    a few percent over a wide span of ends (EfficientNet-Lite0's projections), and there the
    choice is otherwise decided by noise. Symmetric: exhaustive search of t over bin edges of
    the |x| histogram. Asymmetric: the window contains 0; for one-signed data only the far end
    moves (an exhaustive 1-D search, the unsigned case), otherwise the two ends are searched
    alternately (coordinate descent) from the full range. Windows narrower than `steps + 1` bins
    are not candidates, so with more levels than bins (int16) the full range is returned: the
    histogram cannot tell the candidates apart. Measured, ranges chosen with 1024 to 8192 bins
    agree within 5 % on every activation of MNISTNet and EfficientNet-Lite0
    (tests/test_realmodel_quant.py, tests/test_realmodel_efficientnet.py).
    """
    lo, hi = _require_data(stats)
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    if lo == hi:
        return lo, hi
    hist, zero = _search_histogram(stats, symmetric)
    levels = steps + 1
    if hist.bins < levels or not hist.counts.any():
        return lo, hi
    kl = _KL(hist.counts, levels, zero)
    if symmetric:
        b = np.arange(max(levels, _occupied(hist.counts)[0] + 1), hist.bins + 1)
        if b.size == 0:
            return lo, hi
        t = _edge(hist, _widest(b, kl(np.zeros(b.size, np.int64), b), upper=True))
        return _clamp(stats, -t, t)
    a, b = _coordinate_descent(kl, hist.counts, zero, levels)
    return _clamp(stats, _edge(hist, a), _edge(hist, b))


class _SquaredError:
    """Expected squared quantization error of windows [a, b) of a histogram, in bin units.

    Values are taken uniform within each bin. Values outside the window are clipped to its ends
    and contribute their exact mean squared distance to the end; values inside contribute the
    rounding noise of a uniform grid, step^2 / 12 each, with step = (b - a) / steps
    (or b / steps when symmetric, where the histogram is of |x| and a = 0).
    """

    def __init__(self, counts: np.ndarray, steps: int, symmetric: bool) -> None:
        c = counts.astype(np.float64)
        mid = np.arange(c.size) + 0.5
        self.steps, self.symmetric = steps, symmetric
        self.m0 = np.concatenate(([0.0], np.cumsum(c)))
        self.m1 = np.concatenate(([0.0], np.cumsum(c * mid)))
        self.m2 = np.concatenate(([0.0], np.cumsum(c * (mid * mid + 1.0 / 12.0))))

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        m0, m1, m2 = self.m0, self.m1, self.m2
        af, bf = a.astype(np.float64), b.astype(np.float64)
        below = m2[a] - 2 * af * m1[a] + af * af * m0[a]
        above = ((m2[-1] - m2[b]) - 2 * bf * (m1[-1] - m1[b]) + bf * bf * (m0[-1] - m0[b]))
        step = (bf if self.symmetric else bf - af) / self.steps
        return below + above + (m0[b] - m0[a]) * step * step / 12.0

    def search(self, a_max: int, b_lo: int) -> tuple[int, int] | None:
        """The first window (a, b) in (a, b) order of least error, a in [0, a_max], b in
        [b_lo, n], b > a (asymmetric), or None when there is none: `__call__`'s terms, those
        of one end computed once, the rest in C (`lowbit.backends.cpu.searches.mse_search`),
        bit for bit."""
        from lowbit.backends.cpu import searches

        m0, m1, m2 = self.m0, self.m1, self.m2
        a = np.arange(a_max + 1)
        b = np.arange(m0.size)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        below = m2[a] - 2 * af * m1[a] + af * af * m0[a]
        above = ((m2[-1] - m2[b]) - 2 * bf * (m1[-1] - m1[b]) + bf * bf * (m0[-1] - m0[b]))
        return searches.mse_search(below, above, m0, bf / self.steps, a_max, b_lo)


def mse(stats: StatsObserver, steps: int = 255, symmetric: bool = False) -> Range:
    """The range minimising the expected squared error between x and its quantized value.

    The error of a candidate range is `_SquaredError` over the histogram (clipping exact per
    bin, rounding modelled as step^2/12 inside the range). Candidate ends are bin edges.
    Symmetric: exhaustive search of t over the |x| histogram, step t / steps. Asymmetric: the
    range contains 0 and every pair of ends (lo <= 0 <= hi, at least one bin apart) is scored,
    step (hi - lo) / steps: a global, exhaustive search; the first least error in (lo, hi)
    order wins (in C when the cpu backend's library loads, `_SquaredError.search`, skipping
    only rows of pairs that provably cannot win).
    """
    lo, hi = _require_data(stats)
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    if lo == hi:
        return lo, hi
    hist, zero = _search_histogram(stats, symmetric)
    if not hist.counts.any():
        return lo, hi
    err = _SquaredError(hist.counts, steps, symmetric)
    n = hist.bins
    first, last = _occupied(hist.counts)
    if symmetric:
        b = np.arange(first + 1, n + 1)
        t = _edge(hist, int(b[np.argmin(err(np.zeros(b.size, np.int64), b))]))
        return _clamp(stats, -t, t)
    his = np.arange(max(zero, first + 1), n + 1)
    a_max = min(zero, last)
    if _native_searches():
        found = err.search(a_max, int(his[0]) if his.size else n + 1)
        best_ab = found if found is not None else (0, n)
        return _clamp(stats, _edge(hist, best_ab[0]), _edge(hist, best_ab[1]))
    best, best_ab = math.inf, (0, n)
    for start in range(0, a_max + 1, 64):
        a = np.arange(start, min(start + 64, a_max + 1))[:, None]
        e = np.where(his[None, :] > a, err(a, his[None, :]), np.inf)
        i, j = np.unravel_index(int(np.argmin(e)), e.shape)
        if e[i, j] < best:
            best, best_ab = float(e[i, j]), (int(a[i, 0]), int(his[j]))
    return _clamp(stats, _edge(hist, best_ab[0]), _edge(hist, best_ab[1]))


@functools.cache
def _native_searches() -> bool:
    """Whether the MSE search runs in C (`lowbit.backends.cpu.searches`)."""
    from lowbit.backends.cpu import searches

    return searches.available()


METHODS: dict[str, Callable[..., Range]] = {
    "minmax": minmax,
    "percentile": percentile,
    "entropy": entropy,
    "mse": mse,
}


def calibrate(stats: StatsObserver, method: str = "minmax", *, steps: int = 255,
              symmetric: bool = False, percentile: float = DEFAULT_PERCENTILE) -> Range:
    """The clipping range of one value by `method` (one of METHODS); see each method."""
    if method == "minmax":
        return minmax(stats)
    if method == "percentile":
        return METHODS["percentile"](stats, percentile=percentile, symmetric=symmetric)
    if method in METHODS:
        return METHODS[method](stats, steps=steps, symmetric=symmetric)
    raise InputError(f"unknown calibration method '{method}'; choose one of "
                     f"{', '.join(METHODS)}")


def activation_params(stats: StatsObserver, *, dtype: DType = dtypes.INT8,
                      scheme: str = "asymmetric", method: str = "minmax",
                      reduce_range: bool = False,
                      percentile: float = DEFAULT_PERCENTILE) -> tuple[DType, QuantParams]:
    """Storage dtype and per-tensor QuantParams of one profiled value: the scheme picks the
    storage type and the calibration grid, the method the range, the scheme the parameters."""
    lo, _ = _require_data(stats)
    nonnegative = lo >= 0.0
    storage = schemes.storage_dtype(scheme, dtype, nonnegative)
    symmetric, steps = schemes.calibration_grid(scheme, storage, nonnegative, reduce_range)
    lo, hi = calibrate(stats, method, steps=steps, symmetric=symmetric, percentile=percentile)
    return storage, schemes.quant_params(lo, hi, storage, scheme, reduce_range=reduce_range)


def weight_params(weight: np.ndarray, *, dtype: DType = dtypes.INT8, scheme: str = "symmetric",
                  axis: int | None = None, reduce_range: bool = False) -> QuantParams:
    """QuantParams of a constant weight from its min-max range: per tensor (`axis` None) or per
    channel along `axis` (e.g. 0 for Conv output channels)."""
    w = np.asarray(weight, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise InputError("weight contains NaN or infinite values; fix the model")
    if w.size == 0:
        raise InputError("weight is empty; nothing to quantize")
    if axis is None:
        return schemes.quant_params(w.min(), w.max(), dtype, scheme, reduce_range=reduce_range)
    ax = axis % w.ndim
    others = tuple(i for i in range(w.ndim) if i != ax)
    return schemes.quant_params(w.min(axis=others), w.max(axis=others), dtype, scheme, axis=ax,
                                reduce_range=reduce_range)
