"""The integer building blocks of quantized kernels, defined once for every backend.

A quantized tensor of type `t` holds integers q standing for `t.quant.scale * (q - zero_point)`.
Kernels accumulate exactly in integers and leave only one real factor M per output channel,
applied by `lowbit.numerics.fixed_point.requantize` in the node's encoding (`requant` attribute,
default by output width). Everything here is deterministic, so `lowbit dump` can show the
derived integers and a user can reproduce a kernel by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowbit.errors import KernelError
from lowbit.ir.attrs import FUSED_CLIP, REQUANT
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.numerics import fixed_point
from lowbit.numerics.fixed_point import INT32_MAX, INT32_MIN, RequantParams

ADD_SHIFT = {8: 20, 16: 12}
"""Left shift applied to input differences before rescaling them to a common scale in Add/Sub:
`(q - z) << L` keeps |.| < 2**(bits + 1 + L) <= 2**29 in int32 while leaving the rescale 20
(8-bit) or 12 (16-bit) fractional bits."""


def scale_of(t: TensorType) -> np.ndarray:
    assert t.quant is not None
    return t.quant.scale.astype(np.float64)


def zero_of(t: TensorType) -> np.ndarray:
    assert t.quant is not None
    return t.quant.zero_point.astype(np.int64)


def method_of(node: Node, out: TensorType) -> str:
    """The node's requantization encoding: its `requant` attribute, else the default for the
    output width."""
    return node.attrs.get(REQUANT) or fixed_point.default_method(out.dtype.bits)


def encode(node: Node, M, out: TensorType) -> RequantParams:
    """`fixed_point.encode` of the real factor(s) M for the node's output type."""
    return fixed_point.encode(M, method_of(node, out), output_bits=out.dtype.bits)


def output_bounds(node: Node, out: TensorType) -> tuple[int, int]:
    """[qmin, qmax] of the output: the dtype's range, narrowed by a fused Relu/Clip
    (`fused_clip = [lo, hi]`, quantized with the output parameters, rounding inward)."""
    qmin, qmax = out.dtype.qmin, out.dtype.qmax
    clip = node.attrs.get(FUSED_CLIP)
    if clip is None:
        return qmin, qmax
    if out.quant is None or not out.quant.per_tensor:
        raise KernelError(f"{node.describe()}: a fused clip needs per-tensor output parameters")
    s, z = float(scale_of(out)), int(zero_of(out))
    lo, hi = clip
    if np.isfinite(lo):
        qmin = max(qmin, z + int(np.ceil(np.float64(lo) / s - 1e-9)))
    if np.isfinite(hi):
        qmax = min(qmax, z + int(np.floor(np.float64(hi) / s + 1e-9)))
    if qmin > qmax:
        qmin = qmax = int(np.clip(qmin, out.dtype.qmin, out.dtype.qmax))
    return qmin, qmax


def saturate_int32(acc: np.ndarray) -> np.ndarray:
    """Clamp exact accumulators to int32 (int16 activations accumulate in int64 and saturate
    here; int8 ones never reach it: |acc| <= 127 * 255 * K < 2**31 for K < 66000)."""
    return np.clip(acc, INT32_MIN, INT32_MAX)


@dataclass(frozen=True, eq=False)
class Requant:
    """One requantization of int32 accumulators into an integer output, as integers:

        y = clamp(requantize(saturate_int32(acc), encoding) + zero_point, qmin, qmax)

    `requantize` is the integer expression of `encoding.method` (`lowbit.numerics.fixed_point`:
    q31 multiplier and shifts, or prescale pre-shift / scale / post-shift / clip), whose arrays
    are 0-d (per tensor) or 1-D (per channel, along `axis` of the accumulator), as is
    `zero_point` (int64). [qmin, qmax] is the output dtype's range narrowed by a fused Relu /
    Clip; `encoding.real` is the real factor M the integers approximate (reports only)."""

    encoding: RequantParams
    zero_point: np.ndarray
    qmin: int
    qmax: int
    dtype: DType
    axis: int | None = None

    @property
    def multiplier(self) -> np.ndarray:
        """M, the real factor (float64) the encoding approximates."""
        return self.encoding.real

    def apply(self, acc: np.ndarray) -> np.ndarray:
        """y of the class docstring, in the output dtype. (Saturating to the dtype's range
        first and then to [qmin, qmax], which lies inside it, is the one clamp above.)"""
        y = fixed_point.requantize(saturate_int32(np.asarray(acc, np.int64)), self.encoding,
                                   self.zero_point, self.dtype.qmin, self.dtype.qmax,
                                   axis=self.axis)
        return np.clip(y, self.qmin, self.qmax).astype(self.dtype.np_dtype)


