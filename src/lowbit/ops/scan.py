"""Ops that run along one axis: CumSum (running sums) and TopK (partial sorting)."""

from __future__ import annotations

from typing import ClassVar

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import FLOATS, NUMERIC, check_dtype, known_types
from lowbit.ops.registry import Attr, OpDef, fail, flag, register
from lowbit.ops.shape_values import symbolic_value
from lowbit.ops.tensor_rules import check_index_dtype

INT64 = frozenset({dt.INT64})


@register
class CumSum(OpDef):
    """y = running sums of x along `axis`: y[i] = x[0] + ... + x[i], or with exclusive=1
    x[0] + ... + x[i-1] (0 first); with reverse=1 the sums run from the end. Integers wrap
    around in their width; float16 and bfloat16 are summed in float32 and rounded once."""

    op_type = "CumSum"
    inputs = ("x", "axis")
    outputs = ("y",)
    attrs: ClassVar[dict[str, Attr]] = {"exclusive": flag(0), "reverse": flag(0)}
    allowed = FLOATS | {dt.INT32, dt.INT64, dt.UINT32, dt.UINT64}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, axis = known_types(node, in_types)
        assert x is not None and axis is not None
        if x.quant is None:
            check_dtype(node, 0, x, frozenset(self.allowed))
        check_index_dtype(node, 1, axis)
        if axis.numel not in (None, 1):
            raise fail(node, f"axis must be a scalar, got shape {axis.shape}")
        return [TensorType(x.dtype, x.shape)]


@register
class TopK(OpDef):
    """Values, Indices = the K largest (largest=1) or smallest elements along `axis` and their
    int64 positions, sorted from the extreme down; equal values keep the lower index first.
    (sorted=0 allows any order; lowbit sorts anyway.)"""

    op_type = "TopK"
    inputs = ("X", "K")
    outputs = ("Values", "Indices")
    attrs: ClassVar[dict[str, Attr]] = {"axis": Attr("int", -1), "largest": flag(1),
                                        "sorted": flag(1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, k_type = known_types(node, in_types)
        assert x is not None and k_type is not None
        check_dtype(node, 0, x, NUMERIC)
        check_index_dtype(node, 1, k_type, INT64)
        if x.shape is None:
            return [TensorType(x.dtype, None, x.quant), TensorType(dt.INT64, None)]
        axis = normalize_axis(node, node.attrs["axis"], len(x.shape))
        k = symbolic_value(node.inputs[1])
        size = None if k is None or len(k) != 1 else k[0]
        dim = x.shape[axis]
        if isinstance(size, int) and (size < 0 or (isinstance(dim, int) and size > dim)):
            raise fail(node, f"K = {size} is outside [0, {dim}] (the size of axis {axis})")
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        q = x.quant
        if q is not None and q.axis is not None and q.axis % len(x.shape) == axis:
            q = None  # the selected channels vary with the data
        return [TensorType(x.dtype, shape, q), TensorType(dt.INT64, shape)]
