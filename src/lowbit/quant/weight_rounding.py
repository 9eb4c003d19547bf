"""Error-compensating rounding of constant weights (`weight_rounding: gptq`, the default).

Rounding each weight to the nearest code minimises each weight's own error, not the error of
the outputs. With H = E[x x^T] the second moment of the input vectors a weight row multiplies
(`lowbit.quant.input_moments`), a row w rounded to values w_q changes its output by d . x,
d = w_q - w, with expected square

    E[(d . x)^2] = d^T H d

and choosing the codes so that the errors cancel through H lowers it. The scale and zero point
are not changed, only which code each weight gets. Two solvers, by row length K:

- K <= 9 (3x3 depthwise kernels, 1x1 convolutions of few channels): exhaustive. Each weight may
  take the code below or above w / s + z (floor and floor + 1, each clamped to [qmin, qmax]);
  all 2^K choices are scored by d^T H d and the lowest is kept (ties: the first in binary order,
  all-floor first). The result is optimal and always within one code of nearest rounding.
  d^T H d is summed in float64 over (k, l) row-major from 0, each term (d_k H_kl) d_l (the
  order np.einsum used before the C kernel `lb_round_exhaustive`, which sums so too).
- Larger K: GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
  Pre-trained Transformers", 2022) in descending order of diag(H) ("act-order"). With
  H' = H + 0.01 * mean(diag H) * I (damping; an input that is always 0 first gets H_kk = 1) and
  U the upper Cholesky factor of H'^-1, for the columns k in that order:
  q_k = clamp(round_half_even(w_k / s + z), qmin, qmax), e = (w_k - s (q_k - z)) / U_kk, and the
  columns not yet rounded absorb the error, w_j -= e * U_kj. A weight can move more than one
  code from nearest, never outside [qmin, qmax].
  Computed without inverting H': U = R^-1 for the upper triangular R with H' = R R^T (the
  Cholesky factor of H' with rows and columns reversed), and since W - Q = E U, column k's
  weight when it is rounded is w_k + sum_{j<k} d_j R_jk / R_kk, d_j = w_j - s (q_j - z) the
  rounding error of column j against its original weight. One Cholesky factorisation (K^3 / 3
  operations) instead of an inverse and a factorisation (about 7x as many), and better
  conditioned. The factorisation and the rounded weights are kept with the input moments, so
  quantizing again with the same profile (other settings, `lowbit sensitivity`'s one layer at
  a time) does not repeat them.

Where the time goes, and how it is kept down (EfficientNet-Lite0: 3.2 GFLOP of factorisations,
3.7 G multiply-adds of GPTQ updates): `RoundingPrefetch` unpacks each S, permutes it, factorises
it and, when the weight's type can be foreseen, rounds the weight on a background thread while
`lowbit.quant.static` calibrates ranges and rewrites the graph; the unpacking, permutation,
exhaustive search and GPTQ's in-block loop are C kernels (`lowbit.backends.cpu.searches`,
`stats.gptq_block`), each equal bit for bit to the numpy code here; the factorisation and the
block updates stay numpy's (LAPACK's and BLAS's, one thread: the bits of both depend on how
they are computed).

With fewer input vectors than K, H is singular and the damping keeps the unseen directions
near nearest rounding; measured, that still helps: MiniLM calibrated on 331 tokens (K = 384 and
1536) gets single-word embedding cosines 0.978 / 0.971 with GPTQ, 0.972 / 0.961 with nearest
rounding. Bias correction (`lowbit.quant.bias_correction`) then removes the mean output shift
that is left. Measured on EfficientNet-Lite0 (benchmarks/efficientnet_precision.py): logits
SQNR of int8 weights alone (int16 activations) 25.6 -> 31.1 dB, of W8A8 21.9 -> 23.9 dB.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import product

import numpy as np

from lowbit.identity_memo import SameObject
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.product import ProductGeometry, integer_product
from lowbit.quant.input_moments import InputMoments

EXHAUSTIVE_MAX = 9
"""Rows of at most this many weights are rounded by trying every floor/ceil choice."""
DAMPING = 0.01
"""GPTQ's damping, a fraction of the mean diagonal of H added to the diagonal."""
BLOCK = 128
"""GPTQ applies the updates of this many columns to the later ones at once (same result)."""

