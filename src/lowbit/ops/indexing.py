"""Indexing ops: Gather, GatherND, GatherElements, ScatterND, ScatterElements, OneHot, NonZero,
Trilu.

Indices may be negative (counting from the end of their axis); an index out of range is refused
when the node runs (ONNX leaves it undefined). Gathers copy elements, so a quantized input keeps
its parameters; per-axis ones along the gathered axis are gathered too when the indices are
constant.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, QuantParams, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import NUMERIC, check_dtype, known_types, same_dtype
from lowbit.ops.registry import KEEP, SELECTS, Attr, OpDef, fail, flag, register
from lowbit.ops.shape_values import static_value
from lowbit.ops.symbolic import merge_dim
from lowbit.ops.tensor_rules import INDEX_DTYPES, check_index_dtype, moved_quant, refuse_axis

INT64 = frozenset({dt.INT64})
REDUCTIONS = ("none", "add", "mul", "max", "min")


@register
class Gather(OpDef):
    """output = data indexed along `axis` by `indices`: output shape is
    data.shape[:axis] + indices.shape + data.shape[axis + 1:] (numpy.take)."""

    op_type = "Gather"
    quant_rule = KEEP
    moves_data = SELECTS
    inputs = ("data", "indices")
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        data, indices = known_types(node, in_types)
        assert data is not None and indices is not None
        check_index_dtype(node, 1, indices)
        if data.shape is None or indices.shape is None:
            if data.quant is not None and data.quant.axis is not None:
                raise refuse_axis(node, data.quant, "moves to an unknown position")
            return [TensorType(data.dtype, None, data.quant)]
        if not data.shape:
            raise fail(node, "cannot gather from a scalar")
        axis = normalize_axis(node, node.attrs["axis"], len(data.shape))
        shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
        return [TensorType(data.dtype, shape, self._quant(node, data, indices, axis))]

    def _quant(self, node: Node, data: TensorType, indices: TensorType, axis: int
               ) -> QuantParams | None:
        q = data.quant
        if q is None or q.axis is None:
            return q
        assert data.shape is not None and indices.shape is not None
        q_axis = q.axis % len(data.shape)
        if q_axis < axis:
            return q
        if q_axis > axis:
            return moved_quant(node, q, q_axis + len(indices.shape) - 1)
        picked = node.inputs[1].const_value
        if picked is None or picked.ndim > 1:
            raise refuse_axis(node, q, "is gathered with indices not known before run time")
        picked = np.where(picked < 0, picked + q.channels, picked)
        if picked.ndim == 0:  # one channel is left and its axis disappears
            return QuantParams(q.scale[picked], q.zero_point[picked])
        return QuantParams(q.scale[picked], q.zero_point[picked], axis)


@register
class GatherND(OpDef):
    """output = slices of data addressed by the last dimension of `indices` (of length k): for
    each index tuple in indices[..., :], the slice data[b..., i_0, ..., i_{k-1}], after the
    first `batch_dims` dimensions, which data and indices share. Output shape:
    indices.shape[:-1] + data.shape[batch_dims + k:]."""

    op_type = "GatherND"
    quant_rule = KEEP
    moves_data = SELECTS
    inputs = ("data", "indices")
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"batch_dims": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        data, indices = known_types(node, in_types)
        assert data is not None and indices is not None
        check_index_dtype(node, 1, indices, INT64)
        b = node.attrs["batch_dims"]
        if data.shape is None or indices.shape is None or not isinstance(
                indices.shape[-1] if indices.shape else 0, int):
            if data.quant is not None and data.quant.axis is not None:
                raise refuse_axis(node, data.quant, "moves to an unknown position")
            return [TensorType(data.dtype, None, data.quant)]
        r, q_rank = len(data.shape), len(indices.shape)
        if q_rank < 1 or b < 0 or b >= min(r, q_rank):
            raise fail(node, f"batch_dims {b} must be less than the ranks of data ({r}) and "
                             f"indices ({q_rank})")
        k = indices.shape[-1]
        assert isinstance(k, int)
        if not 1 <= k <= r - b:
            raise fail(node, f"index tuples of length {k} do not fit data of rank {r} after "
                             f"{b} batch dimensions")
        try:
            batch = [merge_dim(x, y) for x, y in zip(data.shape[:b], indices.shape[:b],
                                                    strict=True)]
        except ValueError:
            raise fail(node, f"batch dimensions of data {data.shape} and indices "
                             f"{indices.shape} differ") from None
        shape = tuple(batch) + indices.shape[b:-1] + data.shape[b + k:]
        q = data.quant
        if q is not None and q.axis is not None:
            axis = q.axis % r
            if b <= axis < b + k:
                raise refuse_axis(node, q, "is indexed by GatherND")
            q = moved_quant(node, q, axis if axis < b else axis - b - k + q_rank - 1)
        return [TensorType(data.dtype, shape, q)]


@register
class GatherElements(OpDef):
    """output[i][j][k] = data[index][j][k] for axis 0, where index = indices[i][j][k] (likewise
    for other axes): output has the shape of indices, which has data's rank."""

    op_type = "GatherElements"
    quant_rule = KEEP
    moves_data = SELECTS
    inputs = ("data", "indices")
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        data, indices = known_types(node, in_types)
        assert data is not None and indices is not None
        check_index_dtype(node, 1, indices)
        if data.rank is not None and indices.rank is not None and data.rank != indices.rank:
            raise fail(node, f"indices have rank {indices.rank}, data {data.rank}; they must "
                             "be equal")
        q = data.quant
        if q is not None and q.axis is not None:
            rank = data.rank or indices.rank
            if rank is None or q.axis % rank == node.attrs["axis"] % rank or (
                    indices.shape is None or indices.shape[q.axis] != q.channels):
                raise refuse_axis(node, q, "is indexed by GatherElements")
        if data.rank is not None:
            normalize_axis(node, node.attrs["axis"], data.rank)
        return [TensorType(data.dtype, indices.shape, q)]


