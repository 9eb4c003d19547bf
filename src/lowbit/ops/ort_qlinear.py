"""ONNX Runtime's element-wise, pooling and activation QLinear ops (domain `com.microsoft`),
imported so that models in QOperator form load unchanged: lowbit's own QOperator exports and
those of `onnxruntime.quantization.quantize_static(quant_format=QOperator)`.

Each takes 8-bit codes (uint8 or int8, one type T for every operand and the result) with float32
scales and zero points per tensor, and computes as ONNX Runtime documents it: dequantize in
float32, compute, quantize with round half to even and saturation. The exact formulas are in
the kernels' docstrings (`lowbit.backends.reference.kernels.ort_qlinear`). ONNX Runtime's
vectorised kernels use fixed-point multipliers or a faster logistic, so its codes can differ
from these by one here and there; the tests measure how often.
"""

from __future__ import annotations

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.ops.elementwise_rules import broadcast, known_types
from lowbit.ops.quantized import EIGHT_BIT, _output_quant, _require, _require_single
from lowbit.ops.registry import Attr, OpDef, fail, flag, register

ORT_DOMAIN = "com.microsoft"
_SCALE = frozenset({dt.FLOAT32})


def _check_params(node: Node, types: list[TensorType | None], code: int,
                  params: tuple[int, ...]) -> None:
    """Codes at `code` are 8-bit; each (scale, zero point) pair at `params` is per tensor, the
    scale float32 and the zero point of the codes' type."""
    t = types[code]
    assert t is not None
    _require(node, code, t, EIGHT_BIT)
    for s in params:
        scale, zero = types[s], types[s + 1] if s + 1 < len(types) else None
        if scale is None:
            raise fail(node, f"input {s} (a scale) is required")
        _require(node, s, scale, _SCALE)
        if zero is not None and zero.dtype != t.dtype:
            raise fail(node, f"input {s + 1} (a zero point) has dtype {zero.dtype}; the codes "
                             f"it belongs to are {t.dtype}")
        _require_single(node, types, *((s,) if zero is None else (s, s + 1)))


def _result(node: Node, t: TensorType, shape, scale: int, zero: int) -> list[TensorType]:
    return [TensorType(t.dtype, shape, _output_quant(node, t.dtype, scale, zero))]


class _Binary(OpDef):
    domain = ORT_DOMAIN
    inputs = ("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale",
              "C_zero_point?")
    outputs = ("C",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = (known_types(node, in_types) + [None] * 8)[:8]
        a, b = types[0], types[3]
        assert a is not None and b is not None
        _check_params(node, types, 0, (1, 6))
        _check_params(node, types, 3, (4,))
        if a.dtype != b.dtype:
            raise fail(node, f"A and B have dtypes {a.dtype} and {b.dtype}; {node.op_type} "
                             f"takes one 8-bit type")
        return _result(node, a, broadcast(node, [a, b]), 6, 7)


@register
class QLinearAdd(_Binary):
    """C = saturate(round_half_even((A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale)
    + C_zp), with numpy broadcasting, in float32."""

    op_type = "QLinearAdd"


@register
class QLinearMul(_Binary):
    """C = saturate(round_half_even((A - A_zp) (B - B_zp) * M) + C_zp) with
    M = A_scale * B_scale / C_scale in float32, with numpy broadcasting."""

    op_type = "QLinearMul"


class _Unary(OpDef):
    domain = ORT_DOMAIN
    inputs = ("X", "X_scale", "X_zero_point?", "Y_scale", "Y_zero_point?")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = (known_types(node, in_types) + [None] * 5)[:5]
        x = types[0]
        assert x is not None
        _check_params(node, types, 0, (1, 3))
        return _result(node, x, self.shape(node, x), 3, 4)

    def shape(self, node: Node, x: TensorType):
        return x.shape


@register
class QLinearSigmoid(_Unary):
    """Y = saturate(round_half_even(sigmoid(X_scale (X - X_zp)) / Y_scale) + Y_zp): a 256-entry
    table, as ONNX Runtime builds it."""

    op_type = "QLinearSigmoid"


@register
class QLinearLeakyRelu(_Unary):
    """Y = saturate(round_half_even(leaky_relu(X_scale (X - X_zp), alpha) / Y_scale) + Y_zp):
    a 256-entry table, as ONNX Runtime builds it."""

    op_type = "QLinearLeakyRelu"
    attrs = {"alpha": Attr("float", 0.01)}


@register
class QLinearGlobalAveragePool(_Unary):
    """Y[n, c] = saturate(round_half_even(acc * M) + y_zp), acc = sum over the image of
    (X - x_zp) in integers, M = x_scale / (y_scale * image size) in float32; channels first
    (`channels_last` 0) or last (1); spatial dims become 1."""

    op_type = "QLinearGlobalAveragePool"
    inputs = ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point")
    attrs = {"channels_last": flag(0)}

    def shape(self, node: Node, x: TensorType):
        if x.shape is None:
            return None
        if len(x.shape) < 3:
            raise fail(node, f"X must have at least 3 dims, got shape {list(x.shape)}")
        last = node.attrs["channels_last"]
        spatial = range(1, len(x.shape) - 1) if last else range(2, len(x.shape))
        return tuple(1 if i in spatial else d for i, d in enumerate(x.shape))


@register
class QLinearConcat(OpDef):
    """Y = concat over `axis` of each input requantized to Y's parameters:
    saturate(round_half_even(x_scale (x - x_zp) / Y_scale) + Y_zp) in float32 (a copy where an
    input already has Y's parameters)."""

    op_type = "QLinearConcat"
    domain = ORT_DOMAIN
    inputs = ("Y_scale", "Y_zero_point", "inputs*")
    attrs = {"axis": Attr("int", None)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        if "axis" not in node.attrs:
            raise fail(node, "attribute axis is required")
        if (len(types) - 2) % 3 or len(types) < 5:
            raise fail(node, f"needs Y_scale, Y_zero_point and triples (X, X_scale, "
                             f"X_zero_point), got {len(types)} inputs")
        scale, zero = types[0], types[1]
        assert scale is not None and zero is not None
        _require(node, 0, scale, _SCALE)
        _require(node, 1, zero, EIGHT_BIT)
        _require_single(node, types, 0, 1)
        xs = [types[i] for i in range(2, len(types), 3)]
        for i in range(2, len(types), 3):
            _check_params(node, types, i, (i + 1,))
            if types[i].dtype != zero.dtype:  # type: ignore[union-attr]
                raise fail(node, f"input {i} has dtype {types[i].dtype}; Y_zero_point's is "
                                 f"{zero.dtype}")
        shape = _concat_shape(node, xs)
        return _result(node, zero, shape, 0, 1)


def _concat_shape(node: Node, xs: list[TensorType | None]):
    if any(x is None or x.shape is None for x in xs):
        return None
    shapes = [x.shape for x in xs]  # type: ignore[union-attr]
    rank = len(shapes[0])
    axis = node.attrs["axis"]
    if not -rank <= axis < rank or any(len(s) != rank for s in shapes):
        raise fail(node, f"axis {axis} and input shapes {[list(s) for s in shapes]} do not "
                         f"concatenate")
    axis %= rank
    dims = [s[axis] for s in shapes]
    total = sum(dims) if all(isinstance(d, int) for d in dims) else None
    return tuple(total if i == axis else d for i, d in enumerate(shapes[0]))
