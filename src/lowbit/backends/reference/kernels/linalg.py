"""Reference kernels of Gemm and MatMul (lowbit.ops.linalg).

Floats are multiplied and accumulated in float64 and rounded once to the operands' dtype,
except float16 MatMul, which is numpy's float16 product as ONNX's reference computes it (its
conformance data expect those bits).
Integers are computed in 64 bits, where numpy's integer arithmetic wraps around, then cast to
the operands' width: the result is the exact product modulo 2**width.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.ops.product import product_of


def _wide(x: np.ndarray) -> np.ndarray:
    """`x` in its accumulation dtype: float64, int64 or uint64."""
    if x.dtype.kind == "u":
        return x.astype(np.uint64, copy=False)
    if x.dtype.kind == "i":
        return x.astype(np.int64, copy=False)
    return x.astype(np.float64, copy=False)


def _scale(y: np.ndarray, factor: float) -> np.ndarray:
    if factor == 1.0:
        return y
    if y.dtype.kind in "iu":
        return y * y.dtype.type(int(factor) % 2**64 if y.dtype.kind == "u" else int(factor))
    return y * factor


@kernel("Gemm")
def gemm(node, inputs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    aw, bw = product_of(node).operands(_wide(a), _wide(b))
    with np.errstate(over="ignore"):
        y = _scale(np.matmul(aw, bw), float(node.attrs["alpha"]))
        if c is not None:
            y = y + _scale(_wide(c), float(node.attrs["beta"]))
    return [y.astype(a.dtype)]


@kernel("MatMul")
def matmul(node, inputs):
    a, b = inputs
    if a.dtype == np.float16:
        return [np.matmul(a, b)]
    with np.errstate(over="ignore"):
        return [np.matmul(_wide(a), _wide(b)).astype(a.dtype)]
