"""Reference kernels of Softmax, LogSoftmax and Hardmax (lowbit.ops.softmax).

float32 Softmax is `lowbit.numerics.elementary.softmax` (float32 steps in a defined order, which
the compiled backend reproduces bit for bit); float64 is computed in float64 after subtracting
the maximum.
Softmax on float16 and bfloat16 rounds after each step (subtract, exp, sum, divide), as ONNX's
reference computes it and its conformance data expect bit for bit.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.numerics import elementary


def _shifted(node, x: np.ndarray) -> tuple[np.ndarray, int]:
    axis = node.attrs["axis"] % max(x.ndim, 1)
    xf = x.astype(np.float64)
    if x.ndim == 0:
        return xf - xf, axis
    with np.errstate(invalid="ignore"):
        return xf - xf.max(axis=axis, keepdims=True), axis


@kernel("Softmax")
def softmax(node, inputs):
    (x,) = inputs
    if x.dtype not in (np.float32, np.float64) and x.ndim:
        axis = node.attrs["axis"] % x.ndim
        with np.errstate(invalid="ignore"):
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]
    if x.dtype == np.float32 and x.ndim:
        return [elementary.softmax(x, node.attrs["axis"] % x.ndim)]
    d, axis = _shifted(node, x)
    with np.errstate(invalid="ignore"):
        e = np.exp(d)
        return [(e / e.sum(axis=axis if x.ndim else None, keepdims=True)).astype(x.dtype)]


@kernel("LogSoftmax")
def log_softmax(node, inputs):
    (x,) = inputs
    d, axis = _shifted(node, x)
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = np.log(np.exp(d).sum(axis=axis if x.ndim else None, keepdims=True))
        return [(d - lse).astype(x.dtype)]


@kernel("Hardmax")
def hardmax(node, inputs):
    (x,) = inputs
    if x.ndim == 0:
        return [np.ones_like(x)]
    axis = node.attrs["axis"] % x.ndim
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, first, 1, axis=axis)
    return [y]
