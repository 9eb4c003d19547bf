"""Reference kernels of the pools (lowbit.ops.pool).

Windows are strided views over the input padded with the begin/end pads plus, in ceil_mode,
the overhang the last window needs at the end (padding that never counts). MaxPool is exact in
every dtype; average and Lp pools sum in float64 and round once to X's dtype.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.floatmath import narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.windows import extract_windows, pad_spatial
from lowbit.ops.conv_geometry import Window
from lowbit.ops.pool import pool_window


def pool_geometry(node, x: np.ndarray
                  ) -> tuple[Window, tuple[int, ...], tuple[int, ...], list[int], tuple[int, ...]]:
    """(window, pads, output dims, ceil_mode overhang at the end of each axis, full pads =
    pads with the overhang added to the ends) of a pooling node over `x`."""
    nsp = x.ndim - 2
    window = pool_window(node, nsp)
    spatial = x.shape[2:]
    pads = window.resolved_pads(spatial)
    out_dims = tuple(int(d) for d in window.output_dims(spatial))  # type: ignore[arg-type]
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (i + pads[a] + pads[a + nsp]))
             for a, (o, s, d, k, i) in enumerate(zip(out_dims, window.strides, window.dilations,
                                                     window.kernel, spatial, strict=True))]
    full = tuple(pads[:nsp]) + tuple(p + e for p, e in zip(pads[nsp:], extra, strict=True))
    return window, pads, out_dims, extra, full


def _kernel_axes(nsp: int) -> tuple[int, ...]:
    return tuple(range(2 + nsp, 2 + 2 * nsp))


def window_counts(node, x: np.ndarray, window: Window, pads, out_dims, extra) -> np.ndarray:
    """How many elements each AveragePool window averages: input positions, plus the explicit
    (or SAME_*) padding with count_include_pad, never the overhang ceil_mode adds."""
    nsp = x.ndim - 2
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
    counted = pad_spatial(ones, pads, 1 if node.attrs.get("count_include_pad", 0) else 0)
    counted = pad_spatial(counted, (0,) * nsp + tuple(extra), 0)
    return extract_windows(counted, window, out_dims).sum(axis=_kernel_axes(nsp))


def _windows(node, x: np.ndarray, fill):
    """(windows view (N, C, O..., K...), window, pads, out dims) of a pool over `x`."""
    window, pads, out_dims, _, full = pool_geometry(node, x)
    return extract_windows(pad_spatial(x, full, fill), window, out_dims), window, pads, out_dims


def _lowest(dtype: np.dtype):
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


@kernel("MaxPool")
def max_pool(node, inputs):
    (x,) = inputs
    xc = widen(x)
    nsp = x.ndim - 2
    views, window, pads, _ = _windows(node, xc, _lowest(xc.dtype))
    y = narrow(views.max(axis=_kernel_axes(nsp)), x.dtype)
    if len(node.outputs) < 2:
        return [y]
    return [y, _argmax_indices(views, window, pads, x.shape, int(node.attrs["storage_order"]))]


def _argmax_indices(views: np.ndarray, w: Window, pads, shape: tuple[int, ...],
                    storage_order: int) -> np.ndarray:
    """Flat indices into X of each window's first maximum: row-major, or with the spatial
    axes column-major for storage_order 1."""
    n_sp = w.rank
    flat = views.reshape(views.shape[:2 + n_sp] + (-1,)).argmax(axis=-1)
    offsets = np.unravel_index(flat, w.kernel)
    grid = np.indices(flat.shape, sparse=True)
    spatial = shape[2:]
    order = range(n_sp) if storage_order == 0 else reversed(range(n_sp))
    pos = np.zeros(flat.shape, np.int64)
    for a in order:
        coord = grid[2 + a] * w.strides[a] + offsets[a] * w.dilations[a] - pads[a]
        pos = pos * spatial[a] + coord
    plane = int(np.prod(spatial))
    return (grid[0] * shape[1] + grid[1]) * plane + pos


@kernel("AveragePool")
def average_pool(node, inputs):
    (x,) = inputs
    nsp = x.ndim - 2
    window, pads, out_dims, extra, full = pool_geometry(node, x)
    total = extract_windows(pad_spatial(x.astype(np.float64), full, 0.0), window,
                            out_dims).sum(axis=_kernel_axes(nsp))
    counts = window_counts(node, x, window, pads, out_dims, extra)
    with np.errstate(invalid="ignore", divide="ignore"):
        return [(total / counts).astype(x.dtype)]


@kernel("LpPool")
def lp_pool(node, inputs):
    (x,) = inputs
    p = int(node.attrs["p"])
    views = _windows(node, np.abs(x.astype(np.float64)) ** p, 0.0)[0]
    return [(views.sum(axis=_kernel_axes(x.ndim - 2)) ** (1 / p)).astype(x.dtype)]


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@kernel("GlobalAveragePool")
def global_average_pool(node, inputs):
    (x,) = inputs
    return [x.astype(np.float64).mean(axis=_spatial_axes(x), keepdims=True).astype(x.dtype)]


@kernel("GlobalMaxPool")
def global_max_pool(node, inputs):
    (x,) = inputs
    return [narrow(widen(x).max(axis=_spatial_axes(x), keepdims=True), x.dtype)]


@kernel("GlobalLpPool")
def global_lp_pool(node, inputs):
    (x,) = inputs
    p = int(node.attrs["p"])
    total = (np.abs(x.astype(np.float64)) ** p).sum(axis=_spatial_axes(x), keepdims=True)
    return [(total ** (1 / p)).astype(x.dtype)]
