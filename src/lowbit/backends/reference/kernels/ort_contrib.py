"""Reference kernels of ONNX Runtime contrib ops (see `lowbit.ops.ort_contrib`)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.backends.reference.kernels.quantized import (
    QLinearParams,
    exact_matmul,
    requantize,
    wrap_int32,
)
from lowbit.ir.graph import Node
from lowbit.numerics.arith import float32_multiplier
from lowbit.ops.product import product_of


@params("QGemm", domain="com.microsoft", typed=False)
def qgemm_params(node: Node, inputs: Inputs) -> QLinearParams:
    """`QLinearParams` of QGemm: M_n = float32(float32(alpha * a_scale) * b_scale[n]), then
    float32(M_n / y_scale) when y_scale is given (else the float output's factor)."""
    ins = (list(inputs) + [None] * 9)[:9]
    a_scale, b_scale, y_scale, y_zero = ins[1], ins[4], ins[7], ins[8]
    m = float32_multiplier(np.asarray(a_scale).reshape(()), np.asarray(b_scale).reshape(-1),
                           y_scale, alpha=float(node.attrs["alpha"]))
    m = m.astype(np.float32).reshape(()) if m.size == 1 else m.astype(np.float32).reshape(1, -1)
    if y_scale is None:
        return QLinearParams(m, None, None)
    return QLinearParams(m, int(np.asarray(y_zero).reshape(())), y_zero.dtype)


@kernel("QGemm", "com.microsoft")
def qgemm(node, inputs):
    """acc = wrap_int32((A - a_zero_point) @ (B - b_zero_point) + C), summed exactly in int64
    (A, B transposed first per transA / transB; b_zero_point per tensor or per column);
    M_n = float32(float32(alpha * a_scale) * b_scale[n]), then float32(M_n / y_scale) when
    y_scale is given. Quantized output: requantize(acc, M) =
    clamp(rint(float32(acc) * M_n), qmin - y_zero_point, qmax - y_zero_point) + y_zero_point
    (round half to even, like MLAS's requantization); float output: float32(acc) * M_n."""
    a, _, a_zero, b, _, b_zero, c = (list(inputs) + [None] * 3)[:7]
    p = integer_params(node, inputs)
    a, b = product_of(node).operands(np.asarray(a), np.asarray(b))
    b_zero = np.asarray(b_zero).astype(np.int64)
    acc = exact_matmul(a.astype(np.int64) - np.int64(np.asarray(a_zero).reshape(())),
                       b.astype(np.int64) - (b_zero.reshape(()) if b_zero.size == 1
                                             else b_zero.reshape(1, -1)))
    if c is not None:
        acc = acc + np.asarray(c).astype(np.int64)
    acc = wrap_int32(acc)
    if p.output_zero is None:
        with np.errstate(all="ignore"):
            return [acc.astype(np.float32) * p.multiplier]
    return [requantize(acc, p.multiplier, p.output_zero, p.output_dtype)]