_CHOICES: dict[int, np.ndarray] = {}
_KEEP_CODES = 4
"""Rounded weights kept per input moments (bias correction may ask for two weight scales)."""
PREFETCH_THREADS = 2
"""Background threads of `RoundingPrefetch`: the quantizing thread mostly waits for them, so
two keep both cores of a small machine busy (each job is a pure function of its moments and
weight, so the results do not depend on this)."""


class _Known:
    """What was derived from one InputMoments: GPTQ's solver, and codes by weight and type."""

    def __init__(self, count: int, second: np.ndarray) -> None:
        self.count, self.second = count, second
        self.solver: _Solver | None = None
        self.codes: dict[tuple, np.ndarray] = {}


_KNOWN: weakref.WeakKeyDictionary[InputMoments, _Known] = weakref.WeakKeyDictionary()


def _known(moments: InputMoments) -> _Known:
    """The entry of `moments`, new if they changed since (more data merged into them); what
    `RoundingPrefetch` derived from them ahead is waited for and taken, or derived here when
    no background thread has started on it yet (rather than waiting for the jobs queued before
    it)."""
    ahead = _PENDING.pop(moments, None)
    built = None
    if ahead is not None:
        built = _build(ahead.job, ahead.count) if ahead.future.cancel() else \
            ahead.future.result()
    known = _KNOWN.get(moments)
    if known is None or known.count != moments.count or known.second is not moments.second:
        known = _KNOWN[moments] = _Known(moments.count, moments.second)
    if built is not None and built.count == known.count and built.second is known.second:
        if known.solver is None:
            known.solver = built.solver
        if built.key is not None and built.key not in known.codes:
            _remember(known, built.key, built.codes)
    return known


def settle(moments: InputMoments) -> None:
    """Wait for (and take) what is being derived ahead from `moments`, if anything, before
    reading `moments.second` elsewhere (the prefetch thread may be unpacking it)."""
    if moments in _PENDING:
        _known(moments)


@dataclass
class _Pending:
    future: Future
    job: Ahead
    count: int


_PENDING: weakref.WeakKeyDictionary[InputMoments, _Pending] = weakref.WeakKeyDictionary()
"""Work being done ahead (`RoundingPrefetch`), by the moments it is for."""


@dataclass
class Ahead:
    """One product's rounding to do ahead: its moments and, to round its weight too, the
    weight, its geometry and the function giving the weight type it will most likely get, or
    None when that cannot be foreseen (run on the prefetch thread)."""

    moments: InputMoments
    geometry: ProductGeometry | None = None
    weight: np.ndarray | None = None
    weight_type: Callable[[], TensorType | None] | None = None


@dataclass
class _Built:
    count: int
    second: np.ndarray
    solver: _Solver | None
    key: tuple | None
    codes: np.ndarray | None


def _build(job: Ahead, count: int) -> _Built:
    """S unpacked, the solver of S / count and the codes of the foreseen weight type, on the
    prefetch thread: its C kernels run on that thread alone
    (`lowbit.backends.cpu.searches.serial`)."""
    from lowbit.backends.cpu import searches

    m = job.moments
    with searches.serial():
        second = m.second
        solver = _Solver(second, max(count, 1)) if m.size > EXHAUSTIVE_MAX else None
        key = codes = None
        if job.weight_type is not None and job.geometry is not None and \
                job.weight is not None:
            wt = job.weight_type()
            if wt is not None:
                rows, scale, zero = _weight_inputs(job.geometry, job.weight, wt)
                key = _key(job.weight, job.geometry, rows, scale, zero, wt)
                codes = _codes(rows, scale, zero, wt, m, solver)
        return _Built(count, second, solver, key, codes)


def _cost(job: Ahead) -> float:
    """About how many multiply-adds `_build` does for `job`: the factorisation of each group's
    H (K^3 / 3) and GPTQ's updates (K per weight), or the exhaustive search's 2^K choices of
    K^2 terms per row."""
    groups, k = job.moments.groups, job.moments.size
    size = job.weight.size if job.weight is not None and job.weight_type is not None else 0
    if k <= EXHAUSTIVE_MAX:
        return size / max(k, 1) * 2.0 ** k * k * k
    return groups * k ** 3 / 3 + size * k


