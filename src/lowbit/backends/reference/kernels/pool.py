"""Reference kernels of the pools (lowbit.ops.pool).

Windows are strided views over the input padded with the begin/end pads plus, in ceil_mode,
the overhang the last window needs at the end. MaxPool is exact in every dtype; average and
Lp pools sum in float64 and round once to X's dtype.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.floatmath import narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.windows import extract_windows, pad_spatial
from lowbit.ops.conv_geometry import Window
from lowbit.ops.pool import pool_window


class Windows:
    """The windows of a pool over `x` (padded with `fill`), and the geometry behind them."""

    def __init__(self, x: np.ndarray, window: Window, fill) -> None:
        spatial = x.shape[2:]
        n = window.rank
        pads = window.resolved_pads(spatial)
        out = tuple(int(d) for d in window.output_dims(spatial))  # type: ignore[arg-type]
        ends = []
        for a in range(n):
            need = (out[a] - 1) * window.strides[a] + window.dilations[a] * (
                window.kernel[a] - 1) + 1
            ends.append(pads[a + n] + max(0, need - (spatial[a] + pads[a] + pads[a + n])))
        self.window, self.pads, self.out, self.spatial = window, pads, out, spatial
        self.full_pads = tuple(pads[:n]) + tuple(ends)
        self.views = extract_windows(pad_spatial(x, self.full_pads, fill), window, out)

    @property
    def kernel_axes(self) -> tuple[int, ...]:
        n = self.window.rank
        return tuple(range(2 + n, 2 + 2 * n))

    def counts(self, include_pad: bool) -> np.ndarray:
        """Per output position, how many window elements count as the mean's divisor: those
        inside the input, plus the explicit pads with `include_pad`."""
        n = self.window.rank
        mask = np.ones((1, 1) + tuple(self.spatial))
        if include_pad:
            overhang = (0,) * n + tuple(f - p for f, p in zip(self.full_pads[n:], self.pads[n:],
                                                             strict=True))
            mask = pad_spatial(pad_spatial(mask, self.pads, 1.0), overhang, 0.0)
        else:
            mask = pad_spatial(mask, self.full_pads, 0.0)
        return extract_windows(mask, self.window, self.out).sum(axis=self.kernel_axes)


def _lowest(dtype: np.dtype):
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


@kernel("MaxPool")
def max_pool(node, inputs):
    (x,) = inputs
    xc = widen(x)
    win = Windows(xc, pool_window(node, x.ndim - 2), _lowest(xc.dtype))
    y = narrow(win.views.max(axis=win.kernel_axes), x.dtype)
    if len(node.outputs) < 2:
        return [y]
    return [y, _argmax_indices(win, x.shape, int(node.attrs["storage_order"]))]


def _argmax_indices(win: Windows, shape: tuple[int, ...], storage_order: int) -> np.ndarray:
    """Flat indices into X of each window's first maximum."""
    w = win.window
    n_sp = w.rank
    flat = win.views.reshape(win.views.shape[:2 + n_sp] + (-1,)).argmax(axis=-1)
    offsets = np.unravel_index(flat, w.kernel)
    grid = np.indices(flat.shape, sparse=True)
    spatial = shape[2:]
    order = range(n_sp) if storage_order == 0 else reversed(range(n_sp))
    pos = np.zeros(flat.shape, np.int64)
    for a in order:
        coord = grid[2 + a] * w.strides[a] + offsets[a] * w.dilations[a] - win.pads[a]
        pos = pos * spatial[a] + coord
    plane = int(np.prod(spatial))
    return (grid[0] * shape[1] + grid[1]) * plane + pos


@kernel("AveragePool")
def average_pool(node, inputs):
    (x,) = inputs
    win = Windows(x.astype(np.float64), pool_window(node, x.ndim - 2), 0.0)
    total = win.views.sum(axis=win.kernel_axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return [(total / win.counts(bool(node.attrs["count_include_pad"]))).astype(x.dtype)]


@kernel("LpPool")
def lp_pool(node, inputs):
    (x,) = inputs
    p = int(node.attrs["p"])
    win = Windows(np.abs(x.astype(np.float64)) ** p, pool_window(node, x.ndim - 2), 0.0)
    return [(win.views.sum(axis=win.kernel_axes) ** (1 / p)).astype(x.dtype)]


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
