"""Integer kernels of averaging ops on quantized types (the RESCALE rule): AveragePool,
GlobalAveragePool and ReduceMean.

With n the number of input elements averaged into an output (per position: it varies near the
borders when padding is not counted),

    acc = sum(q - z_x)                                     exact int32
    y   = saturate(requantize(acc, M = s_x / (s_y * n)) + z_y)

so the division by n is part of the single requantization (no separate integer division and
no double rounding). The parameters come from `average_pool_params`,
`global_average_pool_params` and `reduce_mean_params` (`AverageParams`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.backends.reference.kernels.pool import pool_geometry, window_counts
from lowbit.backends.reference.windows import extract_windows, pad_spatial
from lowbit.errors import KernelError
from lowbit.ir.graph import Node
from lowbit.numerics import arith
from lowbit.numerics.arith import Requant


@dataclass(frozen=True, eq=False)
class AverageParams:
    """An average of quantized codes: with n = counts at the output position (the number of
    input elements averaged there),

        acc = sum(q - input_zero)                     exact
        y   = requants[n].apply(acc)                  M_n = s_x / (s_y * n)

    `counts` is int64, broadcastable against the output (0-d when every output averages the
    same number of elements); `requants` holds one requantization per distinct n, each clamped
    to the output range narrowed by a fused clip."""

    input_zero: int
    counts: np.ndarray
    requants: dict[int, Requant]


def _average_params(node: Node, counts: np.ndarray) -> AverageParams:
    tx, out = node.inputs[0].type, node.outputs[0].type
    if tx.quant is None or not tx.quant.per_tensor:
        raise KernelError(f"{node.describe()}: the input must be quantized per tensor")
    base = float(arith.scale_of(tx)) / float(arith.scale_of(out))
    counts = np.asarray(counts, np.int64)
    return AverageParams(int(arith.zero_of(tx)), counts,
                         {int(n): arith.output_requant(node, base / float(n), out)
                          for n in np.unique(counts)})


@params("AveragePool")
def average_pool_params(node: Node, inputs: Inputs) -> AverageParams:
    """`AverageParams` of a quantized AveragePool: n counts the window's input positions
    (plus the padding with count_include_pad, never the overhang ceil_mode adds)."""
    x = inputs[0]
    window, pads, out_dims, extra, _ = pool_geometry(node, x)
    return _average_params(node, window_counts(node, x, window, pads, out_dims, extra))


@params("GlobalAveragePool")
def global_average_pool_params(node: Node, inputs: Inputs) -> AverageParams:
    """`AverageParams` of a quantized GlobalAveragePool: n is the spatial size."""
    return _average_params(node, np.asarray(int(np.prod(inputs[0].shape[2:]))))


def _reduced_axes(node: Node, inputs: Inputs) -> tuple[int, ...] | None:
    """ReduceMean's axes (all when none are given), or None for a no-op."""
    x = inputs[0]
    axes_in = inputs[1] if len(inputs) > 1 else None
    if axes_in is None or np.asarray(axes_in).size == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(int(a) % x.ndim for a in np.asarray(axes_in).reshape(-1))


@params("ReduceMean")
def reduce_mean_params(node: Node, inputs: Inputs) -> AverageParams | None:
    """`AverageParams` of a quantized ReduceMean: n is the product of the reduced axes'
    sizes; None for a no-op (empty axes with noop_with_empty_axes: the codes pass as they
    are)."""
    axes = _reduced_axes(node, inputs)
    if axes is None:
        return None
    return _average_params(node, np.asarray(int(np.prod([inputs[0].shape[a] for a in axes]))))


# -- kernels ------------------------------------------------------------------------------------


def _average(p: AverageParams, acc: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`acc / counts` requantized into the output type."""
    counts = np.broadcast_to(p.counts, acc.shape)
    y = np.empty(acc.shape, dtype=dtype)
    for n, requant in p.requants.items():
        where = counts == n
        y[where] = requant.apply(acc[where])
    return y


@kernel("AveragePool", quantized=True)
def average_pool(node, inputs):
    p = integer_params(node, inputs)
    x = inputs[0]
    nsp = x.ndim - 2
    window, _, out_dims, _, full = pool_geometry(node, x)
    centred = pad_spatial(x.astype(np.int64) - p.input_zero, full, 0)
    acc = extract_windows(centred, window, out_dims).sum(axis=tuple(range(2 + nsp, 2 + 2 * nsp)))
    return [_average(p, acc, node.outputs[0].type.dtype.np_dtype)]


@kernel("GlobalAveragePool", quantized=True)
def global_average_pool(node, inputs):
    p = integer_params(node, inputs)
    x = inputs[0]
    acc = (x.astype(np.int64) - p.input_zero).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
    return [_average(p, acc, node.outputs[0].type.dtype.np_dtype)]


@kernel("ReduceMean", quantized=True)
def reduce_mean(node, inputs):
    p = integer_params(node, inputs)
    x = inputs[0]
    if p is None:
        return [x.copy()]
    keepdims = bool(node.attrs.get("keepdims", 1))
    acc = (x.astype(np.int64) - p.input_zero).sum(axis=_reduced_axes(node, inputs),
                                                  keepdims=keepdims)
    return [_average(p, acc, node.outputs[0].type.dtype.np_dtype)]