class RoundingPrefetch:
    """Error-compensating rounding done ahead, the longest jobs first, on `PREFETCH_THREADS`
    background threads while quantizing does the rest (activation ranges, graph rewriting):
    each product's S unpacked from its exact sum, GPTQ's solver (S permuted and factorised)
    and, when the weight's type can be foreseen, its codes. These are what `round_weight` would
    compute (the same functions on the same inputs), taken by it when it reaches the moments,
    or derived there when no thread has started on them yet (the short jobs, queued last);
    codes for a type that turns out different (a bias that needed larger weight scales) are
    not used.
    `close()` (always, before BLAS settings change) cancels the work not started and waits
    for the jobs running."""

    def __init__(self, jobs: list[Ahead]) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._mine: list[tuple[weakref.ref, Future]] = []
        queue: dict[InputMoments, Ahead] = {}
        for job in jobs:
            m = job.moments
            if m in _PENDING or m in queue:
                continue
            known = _KNOWN.get(m)
            if known is not None and known.count == m.count and \
                    (known.solver is not None or m.size <= EXHAUSTIVE_MAX):
                continue  # derived by an earlier quantization (moments changed: again)
            queue[m] = job
        # the longest first, so that the threads end together (the quantizing thread derives
        # the short ones itself when it reaches them before a thread has: `_known`)
        for job in sorted(queue.values(), key=_cost, reverse=True):
            m = job.moments
            if self._pool is None:
                self._pool = ThreadPoolExecutor(PREFETCH_THREADS,
                                                thread_name_prefix="lowbit-rounding")
            future = self._pool.submit(_build, job, m.count)
            _PENDING[m] = _Pending(future, job, m.count)
            self._mine.append((weakref.ref(m), future))

    def close(self) -> None:
        if self._pool is None:
            return
        self._pool.shutdown(wait=True, cancel_futures=True)
        for ref, future in self._mine:
            m = ref()
            pending = _PENDING.get(m) if m is not None else None
            if pending is not None and pending.future is future and future.cancelled():
                del _PENDING[m]
        self._pool, self._mine = None, []

    def __enter__(self) -> RoundingPrefetch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def round_rows(rows: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, qmin: int,
               qmax: int, correlation: np.ndarray) -> np.ndarray:
    """Codes (int64, `rows`' shape) for weight rows [N, K] with per-row scale and zero point
    ([N], or scalars) and the rows' input second moment H [K, K] (module docstring). Groups
    with their own H go in one call as rows [G, N, K], scale and zero point [G, N], H
    [G, K, K]."""
    rows = np.asarray(rows, np.float64)
    h = np.asarray(correlation, np.float64)
    if rows.ndim == 2:
        return round_rows(rows[None], np.reshape(scale, (1, -1)), np.reshape(zero_point, (1, -1)),
                          qmin, qmax, h[None])[0]
    return _round_rows(rows, scale, zero_point, qmin, qmax, h, None)


def _round_rows(rows, scale, zero_point, qmin, qmax, h, solver: _Solver | None) -> np.ndarray:
    """`round_rows` for rows [G, N, K]; `solver` is H's (made here when None)."""
    scale = np.broadcast_to(np.asarray(scale, np.float64), rows.shape[:2])[..., None]
    zero = np.broadcast_to(np.asarray(zero_point, np.float64), rows.shape[:2])[..., None]
    if rows.shape[2] <= EXHAUSTIVE_MAX:
        return _exhaustive(rows, scale, zero, qmin, qmax, h)
    solver = solver or _Solver(h)
    if rows.shape[0] == 1:  # columns [K, N] in order, in one copy
        columns = rows[0].T[solver.order[0]][None]
    else:
        columns = np.take_along_axis(rows.transpose(0, 2, 1), solver.order[:, :, None], 1)
    codes = _gptq(columns, scale, zero, qmin, qmax, solver.ratios)  # [G, K, N]
    if rows.shape[0] == 1:
        return codes[0][solver.inverse[0]].T.astype(np.int64)[None]
    return np.take_along_axis(codes, solver.inverse[:, :, None], 1).transpose(0, 2, 1).astype(
        np.int64)


