"""Reference kernels of Softmax, LogSoftmax and Hardmax (float64, rounded once)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    xf = x.astype(np.float64)
    return xf - xf.max(axis=axis, keepdims=True)


@kernel("Softmax")
def softmax(node, inputs):
    x = inputs[0]
    axis = int(node.attrs["axis"])
    if x.dtype not in (np.float32, np.float64):
        # Narrow floats round after each step, as ONNX's reference computes them.
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]
    e = np.exp(_shifted(x, axis))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]


@kernel("LogSoftmax")
def log_softmax(node, inputs):
    x = inputs[0]
    axis = int(node.attrs["axis"])
    s = _shifted(x, axis)
    return [(s - np.log(np.exp(s).sum(axis=axis, keepdims=True))).astype(x.dtype)]


@kernel("Hardmax")
def hardmax(node, inputs):
    x = inputs[0]
    axis = int(node.attrs["axis"]) % x.ndim
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, first, 1, axis=axis)
    return [y]
