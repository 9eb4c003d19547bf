"""lowbit's dynamic-quantization ops (domain "lowbit"): activation parameters computed at run time.

A static quantized tensor carries its parameters in its type (`QuantParams`); a dynamically
quantized one cannot, since they depend on the input. Here they travel as tensors beside the
codes, shaped to broadcast against them (a reduced axis has length 1):

    DynamicQuantize(x, channel_scale?) -> (q, scale, zero_point)
        the formula of `lowbit.numerics.dynamic_params`, per slice over `axes`, applied to
        float32(x / channel_scale) when a (constant, last-axis) channel_scale is given;
    TorchDynamicQuantize(x) -> (q, scale, zero_point)
        PyTorch's (fbgemm's) choice for a dynamically quantized Linear, one set for the whole
        tensor (`lowbit.numerics.torch_params`), scalar parameters;
    DynamicMatMul(A, A_scale, A_zero, B, B_scale?, B_zero?, C?) -> Y (float32)
        acc = matmul(A - A_zero, B - B_zero)                      exact integers
        Y   = float32(acc * (A_scale * B_scale)) + C               (product in float64)

B is either a quantized constant (int8 weights with static per-tensor or per-output-channel
parameters in its type, B_scale/B_zero absent) or codes with explicit B_scale, B_zero
(dynamically quantized activations, or grouped int8 weights). The parameters must be constant
along the inner dimension K (A's last axis, B's second-to-last), so that the integer sum
factors out exactly, or, with `group_size` g > 0, constant within each of the G = ceil(K / g)
groups of g consecutive elements along K (the parameters then have length G there):

        acc_j = matmul(A_j - A_zero_j, B_j - B_zero_j)            group j, exact integers
        Y     = dequantize_groups(acc, A_scale, B_scale) + C      (float32: y = 0, then
                y = y + (float32(acc_j) * B_scale_j) * A_scale_j for j = 0 .. G-1)
"""

from __future__ import annotations

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.numerics.dynamic_params import group_count, normalize_axes
from lowbit.ops.linalg import inner_dim, matmul_shape
from lowbit.ops.product import ProductGeometry, matrix_product
from lowbit.ops.registry import QUANT_DOMAIN, REQUIRED, Attr, OpDef, Work, fail, flag, register
from lowbit.ops.work import product_work

CODES = (dt.UINT8, dt.INT8)


def groups_along(k: Dim, group_size: int) -> Dim:
    """The number of groups G = ceil(K / g) along a dimension of length K (1 without groups;
    unknown for a symbolic K)."""
    if not group_size:
        return 1
    return group_count(k, group_size) if isinstance(k, int) else None


def _param_shape(x: tuple[Dim, ...], axes: tuple[int, ...], group_size: int) -> tuple[Dim, ...]:
    return tuple(groups_along(d, group_size) if i in axes else d for i, d in enumerate(x))


@register
class DynamicQuantize(OpDef):
    """Float32 x to 8-bit codes with parameters computed from x at run time, one set per slice
    over `axes` (see `lowbit.numerics.dynamic_params` for the exact formula and rounding):
    `symmetric` 0 gives uint8 codes with a zero point, 1 int8 codes with zero point 0;
    `reduce_range` 1 uses 7 bits. Outputs q, scale (float32) and zero_point (q's dtype), the
    parameters shaped like x with the reduced axes of length 1. With `group_size` g > 0 the one
    reduced axis is cut into groups of g elements, one parameter set each (length ceil(K / g)
    along that axis)."""

    op_type = "DynamicQuantize"
    domain = QUANT_DOMAIN
    inputs = ("x", "channel_scale?")
    outputs = ("y", "y_scale", "y_zero_point")
    attrs = {"axes": Attr("ints", REQUIRED), "symmetric": flag(0),
             "reduce_range": flag(0), "group_size": Attr("int", 0)}

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
        group_size = node.attrs.get("group_size", 0)
        if group_size < 0 or (group_size and len(axes) != 1):
            raise fail(node, f"group_size {group_size} needs one reduced axis and g >= 0, got "
                             f"axes {list(axes)}")
        c = in_types[1] if len(in_types) > 1 else None
        if c is not None and (c.dtype != dt.FLOAT32 or c.shape is None or len(c.shape) != 1
                              or c.shape[0] != x.shape[-1]):
            raise fail(node, f"channel_scale must be a float32 vector as long as x's last axis "
                             f"({x.shape[-1]}), got {c}")
        p = _param_shape(x.shape, axes, group_size)
        return [TensorType(codes, x.shape), TensorType(dt.FLOAT32, p), TensorType(codes, p)]


