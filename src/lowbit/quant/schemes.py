"""Quantization parameters from a real range: the schemes.

A scheme turns a clipping range `[lo, hi]` (per tensor: scalars; per channel: 1-D arrays) and an
integer dtype into `QuantParams(scale, zero_point)` with `real = scale * (q - zero_point)`:

- `asymmetric`: the range is widened to contain 0 (`lo <= 0 <= hi`), scale
  `(hi - lo) / (qmax - qmin)`, zero point `qmin - lo / scale` rounded to the nearest integer
  (ties to even) and clamped to `[qmin, qmax]`. The integral zero point nudges the represented
  range `[scale * (qmin - zp), scale * (qmax - zp)]` slightly, so that 0 is exactly `q = zp`.
- `symmetric`: `t = max(|lo|, |hi|)`; signed types: zero point 0 and scale `t / qmax` (so +-t
  are both representable; qmin, one step beyond -t, is left for the rare saturated value);
  unsigned types: zero point `(qmin + qmax + 1) // 2` (128 for uint8) and scale `t / (qmax - zp)`.
- `symmetric_uint8`: like `symmetric`, except that a non-negative tensor stored in an unsigned
  type uses the whole unsigned range: zero point qmin (0), scale `hi / (qmax - qmin)`.
  `storage_dtype` picks uint8 for non-negative tensors and int8 otherwise.
- `power_of_2`: `symmetric`, with the scale rounded up to the next power of two (so the range
  still covers `[-t, t]`); multipliers between such scales are exact shifts.

`reduce_range` drops one bit of the integer range (int8 [-64, 63], uint8 [0, 127], int16
[-16384, 16383]) for hardware whose 16-bit intermediate sums of two products would overflow.

Degenerate ranges get a valid scale, never 0, inf or NaN:
- a per-tensor range that is exactly [0, 0] (every value seen was 0): scale 1.0. Any scale
  represents 0 exactly; 1.0 keeps every multiplier derived from it an ordinary number.
- an all-zero channel of a per-channel range: the smallest scale among the other channels
  (1.0 when all are zero). Its weights quantize to exactly 0 with any scale, but its bias scale
  `s_in * s_w` then stays as fine as the finest channel's, and the bias of an all-zero channel
  is that channel's whole output.
- any scale below `MIN_SCALE` = 2**-63 is raised to it: the product of two scales (a bias scale)
  is then still a normal float32.
"""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.types import QuantParams

SCHEMES = ("asymmetric", "symmetric", "symmetric_uint8", "power_of_2")

MIN_SCALE = 2.0**-63
"""Smallest scale produced: sqrt of float32's smallest normal number."""

BIAS_LIMIT = 2**30
"""Default bound on |quantized bias| used by `fit_weight_scale_for_bias`: half of int32, leaving
the other half for the accumulator it is added to."""


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown quantization scheme '{scheme}'; choose one of "
                         f"{', '.join(SCHEMES)}")


def integer_range(dtype: DType, reduce_range: bool = False) -> tuple[int, int]:
    """(qmin, qmax) of `dtype`, one bit narrower with `reduce_range`."""
    if not dtype.is_integer or dtype.bits > 16:
        raise ValueError(f"activations and weights quantize to integer types of at most 16 bits, "
                         f"not {dtype} (int32 is for biases: use bias_params)")
    if not reduce_range:
        return dtype.qmin, dtype.qmax
    bits = dtype.bits - 1
    if dtype.is_signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def storage_dtype(scheme: str, dtype: DType, nonnegative: bool) -> DType:
    """The integer type a tensor is stored in: `dtype`, except that `symmetric_uint8` stores
    8-bit tensors as uint8 when they are non-negative and as int8 otherwise."""
    _check_scheme(scheme)
    if scheme == "symmetric_uint8" and dtype.bits == 8:
        return dtypes.UINT8 if nonnegative else dtypes.INT8
    return dtype


def calibration_grid(scheme: str, dtype: DType, nonnegative: bool,
                     reduce_range: bool = False) -> tuple[bool, int]:
    """(symmetric, steps) to pass to `lowbit.quant.calibration` for this scheme and dtype.

    `dtype` is the storage type (see `storage_dtype`). Symmetric schemes search a threshold t
    with `steps` quantization steps on [0, t]; the asymmetric scheme searches [lo, hi] with
    `steps` steps across it.
    """
    _check_scheme(scheme)
    qmin, qmax = integer_range(dtype, reduce_range)
    if scheme == "asymmetric":
        return False, qmax - qmin
    if scheme == "symmetric_uint8" and not dtype.is_signed and nonnegative:
        return True, qmax - qmin
    zero = 0 if dtype.is_signed else (qmin + qmax + 1) // 2
    return True, qmax - zero