class _Scatter(OpDef):
    inputs = ("data", "indices", "updates")
    outputs = ("output",)

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs["reduction"] not in REDUCTIONS:
            raise fail(node, f"reduction must be one of {', '.join(REDUCTIONS)}, got "
                             f"{node.attrs['reduction']!r}")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        data, indices, updates = known_types(node, in_types)
        assert data is not None and indices is not None and updates is not None
        same_dtype(node, in_types, (0, 2))
        check_index_dtype(node, 1, indices, self.index_dtypes)
        self.check_shapes(node, data, indices, updates)
        copies = node.attrs["reduction"] == "none" and updates.quant == data.quant
        return [TensorType(data.dtype, data.shape, data.quant if copies else None)]

    index_dtypes: ClassVar[frozenset] = INDEX_DTYPES

    def check_shapes(self, node: Node, data: TensorType, indices: TensorType,
                     updates: TensorType) -> None:
        """Refuse statically known shape mismatches."""


@register
class ScatterND(_Scatter):
    """output = a copy of data where, for each index tuple indices[i..., :] (of length k), the
    slice output[index] is set to updates[i...] (reduction none) or combined with it by
    add/mul/max/min, in row-major order of the index tuples (so later duplicates win)."""

    op_type = "ScatterND"
    attrs: ClassVar[dict[str, Attr]] = {"reduction": Attr("string", "none")}
    index_dtypes = INT64

    def check_shapes(self, node: Node, data: TensorType, indices: TensorType,
                     updates: TensorType) -> None:
        if data.shape is None or indices.shape is None or updates.shape is None:
            return
        k = indices.shape[-1] if indices.shape else None
        if not isinstance(k, int):
            return
        if k > len(data.shape):
            raise fail(node, f"index tuples of length {k} exceed the data rank "
                             f"{len(data.shape)}")
        expected = indices.shape[:-1] + data.shape[k:]
        if len(expected) != len(updates.shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b
                for a, b in zip(expected, updates.shape, strict=True)):
            raise fail(node, f"updates have shape {updates.shape}, expected {expected}")


