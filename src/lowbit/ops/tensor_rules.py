"""Rules shared by the tensor and shape op families (layout, shape, combine, indexing, scan,
resize): integer index inputs, and how quantization parameters follow data that is moved
without being changed.

A quantized tensor moved by a shape-only op (Reshape, Transpose, Slice, Gather, ...) keeps its
integers, so its quantization parameters carry over. Per-tensor parameters carry over as they
are; per-axis ones follow their axis to its new position, are sliced or gathered with it, or the
node is refused when the axis does not survive (merged with another dim by a Reshape, say).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lowbit.errors import UnsupportedError
from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, QuantParams, TensorType
from lowbit.ops.registry import fail
from lowbit.ops.symbolic import dim_mul, dims_equal

INDEX_DTYPES = frozenset({dt.INT32, dt.INT64})


def check_index_dtype(node: Node, index: int, t: TensorType | None,
                      allowed: frozenset[DType] = INDEX_DTYPES) -> None:
    """Refuse input `index` unless it is an integer tensor of an allowed dtype."""
    if t is not None and t.dtype not in allowed:
        names = " or ".join(sorted(d.name for d in allowed))
        raise fail(node, f"input {index} ('{node.inputs[index].name}') has dtype {t.dtype}; "
                         f"{node.op_type} needs {names}")


def refuse_axis(node: Node, q: QuantParams, why: str) -> UnsupportedError:
    return UnsupportedError(
        f"{node.describe()}: the input is quantized per channel along axis {q.axis}, which "
        f"{why}; quantize this tensor per tensor, or along another axis")


def moved_quant(node: Node, q: QuantParams | None, new_axis: int | None, why: str = ""
                ) -> QuantParams | None:
    """`q` with its axis moved to `new_axis`; None as `new_axis` refuses a per-axis `q`."""
    if q is None or q.axis is None:
        return q
    if new_axis is None:
        raise refuse_axis(node, q, why or f"{node.op_type} does not keep")
    return QuantParams(q.scale, q.zero_point, new_axis)


def selected_quant(node: Node, q: QuantParams | None, axis: int, indices: np.ndarray | None
                   ) -> QuantParams | None:
    """`q` after selecting `indices` (a 1-D array) along data axis `axis` (the axis itself
    stays in place); refuses a per-axis `q` along `axis` when the indices are not known."""
    if q is None or q.axis is None or q.axis != axis:
        return q
    if indices is None:
        raise refuse_axis(node, q, f"{node.op_type} selects from with indices not known "
                                   "before run time")
    return QuantParams(q.scale[indices], q.zero_point[indices], axis)


def reshaped_axis(in_shape: Sequence[Dim], out_shape: Sequence[Dim], axis: int) -> int | None:
    """Where dimension `axis` of `in_shape` is in `out_shape` after a row-major reshape, if it
    survives as a dimension of its own (same size, same number of elements before it)."""
    before: Dim = 1
    for d in in_shape[:axis]:
        before = dim_mul(before, d)
    size = in_shape[axis]
    prefix: Dim = 1
    for j, d in enumerate(out_shape):
        if dims_equal(prefix, before) and dims_equal(d, size):
            return j
        prefix = dim_mul(prefix, d)
    return None


def reshaped_quant(node: Node, t: TensorType, out_shape: tuple[Dim, ...] | None
                   ) -> QuantParams | None:
    q = t.quant
    if q is None or q.axis is None:
        return q
    new_axis = None
    if t.shape is not None and out_shape is not None:
        new_axis = reshaped_axis(t.shape, out_shape, q.axis % len(t.shape))
    return moved_quant(node, q, new_axis, "the reshape merges or splits")

