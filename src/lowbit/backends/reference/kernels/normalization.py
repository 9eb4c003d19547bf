"""Reference kernels of the normalizations (computed in float64, rounded once)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel


def _channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.astype(np.float64).reshape((1, -1) + (1,) * (ndim - 2))


@kernel("BatchNormalization")
def batch_normalization(node, inputs):
    x, scale, b, mean, var = inputs
    eps = float(node.attrs["epsilon"])
    xf = x.astype(np.float64)
    if x.ndim == 1:
        y = (xf - mean) / np.sqrt(var.astype(np.float64) + eps) * scale + b
    else:
        y = (xf - _channel(mean, x.ndim)) / np.sqrt(_channel(var, x.ndim) + eps) * \
            _channel(scale, x.ndim) + _channel(b, x.ndim)
    return [y.astype(x.dtype)]


@kernel("LayerNormalization")
def layer_normalization(node, inputs):
    x, scale = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    axis = int(node.attrs["axis"]) % x.ndim
    axes = tuple(range(axis, x.ndim))
    stash = np.float32 if int(node.attrs.get("stash_type", 1)) == 1 else np.float64
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + float(node.attrs["epsilon"]))
    y = (xf - mean) * inv * scale.astype(np.float64)
    if b is not None:
        y = y + b.astype(np.float64)
    return [y.astype(x.dtype), mean.astype(stash), inv.astype(stash)]


@kernel("InstanceNormalization")
def instance_normalization(node, inputs):
    x, scale, b = inputs
    axes = tuple(range(2, x.ndim))
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (xf - mean) / np.sqrt(var + float(node.attrs["epsilon"]))
    y = y * _channel(scale, x.ndim) + _channel(b, x.ndim)
    return [y.astype(x.dtype)]
