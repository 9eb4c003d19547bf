"""Integer-only requantization: rescale an int32 accumulator by a positive real factor M.

A quantized Conv/MatMul accumulates in int32 at scale `s_in * s_w`; its output has scale `s_out`,
so the accumulator `x` must become `round(x * M) + zero_point` with `M = s_in * s_w / s_out`,
saturated to the output type. At run time this uses integers only: `encode` turns M into a few
integers once (at lowering), `requantize` executes exactly the integer expression below, and the
C emitter prints the same expression. Two encodings are supported.

"q31" (gemmlowp, TFLite, TVM's TFLite rounding), `Q31Params(multiplier m, left_shift L,
right_shift R)` with `M ~= m * 2**(L - R - 31)`, m in [2**30, 2**31), L, R in [0, 31], at most
one of them non-zero::

    xs = clamp(x * 2**L, INT32_MIN, INT32_MAX)    # saturating left shift (only when M >= 1)
    h  = (xs * m + 2**30) >> 31                   # int64 product; ties toward +infinity
    y  = (h + 2**(R-1) - (h < 0)) >> R  if R > 0  # ties away from zero
         h                              if R == 0
    q  = clamp(y + zero_point, qmin, qmax)

`>>` is an arithmetic (flooring) shift and all intermediates fit in int64 (|xs * m| < 2**62).
The second line is ARM's SQRDMULH and gemmlowp's `SaturatingRoundingDoublingHighMul` (their
nudge of `1 - 2**30` for negative products with a truncating division is the same floor of
`product + 2**30`; saturation never triggers since m > 0); the third is gemmlowp's
`RoundingDivideByPOT`. The result is rounded twice, so |y - x*M| <= 0.5 + 2**-(R+1) + |x*(M^ - M)|
where M^ is the encoded multiplier, |M^/M - 1| <= 2**-31: at most 0.75 ulp, reached for M in
[0.25, 0.5). M >= 1 shifts left before multiplying; an accumulator whose shifted value leaves
int32 saturates there, and its result then has |y| >= 2**30 - 1 like the exact one, so it
saturates correctly whenever the output type spans less than 2**30 (`requantize` checks).
M < 2**-32 ("tiny": R would exceed 31) makes every int32 accumulator round to 0 exactly, and is
encoded as m = L = R = 0. M >= 2**31 keeps L = 31: every non-zero accumulator saturates.

"prescale" (Glow's pre-shift / integer scale / post-shift form, with a clamp added so that the
product can never overflow), `PrescaleParams(pre, scale, post, clip)` with
`M ~= scale * 2**-(pre + post)`::

    t = clamp(x >> pre, -clip, clip)
    p = t * scale + 2**(post-1)                   # fits int32 by the choice of clip
    y = p >> post                                 # ties toward +infinity
    q = clamp(y + zero_point, qmin, qmax)

Everything fits in int32: `clip = (2**31 - 1 - 2**(post-1)) // scale`. Because the product must
stay in 32 bits, the encoding depends on the output width `output_bits` (8 for int8/uint8, 16 for
int16/uint16): post <= 30 - output_bits leaves room for the output integer and its sign, scale
<= 2**29, and a clamped t still gives |y| >= 2**output_bits, i.e. saturates correctly. Among all
(pre, post) the encoder picks the pair minimising the worst error on in-range results,
`(2**pre - 1) * M^ + 2**output_bits * |M^/M - 1|` (the bits `x >> pre` drops plus the scale's
rounding), so |y - x*M| <= 0.5 + (2**pre - 1)*M^ + |x*(M^ - M)|, rounded once. That extra term
is about 0.011 ulp for 8-bit outputs but about 3 ulp for 16-bit ones (see
docs/requantization.md). M >= 2**output_bits is encoded as 2**output_bits (every non-zero
accumulator saturates either way); M < 2**-32 as scale 0.

The measured errors of both are in docs/requantization.md (`benchmarks/requant_error.py`).
The default is the more accurate one there for the output width: prescale for 8-bit outputs,
q31 for wider ones (`default_method`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np

Q31 = "q31"
PRESCALE = "prescale"
METHODS: tuple[str, ...] = (Q31, PRESCALE)
DEFAULT_METHOD = Q31
"""The default for outputs wider than 8 bits: q31's worst error is 0.75 ulp at every width, while
prescale's 32-bit product costs up to 2.8 ulp on 16-bit outputs (docs/requantization.md)."""
DEFAULT_METHOD_8BIT = PRESCALE
"""The default for 8-bit outputs, where prescale is measured more accurate: worst 0.506 ulp and
0.15 % of results off the exact rounding, against q31's 0.75 ulp and 1.9 % from its double
rounding for M in [0.01, 1)."""


