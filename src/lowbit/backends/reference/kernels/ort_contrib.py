"""Reference kernels of ONNX Runtime contrib ops (see `lowbit.ops.ort_contrib`)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.kernels.quantized import exact_matmul, requantize, wrap_int32


@kernel("QGemm", "com.microsoft")
def qgemm(node, inputs):
    """acc = wrap_int32((A - a_zero_point) @ (B - b_zero_point) + C), summed exactly in int64
    (A, B transposed first per transA / transB; b_zero_point per tensor or per column);
    M_n = float32(float32(alpha * a_scale) * b_scale[n]), then float32(M_n / y_scale) when
    y_scale is given. Quantized output: requantize(acc, M) =
    clamp(rint(float32(acc) * M_n), qmin - y_zero_point, qmax - y_zero_point) + y_zero_point
    (round half to even, like MLAS's requantization); float output: float32(acc) * M_n."""
    a, a_scale, a_zero, b, b_scale, b_zero, c, y_scale, y_zero = (list(inputs) + [None] * 3)[:9]
    a = np.asarray(a).T if node.attrs["transA"] else np.asarray(a)
    b = np.asarray(b).T if node.attrs["transB"] else np.asarray(b)
    b_zero = np.asarray(b_zero).astype(np.int64)
    acc = exact_matmul(a.astype(np.int64) - np.int64(np.asarray(a_zero).reshape(())),
                       b.astype(np.int64) - (b_zero.reshape(()) if b_zero.size == 1
                                             else b_zero.reshape(1, -1)))
    if c is not None:
        acc = acc + np.asarray(c).astype(np.int64)
    acc = wrap_int32(acc)
    f = np.float32
    with np.errstate(all="ignore"):
        m = f(f(node.attrs["alpha"]) * f(np.asarray(a_scale).reshape(()))) * \
            np.asarray(b_scale, f).reshape(-1)
        if y_scale is not None:
            m = m / f(np.asarray(y_scale).reshape(()))
    m = m.astype(f).reshape(()) if m.size == 1 else m.astype(f).reshape(1, -1)
    if y_scale is None:
        with np.errstate(all="ignore"):
            return [acc.astype(f) * m]
    return [requantize(acc, m, int(np.asarray(y_zero).reshape(())), y_zero.dtype)]
