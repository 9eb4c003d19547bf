"""Reference kernels of the normalizations (lowbit.ops.normalization), in float64 with Y
rounded once to X's dtype. LayerNormalization sums in the fixed order of
`lowbit.numerics.elementary.lane_sum`, which the compiled backend reproduces."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.numerics.elementary import lane_sum
from lowbit.ops.normalization import STASH_TYPES


def _per_channel(p: np.ndarray, rank: int) -> np.ndarray:
    return p.astype(np.float64).reshape((1, -1) + (1,) * (rank - 2))


@kernel("BatchNormalization")
def batch_normalization(node, inputs):
    x, scale, b, mean, var = inputs
    r = x.ndim
    inv = 1 / np.sqrt(_per_channel(var, r) + float(node.attrs["epsilon"]))
    y = (x.astype(np.float64) - _per_channel(mean, r)) * (inv * _per_channel(scale, r))
    return [(y + _per_channel(b, r)).astype(x.dtype)]


@kernel("LayerNormalization")
def layer_normalization(node, inputs):
    x, scale, b = (list(inputs) + [None])[:3]
    axis = node.attrs["axis"] % x.ndim
    n = int(np.prod(x.shape[axis:]))
    xf = x.astype(np.float64).reshape(x.shape[:axis] + (n,))
    mean = lane_sum(xf)[..., None] / n
    d = xf - mean
    inv = 1 / np.sqrt(lane_sum(d * d)[..., None] / n + float(node.attrs["epsilon"]))
    y = (d * inv).reshape(x.shape) * scale.astype(np.float64)
    if b is not None:
        y = y + b.astype(np.float64)
    stash = STASH_TYPES[node.attrs["stash_type"]].np_dtype
    keep = x.shape[:axis] + (1,) * (x.ndim - axis)
    return [y.astype(x.dtype), mean.reshape(keep).astype(stash), inv.reshape(keep).astype(stash)]


@kernel("InstanceNormalization")
def instance_normalization(node, inputs):
    x, scale, b = inputs
    axes = tuple(range(2, x.ndim))
    xf = x.astype(np.float64)
    d = xf - xf.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + float(node.attrs["epsilon"]))
    y = d * inv * _per_channel(scale, x.ndim) + _per_channel(b, x.ndim)
    return [y.astype(x.dtype)]