def default_method(output_bits: int) -> str:
    """The more accurate encoding for outputs of `output_bits` bits, as measured."""
    return DEFAULT_METHOD_8BIT if output_bits <= 8 else DEFAULT_METHOD


INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
TINY_M = 2.0**-32
"""Below this, every int32 accumulator times M rounds to 0: both encodings store a zero scale."""
Q31_SPAN_LIMIT = 2**30 - 1
"""q31 with a left shift saturates correctly only for outputs within this distance of the zero
point."""
Q31_MAX_ERROR = 0.75 + 2**-15
"""Worst |y - acc*M| (ulp) of q31 for any M and any result within 2**16 of the zero point."""
PRESCALE_MAX_ERROR = {8: 0.52, 16: 4.9}
"""Worst |y - acc*M| (ulp) of prescale, by output_bits, for any M and any result within
2**output_bits of the zero point: the maximum of `error_bound` over M in [2**-32, 2**bits]."""
PRESCALE_MAX_SCALE = 2**29
PRESCALE_MAX_OUTPUT_BITS = 24


@dataclass(frozen=True, eq=False)
class Q31Params:
    """A Q31 multiplier and shifts per channel: `M ~= multiplier * 2**(left_shift - right_shift
    - 31)`. All arrays are int64 of one shape (0-d per tensor, 1-D per channel); `real` is the M
    they encode, kept for reports and error bounds, never used by `requantize`."""

    multiplier: np.ndarray
    left_shift: np.ndarray
    right_shift: np.ndarray
    real: np.ndarray
    method: ClassVar[str] = Q31

    def effective_multiplier(self) -> np.ndarray:
        """The real factor the integers apply: `multiplier * 2**(left_shift - right_shift - 31)`."""
        exponent = (self.left_shift - self.right_shift - 31).astype(np.float64)
        return self.multiplier.astype(np.float64) * np.exp2(exponent)


@dataclass(frozen=True, eq=False)
class PrescaleParams:
    """Pre-shift, integer scale, post-shift and clamp per channel: `M ~= scale * 2**-(pre +
    post)`, valid for outputs narrower than `output_bits`. Arrays are int64 of one shape; `real`
    is the M they encode (reports and bounds only)."""

    pre: np.ndarray
    scale: np.ndarray
    post: np.ndarray
    clip: np.ndarray
    output_bits: int
    real: np.ndarray
    method: ClassVar[str] = PRESCALE

    def effective_multiplier(self) -> np.ndarray:
        """The real factor the integers apply: `scale * 2**-(pre + post)`."""
        return self.scale.astype(np.float64) * np.exp2(-(self.pre + self.post).astype(np.float64))


RequantParams = Q31Params | PrescaleParams


# -- encoding ---------------------------------------------------------------------------------


def check_multiplier(M) -> np.ndarray:
    """M as a float64 array, or ValueError unless every entry is finite and positive."""
    try:
        real = np.asarray(M, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"requantization multiplier must be a positive real, got {M!r}") from None
    bad = ~(np.isfinite(real) & (real > 0))
    if np.any(bad):
        shown = real[bad] if real.ndim else real
        raise ValueError(
            f"requantization multiplier must be finite and positive, got {shown!r}; "
            "M = s_in * s_w / s_out needs positive finite scales"
        )
    return real


def encode(M, method: str | None = None, *, output_bits: int = 8) -> RequantParams:
    """Encode the real factor(s) `M` (scalar, or one per channel) for `requantize`.

    `output_bits` is the width of the output type (8 for int8/uint8, 16 for int16/uint16): it
    picks the default `method` (`default_method`), and "prescale" is encoded for it
    (`requantize` refuses wider outputs). ValueError for M that is not finite and positive.
    """
    real = check_multiplier(M)
    method = default_method(output_bits) if method is None else method
    if method == Q31:
        return _encode_q31(real)
    if method == PRESCALE:
        if not 1 <= output_bits <= PRESCALE_MAX_OUTPUT_BITS:
            raise ValueError(
                f"prescale output_bits must be in [1, {PRESCALE_MAX_OUTPUT_BITS}], "
                f"got {output_bits}"
            )
        return _prescale_memo(real.tobytes(), real.shape, output_bits)
    raise ValueError(f"unknown requantization method {method!r}; valid: {', '.join(METHODS)}")