class _Solver:
    """What GPTQ needs of one H [G, K, K]: the act-order permutation `order` [G, K] (descending
    diag(H), stable) and its inverse, and `ratios` [G, K, K], R_jk / R_kk for the upper
    triangular R with R R^T = H' (H damped, in that order; module docstring)."""

    def __init__(self, second: np.ndarray, count: int = 1) -> None:
        """From H = second / count ([G, K, K]; `count` > 0)."""
        self.order = np.argsort(-(np.diagonal(second, axis1=1, axis2=2) / count), axis=1,
                                kind="stable")
        self.inverse = np.argsort(self.order, axis=1)
        back = self.order[:, ::-1]  # H' is factorised in the reverse order (a copy of H)
        if _native():  # the same values, in C
            from lowbit.backends.cpu import searches

            h = searches.gather_symmetric(second, back, count)
        else:
            if second.shape[0] == 1:
                h = second[0][back[0]][:, back[0]][None]
            else:
                h = np.take_along_axis(np.take_along_axis(second, back[:, :, None], 1),
                                       back[:, None, :], 2)
            if count != 1:
                h /= count
        at = np.arange(h.shape[2])
        diag = h[:, at, at]
        diag[diag <= 0] = 1.0  # inputs that are always 0
        diag += DAMPING * diag.mean(axis=1, keepdims=True)
        h[:, at, at] = diag
        try:
            lower = np.linalg.cholesky(h)
        except np.linalg.LinAlgError:  # H' numerically singular: damp it as much again
            h[:, at, at] += diag.mean(axis=1, keepdims=True)
            lower = np.linalg.cholesky(h)
        r = lower[:, ::-1, ::-1]  # J H' J = L L^T gives H' = R R^T, R = J L J (upper)
        self.ratios = r / np.diagonal(r, axis1=1, axis2=2)[:, None, :]


