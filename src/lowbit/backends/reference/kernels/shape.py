"""Reference kernels of the shape ops and generators (lowbit.ops.shape)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError
from lowbit.ir import dtypes
from lowbit.ops.shape import range_count, shape_slice


@kernel("Shape")
def shape(node, inputs):
    (x,) = inputs
    start, end = shape_slice(x.ndim, node.attrs["start"], node.attrs.get("end"))
    return [np.array(x.shape[start:end], dtype=np.int64)]


@kernel("Size")
def size(node, inputs):
    return [np.array(inputs[0].size, dtype=np.int64)]


@kernel("ConstantOfShape")
def constant_of_shape(node, inputs):
    dims = [int(d) for d in inputs[0]]
    if any(d < 0 for d in dims):
        raise KernelError(f"shape {dims} has a negative size")
    value = node.attrs.get("value")
    if value is None:
        value = np.zeros((), dtype=np.float32)
    return [np.broadcast_to(value.reshape(()), dims).copy()]


_STASH = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


@kernel("Range")
def range_(node, inputs):
    start, limit, delta = (x.reshape(()) for x in inputs)
    dtype = start.dtype
    if dtype.kind in "iu":
        a, b, d = int(start), int(limit), int(delta)
        if d == 0:
            raise KernelError("delta must not be 0")
        n = range_count(a, b, d)
        return [(a + np.arange(n, dtype=np.int64) * d).astype(dtype)]
    wide = dtype in _STASH.values()
    compute = np.dtype(np.float64) if wide else _STASH[node.attrs.get("stash_type", 1)]
    a, b, d = (compute.type(x.astype(compute)) for x in (start, limit, delta))
    if d == 0:
        raise KernelError("delta must not be 0")
    n = range_count(float(a), float(b), float(d))
    return [(a + np.arange(n, dtype=compute) * d).astype(dtype)]


@kernel("EyeLike")
def eye_like(node, inputs):
    (x,) = inputs
    code = node.attrs.get("dtype")
    dtype = x.dtype if code is None else dtypes.from_onnx(code).np_dtype
    rows, cols = x.shape
    return [np.eye(rows, cols, k=node.attrs["k"]).astype(dtype)]