@register
class TorchDynamicQuantize(OpDef):
    """Float32 x to uint8 codes with one scale and zero point for the whole tensor, chosen at
    run time as PyTorch's dynamically quantized Linear (fbgemm) chooses them: 7-bit codes with
    `reduce_range` 1 (fbgemm on x86), fbgemm's smallest scale and zero-point rule, quantized by
    one float32 rounding of x * (1 / scale) + zero (`lowbit.numerics.torch_params` states the
    exact formula). Outputs q (uint8, x's shape), scale (float32 scalar) and zero_point (uint8
    scalar), as ONNX DynamicQuantizeLinear's."""

    op_type = "TorchDynamicQuantize"
    domain = QUANT_DOMAIN
    inputs = ("x",)
    outputs = ("y", "y_scale", "y_zero_point")
    attrs = {"reduce_range": flag(1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = in_types[0]
        if x is None or x.dtype != dt.FLOAT32 or x.quant is not None:
            raise fail(node, "input must be a float32 tensor")
        return [TensorType(dt.UINT8, x.shape), TensorType(dt.FLOAT32, ()),
                TensorType(dt.UINT8, ())]


@register
class TorchGelu(OpDef):
    """The erf form of GELU as PyTorch's exporter writes it (Div, Erf, Add, Mul, Mul), as one op
    of the same float32 steps: d = x / divisor, e = float32(erf(float64(d))), a = e + one,
    y = (x * a) * half (each step one IEEE float32 operation; erf as the reference's Erf). The
    cpu backend's rewrite of the five ops (backends/cpu/torch_products) makes it."""

    op_type = "TorchGelu"
    domain = QUANT_DOMAIN
    inputs = ("x",)
    outputs = ("y",)
    attrs = {"divisor": Attr("float", REQUIRED), "one": Attr("float", REQUIRED),
             "half": Attr("float", REQUIRED)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x = in_types[0]
        if x is None or x.dtype != dt.FLOAT32 or x.quant is not None:
            raise fail(node, "input must be a float32 tensor")
        return [TensorType(dt.FLOAT32, x.shape)]


@register
class DynamicMatMul(OpDef):
    """Integer matrix product of dynamically quantized operands, dequantized to float32 (see the
    module docstring for the exact formula)."""

    op_type = "DynamicMatMul"
    domain = QUANT_DOMAIN
    inputs = ("A", "A_scale", "A_zero_point", "B", "B_scale?", "B_zero_point?", "C?")
    outputs = ("Y",)
    attrs = {"group_size": Attr("int", 0)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        a, a_scale, a_zero, b = in_types[:4]
        rest = (list(in_types[4:]) + [None] * 3)[:3]
        b_scale, b_zero, c = rest
        for i, t in ((0, a), (3, b)):
            if t is None or t.dtype not in CODES:
                raise fail(node, f"input {i} must hold 8-bit codes (uint8 or int8)")
        g = node.attrs.get("group_size", 0)
        if g < 0:
            raise fail(node, f"group_size must be >= 0, got {g}")
        self._check_param(node, a, a_scale, a_zero, -1, "A", g)
        if b.quant is not None:
            if g:
                raise fail(node, "grouped B takes its parameters as B_scale/B_zero_point "
                                 "inputs, not in its type")
            if b_scale is not None or b_zero is not None:
                raise fail(node, "B has static parameters in its type; give no B_scale/B_zero")
            if b.quant.axis is not None and b.shape is not None and \
                    b.quant.axis % len(b.shape) != len(b.shape) - 1:
                raise fail(node, "per-channel B must run along its last axis (output channels)")
        else:
            if b_scale is None or b_zero is None:
                raise fail(node, "B needs B_scale and B_zero_point (or a quantized type)")
            self._check_param(node, b, b_scale, b_zero, -2, "B", g)
        if c is not None and c.dtype != dt.FLOAT32:
            raise fail(node, "the bias C must be float32")
        return [TensorType(dt.FLOAT32, matmul_shape(node, a.shape, b.shape))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return product_work(out_types[0], inner_dim(in_types[0]))

    def product(self, node: Node) -> ProductGeometry:
        """B (input 3) is (..., K, N), C (input 6) the float32 bias."""
        return matrix_product(node, 3, 6)

    @staticmethod
    def _check_param(node: Node, x: TensorType, scale: TensorType | None,
                     zero: TensorType | None, inner: int, label: str, group_size: int) -> None:
        if scale is None or scale.dtype != dt.FLOAT32:
            raise fail(node, f"{label}_scale must be float32")
        if zero is None or zero.dtype != x.dtype:
            raise fail(node, f"{label}_zero_point must have {label}'s dtype {x.dtype}")
        if x.shape is None or scale.shape is None or len(x.shape) < 2:
            return
        want = groups_along(x.shape[inner], group_size)
        if len(scale.shape) != len(x.shape) or (want is not None
                                                and scale.shape[inner] not in (want, None)):
            raise fail(node, f"{label}_scale {scale.shape} must have {label}'s rank and length "
                             f"{want} along the inner dimension (axis {inner})")
