"""Layout ops: the same elements in another shape or order. Reshape, Flatten, Transpose,
Squeeze, Unsqueeze, DepthToSpace, SpaceToDepth.

They copy elements without computing, so they accept every dtype and are exact; a quantized
input keeps its parameters (per-axis ones follow their axis, see `tensor_rules`). Shapes stay
symbolic where they can: Reshape to `[0, 0, 12, 32]` of `(batch, seq, 384)` gives
`(batch, seq, 12, 32)`.
"""

from __future__ import annotations

from typing import ClassVar

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, QuantParams, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import known_types
from lowbit.ops.registry import KEEP, REARRANGES, REQUIRED, Attr, OpDef, fail, flag, register
from lowbit.ops.shape_values import static_value, symbolic_value
from lowbit.ops.symbolic import dim_div, dim_mul, dim_product
from lowbit.ops.tensor_rules import check_index_dtype, moved_quant, refuse_axis, reshaped_quant

INT64 = frozenset({dt.INT64})


@register
class Reshape(OpDef):
    """reshaped = data with the elements in row-major order laid out in `shape`. A 0 in `shape`
    copies the input's dimension at that position (with allowzero=1 it is a zero-size
    dimension); one -1 takes whatever size makes the element counts agree."""

    op_type = "Reshape"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("data", "shape")
    outputs = ("reshaped",)
    attrs: ClassVar[dict[str, Attr]] = {"allowzero": flag(0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        data, shape_type = known_types(node, in_types)
        assert data is not None and shape_type is not None
        check_index_dtype(node, 1, shape_type, INT64)
        if shape_type.rank not in (None, 1):
            raise fail(node, f"shape must be 1-D, got rank {shape_type.rank}")
        target = symbolic_value(node.inputs[1])
        if target is None:
            return [TensorType(data.dtype, None, reshaped_quant(node, data, None))]
        out = reshape_dims(node, data.shape, target, bool(node.attrs["allowzero"]))
        return [TensorType(data.dtype, out, reshaped_quant(node, data, out))]


def reshape_dims(node: Node, in_shape: tuple[Dim, ...] | None, target: tuple[Dim, ...],
                 allowzero: bool) -> tuple[Dim, ...]:
    """The output shape of Reshape(data of `in_shape`, `target`)."""
    out: list[Dim] = []
    infer_at = None
    for i, d in enumerate(target):
        if d == -1:
            if infer_at is not None:
                raise fail(node, f"shape {_text(target)} has more than one -1")
            infer_at = i
            out.append(None)
        elif d == 0 and not allowzero:
            if in_shape is None:
                out.append(None)
            elif i >= len(in_shape):
                raise fail(node, f"shape {_text(target)} copies dimension {i} (a 0) but the "
                                 f"input has rank {len(in_shape)}")
            else:
                out.append(in_shape[i])
        elif isinstance(d, int) and d < -1:
            raise fail(node, f"shape {_text(target)} has a negative size {d}")
        else:
            out.append(d)
    if allowzero and 0 in target and -1 in target:
        raise fail(node, f"with allowzero=1, shape {_text(target)} cannot have both 0 and -1")
    if in_shape is None:
        return tuple(out)
    total = dim_product(in_shape)
    rest = dim_product(d for i, d in enumerate(out) if i != infer_at)
    if infer_at is not None:
        if isinstance(total, int) and isinstance(rest, int) and (rest == 0 or total % rest):
            raise fail(node, f"cannot reshape {_text(in_shape)} to {_text(target)}: "
                             f"{total} elements do not divide into parts of {rest}")
        out[infer_at] = dim_div(total, rest)
    elif isinstance(total, int) and isinstance(rest, int) and total != rest:
        raise fail(node, f"cannot reshape {_text(in_shape)} ({total} elements) to "
                         f"{_text(tuple(out))} ({rest} elements)")
    return tuple(out)


def _text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


@register
class Flatten(OpDef):
    """output = input reshaped to 2-D: (product of dims before `axis`, product of the rest).
    `axis` is in [-rank, rank]."""

    op_type = "Flatten"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("input",)
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", 1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        if x.shape is None:
            return [TensorType(x.dtype, (None, None), reshaped_quant(node, x, None))]
        rank = len(x.shape)
        axis = node.attrs["axis"]
        if not -rank <= axis <= rank:
            raise fail(node, f"axis {axis} out of range [-{rank}, {rank}]")
        axis = axis + rank if axis < 0 else axis
        out = (dim_product(x.shape[:axis]), dim_product(x.shape[axis:]))
        return [TensorType(x.dtype, out, reshaped_quant(node, x, out))]


@register
class Transpose(OpDef):
    """transposed[i_perm[0], ..., i_perm[r-1]] = data[i_0, ..., i_{r-1}]: output dimension k is
    input dimension perm[k]. Without perm the dimensions are reversed."""

    op_type = "Transpose"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("data",)
    outputs = ("transposed",)
    attrs: ClassVar[dict[str, Attr]] = {"perm": Attr("ints")}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        perm = node.attrs.get("perm")
        if x.shape is None:
            if perm is None:
                return [TensorType(x.dtype, None, moved_quant(node, x.quant, None, "has an "
                                                              "unknown rank"))]
            rank = len(perm)
        else:
            rank = len(x.shape)
        perm = list(range(rank))[::-1] if perm is None else list(perm)
        if sorted(perm) != list(range(rank)):
            raise fail(node, f"perm {perm} is not a permutation of the {rank} input dimensions")
        shape = None if x.shape is None else tuple(x.shape[p] for p in perm)
        q = x.quant
        new_axis = None if q is None or q.axis is None else perm.index(q.axis % rank)
        return [TensorType(x.dtype, shape, moved_quant(node, q, new_axis))]


def _axes(node: Node, index: int, rank: int | None) -> list[int] | None:
    """The constant axes input normalised into [0, rank), refused when repeated."""
    axes = static_value(node.input_or_none(index))
    if axes is None or rank is None:
        return axes
    out = [normalize_axis(node, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise fail(node, f"axes {axes} repeat an axis")
    return out


@register
class Squeeze(OpDef):
    """squeezed = data without the size-1 dimensions listed in `axes` (all of them when axes is
    omitted)."""

    op_type = "Squeeze"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("data", "axes?")
    outputs = ("squeezed",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = known_types(node, in_types)[0]
        assert x is not None
        if len(in_types) > 1 and in_types[1] is not None:
            check_index_dtype(node, 1, in_types[1], INT64)
        if x.shape is None:
            return [TensorType(x.dtype, None, moved_quant(node, x.quant, None, "has an unknown "
                                                          "rank"))]
        rank = len(x.shape)
        if node.input_or_none(1) is None:
            if not x.is_static:
                # Whether a symbolic dim is 1 is only known at run time.
                return [TensorType(x.dtype, None, moved_quant(node, x.quant, None, "may be "
                                                              "squeezed"))]
            axes = [i for i, d in enumerate(x.shape) if d == 1]
        else:
            axes = _axes(node, 1, rank)
            if axes is None:
                return [TensorType(x.dtype, None, moved_quant(node, x.quant, None, "may be "
                                                              "squeezed"))]
        for a in axes:
            if isinstance(x.shape[a], int) and x.shape[a] != 1:
                raise fail(node, f"cannot squeeze axis {a} of size {x.shape[a]} (shape "
                                 f"{_text(x.shape)})")
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [TensorType(x.dtype, shape, _squeezed_quant(x.quant, axes, rank))]


def _squeezed_quant(q: QuantParams | None, axes: list[int], rank: int) -> QuantParams | None:
    if q is None or q.axis is None:
        return q
    axis = q.axis % rank
    if axis in axes:  # a single channel: its parameters hold for the whole tensor
        return QuantParams(q.scale.reshape(()), q.zero_point.reshape(()))
    return QuantParams(q.scale, q.zero_point, axis - sum(1 for a in axes if a < axis))


@register
class Unsqueeze(OpDef):
    """expanded = data with size-1 dimensions inserted so that they sit at `axes` of the
    output (axes count in the output's rank, negative from its end)."""

    op_type = "Unsqueeze"
    quant_rule = KEEP
    moves_data = REARRANGES
    inputs = ("data", "axes")
    outputs = ("expanded",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, axes_type = known_types(node, in_types)
        assert x is not None and axes_type is not None
        check_index_dtype(node, 1, axes_type, INT64)
        raw = static_value(node.inputs[1])
        if x.shape is None or raw is None:
            return [TensorType(x.dtype, None, moved_quant(node, x.quant, None, "moves to an "
                                                          "unknown position"))]
        rank = len(x.shape) + len(raw)
        axes = _axes(node, 1, rank)
        assert axes is not None
        rest = iter(x.shape)
        positions = []
        shape: list[Dim] = []
        for i in range(rank):
            if i in axes:
                shape.append(1)
            else:
                positions.append(i)
                shape.append(next(rest))
        q = x.quant
        new_axis = None if q is None or q.axis is None else positions[q.axis % len(x.shape)]
        return [TensorType(x.dtype, tuple(shape), moved_quant(node, q, new_axis))]


class _BlockRearrange(OpDef):
    inputs = ("input",)
    outputs = ("output",)
    attrs: ClassVar[dict[str, Attr]] = {"blocksize": Attr("int", REQUIRED, low=1),
                                        "mode": Attr("string", "DCR")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs["blocksize"] < 1:
            raise fail(node, f"blocksize must be positive, got {node.attrs['blocksize']}")
        if node.attrs.get("mode", "DCR") not in ("DCR", "CRD"):
            raise fail(node, f"mode must be DCR or CRD, got {node.attrs['mode']!r}")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        self.check(node, in_types)
        (x,) = known_types(node, in_types)
        assert x is not None
        if x.rank not in (None, 4):
            raise fail(node, f"input must be 4-D (N, C, H, W), got rank {x.rank}")
        q = x.quant
        if q is not None and q.axis is not None and q.axis % 4 != 0:
            raise refuse_axis(node, q, f"{node.op_type} mixes with other dimensions")
        if x.shape is None:
            return [TensorType(x.dtype, (None,) * 4, q)]
        return [TensorType(x.dtype, self.out_shape(node, x.shape), q)]

    def out_shape(self, node: Node, shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
        raise NotImplementedError


@register
class DepthToSpace(_BlockRearrange):
    """Moves blocks of blocksize x blocksize channels into space: (N, C, H, W) becomes
    (N, C / b^2, H * b, W * b). DCR takes the channel index as (row, column, depth), CRD as
    (depth, row, column)."""

    op_type = "DepthToSpace"
    quant_rule = KEEP
    moves_data = REARRANGES

    def out_shape(self, node: Node, shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
        n, c, h, w = shape
        b = node.attrs["blocksize"]
        if isinstance(c, int) and c % (b * b):
            raise fail(node, f"channels {c} are not a multiple of blocksize^2 = {b * b}")
        return n, dim_div(c, b * b), dim_mul(h, b), dim_mul(w, b)


@register
class SpaceToDepth(_BlockRearrange):
    """Moves blocks of blocksize x blocksize pixels into channels: (N, C, H, W) becomes
    (N, C * b^2, H / b, W / b), the inverse of DepthToSpace in the same mode (SpaceToDepth
    before version 28 has no mode and is DCR)."""

    op_type = "SpaceToDepth"
    quant_rule = KEEP
    moves_data = REARRANGES
    attrs: ClassVar[dict[str, Attr]] = {"blocksize": Attr("int", REQUIRED, low=1),
                                        "mode": Attr("string")}

    def out_shape(self, node: Node, shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
        n, c, h, w = shape
        b = node.attrs["blocksize"]
        for name, d in (("height", h), ("width", w)):
            if isinstance(d, int) and d % b:
                raise fail(node, f"{name} {d} is not a multiple of blocksize {b}")
        return n, dim_mul(c, b * b), dim_div(h, b), dim_div(w, b)