@register
class ScatterElements(_Scatter):
    """output = a copy of data where output[indices[i][j]][j] (axis 0; likewise for other axes)
    is set to updates[i][j] (reduction none) or combined with it by add/mul/max/min, in
    row-major order of the updates (so later duplicates win)."""

    op_type = "ScatterElements"
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", 0),
                                        "reduction": Attr("string", "none")}

    def check_shapes(self, node: Node, data: TensorType, indices: TensorType,
                     updates: TensorType) -> None:
        if indices.shape is not None and updates.shape is not None and (
                len(indices.shape) != len(updates.shape) or any(
                    isinstance(a, int) and isinstance(b, int) and a != b
                    for a, b in zip(indices.shape, updates.shape, strict=True))):
            raise fail(node, f"indices {indices.shape} and updates {updates.shape} need the "
                             "same shape")
        if data.rank is not None:
            normalize_axis(node, node.attrs["axis"], data.rank)


@register
class OneHot(OpDef):
    """output = on_value where the position along the new axis equals the index, off_value
    elsewhere, with values = [off_value, on_value]. The new axis of size `depth` is inserted at
    `axis` (-1: last). Indices in [-depth, -1] count from the end; others outside
    [0, depth - 1] give a row of off_value. Float indices and depth are truncated to integers."""

    op_type = "OneHot"
    inputs = ("indices", "depth", "values")
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", -1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        indices, depth, values = known_types(node, in_types)
        assert indices is not None and depth is not None and values is not None
        check_dtype(node, 0, indices, NUMERIC)
        check_dtype(node, 1, depth, NUMERIC)
        if depth.numel not in (None, 1):
            raise fail(node, f"depth must be a scalar, got shape {depth.shape}")
        if values.numel not in (None, 2):
            raise fail(node, f"values must hold [off_value, on_value], got shape "
                             f"{values.shape}")
        if indices.shape is None:
            return [TensorType(values.dtype, None)]
        rank = len(indices.shape) + 1
        axis = node.attrs["axis"]
        if not -rank <= axis < rank:
            raise fail(node, f"axis {axis} out of range for output rank {rank}")
        axis %= rank
        size = one_hot_depth(node)
        shape = indices.shape[:axis] + (size,) + indices.shape[axis:]
        return [TensorType(values.dtype, shape, values.quant)]


def one_hot_depth(node: Node) -> Dim:
    value = node.inputs[1].const_value
    if value is None:
        ints = static_value(node.inputs[1])
        return None if ints is None else ints[0]
    depth = int(value.reshape(-1)[0])
    if depth < 1:
        raise fail(node, f"depth must be positive, got {depth}")
    return depth


@register
class NonZero(OpDef):
    """Y = the indices of the nonzero elements of X, as a (rank, count) int64 matrix in
    row-major order (numpy.nonzero stacked). The count is only known when X is."""

    op_type = "NonZero"
    inputs = ("X",)
    outputs = ("Y",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        value = node.inputs[0].const_value
        count = None if value is None else int(np.count_nonzero(value))
        return [TensorType(dt.INT64, (x.rank, count))]


@register
class Trilu(OpDef):
    """output = the upper (upper=1: j - i >= k) or lower (upper=0: j - i <= k) triangle of the
    last two dimensions of input, other elements 0; k (default 0) shifts the diagonal."""

    op_type = "Trilu"
    inputs = ("input", "k?")
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"upper": flag(1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        if x.rank is not None and x.rank < 2:
            raise fail(node, f"input must have rank >= 2, got {x.rank}")
        if len(types) > 1 and types[1] is not None:
            check_index_dtype(node, 1, types[1], INT64)
        return [TensorType(x.dtype, x.shape)]
