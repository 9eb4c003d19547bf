"""Matrix products: Gemm and MatMul (ONNX version 13).

Float products are accumulated in float64 by the reference kernels and rounded once. Integer
products (int32, int64, uint32, uint64) wrap around in the operands' width, as the sum of
products computed in that width would. Quantized operands (of different integer dtypes) are
accepted: the COMPUTE rule decides how they are computed.
"""

from __future__ import annotations

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import broadcast_shapes
from lowbit.ops.elementwise_rules import (
    FLOATS,
    broadcast_to,
    check_dtype,
    known_types,
    same_dtype,
)
from lowbit.ops.product import ProductGeometry, gemm_product, matrix_product
from lowbit.ops.registry import COMPUTE, Attr, OpDef, Work, fail, flag, register
from lowbit.ops.work import product_work

MATMUL_TYPES = FLOATS | {dt.INT32, dt.INT64, dt.UINT32, dt.UINT64}


def _inner_dims_agree(node: Node, k1: Dim, k2: Dim, a_shape, b_shape) -> None:
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise fail(node, f"inner dimensions differ: A is {a_shape} and B is {b_shape}")


def _same_unless_quantized(node: Node, types: list[TensorType | None]) -> None:
    if not any(t is not None and t.quant is not None for t in types):
        same_dtype(node, types, range(len(types)))


@register
class Gemm(OpDef):
    """Y = alpha * A' B' + beta * C, with A' = transpose(A) if transA (same for B); A' is
    (M, K), B' is (K, N), and C (optional) broadcasts unidirectionally to (M, N).

    Integer Gemm needs integral alpha and beta, so that the result stays exact.
    """

    op_type = "Gemm"
    inputs = ("A", "B", "C?")
    attrs = {"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0),
             "transA": flag(0), "transB": flag(0)}
    fusable = True
    quant_rule = COMPUTE

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        self.infer(node, in_types)
        a = in_types[0]
        assert a is not None
        if a.dtype.is_integer and a.quant is None:
            for name in ("alpha", "beta"):
                value = float(node.attrs.get(name, 1.0))
                if value != int(value):
                    raise fail(node, f"{name} = {value} is not an integer; integer Gemm "
                                     f"computes exactly and needs integral alpha and beta")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        a, b = types[0], types[1]
        assert a is not None and b is not None
        for i, t in enumerate(types):
            if t is not None:
                check_dtype(node, i, t, MATMUL_TYPES)
        _same_unless_quantized(node, types)
        if a.shape is None or b.shape is None:
            return [TensorType(a.dtype, (None, None))]
        for label, t in (("A", a), ("B", b)):
            if len(t.shape) != 2:  # type: ignore[arg-type]
                raise fail(node, f"{label} must be a matrix, got shape {t.shape}")
        geometry = self.product(node)
        m, k1 = reversed(a.shape) if geometry.trans_a else a.shape
        k2, n = reversed(b.shape) if geometry.trans_b else b.shape
        if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
            raise fail(node, f"inner dimensions differ: A is {a.shape}, so with transA="
                             f"{int(geometry.trans_a)} K is {k1}; B is {b.shape}, so with "
                             f"transB={int(geometry.trans_b)} K is {k2}")
        shape: tuple[Dim, ...] | None = (m, n)
        c = types[2] if len(types) > 2 else None
        if c is not None:
            shape = broadcast_to(node, shape, c, "C")
        return [TensorType(a.dtype, shape)]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return product_work(out_types[0], inner_dim(in_types[0], self.product(node).trans_a))

    def product(self, node: Node) -> ProductGeometry:
        """B (input 1) is (K, N), or (N, K) with transB; C (input 2) the bias."""
        return gemm_product(node, 1, 2)

    def integer_problem(self, node: Node) -> str | None:
        """An integer product has no room for alpha or beta other than 1 (they would scale the
        int32 accumulator) nor for transA (A is quantized per tensor along its rows)."""
        c = node.input_or_none(2)
        if float(node.attrs.get("alpha", 1.0)) != 1.0 or (
                c is not None and float(node.attrs.get("beta", 1.0)) != 1.0):
            return "Gemm with alpha or beta other than 1"
        if self.product(node).trans_a:
            return "Gemm with transA"
        return None


@register
class MatMul(OpDef):
    """Matrix product with numpy.matmul semantics: a 1-D A is a row vector and a 1-D B a
    column vector (the added axis is removed again); leading (batch) axes broadcast."""

    op_type = "MatMul"
    inputs = ("A", "B")
    fusable = True
    quant_rule = COMPUTE

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        a, b = known_types(node, in_types)
        assert a is not None and b is not None
        check_dtype(node, 0, a, MATMUL_TYPES)
        check_dtype(node, 1, b, MATMUL_TYPES)
        _same_unless_quantized(node, [a, b])
        return [TensorType(a.dtype, matmul_shape(node, a.shape, b.shape))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return product_work(out_types[0], inner_dim(in_types[0]))

    def product(self, node: Node) -> ProductGeometry:
        """B is (..., K, N): its last axis runs along the output channels."""
        return matrix_product(node, 1, None)


def inner_dim(a: TensorType | None, transposed: bool = False) -> Dim:
    """K of a product whose left operand has type `a` (its last dim, or its first when
    transposed), None when unknown."""
    if a is None or not a.shape:
        return None
    return a.shape[0] if transposed else a.shape[-1]


def matmul_shape(node: Node, a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None
                 ) -> tuple[Dim, ...] | None:
    """numpy.matmul's result shape, with symbolic and unknown dims; refuses rank-0 operands,
    inner dims that differ and batch dims that do not broadcast."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise fail(node, "MatMul operands must have rank 1 or more")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    _inner_dims_agree(node, a2[-1], b2[-2], a, b)
    try:
        batch = broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError as exc:
        raise fail(node, f"batch dimensions of {a} and {b} do not broadcast ({exc})") from None
    assert batch is not None
    out = [*batch]
    if len(a) > 1:
        out.append(a2[-2])
    if len(b) > 1:
        out.append(b2[-1])
    return tuple(out)
