"""Pooling: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool."""

from __future__ import annotations

from lowbit.ir import dtypes
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.conv_geometry import WINDOW_ATTRS, Window, window_from_attrs
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types
from lowbit.ops.registry import KEEP, RESCALE, Attr, OpDef, fail, register

MAXPOOL_TYPES = FLOATS | {dtypes.INT8, dtypes.UINT8}


def pool_window(node: Node, rank: int) -> Window:
    if not node.attrs.get("kernel_shape"):
        raise fail(node, "kernel_shape is required")
    return window_from_attrs(node, None, rank, bool(node.attrs.get("ceil_mode", 0)))


def _input(node: Node, in_types: list[TensorType | None], allowed) -> TensorType:
    x = known_types(node, in_types)[0]
    assert x is not None
    check_dtype(node, 0, x, allowed)
    if x.shape is not None and len(x.shape) < 3:
        raise fail(node, f"input must be N x C x spatial..., got shape {list(x.shape)}")
    return x


def _pooled(node: Node, x: TensorType) -> tuple:
    if x.shape is None:
        return None
    window = pool_window(node, len(x.shape) - 2)
    return (*x.shape[:2], *window.output_dims(x.shape[2:]))


@register
class MaxPool(OpDef):
    """Y = max over each window (padding never wins); Indices = the flat index of that
    maximum in the unpadded input (row-major, or column-major with storage_order 1)."""

    op_type = "MaxPool"
    inputs = ("X",)
    outputs = ("Y", "Indices?")
    attrs = {**WINDOW_ATTRS, "ceil_mode": Attr("int", 0), "storage_order": Attr("int", 0)}
    quant_rule = KEEP

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = _input(node, in_types, MAXPOOL_TYPES)
        shape = _pooled(node, x)
        return [TensorType(x.dtype, shape), TensorType(dtypes.INT64, shape)]


@register
class AveragePool(OpDef):
    """Y = mean over each window; padding counts only with count_include_pad, and the extra
    positions ceil_mode adds never count."""

    op_type = "AveragePool"
    inputs = ("X",)
    attrs = {**WINDOW_ATTRS, "ceil_mode": Attr("int", 0), "count_include_pad": Attr("int", 0)}
    quant_rule = RESCALE

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = _input(node, in_types, FLOATS)
        return [TensorType(x.dtype, _pooled(node, x))]


class _GlobalPool(OpDef):
    inputs = ("X",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = _input(node, in_types, FLOATS)
        shape = None if x.shape is None else (*x.shape[:2], *(1,) * (len(x.shape) - 2))
        return [TensorType(x.dtype, shape)]


@register
class GlobalAveragePool(_GlobalPool):
    """Y[n, c] = mean of X[n, c] over all spatial positions (spatial dims kept as 1)."""

    op_type = "GlobalAveragePool"
    quant_rule = RESCALE


@register
class GlobalMaxPool(_GlobalPool):
    """Y[n, c] = max of X[n, c] over all spatial positions (spatial dims kept as 1)."""

    op_type = "GlobalMaxPool"
    quant_rule = KEEP