def output_requant(node: Node, M, out: TensorType, *, axis: int | None = None,
                   bounds: tuple[int, int] | None = None) -> Requant:
    """The requantization of `node`'s accumulators by the real factor(s) M into output type
    `out`: M encoded in the node's encoding (`encode`), the output zero point, and the clamp
    bounds `bounds` (default `output_bounds`: a fused clip narrows them). Per-channel M runs
    along `axis` of the accumulator, or along the output type's axis when its zero point is
    per channel."""
    qmin, qmax = bounds if bounds is not None else output_bounds(node, out)
    zp = zero_of(out)
    q_axis = out.quant.axis if out.quant is not None else None
    if zp.ndim and q_axis is not None:
        axis = q_axis
    return Requant(encode(node, M, out), zp, int(qmin), int(qmax), out.dtype, axis)


def quantize(x: np.ndarray, out: TensorType) -> np.ndarray:
    """`saturate(round_half_even(x / scale) + zero_point)`, x / scale computed in float32 as
    ONNX QuantizeLinear does; per channel along the type's axis."""
    q = out.quant
    assert q is not None
    scale, zp = q.scale.astype(np.float32), q.zero_point
    if q.axis is not None:
        shape = [1] * x.ndim
        shape[q.axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.rint(np.asarray(x, np.float32) / scale)
    y = np.nan_to_num(y, nan=0.0, posinf=out.dtype.qmax, neginf=out.dtype.qmin)
    y = np.clip(y.astype(np.float64) + zp, out.dtype.qmin, out.dtype.qmax)
    return y.astype(out.dtype.np_dtype)


def dequantize(q: np.ndarray, t: TensorType) -> np.ndarray:
    """`float32(q - zero_point) * scale`, per channel along the type's axis."""
    p = t.quant
    assert p is not None
    scale, zp = p.scale, p.zero_point
    if p.axis is not None:
        shape = [1] * q.ndim
        shape[p.axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((q.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def centred(q: np.ndarray, t: TensorType, axis_ndim: int | None = None) -> np.ndarray:
    """`q - zero_point` as int64 (per channel along the type's axis)."""
    p = t.quant
    assert p is not None
    zp = p.zero_point
    if p.axis is not None:
        shape = [1] * q.ndim
        shape[p.axis] = zp.size
        zp = zp.reshape(shape)
    return q.astype(np.int64) - zp


def lookup_table(f: Callable[[np.ndarray], np.ndarray], x: TensorType,
                 out: TensorType) -> np.ndarray:
    """`table[i] = saturate(round_half_even(f(dequantize(qmin + i)) / s_out) + z_out)` for every
    input code qmin..qmax of `x`'s dtype; f is evaluated in float32 by the op's reference float
    kernel, so the table is exactly what quantizing the float op's result would give."""
    codes = np.arange(x.dtype.qmin, x.dtype.qmax + 1, dtype=np.int64)
    real = dequantize(codes.astype(x.dtype.np_dtype), x)
    return quantize(np.asarray(f(real), np.float32), out)


def float32_multiplier(s_in, s_w, s_out=None, alpha: float = 1.0) -> np.ndarray:
    """ONNX Runtime's requantization multiplier of an int32 accumulator, in float32 (MLAS):
    `float32(float32(float32(alpha * s_in) * s_w) / s_out)`, elementwise with broadcasting
    (per output channel with per-channel s_w); without `s_out`, the dequantization factor
    `float32(float32(alpha * s_in) * s_w)`. Scales of narrower float types widen to float32
    first (exact); NaN and infinities propagate."""
    f = np.float32
    with np.errstate(all="ignore"):
        m = np.asarray(s_in).astype(f)
        if alpha != 1.0:
            m = (f(alpha) * m).astype(f)
        m = m * np.asarray(s_w).astype(f)
        if s_out is not None:
            m = m / np.asarray(s_out).astype(f).reshape(())
    return np.asarray(m, f)


def bias_scale_matches(bias: TensorType, expected: np.ndarray) -> bool:
    """Whether an int32 bias type has zero point 0 and scale `s_in * s_w` (as float32)."""
    if bias.quant is None:
        return False
    s = bias.quant.scale.astype(np.float64)
    want = np.asarray(expected, np.float32).astype(np.float64)
    return bool(np.all(bias.quant.zero_point == 0)) and s.shape in (want.shape, ()) and \
        bool(np.allclose(s, want, rtol=1e-6, atol=0))
