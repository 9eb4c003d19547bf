"""Float arithmetic policy of the reference kernels.

float32 and float64 compute in their own precision. Narrower floats (float16, bfloat16, float8)
compute in float32, which holds every one of their values exactly, and are rounded back once at
the end; for +, -, *, / and sqrt that gives the correctly rounded narrow result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lowbit.ir import dtypes

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def is_float(dtype: np.dtype) -> bool:
    """Whether `dtype` is one of lowbit's float types (ml_dtypes ones included)."""
    return dtype.kind == "f" or dtypes.from_numpy(dtype).is_float


def widen(x: np.ndarray) -> np.ndarray:
    """`x` in its compute dtype: float32 for floats narrower than float32, else unchanged."""
    if x.dtype in _NATIVE or not is_float(x.dtype):
        return x
    return x.astype(np.float32)


def narrow(result: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`result` as an array of `dtype` (rounded once if it was computed wider)."""
    return np.asarray(result).astype(dtype, copy=False)


def float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Lift `fn` (written for float32/float64) to every float dtype, ignoring float warnings:
    overflow to inf and NaN results are the specified answers, not errors."""

    def apply(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return narrow(fn(widen(x)), x.dtype)

    return apply