def _encode_q31(real: np.ndarray) -> Q31Params:
    frac, exponent = np.frexp(real)
    multiplier = np.rint(np.ldexp(frac, 31)).astype(np.int64)
    exponent = exponent.astype(np.int64)
    carry = multiplier == 2**31
    multiplier = np.where(carry, 2**30, multiplier)
    exponent = np.where(carry, exponent + 1, exponent)
    left = np.clip(exponent, 0, 31)
    right = np.maximum(-exponent, 0)
    tiny = real < TINY_M
    multiplier = np.where(tiny, 0, multiplier)
    right = np.where(tiny, 0, right)
    return Q31Params(
        _frozen(multiplier), _frozen(left), _frozen(np.minimum(right, 31)), _frozen(real)
    )


@functools.lru_cache(maxsize=4096)
def _prescale_memo(data: bytes, shape: tuple[int, ...], output_bits: int) -> PrescaleParams:
    """`_encode_prescale`, remembered by the multipliers' bytes: its search tries 704 (pre,
    post) pairs per multiplier, and every run of a quantized graph on the reference encodes
    each product's multipliers again (the results are read-only arrays, safe to share)."""
    return _encode_prescale(np.frombuffer(data, np.float64).reshape(shape), output_bits)


def _encode_prescale(real: np.ndarray, output_bits: int) -> PrescaleParams:
    capped = np.minimum(real, 2.0**output_bits)[..., None]
    grid_pre = np.repeat(np.arange(32), 30 - output_bits)
    grid_post = np.tile(np.arange(1, 31 - output_bits), 32)
    exact = capped * np.exp2(grid_pre + grid_post)
    scale = np.rint(exact)
    approx = scale * np.exp2(-(grid_pre + grid_post).astype(np.float64))
    cost = (np.exp2(grid_pre) - 1) * approx + 2.0**output_bits * np.abs(approx / capped - 1)
    cost = np.where((scale >= 1) & (scale <= PRESCALE_MAX_SCALE), cost, np.inf)
    best = np.argmin(cost, axis=-1)
    pre = grid_pre[best]
    post = grid_post[best]
    scale = np.take_along_axis(scale, best[..., None], axis=-1)[..., 0].astype(np.int64)
    tiny = real < TINY_M
    scale = np.where(tiny, 0, scale)
    pre = np.where(tiny, 0, pre)
    post = np.where(tiny, 1, post)
    room = INT32_MAX - (np.int64(1) << (post - 1))
    clip = np.where(tiny, INT32_MAX, room // np.maximum(scale, 1))
    reach = (clip * scale + (np.int64(1) << (post - 1))) >> post
    assert np.all(tiny | (reach >= 2**output_bits)), "prescale clamp would cut in-range results"
    return PrescaleParams(
        _frozen(pre.astype(np.int64)), _frozen(scale), _frozen(post.astype(np.int64)),
        _frozen(clip.astype(np.int64)), output_bits, _frozen(real),
    )  # fmt: skip


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return array


# -- execution --------------------------------------------------------------------------------


def requantize(
    acc: np.ndarray,
    params: RequantParams,
    zero_point=0,
    qmin: int = -128,
    qmax: int = 127,
    *,
    axis: int | None = None,
) -> np.ndarray:
    """Rescale the int32 accumulators `acc` with the integer expression of `params.method` (see
    the module docstring), add `zero_point` and saturate to [qmin, qmax]; returns int64.

    Per-channel params (1-D) and zero points run along `axis` of `acc`; with `axis=None` they
    broadcast by numpy's rules.
    """
    x = _check_accumulator(acc)
    zp = np.asarray(zero_point, dtype=np.int64)
    _check_output_range(zp, qmin, qmax)
    span = int(max(qmax - np.min(zp), np.max(zp) - qmin))
    if isinstance(params, Q31Params):
        if np.any(params.left_shift > 0) and span > Q31_SPAN_LIMIT:
            raise ValueError(
                f"q31 requantization with M >= 1 saturates correctly only for outputs within "
                f"{Q31_SPAN_LIMIT} of the zero point; [{qmin}, {qmax}] is wider"
            )
        y = _q31(x, *(_along(a, axis, x.ndim) for a in
                      (params.multiplier, params.left_shift, params.right_shift)))  # fmt: skip
    elif isinstance(params, PrescaleParams):
        if span >= 2**params.output_bits:
            raise ValueError(
                f"prescale params encoded for {params.output_bits}-bit outputs cannot produce "
                f"[{qmin}, {qmax}] with zero point {zero_point}; encode with a larger output_bits"
            )
        y = _prescale(x, *(_along(a, axis, x.ndim) for a in
                           (params.pre, params.scale, params.post, params.clip)))  # fmt: skip
    else:
        raise TypeError(f"expected Q31Params or PrescaleParams, got {type(params).__name__}")
    return np.clip(y + _along(zp, axis, x.ndim), qmin, qmax)


def _q31(x: np.ndarray, m: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    xs = np.clip(x << left, INT32_MIN, INT32_MAX)
    h = (xs * m + (1 << 30)) >> 31
    half = np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 0)
    return (h + half - ((h < 0) & (right > 0)).astype(np.int64)) >> right


def _prescale(
    x: np.ndarray, pre: np.ndarray, scale: np.ndarray, post: np.ndarray, clip: np.ndarray
) -> np.ndarray:
    t = np.clip(x >> pre, -clip, clip)
    p = t * scale + (np.int64(1) << (post - 1))
    assert p.size == 0 or (p.min() >= INT32_MIN and p.max() <= INT32_MAX), "int32 overflow"
    return p >> post


def error_bound(params: RequantParams, acc) -> np.ndarray:
    """The proven bound on |y - acc * M| (output ulps, before zero point and saturation) of the
    integer result y, per element: the rounding(s) plus the multiplier's and pre-shift's error.

    Pass accumulators broadcast against the params. Saturation only moves y towards an exact
    result beyond the same limit, so |requantize - clamp(acc*M + zp)| is bounded by it too.
    """
    x = np.abs(np.asarray(acc, dtype=np.float64))
    approx = params.effective_multiplier()
    drift = x * np.abs(approx - params.real)
    if isinstance(params, Q31Params):
        right = params.right_shift
        double = np.where(right > 0, np.exp2(-(right + 1).astype(np.float64)), 0.0)
        return 0.5 + double + drift
    return 0.5 + (np.exp2(params.pre.astype(np.float64)) - 1) * approx + drift


# -- float reference ----------------------------------------------------------------------------


def requantize_reference(
    acc: np.ndarray, M, zero_point=0, qmin: int = -128, qmax: int = 127, *,
    axis: int | None = None,
) -> np.ndarray:  # fmt: skip
    """Exact `clamp(round_half_to_even(acc * M) + zero_point, qmin, qmax)` as int64, for tests and
    analysis only: the product is exact (rational arithmetic where float64 could misround)."""
    x = _check_accumulator(acc)
    zp = np.asarray(zero_point, dtype=np.int64)
    _check_output_range(zp, qmin, qmax)
    real = _along(check_multiplier(M), axis, x.ndim)
    x, real = np.broadcast_arrays(x, real)
    rounded = _round_product_half_even(x, real)
    return np.clip(rounded + _along(zp, axis, x.ndim), qmin, qmax)


def _round_product_half_even(x: np.ndarray, real: np.ndarray) -> np.ndarray:
    shape = x.shape
    x, real = x.reshape(-1), real.reshape(-1)
    product = x.astype(np.float64) * real
    rounded = np.rint(product)
    # float64 rounds the product by at most 2**-53 relative: only results that close to a
    # half-integer can round differently, and beyond 2**34 every output saturates anyway.
    distance = np.abs(product - np.floor(product) - 0.5)
    doubtful = (distance <= 2.0**-51 * np.abs(product)) & (np.abs(product) < 2.0**34)
    clipped = np.clip(rounded, -(2.0**40), 2.0**40).astype(np.int64)
    for i in np.flatnonzero(doubtful):
        clipped[i] = round(int(x[i]) * Fraction(float(real[i])))
    return clipped.reshape(shape)


# -- helpers ------------------------------------------------------------------------------------


def _check_accumulator(acc) -> np.ndarray:
    x = np.asarray(acc)
    if x.dtype.kind not in "iu":
        raise ValueError(f"accumulators must be integers, got dtype {x.dtype}")
    x = x.astype(np.int64)
    if x.size and (x.min() < INT32_MIN or x.max() > INT32_MAX):
        raise ValueError(
            f"accumulators must lie in int32, got values in [{x.min()}, {x.max()}]"
        )
    return x


def _check_output_range(zp: np.ndarray, qmin: int, qmax: int) -> None:
    if not INT32_MIN <= qmin <= qmax <= INT32_MAX:
        raise ValueError(f"output range [{qmin}, {qmax}] must be ordered and inside int32")
    if np.any(zp < qmin) or np.any(zp > qmax):
        raise ValueError(f"zero point {zp} lies outside the output range [{qmin}, {qmax}]")


def _along(array: np.ndarray, axis: int | None, ndim: int) -> np.ndarray:
    """A per-channel 1-D array shaped to broadcast along `axis` of an ndim-dimensional tensor."""
    array = np.asarray(array)
    if axis is None or array.ndim == 0:
        return array
    if array.ndim != 1:
        raise ValueError(f"per-channel parameters must be 1-D, got shape {array.shape}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for {ndim}-D accumulators")
    shape = [1] * ndim
    shape[axis] = array.size
    return array.reshape(shape)
