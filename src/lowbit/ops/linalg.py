"""Matrix products: Gemm and MatMul."""

from __future__ import annotations

from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import broadcast_dim
from lowbit.ops.elementwise_rules import FLOATS, INTS, broadcast_to, check_dtype, known_types
from lowbit.ops.registry import COMPUTE, Attr, OpDef, fail, register


def _inner(node: Node, k1: Dim, k2: Dim) -> None:
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise fail(node, f"inner dimensions differ: {k1} and {k2}")


@register
class Gemm(OpDef):
    """Y = alpha * A' @ B' + beta * C, where A' = A^T if transA, B' = B^T if transB, and C
    broadcasts to [M, N] (unidirectionally)."""

    op_type = "Gemm"
    inputs = ("A", "B", "C?")
    attrs = {"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0),
             "transA": Attr("int", 0), "transB": Attr("int", 0)}
    fusable = True
    quant_rule = COMPUTE

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        a, b = known_types(node, in_types)[:2]
        assert a is not None and b is not None
        allowed = FLOATS | INTS
        check_dtype(node, 0, a, allowed)
        check_dtype(node, 1, b, allowed)
        if a.shape is None or b.shape is None:
            raise fail(node, "A and B must have known ranks")
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise fail(node, f"A {list(a.shape)} and B {list(b.shape)} must be 2-D")
        m, ka = a.shape[::-1] if node.attrs["transA"] else a.shape
        kb, n = b.shape[::-1] if node.attrs["transB"] else b.shape
        _inner(node, ka, kb)
        shape = (m, n)
        c = in_types[2] if len(in_types) > 2 else None
        if c is not None:
            broadcast_to(node, shape, c, "C")
        return [TensorType(a.dtype, shape)]


def matmul_shape(node: Node, a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """numpy.matmul's result shape: 1-D operands are promoted and the added axis removed; batch
    dimensions broadcast."""
    if not a or not b:
        raise fail(node, "MatMul operands must be at least 1-D")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    _inner(node, a2[-1], b2[-2])
    batch_a, batch_b = a2[:-2], b2[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (rank - len(batch_a)) + tuple(batch_a)
    batch_b = (1,) * (rank - len(batch_b)) + tuple(batch_b)
    try:
        batch = tuple(broadcast_dim(x, y) for x, y in zip(batch_a, batch_b, strict=True))
    except ValueError as exc:
        raise fail(node, f"batch dimensions of {list(a)} and {list(b)} do not broadcast: "
                   f"{exc}") from None
    shape = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


@register
class MatMul(OpDef):
    """Y = A @ B with numpy.matmul semantics (batch broadcasting, 1-D promotion)."""

    op_type = "MatMul"
    inputs = ("A", "B")
    fusable = True
    quant_rule = COMPUTE

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        a, b = known_types(node, in_types)
        assert a is not None and b is not None
        allowed = FLOATS | INTS
        check_dtype(node, 0, a, allowed)
        check_dtype(node, 1, b, allowed)
        if a.dtype != b.dtype and a.quant is None:
            raise fail(node, f"A and B have dtypes {a.dtype} and {b.dtype}; insert a Cast")
        if a.shape is None or b.shape is None:
            return [TensorType(a.dtype, None)]
        return [TensorType(a.dtype, matmul_shape(node, a.shape, b.shape))]