def _exhaustive(rows, scale, zero, qmin, qmax, h) -> np.ndarray:
    """rows [G, N, K], scale and zero [G, N, 1], h [G, K, K]; a bounded number of rows at a
    time."""
    groups, n, k = rows.shape
    choices = _CHOICES.get(k)
    if choices is None:
        choices = _CHOICES[k] = np.array(list(product((0.0, 1.0), repeat=k)))  # [2^K, K]
    flat, s, z = rows.reshape(-1, k), scale.reshape(-1, 1), zero.reshape(-1, 1)
    if _native():  # the loop below in C, bit for bit
        from lowbit.backends.cpu import searches

        return searches.round_exhaustive(flat, s[:, 0], z[:, 0], h, n, qmin,
                                         qmax).reshape(rows.shape)
    group = np.repeat(np.arange(groups), n)
    codes = np.empty(flat.shape, np.int64)
    chunk = max(1, (1 << 22) // (len(choices) * k))
    for start in range(0, len(flat), chunk):
        part = slice(start, start + chunk)
        cand = np.clip(np.floor(flat[part] / s[part] + z[part])[:, None, :] + choices, qmin,
                       qmax)  # [rows, 2^K, K]
        d = (cand - z[part, :, None]) * s[part, :, None] - flat[part, None, :]
        hp = h[group[part]]
        cost = np.zeros(d.shape[:2])
        for a in range(k):  # sum over (a, l) row-major, each term (d_a H_al) d_l
            for b in range(k):
                cost += (d[:, :, a] * hp[:, a, b, None]) * d[:, :, b]
        codes[part] = cand[np.arange(len(cand)), np.argmin(cost, axis=1)]
    return codes.reshape(rows.shape)


def _gptq(columns, scale, zero, qmin, qmax, ratios) -> np.ndarray:
    """The codes [G, K, N] (float64) of the weights' columns [G, K, N] already in order,
    scale and zero [G, N, 1]; `ratios` of `_Solver`. `w[:, j]` is column j's weights plus the
    corrections of the columns rounded before it (module docstring), in-block ones added as
    each column is rounded, the others a block at a time."""
    k = columns.shape[1]
    original = np.ascontiguousarray(columns)
    w = original.copy()
    s, z = scale[..., 0], zero[..., 0]
    codes = np.empty(original.shape)
    errors = np.empty(original.shape)
    native = _native()
    if native:
        from lowbit.backends.cpu import stats

        s, z, ratios = (np.ascontiguousarray(a) for a in (s, z, ratios))
    for first in range(0, k, BLOCK):
        last = min(first + BLOCK, k)
        if native:  # the loop below in C, bit for bit
            stats.gptq_block(w, original, codes, errors, s, z, ratios, first, last, qmin, qmax)
        for j in range(first, last) if not native else ():
            q = codes[:, j]
            np.divide(w[:, j], s, out=q)
            q += z
            np.round(q, out=q)
            np.clip(q, qmin, qmax, out=q)
            err = errors[:, j]  # original - s (q - z)
            np.subtract(q, z, out=err)
            err *= s
            np.subtract(original[:, j], err, out=err)
            w[:, j + 1:last] += ratios[:, j, j + 1:last, None] * err[:, None, :]
        # the same updates for the later columns, at once
        w[:, last:] += ratios[:, first:last, last:].transpose(0, 2, 1) @ errors[:, first:last]
    return codes


@functools.cache
def _native() -> bool:
    """Whether GPTQ's column loop, the exhaustive search and H's permutation run in C
    (`lowbit.backends.cpu.stats.gptq_block`, `lowbit.backends.cpu.searches`)."""
    from lowbit.backends.cpu import searches, stats

    return stats.available() and searches.available()


def weight_rows(node: Node, weight: np.ndarray) -> np.ndarray:
    """The rows [N, K] of `node`'s constant weight, one per output channel, in the order of
    the input vectors of `lowbit.quant.input_moments`: Conv W.reshape(C_out, -1), Gemm B^T
    (B with transB), MatMul B^T."""
    return integer_product(node).weight_matrix(np.asarray(weight))


def _weight_inputs(geometry: ProductGeometry, weight: np.ndarray, wt: TensorType
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows [N, K] (float64) of `weight` and their scales and zero points [N]."""
    q = wt.quant
    assert q is not None
    rows = geometry.weight_matrix(np.asarray(weight, np.float64))
    n = rows.shape[0]
    scale = np.broadcast_to(np.asarray(q.scale, np.float64).reshape(-1), (n,))
    zero = np.broadcast_to(np.asarray(q.zero_point, np.float64).reshape(-1), (n,))
    return rows, scale, zero


def _immutable(array: np.ndarray) -> bool:
    """Whether `array`'s values can no longer change: read-only down to memory it owns or an
    immutable bytes object (graph constants: `Graph.add_constant`, ONNX initializers)."""
    a = array
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        if a.base is None:
            return a.flags.owndata
        a = a.base
    return isinstance(a, bytes)


def _key(weight: np.ndarray, geometry: ProductGeometry, rows: np.ndarray, scale: np.ndarray,
         zero: np.ndarray, wt: TensorType) -> tuple:
    """What the codes of `rows` (`weight` laid out by `geometry`) depend on. An immutable
    weight (every graph constant) is named by its identity rather than a digest of its bytes
    (hashing EfficientNet-Lite0's rows cost as much as a tenth of quantizing it)."""
    if isinstance(weight, np.ndarray) and _immutable(weight):
        which: object = (SameObject(weight), weight.dtype.str, weight.shape, geometry)
    else:
        which = hashlib.sha256(rows.tobytes()).hexdigest()
    return (which, rows.shape, scale.tobytes(), zero.tobytes(), wt.dtype.qmin, wt.dtype.qmax)


def _codes(rows, scale, zero, wt: TensorType, moments: InputMoments,
           solver: _Solver | None) -> np.ndarray:
    """The codes `round_rows` picks for rows [N, K] (read-only), each group of output channels
    with its own H."""
    groups, n = moments.groups, rows.shape[0]
    exhaustive = moments.size <= EXHAUSTIVE_MAX
    codes = _round_rows(rows.reshape(groups, n // groups, -1), scale.reshape(groups, -1),
                        zero.reshape(groups, -1), wt.dtype.qmin, wt.dtype.qmax,
                        moments.correlation() if exhaustive else None,
                        solver).reshape(rows.shape)
    codes.setflags(write=False)
    return codes


def _remember(known: _Known, key: tuple, codes: np.ndarray) -> None:
    while len(known.codes) >= _KEEP_CODES:
        known.codes.pop(next(iter(known.codes)))
    known.codes[key] = codes


def round_weight(node: Node, weight: np.ndarray, wt: TensorType,
                 moments: InputMoments) -> np.ndarray:
    """`weight` (the constant weight of Conv/Gemm/MatMul `node`) as the real values
    `scale * (q - zero_point)` of the codes q that `round_rows` picks for type `wt`, in float64
    and `weight`'s shape; each group of output channels uses its own H."""
    geometry = integer_product(node)
    rows, scale, zero = _weight_inputs(geometry, weight, wt)
    known = _known(moments)
    key = _key(weight, geometry, rows, scale, zero, wt)
    codes = known.codes.get(key)
    if codes is None:
        if known.solver is None and moments.size > EXHAUSTIVE_MAX:
            known.solver = _Solver(moments.second, max(moments.count, 1))
        codes = _codes(rows, scale, zero, wt, moments, known.solver)
        _remember(known, key, codes)
    values = (codes - zero[:, None]) * scale[:, None]
    return geometry.weight_from_matrix(values, np.shape(weight))
