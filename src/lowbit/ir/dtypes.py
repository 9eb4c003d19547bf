"""Element types of lowbit tensors and their mapping to numpy and ONNX.

Sub-byte and 8-bit float types are represented in numpy with the `ml_dtypes` scalar types that
onnx itself depends on. Integer kernels never compute in those types directly: they widen to
int32/int64 first.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import TensorProto


@dataclass(frozen=True)
class DType:
    """One element type: its printed short name, ONNX code and numpy dtype."""

    name: str
    short: str
    onnx_code: int
    np_dtype: np.dtype
    bits: int
    is_float: bool
    is_signed: bool

    @property
    def is_integer(self) -> bool:
        return not self.is_float and self.name != "bool"

    @property
    def qmin(self) -> int:
        """Smallest representable integer (integer types only)."""
        if not self.is_integer:
            raise TypeError(f"{self.name} has no integer range")
        return -(1 << (self.bits - 1)) if self.is_signed else 0

    @property
    def qmax(self) -> int:
        """Largest representable integer (integer types only)."""
        if not self.is_integer:
            raise TypeError(f"{self.name} has no integer range")
        return (1 << (self.bits - 1)) - 1 if self.is_signed else (1 << self.bits) - 1

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


def _dt(name, short, code, np_type, bits, is_float, is_signed) -> DType:
    return DType(name, short, code, np.dtype(np_type), bits, is_float, is_signed)


T = TensorProto
FLOAT32 = _dt("float32", "f32", T.FLOAT, np.float32, 32, True, True)
FLOAT64 = _dt("float64", "f64", T.DOUBLE, np.float64, 64, True, True)
FLOAT16 = _dt("float16", "f16", T.FLOAT16, np.float16, 16, True, True)
BFLOAT16 = _dt("bfloat16", "bf16", T.BFLOAT16, ml_dtypes.bfloat16, 16, True, True)
FLOAT8E4M3FN = _dt(
    "float8e4m3fn", "f8e4m3fn", T.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 8, True, True
)
FLOAT8E4M3FNUZ = _dt(
    "float8e4m3fnuz", "f8e4m3fnuz", T.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, 8, True, True
)
FLOAT8E5M2 = _dt("float8e5m2", "f8e5m2", T.FLOAT8E5M2, ml_dtypes.float8_e5m2, 8, True, True)
FLOAT8E5M2FNUZ = _dt(
    "float8e5m2fnuz", "f8e5m2fnuz", T.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, 8, True, True
)
FLOAT4E2M1 = _dt("float4e2m1", "f4e2m1", T.FLOAT4E2M1, ml_dtypes.float4_e2m1fn, 4, True, True)
INT2 = _dt("int2", "i2", T.INT2, ml_dtypes.int2, 2, False, True)
UINT2 = _dt("uint2", "u2", T.UINT2, ml_dtypes.uint2, 2, False, False)
INT4 = _dt("int4", "i4", T.INT4, ml_dtypes.int4, 4, False, True)
UINT4 = _dt("uint4", "u4", T.UINT4, ml_dtypes.uint4, 4, False, False)
INT8 = _dt("int8", "i8", T.INT8, np.int8, 8, False, True)
UINT8 = _dt("uint8", "u8", T.UINT8, np.uint8, 8, False, False)
INT16 = _dt("int16", "i16", T.INT16, np.int16, 16, False, True)
UINT16 = _dt("uint16", "u16", T.UINT16, np.uint16, 16, False, False)
INT32 = _dt("int32", "i32", T.INT32, np.int32, 32, False, True)
UINT32 = _dt("uint32", "u32", T.UINT32, np.uint32, 32, False, False)
INT64 = _dt("int64", "i64", T.INT64, np.int64, 64, False, True)
UINT64 = _dt("uint64", "u64", T.UINT64, np.uint64, 64, False, False)
BOOL = _dt("bool", "b", T.BOOL, np.bool_, 8, False, False)

ALL: tuple[DType, ...] = (
    FLOAT32, FLOAT64, FLOAT16, BFLOAT16, FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ,
    FLOAT4E2M1, INT2, UINT2, INT4, UINT4, INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64, UINT64,
    BOOL,
)  # fmt: skip

_BY_NAME = {d.name: d for d in ALL} | {d.short: d for d in ALL}
_BY_ONNX = {d.onnx_code: d for d in ALL}
_BY_NUMPY = {d.np_dtype: d for d in ALL}


def from_name(name: str) -> DType:
    """Look up a dtype by its name (`int8`) or short name (`i8`)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(d.name for d in ALL)
        raise ValueError(f"unknown dtype '{name}'; known: {known}") from None


def from_onnx(code: int) -> DType:
    """Look up a dtype by its ONNX TensorProto code."""
    try:
        return _BY_ONNX[code]
    except KeyError:
        label = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        raise ValueError(f"unsupported ONNX element type {label}") from None


def from_numpy(dtype: np.dtype | type) -> DType:
    """Look up the lowbit dtype of a numpy dtype."""
    try:
        return _BY_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"unsupported numpy dtype {dtype}") from None
