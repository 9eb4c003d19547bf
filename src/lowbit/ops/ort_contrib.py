"""ONNX Runtime contrib ops (domain `com.microsoft`) that its quantizer writes into QOperator
models and that have no standard ONNX equivalent, imported so such models load unchanged.

QGemm: what `onnxruntime.quantization.quantize_static(quant_format=QOperator)` writes for Gemm.
The exact formula and rounding are in its kernel's docstring
(`lowbit.backends.reference.kernels.ort_contrib`).
"""

from __future__ import annotations

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.elementwise_rules import known_types
from lowbit.ops.linalg import inner_dim
from lowbit.ops.product import ProductGeometry, gemm_product
from lowbit.ops.quantized import (
    EIGHT_BIT,
    _output_quant,
    _require,
    _require_single,
    _same_dtype,
)
from lowbit.ops.registry import Attr, OpDef, Work, fail, flag, register
from lowbit.ops.work import product_work

ORT_DOMAIN = "com.microsoft"


def _single_or_columns(node: Node, t: TensorType | None, index: int, n: Dim | None) -> None:
    """b's scale / zero point: one element or a vector of N (one per output column)."""
    if t is None or t.shape is None:
        raise fail(node, f"input {index} ('{node.inputs[index].name}') needs a known shape")
    size = 1
    for d in t.shape:
        if not isinstance(d, int):
            return
        size *= d
    if size != 1 and not (len(t.shape) == 1 and isinstance(n, int) and t.shape[0] == n):
        raise fail(node, f"input {index} ('{node.inputs[index].name}') has shape "
                         f"{list(t.shape)}; QGemm takes one element or one per output column")


@register
class QGemm(OpDef):
    """Y[M, N] from A (uint8/int8, transA) and B (uint8/int8, transB), ONNX Runtime's
    `com.microsoft.QGemm`: acc = wrap_int32((A - a_zero_point) @ (B - b_zero_point) + C) with
    C an int32 bias broadcast to [M, N]; M_n = float32(float32(alpha * a_scale) * b_scale[n])
    (divided by y_scale when given); with y_scale and y_zero_point,
    y = saturate(round_half_even(float32(acc) * M_n) + y_zero_point), else y = float32(acc) * M_n
    as float32. b's scale and zero point are per tensor or per output column."""

    op_type = "QGemm"
    domain = ORT_DOMAIN
    inputs = ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C?",
              "y_scale?", "y_zero_point?")
    attrs = {"alpha": Attr("float", 1.0), "transA": flag(0), "transB": flag(0)}

    def product(self, node: Node) -> ProductGeometry:
        """B (input 3) is (K, N), or (N, K) with transB; C (input 6) the int32 bias."""
        return gemm_product(node, 3, 6)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = (known_types(node, in_types) + [None] * 9)[:9]
        a, b = types[0], types[3]
        assert a is not None and b is not None
        _require(node, 0, a, EIGHT_BIT)
        _require(node, 3, b, EIGHT_BIT)
        _same_dtype(node, types, 0, 2)
        _same_dtype(node, types, 3, 5)
        for i in (1, 4, 7):
            if types[i] is not None:
                _require(node, i, types[i], frozenset({dt.FLOAT32}))  # type: ignore[arg-type]
        if types[6] is not None:
            _require(node, 6, types[6], frozenset({dt.INT32}))  # type: ignore[arg-type]
        if (types[7] is None) != (types[8] is None):
            raise fail(node, "y_scale and y_zero_point must be given together (quantized "
                             "output) or both left out (float output)")
        _require_single(node, types, 1, 2)
        m: Dim | None = None
        n: Dim | None = None
        if a.shape is not None and b.shape is not None:
            if len(a.shape) != 2 or len(b.shape) != 2:
                raise fail(node, f"A and B must be 2-D, got shapes {list(a.shape)} and "
                                 f"{list(b.shape)}")
            geometry = self.product(node)
            m, k = a.shape[::-1] if geometry.trans_a else a.shape
            kb, n = b.shape[::-1] if geometry.trans_b else b.shape
            if isinstance(k, int) and isinstance(kb, int) and k != kb:
                raise fail(node, f"inner dimensions differ: A gives {k}, B gives {kb}")
        _single_or_columns(node, types[4], 4, n)
        _single_or_columns(node, types[5], 5, n)
        shape = None if m is None else (m, n)
        if types[7] is None:
            return [TensorType(dt.FLOAT32, shape)]
        _require_single(node, types, 7, 8)
        y_zero = types[8]
        assert y_zero is not None
        _same_dtype(node, types, 0, 8)
        return [TensorType(y_zero.dtype, shape, _output_quant(node, y_zero.dtype, 7, 8))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return product_work(out_types[0], inner_dim(in_types[0], self.product(node).trans_a))

