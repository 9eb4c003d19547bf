"""Reference kernels of Conv and ConvTranspose (float: float64 accumulation, one rounding)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.windows import conv_nd
from lowbit.ops.conv import conv_window, transpose_geometry


def _bias_along_channels(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is None:
        return y
    return y + b.astype(y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))


@kernel("Conv")
def conv(node, inputs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    window = conv_window(node, w.shape, x.ndim - 2)
    y = conv_nd(x.astype(np.float64), w.astype(np.float64), window, int(node.attrs["group"]))
    return [_bias_along_channels(y, b).astype(x.dtype)]


@kernel("ConvTranspose")
def conv_transpose(node, inputs):
    x, w = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    b = inputs[2] if len(inputs) > 2 else None
    n_sp = x.ndim - 2
    window = conv_window(node, w.shape, n_sp)
    group = int(node.attrs["group"])
    sizes, pads = transpose_geometry(node, window, x.shape[2:])
    n, c = x.shape[:2]
    mg = w.shape[1]
    cg = c // group
    kernel_shape = w.shape[2:]
    in_sp = x.shape[2:]
    full = [s * (i - 1) + d * (k - 1) + 1 for s, i, d, k in
            zip(window.strides, in_sp, window.dilations, kernel_shape, strict=True)]
    need = [max(f, p + o + q) for f, p, o, q in zip(full, pads[:n_sp], sizes, pads[n_sp:],
                                                    strict=True)]
    y = np.zeros((n, group, mg, *need), dtype=np.float64)
    xg = x.reshape(n, group, cg, *in_sp)
    wg = w.reshape(group, cg, mg, *kernel_shape)
    for k in np.ndindex(*kernel_shape):
        # contribution of kernel offset k: (N, G, Mg, *in_sp)
        part = np.einsum("ngc...,gcm->ngm...", xg, wg[(slice(None), slice(None), slice(None))
                                                        + k])
        index = tuple(slice(kk * d, kk * d + s * (i - 1) + 1, s) for kk, d, s, i in
                      zip(k, window.dilations, window.strides, in_sp, strict=True))
        y[(slice(None), slice(None), slice(None)) + index] += part
    y = y.reshape(n, group * mg, *need)
    crop = tuple(slice(p, p + o) for p, o in zip(pads[:n_sp], sizes, strict=True))
    y = y[(slice(None), slice(None)) + crop]
    return [_bias_along_channels(y, b).astype(inputs[0].dtype)]
