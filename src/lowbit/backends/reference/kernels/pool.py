"""Reference kernels of pooling. Windows are strided views over the padded input; positions
beyond the input that ceil_mode adds are padding that never counts."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.windows import extract_windows, pad_spatial
from lowbit.ops.pool import pool_window


def pool_geometry(node, x: np.ndarray):
    """(window, pads, output dims, extra end padding for ceil_mode, full pads) of a pool."""
    nsp = x.ndim - 2
    window = pool_window(node, nsp)
    spatial = x.shape[2:]
    pads = window.resolved_pads(spatial)
    out_dims = tuple(int(d) for d in window.output_dims(spatial))
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (i + pads[a] + pads[a + nsp]))
             for a, (o, s, d, k, i) in enumerate(zip(out_dims, window.strides, window.dilations,
                                                     window.kernel, spatial, strict=True))]
    full = tuple(pads[:nsp]) + tuple(p + e for p, e in zip(pads[nsp:], extra, strict=True))
    return window, pads, out_dims, extra, full


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@kernel("MaxPool")
def max_pool(node, inputs):
    x = inputs[0]
    nsp = x.ndim - 2
    window, pads, out_dims, _, full = pool_geometry(node, x)
    work = x.astype(np.float32) if x.dtype.kind == "f" and x.dtype != np.float64 else x
    xp = pad_spatial(work, full, _lowest(work.dtype))
    cols = extract_windows(xp, window, out_dims)
    flat = cols.reshape(cols.shape[: 2 + nsp] + (-1,))
    best = flat.argmax(axis=-1)
    y = np.take_along_axis(flat, best[..., None], axis=-1)[..., 0].astype(x.dtype)
    outputs = [y]
    if len(node.outputs) > 1:
        outputs.append(_indices(node, x, window, pads, out_dims, best))
    return outputs


def _indices(node, x, window, pads, out_dims, best) -> np.ndarray:
    nsp = x.ndim - 2
    kpos = np.unravel_index(best, window.kernel)
    grids = np.meshgrid(*[np.arange(o) for o in out_dims], indexing="ij")
    coords = [grids[a] * window.strides[a] + kpos[a] * window.dilations[a] - pads[a]
              for a in range(nsp)]
    spatial = x.shape[2:]
    n, c = x.shape[:2]
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]).reshape(
        (n, c) + (1,) * nsp) * int(np.prod(spatial))
    if node.attrs.get("storage_order", 0):
        index = np.zeros_like(best)
        stride = 1
        for a in range(nsp):
            index = index + coords[a] * stride
            stride *= spatial[a]
    else:
        index = np.ravel_multi_index(tuple(coords), spatial, mode="clip") if nsp else 0
    return (base + index).astype(np.int64)


@kernel("AveragePool")
def average_pool(node, inputs):
    x = inputs[0]
    nsp = x.ndim - 2
    window, pads, out_dims, extra, full = pool_geometry(node, x)
    axes = tuple(range(2 + nsp, 2 + 2 * nsp))
    sums = extract_windows(pad_spatial(x.astype(np.float64), full, 0.0), window,
                           out_dims).sum(axis=axes)
    counts = window_counts(node, x, window, pads, out_dims, extra)
    return [(sums / counts).astype(x.dtype)]


def window_counts(node, x: np.ndarray, window, pads, out_dims, extra) -> np.ndarray:
    """How many elements each AveragePool window averages: input positions, plus padding with
    count_include_pad, never the positions ceil_mode adds."""
    nsp = x.ndim - 2
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
    counted = pad_spatial(ones, pads, 1 if node.attrs.get("count_include_pad", 0) else 0)
    counted = pad_spatial(counted, (0,) * nsp + tuple(extra), 0)
    return extract_windows(counted, window, out_dims).sum(axis=tuple(range(2 + nsp, 2 + 2 * nsp)))


@kernel("GlobalAveragePool")
def global_average_pool(node, inputs):
    x = inputs[0]
    axes = tuple(range(2, x.ndim))
    return [x.astype(np.float64).mean(axis=axes, keepdims=True).astype(x.dtype)]


@kernel("GlobalMaxPool")
def global_max_pool(node, inputs):
    x = inputs[0]
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
