"""Reference kernels of lowbit's dynamic-quantization ops (`lowbit.ops.dynamic`).

DynamicQuantize computes `lowbit.numerics.dynamic_params` exactly, on float32(x / channel_scale)
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

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.kernels.int_linear import matmul_exact
from lowbit.errors import KernelError
from lowbit.numerics import arith
from lowbit.numerics.dynamic_params import dequantize_groups, dynamic_params, split_groups
from lowbit.numerics.fixed_point import INT32_MAX, INT32_MIN
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


@kernel("DynamicMatMul", QUANT_DOMAIN)
def dynamic_matmul(node, inputs):
    a, a_scale, a_zero, b = inputs[:4]
    b_scale, b_zero, c = (list(inputs[4:]) + [None] * 3)[:3]
    tb = node.inputs[3].type
    g = node.attrs.get("group_size", 0)
    if g:
        return [_grouped(node, g, a, a_scale, a_zero, b, b_scale, b_zero, c)]
    ca = a.astype(np.int64) - a_zero.astype(np.int64)
    if tb.quant is not None:
        cb = arith.centred(b, tb)
        s_b = arith.scale_of(tb)
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
