"""Reference kernels of Gemm and MatMul: floats accumulate in float64 and round once (float16:
numpy's float16 product, as ONNX's reference computes it); integer products are exact (wrapping
to the type like ONNX Runtime's integer GEMM)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.floatmath import is_float
from lowbit.backends.reference.kernels import kernel


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.float16:
        return np.matmul(a, b)  # as ONNX's reference: numpy's float16 product
    if is_float(a.dtype):
        return np.matmul(a.astype(np.float64), b.astype(np.float64))
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


@kernel("Gemm")
def gemm(node, inputs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    x = a.T if node.attrs["transA"] else a
    y = b.T if node.attrs["transB"] else b
    result = float(node.attrs["alpha"]) * _product(x, y) if is_float(a.dtype) else \
        int(node.attrs["alpha"]) * _product(x, y)
    if c is not None:
        beta = node.attrs["beta"]
        result = result + (beta * c.astype(np.float64) if is_float(a.dtype)
                           else int(beta) * c.astype(np.int64))
    return [result.astype(a.dtype)]


@kernel("MatMul")
def matmul(node, inputs):
    a, b = inputs
    return [_product(a, b).astype(a.dtype)]
