"""Pooling: MaxPool, AveragePool, LpPool over sliding windows, and their global forms
(ONNX version 22). X is (N, C, D1, ..., Dn); Y is (N, C, O1, ..., On) with the window output
sizes of `conv_geometry` (ceil_mode rounds up, but a window must start inside the input or its
begin padding), or (N, C, 1, ..., 1) for the global pools.
"""

from __future__ import annotations

from typing import ClassVar

from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.conv_geometry import WINDOW_ATTRS, Window, window_from_attrs
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types
from lowbit.ops.registry import (
    KEEP,
    REQUIRED,
    RESCALE,
    SELECTS,
    Attr,
    OpDef,
    Work,
    fail,
    flag,
    register,
    sizes,
)
from lowbit.ops.work import window_work

POOL_ATTRS = {**WINDOW_ATTRS, "kernel_shape": sizes(1, REQUIRED), "ceil_mode": flag(0)}


def pool_window(node: Node, spatial_rank: int) -> Window:
    """The validated window of a pooling node with `spatial_rank` spatial axes."""
    return window_from_attrs(node, None, spatial_rank, bool(node.attrs.get("ceil_mode", 0)))


def _spatial_input(node: Node, in_types: list[TensorType | None], allowed: frozenset[DType]
                   ) -> TensorType:
    (x,) = known_types(node, in_types)
    assert x is not None
    check_dtype(node, 0, x, allowed)
    if x.shape is not None and len(x.shape) < 3:
        raise fail(node, f"the input has shape {x.shape}; pooling needs (N, C, D1, ...) with "
                         f"at least one spatial axis")
    return x


class WindowPool(OpDef):
    """A pool over sliding windows; `allowed` are the accepted input dtypes."""

    inputs = ("X",)
    outputs = ("Y",)
    attrs = POOL_ATTRS
    allowed: ClassVar[frozenset[DType]] = FLOATS

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        """Each pad must be smaller than the kernel along its axis, as ONNX Runtime requires
        (a window wholly in the padding has nothing to pool)."""
        kernel = node.attrs["kernel_shape"]
        pads = node.attrs.get("pads") or []
        if node.attrs.get("auto_pad", "NOTSET") == "NOTSET" and len(pads) == 2 * len(kernel):
            n = len(kernel)
            for a, k in enumerate(kernel):
                if pads[a] >= k or pads[a + n] >= k:
                    raise fail(node, f"attribute 'pads' is {list(pads)}: each pad must be "
                                     f"smaller than the kernel {list(kernel)} along its axis "
                                     f"(spatial axis {a}: pads {pads[a]} and {pads[a + n]})")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = _spatial_input(node, in_types, self.allowed)
        kernel = node.attrs.get("kernel_shape") or []
        window = pool_window(node, len(x.shape) - 2 if x.shape is not None else len(kernel))
        if x.shape is None:
            return [TensorType(x.dtype, None), TensorType(dt.INT64, None)]
        spatial = window.output_dims(x.shape[2:])
        if any(isinstance(d, int) and d <= 0 for d in spatial):
            raise fail(node, f"the window does not fit the input {x.shape}: output spatial "
                             f"size {spatial}")
        shape = (x.shape[0], x.shape[1], *spatial)
        return [TensorType(x.dtype, shape), TensorType(dt.INT64, shape)]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return window_work(in_types[0], out_types[0], node.attrs["kernel_shape"],
                           node.attrs.get("pads") or [], 1, im2col=False)


@register
class MaxPool(WindowPool):
    """Y = the maximum over each window; padding never wins (it is below every value).
    Indices (optional) are the positions of the first maximum in the flattened X, row-major
    (storage_order 0) or with the spatial axes column-major (storage_order 1). Exact for int8
    and uint8."""

    op_type = "MaxPool"
    outputs = ("Y", "Indices?")
    attrs = {**POOL_ATTRS, "storage_order": flag(0)}
    allowed = FLOATS | {dt.INT8, dt.UINT8}
    quant_rule = KEEP
    moves_data = SELECTS



@register
class AveragePool(WindowPool):
    """Y = the mean of each window. Padding counts in the divisor when count_include_pad is
    1 (explicit or SAME_* pads, not the overhang that ceil_mode adds at the end)."""

    op_type = "AveragePool"
    attrs = {**POOL_ATTRS, "count_include_pad": flag(0)}
    quant_rule = RESCALE


@register
class LpPool(WindowPool):
    """Y = (sum over each window of |X| ** p) ** (1 / p); padding adds nothing."""

    op_type = "LpPool"
    attrs = {**POOL_ATTRS, "p": Attr("int", 2, low=1)}


class GlobalPool(OpDef):
    """A pool over all spatial axes: Y is (N, C, 1, ..., 1)."""

    inputs = ("X",)
    outputs = ("Y",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = _spatial_input(node, in_types, FLOATS)
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        return [TensorType(x.dtype, (x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2))]


@register
class GlobalAveragePool(GlobalPool):
    """Y = the mean over the spatial axes."""

    op_type = "GlobalAveragePool"
    quant_rule = RESCALE


@register
class GlobalMaxPool(GlobalPool):
    """Y = the maximum over the spatial axes."""

    op_type = "GlobalMaxPool"
    quant_rule = KEEP
    moves_data = SELECTS


@register
class GlobalLpPool(GlobalPool):
    """Y = (sum over the spatial axes of |X| ** p) ** (1 / p)."""

    op_type = "GlobalLpPool"
    attrs = {"p": Attr("int", 2, low=1)}
