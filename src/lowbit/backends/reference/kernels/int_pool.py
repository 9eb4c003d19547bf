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
from lowbit.backends.reference.windows import extract_windows, pad_spatial
from lowbit.errors import KernelError
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.quant import arith


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
    window = window_from_attrs(node, None, nsp, bool(node.attrs.get("ceil_mode", 0)))
    spatial = x.shape[2:]
    pads = window.resolved_pads(spatial)
    out_dims = tuple(int(d) for d in window.output_dims(spatial))
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (i + pads[a] + pads[a + nsp]))
             for a, (o, s, d, k, i) in enumerate(zip(out_dims, window.strides, window.dilations,
                                                     window.kernel, spatial, strict=True))]
    full_pads = tuple(pads[:nsp]) + tuple(p + e for p, e in zip(pads[nsp:], extra, strict=True))
    centred = pad_spatial(arith.centred(x, node.inputs[0].type), full_pads, 0)
    axes = tuple(range(2 + nsp, 2 + 2 * nsp))
    acc = extract_windows(centred, window, out_dims).sum(axis=axes)
    ones = np.ones((1, 1) + spatial, dtype=np.int64)
    counted = pad_spatial(ones, pads, 1 if node.attrs.get("count_include_pad", 0) else 0)
    counted = pad_spatial(counted, (0,) * nsp + tuple(extra), 0)
    counts = extract_windows(counted, window, out_dims).sum(axis=axes)
    return [_average(node, acc, counts)]


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
