"""Sliding windows for the reference kernels: padding, window extraction and grouped N-d conv.

`conv_nd` computes, for every output position o and output channel m in group g,

    y[n, m, o] = sum over c in g, kernel offsets k of x_pad[n, c, o * s + k * d] * w[m, c, k]

Integer operands are accumulated exactly: products are summed in float64, which is exact while
|sum| < 2**53 (int8 and int16 operands stay far below that), then converted to int64.
"""

from __future__ import annotations

import numpy as np

from lowbit.ops.conv_geometry import Window


def pad_spatial(x: np.ndarray, pads: tuple[int, ...], value=0) -> np.ndarray:
    """Pad the spatial axes (all but the first two) of `x` with constant `value`."""
    n = x.ndim - 2
    if not any(pads):
        return x
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
    return np.pad(x, width, mode="constant", constant_values=value)


def extract_windows(xp: np.ndarray, window: Window, out_dims: tuple[int, ...]) -> np.ndarray:
    """View of shape (N, C, *out_dims, *kernel) over the padded input `xp`.

    Element [n, c, o..., k...] is xp[n, c, o * stride + k * dilation]. No copy is made.
    """
    n_sp = window.rank
    s0, s1 = xp.strides[:2]
    sp_strides = xp.strides[2:]
    shape = xp.shape[:2] + tuple(out_dims) + window.kernel
    strides = (s0, s1) + tuple(sp_strides[i] * window.strides[i] for i in range(n_sp)) + tuple(
        sp_strides[i] * window.dilations[i] for i in range(n_sp))
    return np.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides, writeable=False)


def conv_nd(x: np.ndarray, w: np.ndarray, window: Window, group: int,
            pad_value=0) -> np.ndarray:
    """Grouped N-d convolution without bias.

    Float inputs return float of the promoted input dtype (accumulated in float32 at least);
    integer inputs return the exact int64 accumulator. `pad_value` fills padding (the zero
    point for quantized inputs).
    """
    integer = x.dtype.kind in "iu"
    acc = np.float64 if (integer or x.dtype == np.float64) else np.float32
    xa = x.astype(acc, copy=False)
    wa = w.astype(acc, copy=False)
    spatial = x.shape[2:]
    pads = window.resolved_pads(spatial)
    xp = pad_spatial(xa, pads, pad_value)
    out_dims = tuple(int(d) for d in window.output_dims(spatial))  # type: ignore[arg-type]
    cols = extract_windows(xp, window, out_dims)
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    nsp = window.rank
    kprod = int(np.prod(window.kernel))
    opos = int(np.prod(out_dims)) if out_dims else 1
    # (N, G, Cg, O..., K...) -> (N, G, O, Cg*K)
    cols = cols.reshape((n, group, cg) + out_dims + window.kernel)
    perm = (0, 1) + tuple(range(3, 3 + nsp)) + (2,) + tuple(range(3 + nsp, 3 + 2 * nsp))
    cols = np.ascontiguousarray(cols.transpose(perm)).reshape(n, group, opos, cg * kprod)
    wg = wa.reshape(group, mg, cg * kprod)
    y = np.matmul(cols, wg.transpose(0, 2, 1))  # (N, G, O, Mg)
    y = y.transpose(0, 1, 3, 2).reshape((n, m) + out_dims)
    if integer:
        return np.rint(y).astype(np.int64)
    return y
