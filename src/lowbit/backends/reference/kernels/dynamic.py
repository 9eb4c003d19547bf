"""Reference kernels of lowbit's dynamic-quantization ops (`lowbit.ops.dynamic`).

TorchDynamicQuantize computes `lowbit.numerics.torch_params` exactly. DynamicQuantize computes
`lowbit.numerics.dynamic_params` exactly, on float32(x / channel_scale)
when a channel scale is given. DynamicMatMul centres both
operands on their zero points in int64, multiplies them exactly (`int_linear.matmul_exact`),
checks the int32 bound, and dequantizes once:

    Y = float32(float64(acc) * float64(A_scale) * float64(B_scale)) + C

where B_scale is the weight type's scale (per output channel along B's last axis) or the run-time
B_scale tensor. |acc| <= K * 255 * 128 for 8-bit operands, inside int32 for K < 65794.

With `group_size` g, each group's sum acc_j (|acc_j| <= g * 255 * 255) is exact and

    Y = dequantize_groups(acc, A_scale, B_scale) + C      (lowbit.numerics.dynamic_params)

that is y = 0, y = y + (float32(acc_j) * B_scale_j) * A_scale_j for each group j in order, in
float32; the zero-padded tail of a last, shorter group adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.floatmath import float_unary
from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.backends.reference.kernels.int_linear import matmul_exact, weight_sums
from lowbit.backends.reference.special import erf
from lowbit.errors import KernelError
from lowbit.ir.graph import Node
from lowbit.numerics import arith
from lowbit.numerics.dynamic_params import dequantize_groups, dynamic_params, split_groups
from lowbit.numerics.fixed_point import INT32_MAX, INT32_MIN
from lowbit.numerics.torch_params import torch_dynamic_quantize
from lowbit.ops.product import product_of
from lowbit.ops.registry import QUANT_DOMAIN


@kernel("DynamicQuantize", QUANT_DOMAIN)
def dynamic_quantize(node, inputs):
    x, channel_scale = (list(inputs) + [None])[:2]
    if channel_scale is not None:
        x = (np.asarray(x, np.float32) / channel_scale.astype(np.float32)).astype(np.float32)
    q, scale, zero = dynamic_params(x, node.attrs["axes"], bool(node.attrs.get("symmetric", 0)),
                                    bool(node.attrs.get("reduce_range", 0)),
                                    node.attrs.get("group_size", 0))
    return [q, scale, zero]


@kernel("TorchDynamicQuantize", QUANT_DOMAIN)
def torch_dynamic_quantize_kernel(node, inputs):
    q, scale, zero = torch_dynamic_quantize(inputs[0], bool(node.attrs.get("reduce_range", 1)))
    return [q, np.asarray(scale, np.float32), np.asarray(zero, np.uint8)]


@kernel("TorchGelu", QUANT_DOMAIN)
def torch_gelu_kernel(node, inputs):
    """The five ops' steps (lowbit.ops.dynamic.TorchGelu), erf as the reference's Erf."""
    f = np.float32
    x = np.asarray(inputs[0], np.float32)
    with np.errstate(all="ignore"):
        e = float_unary(erf)(x / f(node.attrs["divisor"]))
        return [((x * (e + f(node.attrs["one"]))) * f(node.attrs["half"])).astype(np.float32)]


@dataclass(frozen=True, eq=False)
class DynamicMatMulParams:
    """The static integers of a DynamicMatMul (module docstring) whose B has its parameters in
    its type (int8 weights), per tensor or per output channel (B's last axis):

        acc[n] = sum_k (a[k] - A_zero) * (b[k, n] - weight_zero[n])          exact, in int32
               = sum_k a[k] * (b[k, n] - weight_zero[n]) - A_zero * weight_sums[n]
        y[n]   = float32(float64(acc[n]) * (float64(A_scale) * weight_scale[n])) + C[n]

    with A_scale, A_zero computed at run time (DynamicQuantize). With B's parameters given as
    run-time inputs (B_scale, B_zero_point: activations or grouped weights) the fields are None
    and only `group_size` (g, 0 without groups) is static."""

    weight_zero: np.ndarray | None
    """int64, 0-d or [N]."""
    weight_scale: np.ndarray | None
    """float64, 0-d or [N]."""
    weight_sums: np.ndarray | None
    """sum over K of (b - weight_zero) per output channel, int64 [..., N]."""
    group_size: int


@params("DynamicMatMul", domain=QUANT_DOMAIN, typed=False)
def dynamic_matmul_params(node: Node, inputs: Inputs) -> DynamicMatMulParams:
    """`DynamicMatMulParams` of a DynamicMatMul for its inputs (B's codes for `weight_sums`)."""
    group = int(node.attrs.get("group_size", 0))
    geometry = product_of(node)
    tb = node.inputs[geometry.weight_input].type
    if group or tb.quant is None:
        return DynamicMatMulParams(None, None, None, group)
    zero = arith.zero_of(tb)
    return DynamicMatMulParams(zero, arith.scale_of(tb),
                               weight_sums(inputs[geometry.weight_input], zero, geometry), group)


@kernel("DynamicMatMul", QUANT_DOMAIN)
def dynamic_matmul(node, inputs):
    a, a_scale, a_zero, b = inputs[:4]
    b_scale, b_zero, c = (list(inputs[4:]) + [None] * 3)[:3]
    p = integer_params(node, inputs)
    g = p.group_size
    if g:
        return [_grouped(node, g, a, a_scale, a_zero, b, b_scale, b_zero, c)]
    ca = a.astype(np.int64) - a_zero.astype(np.int64)
    if p.weight_zero is not None:
        zero = p.weight_zero
        cb = b.astype(np.int64) - (zero if zero.ndim == 0 else zero.reshape(-1))
        s_b = p.weight_scale
    else:
        cb = b.astype(np.int64) - b_zero.astype(np.int64)
        s_b = np.asarray(b_scale, np.float64)
    acc = matmul_exact(ca, cb)
    if acc.size and (acc.max() > INT32_MAX or acc.min() < INT32_MIN):
        raise KernelError(f"{node.describe()}: the int32 accumulator overflows (K = "
                          f"{a.shape[-1]}); quantize this product with reduce_range")
    y = (acc.astype(np.float64) * (np.asarray(a_scale, np.float64) * s_b)).astype(np.float32)
    if c is not None:
        y = (y + c.astype(np.float32)).astype(np.float32)
    return [y]


def _spread(zero: np.ndarray, axis: int, group_size: int, k: int) -> np.ndarray:
    """Per-group zero points repeated over their group's elements along `axis` (length k)."""
    full = np.repeat(zero.astype(np.int64), group_size, axis=axis)
    return np.take(full, np.arange(k), axis=axis)


def _grouped(node, g: int, a, a_scale, a_zero, b, b_scale, b_zero, c) -> np.ndarray:
    k = a.shape[-1]
    ca = a.astype(np.int64) - _spread(a_zero, -1, g, k)
    cb = b.astype(np.int64) - _spread(b_zero, -2, g, k)
    groups_a = np.moveaxis(split_groups(ca, -1, g), -2, -3)   # [..., G, M, g]
    groups_b = np.moveaxis(split_groups(cb, -2, g), -3, -1)   # [..., G, g, N]
    acc = matmul_exact(groups_a, groups_b)  # [..., G, M, N]
    y = dequantize_groups(acc, a_scale, b_scale)
    if c is not None:
        y = (y + c.astype(np.float32)).astype(np.float32)
    return y
