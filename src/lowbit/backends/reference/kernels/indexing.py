"""Reference kernels of the indexing ops (lowbit.ops.indexing). Indices out of range are
refused; scatter reductions combine in the data's dtype (integers wrap around)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.floatmath import narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError


def normalized(indices: np.ndarray, size: int | np.ndarray, what: str = "index"
               ) -> np.ndarray:
    """`indices` (int64) with negative ones counted from the end; out of range is refused."""
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + size, idx)
    bad = (idx < 0) | (idx >= size)
    if np.any(bad):
        first = indices[bad].reshape(-1)[0]
        raise KernelError(f"{what} {first} out of range for size {size}")
    return idx


@kernel("Gather")
def gather(node, inputs):
    data, indices = inputs
    axis = node.attrs["axis"] % data.ndim
    return [np.take(data, normalized(indices, data.shape[axis]), axis=axis)]


@kernel("GatherElements")
def gather_elements(node, inputs):
    data, indices = inputs
    axis = node.attrs["axis"] % data.ndim
    for d, (n, m) in enumerate(zip(indices.shape, data.shape, strict=True)):
        if d != axis and n > m:
            raise KernelError(f"indices shape {indices.shape} exceeds data shape {data.shape}")
    window = data[tuple(slice(0, n) if d != axis else slice(None)
                        for d, n in enumerate(indices.shape))]
    idx = normalized(indices, data.shape[axis])
    return [np.take_along_axis(window, idx, axis=axis)]


@kernel("GatherND")
def gather_nd(node, inputs):
    data, indices = inputs
    b = node.attrs["batch_dims"]
    k = indices.shape[-1]
    batch = data.shape[:b]
    if indices.shape[:b] != batch:
        raise KernelError(f"batch dimensions of data {data.shape} and indices {indices.shape} "
                          "differ")
    n_batch = int(np.prod(batch, dtype=np.int64))
    flat_data = data.reshape((n_batch,) + data.shape[b:])
    tuples = indices.reshape(n_batch, -1, k)
    sizes = np.array(data.shape[b:b + k])
    idx = normalized(tuples, sizes)
    picked = flat_data[(np.arange(n_batch)[:, None],) + tuple(np.moveaxis(idx, -1, 0))]
    return [picked.reshape(indices.shape[:-1] + data.shape[b + k:])]


_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _combine(reduction: str, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    if reduction == "none":
        return new
    with np.errstate(all="ignore"):
        return narrow(_COMBINE[reduction](widen(old), widen(new)), old.dtype)


@kernel("ScatterND")
def scatter_nd(node, inputs):
    data, indices, updates = inputs
    out = data.copy()
    k = indices.shape[-1]
    sizes = np.array(data.shape[:k])
    idx = normalized(indices, sizes).reshape(-1, k)
    ups = updates.reshape((idx.shape[0],) + data.shape[k:])
    reduction = node.attrs["reduction"]
    for i, where in enumerate(idx):
        key = tuple(int(j) for j in where)
        out[key] = _combine(reduction, out[key], ups[i])
    return [out]


@kernel("ScatterElements")
def scatter_elements(node, inputs):
    data, indices, updates = inputs
    axis = node.attrs["axis"] % data.ndim
    out = data.copy()
    idx = normalized(indices, data.shape[axis])
    reduction = node.attrs["reduction"]
    for pos in np.ndindex(*indices.shape):
        target = list(pos)
        target[axis] = int(idx[pos])
        key = tuple(target)
        out[key] = _combine(reduction, out[key], updates[pos])
    return [out]


@kernel("OneHot")
def one_hot(node, inputs):
    indices, depth, values = inputs
    depth = int(depth.reshape(-1)[0])
    if depth < 1:
        raise KernelError(f"depth must be positive, got {depth}")
    idx = np.trunc(indices).astype(np.int64) if indices.dtype.kind == "f" else \
        indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    axis = node.attrs["axis"] % (indices.ndim + 1)
    positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(idx, axis) == positions
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    return [np.where(hot, on, off).astype(values.dtype)]


@kernel("NonZero")
def non_zero(node, inputs):
    (x,) = inputs
    if x.ndim == 0:
        return [np.zeros((0, int(x != 0)), dtype=np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


@kernel("Trilu")
def trilu(node, inputs):
    x = inputs[0]
    k = int(inputs[1].reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None else 0
    rows, cols = x.shape[-2:]
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    keep = (j - i >= k) if node.attrs["upper"] else (j - i <= k)
    return [np.where(keep, x, np.zeros((), x.dtype))]
