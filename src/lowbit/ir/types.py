"""Tensor types: element type, shape and (for quantized tensors) quantization parameters.

A quantized tensor holds integers q that stand for reals by the affine map

    real = scale * (q - zero_point)

`QuantParams` keeps scale and zero point as scalars (per tensor) or as 1-D vectors along `axis`
(per channel). It is immutable and part of `TensorType` equality, so an op is "quantized" because
its operand types are, never because a dedicated quantized op variant exists.

Types print the way engineers debug them. A per-tensor quantized type prints as
`i8[S:0.025500000 O:-128][0.000,6.503]<1 x 56 x 56 x 64>`: dtype, scale, zero point (offset),
the real range the integers can represent, and the shape. A per-channel type shows its axis and
the range of its scales and zero points:
`i8[axis:0 S:0.000412000..0.008113000 O:0][-1.030,1.030]<64 x 3 x 3 x 3>`. Float types print as
`f32<1 x 3 x 224 x 224>`; symbolic dimensions print by name and unknown ones as `?`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lowbit.ir.dtypes import DType

Dim = int | str | None
"""A dimension: an int when static, a str when symbolic (`"batch"`), None when unknown."""


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class QuantParams:
    """Affine quantization parameters `real = scale * (q - zero_point)`.

    Per tensor: `scale` and `zero_point` are 0-d and `axis` is None. Per channel: both are 1-D of
    the same length and `axis` names the tensor dimension they run along.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    def __init__(self, scale, zero_point=0, axis: int | None = None) -> None:
        s = np.asarray(scale, dtype=np.float32)
        z = np.asarray(zero_point)
        if z.dtype.kind == "f" and (not np.all(np.isfinite(z)) or np.any(z != np.round(z))):
            raise ValueError(f"zero point must be integral, got {zero_point!r}")
        z = z.astype(np.int64)
        if axis is None:
            if s.ndim != 0 or z.ndim != 0:
                if s.size == 1 and z.size == 1:
                    s, z = s.reshape(()), z.reshape(())
                else:
                    raise ValueError("per-tensor QuantParams need scalar scale and zero point")
        else:
            if s.ndim == 0:
                s = s.reshape(1)
            if z.ndim == 0:
                z = np.full(s.shape, int(z), dtype=np.int64)
            if s.ndim != 1 or z.shape != s.shape:
                raise ValueError(
                    f"per-axis QuantParams need 1-D scale and zero point of equal length, "
                    f"got shapes {s.shape} and {z.shape}"
                )
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            bad = s[~(np.isfinite(s) & (s > 0))] if s.ndim else s
            raise ValueError(f"scale must be finite and positive, got {bad!r}")
        object.__setattr__(self, "scale", _frozen(s))
        object.__setattr__(self, "zero_point", _frozen(z))
        object.__setattr__(self, "axis", axis)

    @property
    def per_tensor(self) -> bool:
        return self.axis is None

    @property
    def channels(self) -> int:
        """Number of (scale, zero point) pairs: 1 per tensor."""
        return int(self.scale.size)

    def real_range(self, dtype: DType) -> tuple[float, float]:
        """The smallest and largest real value representable in `dtype` (over all channels)."""
        lo = self.scale.astype(np.float64) * (dtype.qmin - self.zero_point)
        hi = self.scale.astype(np.float64) * (dtype.qmax - self.zero_point)
        return float(np.min(lo)), float(np.max(hi))

    def _key(self) -> tuple:
        return (self.axis, self.scale.tobytes(), self.scale.shape, self.zero_point.tobytes())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuantParams) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self.per_tensor:
            return f"QuantParams(scale={float(self.scale):.9g}, zero_point={int(self.zero_point)})"
        return (
            f"QuantParams(axis={self.axis}, scale=[{self.scale.min():.9g}..{self.scale.max():.9g}]"
            f" x{self.channels}, zero_point=[{self.zero_point.min()}..{self.zero_point.max()}])"
        )


@dataclass(frozen=True)
class TensorType:
    """(dtype, shape, quant). `shape` is None when even the rank is unknown."""

    dtype: DType
    shape: tuple[Dim, ...] | None
    quant: QuantParams | None = None

    def __post_init__(self) -> None:
        if self.shape is not None:
            shape = tuple(self.shape)
            for d in shape:
                if d is not None and not isinstance(d, (int, str)):
                    raise TypeError(f"dimension must be int, str or None, got {d!r}")
                if isinstance(d, int) and not isinstance(d, bool) and d < 0:
                    raise ValueError(f"negative dimension {d} in shape {shape}")
            object.__setattr__(self, "shape", tuple(int(d) if isinstance(d, int) else d
                                                    for d in shape))
        if self.quant is not None:
            self._check_quant()

    def _check_quant(self) -> None:
        q = self.quant
        assert q is not None
        if not self.dtype.is_integer:
            raise ValueError(f"quantization parameters need an integer dtype, not {self.dtype}")
        if np.any(q.zero_point < self.dtype.qmin) or np.any(q.zero_point > self.dtype.qmax):
            raise ValueError(f"zero point {q.zero_point} outside the range of {self.dtype}")
        if q.axis is not None and self.shape is not None:
            rank = len(self.shape)
            if not -rank <= q.axis < rank:
                raise ValueError(f"quantization axis {q.axis} out of range for rank {rank}")
            d = self.shape[q.axis]
            if isinstance(d, int) and d != q.channels:
                raise ValueError(
                    f"{q.channels} per-channel scales for dimension {q.axis} of size {d}"
                )

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        """Element count when the shape is static, else None."""
        if not self.is_static:
            return None
        return math.prod(self.shape)  # type: ignore[arg-type]

    @property
    def is_quantized(self) -> bool:
        return self.quant is not None

    def with_shape(self, shape: tuple[Dim, ...] | None) -> TensorType:
        return TensorType(self.dtype, shape, self.quant if self._quant_fits(shape) else None)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape, None)

    def with_quant(self, quant: QuantParams | None) -> TensorType:
        return TensorType(self.dtype, self.shape, quant)

    def _quant_fits(self, shape: tuple[Dim, ...] | None) -> bool:
        q = self.quant
        if q is None or q.axis is None:
            return True
        return shape is not None and -len(shape) <= q.axis < len(shape)

    def __str__(self) -> str:
        return format_type(self)


# -- text form ---------------------------------------------------------------------------------
def format_dim(d: Dim) -> str:
    return "?" if d is None else str(d)


def format_shape(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "<*>"
    return "<" + " x ".join(format_dim(d) for d in shape) + ">"


def format_quant(q: QuantParams, dtype) -> str:
    lo, hi = q.real_range(dtype)
    if q.per_tensor:
        params = f"S:{float(q.scale):.9f} O:{int(q.zero_point)}"
    else:
        zmin, zmax = int(np.min(q.zero_point)), int(np.max(q.zero_point))
        zp = f"O:{zmin}" if zmin == zmax else f"O:{zmin}..{zmax}"
        params = f"axis:{q.axis} S:{float(q.scale.min()):.9f}..{float(q.scale.max()):.9f} {zp}"
    return f"[{params}][{lo:.3f},{hi:.3f}]"


def format_type(t: TensorType | None) -> str:
    if t is None:
        return "?"
    quant = format_quant(t.quant, t.dtype) if t.quant is not None else ""
    return f"{t.dtype.short}{quant}{format_shape(t.shape)}"
