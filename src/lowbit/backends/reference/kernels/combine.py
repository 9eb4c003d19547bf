"""Reference kernels of Concat, Split, Slice, Tile, Expand and Pad (lowbit.ops.combine):
element copies, exact for every dtype."""

from __future__ import annotations

import itertools

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError
from lowbit.ops.combine import split_sizes
from lowbit.ops.symbolic import clamped_slice


@kernel("Concat")
def concat(node, inputs):
    return [np.concatenate(inputs, axis=node.attrs["axis"])]


@kernel("Split")
def split(node, inputs):
    x = inputs[0]
    axis = node.attrs["axis"] % x.ndim
    if len(inputs) > 1 and inputs[1] is not None:
        sizes = [int(s) for s in inputs[1]]
        if len(sizes) != len(node.outputs) or sum(sizes) != x.shape[axis] or min(sizes) < 0:
            raise KernelError(f"split {sizes} does not divide dimension {x.shape[axis]} into "
                              f"{len(node.outputs)} parts")
    else:
        sizes = split_sizes(node, x.shape[axis], len(node.outputs))
    bounds = np.cumsum([0, *sizes])
    return [x[(slice(None),) * axis + (slice(int(lo), int(hi)),)].copy()
            for lo, hi in itertools.pairwise(bounds)]


@kernel("Slice")
def slice_(node, inputs):
    data, starts, ends = inputs[:3]
    axes = inputs[3] if len(inputs) > 3 else None
    steps = inputs[4] if len(inputs) > 4 else None
    axes = range(len(starts)) if axes is None else [int(a) % data.ndim for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    index = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        if step == 0:
            raise KernelError("steps must not be 0")
        index[axis] = clamped_slice(int(start), int(end), step, data.shape[axis])
    return [data[tuple(index)].copy()]


@kernel("Tile")
def tile(node, inputs):
    x, repeats = inputs
    return [np.tile(x, [int(r) for r in repeats])]


@kernel("Expand")
def expand(node, inputs):
    x, shape = inputs
    out = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))
    return [np.broadcast_to(x, out).copy()]


_NUMPY_MODES = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@kernel("Pad")
def pad(node, inputs):
    data, pads = inputs[:2]
    value = inputs[2] if len(inputs) > 2 else None
    axes = inputs[3] if len(inputs) > 3 else None
    rank = data.ndim
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    pads = [int(p) for p in pads]
    n = len(axes)
    if len(pads) != 2 * n:
        raise KernelError(f"pads has {len(pads)} elements for {n} axes")
    crop = [slice(None)] * rank
    widths = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        begin, end = pads[i], pads[n + i]
        crop[axis] = slice(max(-begin, 0), data.shape[axis] - max(-end, 0))
        widths[axis] = (max(begin, 0), max(end, 0))
    data = data[tuple(crop)]
    mode = node.attrs["mode"]
    if mode == "constant":
        fill = np.zeros((), data.dtype) if value is None else value.reshape(())
        out = np.full(tuple(d + b + e for d, (b, e) in zip(data.shape, widths, strict=True)),
                      fill, dtype=data.dtype)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(data.shape, widths, strict=True))] = data
        return [out]
    for axis, (b, e) in enumerate(widths):
        if (b or e) and data.shape[axis] == 0:
            raise KernelError(f"cannot pad an empty dimension {axis} in {mode} mode")
        if mode == "reflect" and max(b, e) >= data.shape[axis]:
            raise KernelError(f"reflect pads {b, e} must be smaller than dimension {axis} of "
                              f"size {data.shape[axis]}")
    return [np.pad(data, widths, mode=_NUMPY_MODES[mode])]
