"""Ops that cut, join, repeat and pad tensors: Concat, Split, Slice, Tile, Expand, Pad.

Elements are copied, never computed (Pad's constant is given in the data's own dtype), so every
dtype is accepted and the kernels are exact. Quantized inputs keep their parameters; per-axis
parameters are sliced, split, tiled or broadcast along with their axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, QuantParams, TensorType
from lowbit.ops.common import broadcast_shapes, normalize_axis
from lowbit.ops.elementwise_rules import known_types, same_dtype
from lowbit.ops.registry import (
    KEEP,
    REARRANGES,
    REQUIRED,
    RESCALE,
    SELECTS,
    Attr,
    OpDef,
    fail,
    register,
)
from lowbit.ops.shape import shape_from_input
from lowbit.ops.shape_values import static_value, symbolic_value
from lowbit.ops.symbolic import (
    clamped_slice,
    dim_add,
    dim_div,
    dim_min,
    dim_mul,
    dims_equal,
    merge_dim,
)
from lowbit.ops.tensor_rules import INDEX_DTYPES, check_index_dtype, moved_quant, refuse_axis

INT64 = frozenset({dt.INT64})
BIG = 1 << 30
"""Slice bounds at least this large (INT_MAX in exports) mean "to the end"."""


def _rank(node: Node, types: Sequence[TensorType | None]) -> int | None:
    ranks = {t.rank for t in types if t is not None and t.rank is not None}
    if len(ranks) > 1:
        raise fail(node, f"inputs have different ranks {sorted(ranks)}")
    return ranks.pop() if ranks else None


@register
class Concat(OpDef):
    """concat_result = the inputs joined along `axis`; all other dimensions must agree.
    Quantized inputs are requantized to the output's parameters (RESCALE)."""

    op_type = "Concat"
    quant_rule = RESCALE
    moves_data = REARRANGES
    inputs = ("inputs*",)
    outputs = ("concat_result",)
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", REQUIRED)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        if not types:
            raise fail(node, "Concat needs at least one input")
        dtype = same_dtype(node, types, range(len(types)))
        rank = _rank(node, types)
        if rank is None:
            return [TensorType(dtype, None)]
        if rank == 0:
            raise fail(node, "cannot concatenate scalars (rank 0)")
        axis = normalize_axis(node, node.attrs["axis"], rank)
        shapes = [t.shape for t in types if t is not None and t.shape is not None]
        out: list[Dim] = list(shapes[0])
        total: Dim = 0
        for t in types:
            assert t is not None
            if t.shape is None:
                total = None
                continue
            for i, d in enumerate(t.shape):
                if i == axis:
                    total = dim_add(total, d) if total is not None else None
                else:
                    try:
                        out[i] = merge_dim(out[i], d)
                    except ValueError:
                        raise fail(node, f"input shapes {[t.shape for t in types]} differ "
                                         f"outside axis {axis} (dimension {i})") from None
        out[axis] = total
        return [TensorType(dtype, tuple(out))]


