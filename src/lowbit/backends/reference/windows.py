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
    """Grouped N-d convolution without bias, accumulated in float64.

    Float inputs give the float64 result (to be rounded once to the output dtype by the
    caller); integer inputs give the exact int64 accumulator. `pad_value` fills padding (the
    zero point for quantized inputs). Depthwise-like convolutions (one input channel per
    group) sum over kernel offsets; the others multiply an im2col matrix per image.
    """
    integer = x.dtype.kind in "iu"
    spatial = x.shape[2:]
    pads = window.resolved_pads(spatial)
    xp = pad_spatial(x.astype(np.float64, copy=False), pads, pad_value)
    wa = w.astype(np.float64, copy=False)
    out_dims = tuple(int(d) for d in window.output_dims(spatial))  # type: ignore[arg-type]
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    kprod = int(np.prod(window.kernel))
    opos = int(np.prod(out_dims))
    if cg == 1:
        y = _conv_one_channel_per_group(xp, wa.reshape(group, mg, kprod), window, out_dims)
    else:
        nsp = window.rank
        # (N, C, O..., K...) -> (N, C, K..., O...) -> per image (G, Cg*K, O)
        perm = (0, 1) + tuple(range(2 + nsp, 2 + 2 * nsp)) + tuple(range(2, 2 + nsp))
        cols = extract_windows(xp, window, out_dims).transpose(perm)
        wg = wa.reshape(group, mg, cg * kprod)
        y = np.empty((n, group, mg, opos))
        for i in range(n):
            y[i] = np.matmul(wg, cols[i].reshape(group, cg * kprod, opos))
    y = y.reshape((n, m) + out_dims)
    if integer:
        return np.rint(y).astype(np.int64)
    return y


def _conv_one_channel_per_group(xp: np.ndarray, wg: np.ndarray, window: Window,
                                out_dims: tuple[int, ...]) -> np.ndarray:
    """Convolution with C / group = 1 (depthwise when M = C): for each kernel offset, a
    strided view of the padded input times one weight per output channel, summed in float64.
    `wg` is (G, Mg, K); the result is (N, G, Mg, O...)."""
    n, g = xp.shape[:2]
    y = np.zeros((n, g, wg.shape[1]) + out_dims)
    for kidx, offset in enumerate(np.ndindex(*window.kernel)):
        view = xp[(slice(None), slice(None)) + tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, s, o in
            zip(offset, window.dilations, window.strides, out_dims, strict=True))]
        wk = wg[:, :, kidx].reshape((1, g, -1) + (1,) * len(out_dims))
        y += view[:, :, None] * wk
    return y


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, strides: tuple[int, ...],
                      dilations: tuple[int, ...], group: int, begins: tuple[int, ...],
                      out_dims: tuple[int, ...]) -> np.ndarray:
    """Grouped N-d transposed convolution without bias, in float64.

    The full output has size s * (i - 1) + d * (k - 1) + 1 per axis; each input element times
    the kernel is added at offset i * s (col2im). The result is the window of the full output
    starting at `begins` with sizes `out_dims`, zero where it runs past the full output.
    """
    n, c = x.shape[:2]
    in_dims = x.shape[2:]
    kernel = w.shape[2:]
    mg = w.shape[1]
    cg = c // group
    kprod = int(np.prod(kernel))
    ipos = int(np.prod(in_dims))
    xa = x.astype(np.float64, copy=False).reshape(n, group, cg, ipos)
    wg = w.astype(np.float64, copy=False).reshape(group, cg, mg * kprod).transpose(0, 2, 1)
    cols = np.matmul(wg, xa).reshape((n, group * mg, kprod) + in_dims)
    full_dims = tuple(s * (i - 1) + d * (k - 1) + 1
                      for i, k, s, d in zip(in_dims, kernel, strides, dilations, strict=True))
    full = np.zeros((n, group * mg) + full_dims)
    for kidx, offset in enumerate(np.ndindex(*kernel)):
        region = tuple(slice(k * d, k * d + (i - 1) * s + 1, s) for k, d, s, i in
                       zip(offset, dilations, strides, in_dims, strict=True))
        full[(slice(None), slice(None)) + region] += cols[:, :, kidx]
    y = np.zeros((n, group * mg) + tuple(out_dims))
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for b, o, f in zip(begins, out_dims, full_dims, strict=True):
        stop = min(b + o, f)
        src.append(slice(b, max(b, stop)))
        dst.append(slice(0, max(0, stop - b)))
    y[tuple(dst)] = full[tuple(src)]
    return y
