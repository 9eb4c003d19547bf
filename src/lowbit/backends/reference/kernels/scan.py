"""Reference kernels of CumSum and TopK (lowbit.ops.scan)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.floatmath import narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError


@kernel("CumSum")
def cum_sum(node, inputs):
    x, axis = inputs
    axis = int(axis.reshape(-1)[0])
    if not -x.ndim <= axis < x.ndim:
        raise KernelError(f"axis {axis} out of range for rank {x.ndim}")
    axis %= x.ndim
    flip = bool(node.attrs["reverse"])
    data = np.flip(x, axis) if flip else x
    wide = widen(data)
    with np.errstate(all="ignore"):
        sums = np.cumsum(wide, axis=axis, dtype=wide.dtype)
    if node.attrs["exclusive"]:
        sums = np.concatenate([np.zeros_like(np.take(sums, [0], axis=axis)),
                               np.take(sums, np.arange(sums.shape[axis] - 1), axis=axis)],
                              axis=axis) if sums.shape[axis] else sums
    out = narrow(sums, x.dtype)
    return [np.ascontiguousarray(np.flip(out, axis)) if flip else out]


@kernel("TopK")
def top_k(node, inputs):
    x, k = inputs
    k = int(k.reshape(-1)[0])
    axis = node.attrs["axis"] % x.ndim
    if not 0 <= k <= x.shape[axis]:
        raise KernelError(f"K = {k} is outside [0, {x.shape[axis]}]")
    keys = widen(x)
    if node.attrs["largest"]:
        # Descending order with ties to the lower index: a stable sort of order-reversed keys
        # (bitwise not, -x - 1 or max - x, reverses integers without overflow).
        keys = np.invert(keys) if keys.dtype.kind in "iu" else -keys
    order = np.argsort(keys, axis=axis, kind="stable")
    top = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, top, axis=axis), top.astype(np.int64)]