@register
class Split(OpDef):
    """outputs = consecutive parts of the input along `axis`: of the sizes in `split`, or
    `num_outputs` parts of ceil(size / num_outputs) with a smaller last one, or (neither given)
    as many equal parts as the node has outputs."""

    op_type = "Split"
    quant_rule = KEEP
    moves_data = SELECTS
    inputs = ("input", "split?")
    outputs = ("outputs*",)
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", 0), "num_outputs": Attr("int")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        num = node.attrs.get("num_outputs")
        if num is not None and node.input_or_none(1) is not None:
            raise fail(node, "give either the split input or num_outputs, not both")
        if num is not None and num != len(node.outputs):
            raise fail(node, f"num_outputs is {num} but the node has {len(node.outputs)} "
                             "outputs")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        self.check(node, in_types)
        x = known_types(node, in_types)[0]
        assert x is not None
        if node.input_or_none(1) is not None:
            check_index_dtype(node, 1, in_types[1], INT64)
        n = len(node.outputs)
        if x.shape is None:
            if x.quant is not None and x.quant.axis is not None:
                raise refuse_axis(node, x.quant, "may be split (unknown rank)")
            return [TensorType(x.dtype, None, x.quant)] * n
        axis = normalize_axis(node, node.attrs["axis"], len(x.shape))
        sizes = split_sizes(node, x.shape[axis], n)
        out = []
        start = 0
        for size in sizes:
            shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
            q = x.quant
            if q is not None and q.axis is not None and q.axis % len(x.shape) == axis:
                if not isinstance(size, int) or not isinstance(start, int):
                    raise refuse_axis(node, q, "is split at places not known before run time")
                q = QuantParams(q.scale[start:start + size], q.zero_point[start:start + size],
                                axis)
            out.append(TensorType(x.dtype, shape, q))
            start = dim_add(start, size) if start is not None else None
        return out


