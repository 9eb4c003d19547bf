"""Reference kernels of Cast and CastLike (rules in lowbit.ops.cast)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from lowbit.backends.reference.floatmath import is_float, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.ir import dtypes

_FLOAT8 = {d.np_dtype for d in (dtypes.FLOAT8E4M3FN, dtypes.FLOAT8E4M3FNUZ, dtypes.FLOAT8E5M2,
                                dtypes.FLOAT8E5M2FNUZ)}
_SUB_BYTE_INTS = {d.np_dtype: (np.dtype(np.int8) if d.is_signed else np.dtype(np.uint8))
                  for d in (dtypes.INT4, dtypes.UINT4, dtypes.INT2, dtypes.UINT2)}


def convert(x: np.ndarray, target: np.dtype, saturate: bool = True) -> np.ndarray:
    """`x` converted to `target` by the ONNX Cast rules."""
    if x.dtype == target:
        return x
    # ml_dtypes cannot cast between its sub-byte integer types: go through 8 bits (exact).
    if x.dtype in _SUB_BYTE_INTS:
        x = x.astype(_SUB_BYTE_INTS[x.dtype])
    with np.errstate(all="ignore"):
        if target == np.bool_:
            return np.asarray(widen(x) != 0)
        if target in _FLOAT8 and saturate:
            finite = ml_dtypes.finfo(target)
            source = widen(x) if is_float(x.dtype) else x.astype(np.float64)
            return np.clip(source, float(finite.min), float(finite.max)).astype(target)
        return np.asarray(x).astype(target)


@kernel("Cast")
def cast(node, inputs):
    target = dtypes.from_onnx(node.attrs["to"]).np_dtype
    return [convert(inputs[0], target, bool(node.attrs.get("saturate", 1)))]


@kernel("CastLike")
def cast_like(node, inputs):
    return [convert(inputs[0], inputs[1].dtype, bool(node.attrs.get("saturate", 1)))]
