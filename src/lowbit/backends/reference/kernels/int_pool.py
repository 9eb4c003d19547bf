"""Integer kernels of averaging ops on quantized types (the RESCALE rule): AveragePool,
GlobalAveragePool and ReduceMean.

With n the number of input elements averaged into an output (per position: it varies near the
borders when padding is not counted),

    acc = sum(q - z_x)                                     exact int32
    y   = saturate(requantize(acc, M = s_x / (s_y * n)) + z_y)

so the division by n is part of the single requantization (no separate integer division and
no double rounding).
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.kernels.pool import pool_geometry, window_counts
from lowbit.backends.reference.windows import extract_windows, pad_spatial
from lowbit.errors import KernelError
from lowbit.numerics import arith


def _average(node, acc: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Requantize `acc / counts` (counts broadcast against acc) into the output type."""
    tx, out = node.inputs[0].type, node.outputs[0].type
    if tx.quant is None or not tx.quant.per_tensor:
        raise KernelError(f"{node.describe()}: the input must be quantized per tensor")
    base = float(arith.scale_of(tx)) / float(arith.scale_of(out))
    counts = np.broadcast_to(counts, acc.shape)
    y = np.empty(acc.shape, dtype=out.dtype.np_dtype)
    for n in np.unique(counts):
        where = counts == n
        y[where] = arith.requantize(node, acc[where], base / float(n), out)
    return y


@kernel("AveragePool", quantized=True)
def average_pool(node, inputs):
    x = inputs[0]
    nsp = x.ndim - 2
    window, pads, out_dims, extra, full = pool_geometry(node, x)
    centred = pad_spatial(arith.centred(x, node.inputs[0].type), full, 0)
    acc = extract_windows(centred, window, out_dims).sum(axis=tuple(range(2 + nsp, 2 + 2 * nsp)))
    return [_average(node, acc, window_counts(node, x, window, pads, out_dims, extra))]


@kernel("GlobalAveragePool", quantized=True)
def global_average_pool(node, inputs):
    x = inputs[0]
    axes = tuple(range(2, x.ndim))
    acc = arith.centred(x, node.inputs[0].type).sum(axis=axes, keepdims=True)
    return [_average(node, acc, np.asarray(int(np.prod(x.shape[2:]))))]


@kernel("ReduceMean", quantized=True)
def reduce_mean(node, inputs):
    x = inputs[0]
    axes_in = inputs[1] if len(inputs) > 1 else None
    keepdims = bool(node.attrs.get("keepdims", 1))
    if axes_in is None or np.asarray(axes_in).size == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            return [x.copy()]
        axes = tuple(range(x.ndim))
    else:
        axes = tuple(int(a) % x.ndim for a in np.asarray(axes_in).reshape(-1))
    acc = arith.centred(x, node.inputs[0].type).sum(axis=axes, keepdims=keepdims)
    n = int(np.prod([x.shape[a] for a in axes]))
    return [_average(node, acc, np.asarray(n))]
