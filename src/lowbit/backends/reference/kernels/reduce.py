"""Reference kernels of the reductions (lowbit.ops.reduce).

Floats reduce in float64 and round once to the input dtype; ReduceMax/ReduceMin are exact in
every dtype; integer sums, products and sums of squares wrap in the input's width.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lowbit.backends.reference.floatmath import narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError
from lowbit.ops.reduce import reduce_axes

Reduction = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def reduction(op_type: str) -> Callable[[Reduction], Reduction]:
    """Register `fn(x, axes, keepdims)` as the kernel of the Reduce op `op_type`; it sees the
    resolved axes (never empty unless X is a scalar)."""

    def deco(fn: Reduction) -> Reduction:
        def run(node, inputs):
            x = inputs[0]
            axes_in = inputs[1] if len(inputs) > 1 else None
            axes = reduce_axes(node, x.ndim, axes_in)
            if axes is None:
                if node.attrs["noop_with_empty_axes"]:
                    return [x]
                axes = tuple(range(x.ndim))
            with np.errstate(all="ignore"):
                y = fn(x, axes, bool(node.attrs["keepdims"]))
            return [np.asarray(y).astype(x.dtype, copy=False)]

        kernel(op_type)(run)
        return fn

    return deco


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


@reduction("ReduceSum")
def reduce_sum(x, axes, keep):
    if _is_int(x):
        return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)
    return np.sum(x.astype(np.float64), axis=axes, keepdims=keep)


@reduction("ReduceMean")
def reduce_mean(x, axes, keep):
    if not _is_int(x):
        return np.mean(x.astype(np.float64), axis=axes, keepdims=keep)
    count = int(np.prod([x.shape[a] for a in axes]))
    if count == 0:
        raise KernelError("integer ReduceMean over an empty set has no value")
    wide = np.uint64 if x.dtype.kind == "u" else np.int64
    total = np.sum(x, axis=axes, keepdims=keep, dtype=wide)
    quotient = np.abs(total) // wide(count)
    return np.where(total < 0, -quotient, quotient) if x.dtype.kind == "i" else quotient


def _extreme(x: np.ndarray, axes, keep, largest: bool) -> np.ndarray:
    xc = widen(x)
    if xc.dtype == np.bool_:
        initial = not largest
    elif _is_int(xc):
        info = np.iinfo(xc.dtype)
        initial = info.min if largest else info.max
    else:
        initial = -np.inf if largest else np.inf
    fn = np.max if largest else np.min
    return narrow(fn(xc, axis=axes, keepdims=keep, initial=initial), x.dtype)


@reduction("ReduceMax")
def reduce_max(x, axes, keep):
    return _extreme(x, axes, keep, largest=True)


@reduction("ReduceMin")
def reduce_min(x, axes, keep):
    return _extreme(x, axes, keep, largest=False)


@reduction("ReduceProd")
def reduce_prod(x, axes, keep):
    if _is_int(x):
        return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)
    return np.prod(x.astype(np.float64), axis=axes, keepdims=keep)


@reduction("ReduceL1")
def reduce_l1(x, axes, keep):
    if _is_int(x):
        return np.sum(np.abs(x), axis=axes, keepdims=keep, dtype=x.dtype)
    return np.sum(np.abs(x.astype(np.float64)), axis=axes, keepdims=keep)


@reduction("ReduceL2")
def reduce_l2(x, axes, keep):
    xf = x.astype(np.float64)
    y = np.sqrt(np.sum(xf * xf, axis=axes, keepdims=keep))
    return np.trunc(y) if _is_int(x) else y


@reduction("ReduceSumSquare")
def reduce_sum_square(x, axes, keep):
    if _is_int(x):
        return np.sum(x * x, axis=axes, keepdims=keep, dtype=x.dtype)
    xf = x.astype(np.float64)
    return np.sum(xf * xf, axis=axes, keepdims=keep)


@reduction("ReduceLogSum")
def reduce_log_sum(x, axes, keep):
    return np.log(np.sum(x.astype(np.float64), axis=axes, keepdims=keep))


@reduction("ReduceLogSumExp")
def reduce_log_sum_exp(x, axes, keep):
    xf = x.astype(np.float64)
    m = np.max(xf, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(m), m, 0.0)
    y = np.log(np.sum(np.exp(xf - shift), axis=axes, keepdims=True)) + shift
    return y if keep else np.squeeze(y, axis=axes)


def _arg_kernel(largest: bool):
    def run(node, inputs):
        (x,) = inputs
        axis = node.attrs["axis"] % x.ndim
        xc = widen(x)
        fn = np.argmax if largest else np.argmin
        if node.attrs["select_last_index"]:
            idx = x.shape[axis] - 1 - fn(np.flip(xc, axis=axis), axis=axis)
        else:
            idx = fn(xc, axis=axis)
        if node.attrs["keepdims"]:
            idx = np.expand_dims(idx, axis)
        return [np.asarray(idx, dtype=np.int64)]

    return run


kernel("ArgMax")(_arg_kernel(largest=True))
kernel("ArgMin")(_arg_kernel(largest=False))