def quant_params(lo, hi, dtype: DType, scheme: str = "asymmetric", *, axis: int | None = None,
                 reduce_range: bool = False) -> QuantParams:
    """QuantParams representing `[lo, hi]` in `dtype` by `scheme` (see the module docstring).

    Per tensor: `lo`, `hi` scalars and `axis` None. Per channel: 1-D arrays and the tensor axis
    they run along.
    """
    _check_scheme(scheme)
    lo_a = np.asarray(lo, dtype=np.float64)
    hi_a = np.asarray(hi, dtype=np.float64)
    if lo_a.shape != hi_a.shape:
        raise ValueError(f"lo and hi have different shapes {lo_a.shape} and {hi_a.shape}")
    if axis is None and lo_a.ndim != 0:
        raise ValueError("per-channel ranges need the axis they run along")
    if axis is not None and lo_a.ndim != 1:
        raise ValueError(f"per-channel ranges must be 1-D, got shape {lo_a.shape}")
    if not (np.all(np.isfinite(lo_a)) and np.all(np.isfinite(hi_a))):
        raise ValueError(f"range must be finite, got [{lo}, {hi}]")
    if np.any(lo_a > hi_a):
        raise ValueError(f"range has lo > hi: [{lo}, {hi}]")
    qmin, qmax = integer_range(dtype, reduce_range)

    if scheme == "asymmetric":
        lo0, hi0 = np.minimum(lo_a, 0.0), np.maximum(hi_a, 0.0)
        scale = _valid_scales((hi0 - lo0) / (qmax - qmin))
        zero = np.clip(np.round(qmin - lo0 / scale), qmin, qmax)
        return QuantParams(scale, zero.astype(np.int64), axis)

    t = np.maximum(np.abs(lo_a), np.abs(hi_a))
    if scheme == "symmetric_uint8" and not dtype.is_signed and np.all(lo_a >= 0):
        zero = qmin
        scale = _valid_scales(hi_a / (qmax - qmin))
    else:
        zero = 0 if dtype.is_signed else (qmin + qmax + 1) // 2
        scale = _valid_scales(t / (qmax - zero))
    if scheme == "power_of_2":
        scale = _pow2_ceil(scale)
    return QuantParams(scale, np.full(scale.shape, zero, np.int64), axis)


def _valid_scales(scale: np.ndarray) -> np.ndarray:
    """Replace zero scales (zero ranges) as the module docstring says; floor at MIN_SCALE; round
    to float32, the precision QuantParams stores, so zero points are computed from the stored
    scale."""
    scale = np.array(scale, dtype=np.float64)
    zero = scale == 0
    if np.any(zero):
        others = scale[~zero]
        scale[zero] = others.min() if others.size else 1.0
    scale = np.maximum(scale, MIN_SCALE).astype(np.float32)
    return scale.astype(np.float64)


def _pow2_ceil(scale: np.ndarray) -> np.ndarray:
    mantissa, exponent = np.frexp(scale)
    return np.ldexp(1.0, np.where(mantissa == 0.5, exponent - 1, exponent))


def bias_params(input_scale, weight_scale, axis: int | None = None) -> QuantParams:
    """int32 bias parameters: zero point 0 and scale `s_in * s_w` (per channel when the weight
    scale is). With these, `bias_q = round(bias / (s_in * s_w))` adds directly to the integer
    accumulator of `x_q * w_q`. `axis` defaults to 0 for a per-channel weight scale."""
    s_in = np.asarray(input_scale, dtype=np.float64)
    s_w = np.asarray(weight_scale, dtype=np.float64)
    if s_in.ndim != 0:
        raise ValueError("the input of a biased op has one scale (per-tensor activations)")
    scale = (s_in * s_w).astype(np.float32)
    if s_w.ndim == 0:
        return QuantParams(scale, 0)
    return QuantParams(scale, np.zeros(scale.shape, np.int64), 0 if axis is None else axis)


def fit_weight_scale_for_bias(bias, input_scale, weight_scale,
                              limit: int = BIAS_LIMIT) -> np.ndarray:
    """Weight scales, raised where needed so that the quantized bias never saturates.

    `|round(bias / (s_in * s_w))| <= limit` must hold per output channel. Where it does not, the
    channel's weight scale grows to `|bias| / (s_in * limit)` (rounded up to the next float32):
    the weights lose a little precision, the bias is exact to its scale. Returns the weight
    scales in the shape given (scalar per tensor: the largest need over all channels).
    """
    b = np.abs(np.asarray(bias, dtype=np.float64))
    s_in = float(input_scale)
    s_w = np.asarray(weight_scale, dtype=np.float64)
    need = (b / (s_in * limit)).astype(np.float32)
    need = np.nextafter(need, np.float32(np.inf), dtype=np.float32).astype(np.float64)
    need = np.where(b == 0, 0.0, need)
    if s_w.ndim == 0:
        return np.asarray(max(float(s_w), float(need.max(initial=0.0))), dtype=np.float32)
    return np.maximum(s_w, need).astype(np.float32)