def split_sizes(node: Node, dim: Dim, n: int) -> list[Dim]:
    """The part sizes of a Split node along a dimension of size `dim`."""
    if node.input_or_none(1) is not None:
        sizes = static_value(node.inputs[1])
        if sizes is None:
            return [None] * n
        if len(sizes) != n or any(s < 0 for s in sizes):
            raise fail(node, f"split {sizes} must give {n} non-negative sizes, one per output")
        if isinstance(dim, int) and sum(sizes) != dim:
            raise fail(node, f"split {sizes} adds up to {sum(sizes)}, not the dimension {dim}")
        return list(sizes)
    if isinstance(dim, int):
        chunk = -(-dim // n)
        last = dim - chunk * (n - 1)
        if last < 0:
            raise fail(node, f"dimension {dim} cannot be split into {n} parts of {chunk}")
        return [chunk] * (n - 1) + [last]
    return [dim_div(dim, n)] * n


def slice_bounds(node: Node, rank: int) -> dict[int, tuple[Dim, Dim, int]] | None:
    """{axis: (start, end, step)} of a Slice node, with starts/ends as far as known before run
    time (ints, symbols or None); None when the axes or steps are not known."""
    starts, ends = symbolic_value(node.inputs[1]), symbolic_value(node.inputs[2])
    axes_value, steps_value = node.input_or_none(3), node.input_or_none(4)
    axes = list(range(len(starts) if starts is not None else rank)) if axes_value is None \
        else static_value(axes_value)
    steps = None if steps_value is None else static_value(steps_value)
    if axes is None or (steps_value is not None and steps is None):
        return None
    n = len(axes)
    starts = starts if starts is not None else (None,) * n
    ends = ends if ends is not None else (None,) * n
    steps = steps if steps is not None else [1] * n
    if not len(starts) == len(ends) == len(steps) == n:
        raise fail(node, f"starts, ends, axes and steps have different lengths "
                         f"({len(starts)}, {len(ends)}, {n}, {len(steps)})")
    out: dict[int, tuple[Dim, Dim, int]] = {}
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        axis = normalize_axis(node, a, rank)
        if axis in out:
            raise fail(node, f"axes {axes} repeat axis {axis}")
        if st == 0:
            raise fail(node, "steps must not be 0")
        out[axis] = (s, e, st)
    return out


def sliced_dim(dim: Dim, start: Dim, end: Dim, step: int) -> Dim:
    """The size of dimension `dim` after slicing it [start:end:step] with ONNX's clamping."""
    if isinstance(dim, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(dim)[clamped_slice(start, end, step, dim)])
    whole_forward = step == 1 and start == 0 and (
        (isinstance(end, int) and end >= BIG) or dims_equal(end, dim))
    whole_backward = step == -1 and (start == -1 or (isinstance(start, int) and start >= BIG)
                                     ) and isinstance(end, int) and end <= -BIG
    if whole_forward or whole_backward:
        return dim
    if isinstance(dim, int) and start == 0 and step == 1:
        return dim_min(dim, end)  # a table cut to a symbolic length
    return None


@register
class Slice(OpDef):
    """output = data[starts:ends:steps] along `axes` (all axes in order by default, steps 1).
    Negative starts/ends count from the end; then starts are clamped to [0, dim] for positive
    steps and [0, dim - 1] for negative ones, ends to [0, dim] and [-1, dim - 1]."""

    op_type = "Slice"
    quant_rule = KEEP
    moves_data = SELECTS
    inputs = ("data", "starts", "ends", "axes?", "steps?")
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        for i in range(1, len(types)):
            if types[i] is not None:
                check_index_dtype(node, i, types[i], INDEX_DTYPES)
        if x.shape is None:
            if x.quant is not None and x.quant.axis is not None:
                raise refuse_axis(node, x.quant, "may be sliced (unknown rank)")
            return [TensorType(x.dtype, None, x.quant)]
        rank = len(x.shape)
        bounds = slice_bounds(node, rank)
        if bounds is None:
            return [TensorType(x.dtype, (None,) * rank, _sliced_quant(node, x, None))]
        shape = tuple(sliced_dim(d, *bounds[i]) if i in bounds else d
                      for i, d in enumerate(x.shape))
        return [TensorType(x.dtype, shape, _sliced_quant(node, x, bounds))]


def _sliced_quant(node: Node, x: TensorType, bounds: dict | None) -> QuantParams | None:
    q = x.quant
    if q is None or q.axis is None:
        return q
    assert x.shape is not None
    axis = q.axis % len(x.shape)
    if bounds is not None and axis not in bounds:
        return q
    start, end, step = bounds[axis] if bounds is not None else (None, None, 1)
    if not isinstance(start, int) or not isinstance(end, int):
        raise refuse_axis(node, q, "is sliced at places not known before run time")
    keep = clamped_slice(start, end, step, q.channels)
    return QuantParams(q.scale[keep], q.zero_point[keep], axis)


@register
class Tile(OpDef):
    """output = input repeated repeats[i] times along each dimension i (numpy.tile)."""

    op_type = "Tile"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("input", "repeats")
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, repeats_type = known_types(node, in_types)
        assert x is not None and repeats_type is not None
        check_index_dtype(node, 1, repeats_type, INT64)
        repeats = symbolic_value(node.inputs[1])
        if x.shape is None:
            if x.quant is not None and x.quant.axis is not None:
                raise refuse_axis(node, x.quant, "may be tiled (unknown rank)")
            rank = None if repeats is None else len(repeats)
            return [TensorType(x.dtype, None if rank is None else (None,) * rank, x.quant)]
        rank = len(x.shape)
        if repeats is None:
            repeats = (None,) * rank
        if len(repeats) != rank:
            raise fail(node, f"repeats has {len(repeats)} elements for an input of rank {rank}")
        if any(isinstance(r, int) and r < 0 for r in repeats):
            raise fail(node, f"repeats {list(repeats)} must not be negative")
        shape = tuple(dim_mul(d, r) for d, r in zip(x.shape, repeats, strict=True))
        q = x.quant
        if q is not None and q.axis is not None:
            r = repeats[q.axis % rank]
            if not isinstance(r, int):
                raise refuse_axis(node, q, "is tiled a number of times not known before run "
                                           "time")
            q = QuantParams(np.tile(q.scale, r), np.tile(q.zero_point, r), q.axis % rank)
        return [TensorType(x.dtype, shape, q)]


@register
class Expand(OpDef):
    """output = input broadcast (numpy rules, in both directions) with `shape`: a 1 in shape
    keeps the input's size, and the output rank is the larger of the two."""

    op_type = "Expand"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("input", "shape")
    outputs = ("output",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, shape_type = known_types(node, in_types)
        assert x is not None and shape_type is not None
        check_index_dtype(node, 1, shape_type, INT64)
        target = shape_from_input(node, 1)
        if x.shape is None or target is None:
            if x.quant is not None and x.quant.axis is not None:
                raise refuse_axis(node, x.quant, "moves to an unknown position")
            return [TensorType(x.dtype, None, x.quant)]
        try:
            out = broadcast_shapes(x.shape, target)
        except ValueError as exc:
            raise fail(node, f"input shape {x.shape} does not broadcast to {list(target)}: "
                             f"{exc}") from None
        assert out is not None
        q = x.quant
        if q is not None and q.axis is not None:
            axis = q.axis % len(x.shape) + len(out) - len(x.shape)
            size = out[axis]
            if q.channels != size:
                if q.channels != 1 or not isinstance(size, int):
                    raise refuse_axis(node, q, "is broadcast to a size not known before run "
                                               "time")
                q = QuantParams(np.repeat(q.scale, size), np.repeat(q.zero_point, size), axis)
            else:
                q = moved_quant(node, q, axis)
        return [TensorType(x.dtype, out, q)]


PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register
class Pad(OpDef):
    """output = data padded along `axes` (all by default) by pads = [begin_0, ..., begin_n,
    end_0, ..., end_n]. Modes: constant (constant_value, 0 by default, in the data's dtype),
    reflect (mirror without repeating the edge), edge (repeat the edge), wrap (cyclic).
    Negative pads remove elements; they are applied first, then the positive pads."""

    op_type = "Pad"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("data", "pads", "constant_value?", "axes?")
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"mode": Attr("string", "constant")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs["mode"] not in PAD_MODES:
            raise fail(node, f"mode must be one of {', '.join(PAD_MODES)}, got "
                             f"{node.attrs['mode']!r}")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        check_index_dtype(node, 1, types[1], INT64)
        if len(types) > 2 and types[2] is not None:
            same_dtype(node, types, (0, 2))
            if types[2].numel not in (None, 1):
                raise fail(node, f"constant_value must be a scalar, got shape {types[2].shape}")
        if len(types) > 3 and types[3] is not None:
            check_index_dtype(node, 3, types[3])
        if x.shape is None:
            if x.quant is not None and x.quant.axis is not None:
                raise refuse_axis(node, x.quant, "may be padded (unknown rank)")
            return [TensorType(x.dtype, None, x.quant)]
        rank = len(x.shape)
        widths = pad_widths(node, rank)
        if widths is None:
            shape = (None,) * rank
        else:
            shape = tuple(dim_add(dim_add(d, b), e) for d, (b, e) in zip(x.shape, widths,
                                                                         strict=True))
            for d, s in zip(x.shape, shape, strict=True):
                if isinstance(s, int) and s < 0:
                    raise fail(node, f"pads remove more than the {d} elements of a dimension")
        q = x.quant
        if q is not None and q.axis is not None and (
                widths is None or widths[q.axis % rank] != (0, 0)):
            raise refuse_axis(node, q, "is padded (the new channels would have no parameters)")
        return [TensorType(x.dtype, shape, q)]


def pad_widths(node: Node, rank: int) -> list[tuple[int, int]] | None:
    """[(begin, end)] per dimension of a Pad node, when its pads (and axes) are known."""
    pads = static_value(node.inputs[1])
    axes_input = node.input_or_none(3)
    axes = list(range(rank)) if axes_input is None else static_value(axes_input)
    if pads is None or axes is None:
        return None
    if len(pads) != 2 * len(axes):
        raise fail(node, f"pads has {len(pads)} elements; it needs 2 per padded axis "
                         f"({2 * len(axes)})")
    widths = [(0, 0)] * rank
    seen = set()
    for i, a in enumerate(axes):
        axis = normalize_axis(node, a, rank)
        if axis in seen:
            raise fail(node, f"axes {axes} repeat axis {axis}")
        seen.add(axis)
        widths[axis] = (pads[i], pads[len(axes) + i])
    return widths

