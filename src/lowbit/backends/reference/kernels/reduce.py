"""Reference kernels of the reductions: floats accumulate in float64 and round once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.ops.reduce import reduced_axes

_FLOAT_REDUCERS: dict[str, Callable] = {
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceLogSumExp": lambda x, a, k: _logsumexp(x, a, k),
}


def _logsumexp(x: np.ndarray, axes, keep: bool) -> np.ndarray:
    m = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros((1,) * x.ndim)
    m = np.where(np.isfinite(m), m, 0.0)
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return s if keep else np.squeeze(s, axis=axes)


def _axes(node, inputs) -> tuple[int, ...]:
    """The reduced axes, from the constant input or (at run time) from the axes tensor; ()
    means no reduction."""
    x = inputs[0]
    axes = reduced_axes(node, x.ndim)
    if axes is not None:
        return axes
    given = tuple(sorted({int(a) % x.ndim for a in inputs[1].reshape(-1)}))
    if not given and not node.attrs.get("noop_with_empty_axes"):
        return tuple(range(x.ndim))
    return given


def _make(op_type: str, fn: Callable) -> None:
    @kernel(op_type)
    def run(node, inputs):
        x, axes, keep = inputs[0], _axes(node, inputs), bool(node.attrs["keepdims"])
        if not axes:
            return [x.copy()]
        if x.dtype.kind == "f" or x.dtype.kind == "V":
            work = x.astype(np.float64)
        else:
            work = x.astype(np.int64) if x.dtype.kind in "iu" else x
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = fn(work, axes, keep)
        return [np.asarray(y).astype(x.dtype)]


for _op, _fn in _FLOAT_REDUCERS.items():
    _make(_op, _fn)


def _extreme(op_type: str, fn: Callable, empty) -> None:
    @kernel(op_type)
    def run(node, inputs):
        x, axes, keep = inputs[0], _axes(node, inputs), bool(node.attrs["keepdims"])
        if not axes:
            return [x.copy()]
        if any(x.shape[a] == 0 for a in axes):
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
                tuple(d for i, d in enumerate(x.shape) if i not in axes)
            return [np.full(shape, empty(x.dtype), dtype=x.dtype)]
        return [fn(x, axis=axes, keepdims=keep).astype(x.dtype)]


def _lowest(dtype):
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _highest(dtype):
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


_extreme("ReduceMax", np.max, _lowest)
_extreme("ReduceMin", np.min, _highest)


def _arg(op_type: str, fn: Callable) -> None:
    @kernel(op_type)
    def run(node, inputs):
        x = inputs[0]
        axis = int(node.attrs["axis"]) % x.ndim
        if node.attrs.get("select_last_index"):
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        if node.attrs["keepdims"]:
            idx = np.expand_dims(idx, axis)
        return [idx.astype(np.int64)]


_arg("ArgMax", np.argmax)
_arg("ArgMin", np.argmin)
