"""lowbit's dynamic-quantization ops (domain "lowbit"): activation parameters computed at run time.

A static quantized tensor carries its parameters in its type (`QuantParams`); a dynamically
quantized one cannot, since they depend on the input. Here they travel as tensors beside the
codes, shaped to broadcast against them (a reduced axis has length 1):

    DynamicQuantize(x, channel_scale?) -> (q, scale, zero_point)
        the formula of `lowbit.quant.dynamic_params`, per slice over `axes`, applied to
        float32(x / channel_scale) when a (constant, last-axis) channel_scale is given;
    DynamicMatMul(A, A_scale, A_zero, B, B_scale?, B_zero?, C?) -> Y (float32)
        acc = matmul(A - A_zero, B - B_zero)                      exact integers
        Y   = float32(acc * (A_scale * B_scale)) + C               (product in float64)

B is either a quantized constant (int8 weights with static per-tensor or per-output-channel
parameters in its type, B_scale/B_zero absent) or dynamically quantized codes (with B_scale,
B_zero). The parameters must be constant along the inner dimension K (A's last axis, B's
second-to-last), so that the integer sum factors out exactly.
"""

from __future__ import annotations

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.linalg import matmul_shape
from lowbit.ops.registry import QUANT_DOMAIN, REQUIRED, Attr, OpDef, fail, register
from lowbit.quant.dynamic_params import normalize_axes

CODES = (dt.UINT8, dt.INT8)


def _param_shape(node: Node, x: tuple[Dim, ...], axes: tuple[int, ...]) -> tuple[Dim, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(x))


@register
class DynamicQuantize(OpDef):
    """Float32 x to 8-bit codes with parameters computed from x at run time, one set per slice
    over `axes` (see `lowbit.quant.dynamic_params` for the exact formula and rounding):
    `symmetric` 0 gives uint8 codes with a zero point, 1 int8 codes with zero point 0;
    `reduce_range` 1 uses 7 bits. Outputs q, scale (float32) and zero_point (q's dtype), the
    parameters shaped like x with the reduced axes of length 1."""

    op_type = "DynamicQuantize"
    domain = QUANT_DOMAIN
    inputs = ("x", "channel_scale?")
    outputs = ("y", "y_scale", "y_zero_point")
    attrs = {"axes": Attr("ints", REQUIRED), "symmetric": Attr("int", 0),
             "reduce_range": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = in_types[0]
        if x is None or x.dtype != dt.FLOAT32 or x.quant is not None:
            raise fail(node, "input must be a float32 tensor")
        codes = dt.INT8 if node.attrs.get("symmetric", 0) else dt.UINT8
        if x.shape is None:
            raise fail(node, "needs an input of known rank")
        try:
            axes = normalize_axes(node.attrs["axes"], len(x.shape))
        except ValueError as e:
            raise fail(node, str(e)) from None
        c = in_types[1] if len(in_types) > 1 else None
        if c is not None and (c.dtype != dt.FLOAT32 or c.shape is None or len(c.shape) != 1
                              or c.shape[0] != x.shape[-1]):
            raise fail(node, f"channel_scale must be a float32 vector as long as x's last axis "
                             f"({x.shape[-1]}), got {c}")
        p = _param_shape(node, x.shape, axes)
        return [TensorType(codes, x.shape), TensorType(dt.FLOAT32, p), TensorType(codes, p)]


@register
class DynamicMatMul(OpDef):
    """Integer matrix product of dynamically quantized operands, dequantized to float32 (see the
    module docstring for the exact formula)."""

    op_type = "DynamicMatMul"
    domain = QUANT_DOMAIN
    inputs = ("A", "A_scale", "A_zero_point", "B", "B_scale?", "B_zero_point?", "C?")
    outputs = ("Y",)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        a, a_scale, a_zero, b = in_types[:4]
        rest = (list(in_types[4:]) + [None] * 3)[:3]
        b_scale, b_zero, c = rest
        for i, t in ((0, a), (3, b)):
            if t is None or t.dtype not in CODES:
                raise fail(node, f"input {i} must hold 8-bit codes (uint8 or int8)")
        self._check_param(node, a, a_scale, a_zero, -1, "A")
        if b.quant is not None:
            if b_scale is not None or b_zero is not None:
                raise fail(node, "B has static parameters in its type; give no B_scale/B_zero")
            if b.quant.axis is not None and b.shape is not None and \
                    b.quant.axis % len(b.shape) != len(b.shape) - 1:
                raise fail(node, "per-channel B must run along its last axis (output channels)")
        else:
            if b_scale is None or b_zero is None:
                raise fail(node, "B needs B_scale and B_zero_point (or a quantized type)")
            self._check_param(node, b, b_scale, b_zero, -2, "B")
        if c is not None and c.dtype != dt.FLOAT32:
            raise fail(node, "the bias C must be float32")
        return [TensorType(dt.FLOAT32, matmul_shape(node, a.shape, b.shape))]

    @staticmethod
    def _check_param(node: Node, x: TensorType, scale: TensorType | None,
                     zero: TensorType | None, inner: int, label: str) -> None:
        if scale is None or scale.dtype != dt.FLOAT32:
            raise fail(node, f"{label}_scale must be float32")
        if zero is None or zero.dtype != x.dtype:
            raise fail(node, f"{label}_zero_point must have {label}'s dtype {x.dtype}")
        if x.shape is None or scale.shape is None or len(x.shape) < 2:
            return
        if len(scale.shape) != len(x.shape) or scale.shape[inner] != 1:
            raise fail(node, f"{label}_scale {scale.shape} must have {label}'s rank and length "
                             f"1 along the inner dimension (axis {inner})")
