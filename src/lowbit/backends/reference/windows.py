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
    caller; it may be a transposed view of a channels-last array); integer inputs give the
    exact int64 accumulator, C-contiguous. `pad_value` fills padding (the zero point for
    quantized inputs). Depthwise-like convolutions (one input channel per group) add the
    kernel offsets' products one offset after another, starting from 0
    (`_conv_one_channel_per_group`); the others multiply an im2col matrix per image (one
    float64 matrix product per group).
    """
    integer = x.dtype.kind in "iu"
    spatial = x.shape[2:]
    pads = window.resolved_pads(spatial)
    wa = w.astype(np.float64, copy=False)
    out_dims = tuple(int(d) for d in window.output_dims(spatial))  # type: ignore[arg-type]
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    kprod = int(np.prod(window.kernel))
    opos = int(np.prod(out_dims))
    if cg == 1:
        y = _conv_one_channel_per_group(x, pads, pad_value, wa.reshape(group, mg, kprod),
                                        window, out_dims)
    else:
        xp = padded_float64(x, pads, pad_value)
        nsp = window.rank
        # (N, C, O..., K...) -> (N, C, K..., O...) -> per image (G, Cg*K, O)
        perm = (0, 1) + tuple(range(2 + nsp, 2 + 2 * nsp)) + tuple(range(2, 2 + nsp))
        cols = extract_windows(xp, window, out_dims).transpose(perm)
        wg = wa.reshape(group, mg, cg * kprod)
        y = np.empty((n, group, mg, opos))
        for i in range(n):
            np.matmul(wg, cols[i].reshape(group, cg * kprod, opos), out=y[i])
    y = y.reshape((n, m) + out_dims)
    if integer:
        return np.rint(y, out=y).astype(np.int64, order="C")
    return y


def padded_float64(x: np.ndarray, pads: tuple[int, ...], value=0,
                   channels_last: bool = False) -> np.ndarray:
    """`x` in float64 with its spatial axes padded by `value` (`pad_spatial`), converted and
    padded in one copy (none when `x` is float64, unpadded and kept in its layout). With
    `channels_last`, the copy is (N, spatial..., C)."""
    nsp = x.ndim - 2
    if channels_last:
        x = x.transpose((0,) + tuple(range(2, 2 + nsp)) + (1,))
        first = 1
    else:
        first = 2
    if not any(pads) and not channels_last:
        return x.astype(np.float64, copy=False)
    dims = x.shape[first:first + nsp]
    shape = list(x.shape)
    inner = [slice(None)] * x.ndim
    for i, d in enumerate(dims):
        shape[first + i] = d + pads[i] + pads[i + nsp]
        inner[first + i] = slice(pads[i], pads[i] + d)
    xp = np.empty(shape)
    for i in range(nsp):
        edge = [slice(None)] * x.ndim
        if pads[i]:
            edge[first + i] = slice(0, pads[i])
            xp[tuple(edge)] = value
        if pads[i + nsp]:
            edge[first + i] = slice(shape[first + i] - pads[i + nsp], None)
            xp[tuple(edge)] = value
    xp[tuple(inner)] = x
    return xp


def _conv_one_channel_per_group(x: np.ndarray, pads: tuple[int, ...], pad_value,
                                wg: np.ndarray, window: Window,
                                out_dims: tuple[int, ...]) -> np.ndarray:
    """Convolution with C / group = 1 (depthwise when M = C) of `x` padded by `pads`: for
    each kernel offset, a strided view of the padded input times one weight per output
    channel, added in float64 to the sum of the earlier offsets (which starts at 0). `wg`
    is (G, Mg, K); the result is (N, G, Mg, O...).

    Each element's sum is the same in any memory layout; the layout only decides how long
    numpy's inner loops run: along the last output axis in (N, C, O...), along the channels
    channels-last, chosen when there are at least twice as many channels as output columns
    (the result is then a transposed view). The products go through one buffer."""
    n, g = x.shape[:2]
    mg = wg.shape[1]
    rank = len(out_dims)
    channels_last = bool(out_dims) and g * mg >= 2 * out_dims[-1]
    xp = padded_float64(x, pads, pad_value, channels_last)
    if channels_last:
        y = np.zeros((n,) + out_dims + (g, mg))
        weights = np.ascontiguousarray(wg.transpose(2, 0, 1))  # (K, G, Mg)
        lead, tail = (slice(None),), (slice(None), None)
    else:
        y = np.zeros((n, g, mg) + out_dims)
        weights = wg.transpose(2, 0, 1).reshape((-1, 1, g, mg) + (1,) * rank)
        lead, tail = (slice(None), slice(None), None), ()
    products = np.empty_like(y)
    for kidx, offset in enumerate(np.ndindex(*window.kernel)):
        spatial = tuple(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, s, o in
                        zip(offset, window.dilations, window.strides, out_dims, strict=True))
        view = xp[lead[:1] + spatial + tail] if channels_last else \
            xp[lead[:2] + spatial][:, :, None]
        np.multiply(view, weights[kidx], out=products)
        np.add(y, products, out=y)
    if channels_last:
        return y.transpose((0, rank + 1, rank + 2) + tuple(range(1, rank + 1)))
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
