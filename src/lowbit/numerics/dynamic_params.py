"""Run-time quantization parameters of dynamic quantization: the one formula every backend and
the ONNX export reproduce.

For each slice of x over `axes` (all axes: per tensor; the last axis: per row; the last two:
per matrix of a batched product, e.g. per attention head), in float32 throughout:

asymmetric (uint8 codes, qmax = 255, or 127 with reduce_range):
    lo = min(min(x), 0), hi = max(max(x), 0)
    scale = 1 if hi == lo else (hi - lo) / qmax
    zero  = round_half_even(clamp(0 - lo / scale, 0, qmax))
    q     = clamp(round_half_even(x / scale) + zero, 0, qmax)

symmetric (int8 codes, zero point 0, qmax = 127, or 63 with reduce_range):
    m     = max(abs(x))
    scale = 1 if m == 0 else m / qmax
    q     = clamp(round_half_even(x / scale), -qmax, qmax)

Grouped (`group_size` g > 0, one reduced axis a of length K): the slices are the groups of g
consecutive elements along a (the last group holds K - g * (G - 1) when g does not divide K),
G = ceil(K / g) of them; scale and zero point have length G along a.

A slice that is all zeros (a padded token, a masked attention row) gets scale 1 and codes equal
to its zero point: it stands for exact zeros, and never divides by zero. NaN elements are
ignored by the range and give the code `zero` (they stand for 0). The
asymmetric per-tensor 8-bit case equals ONNX DynamicQuantizeLinear (with ONNX Runtime's scale 1
for an all-zero input).

A grouped product (lowbit DynamicMatMul with `group_size`) dequantizes its exact integer group
sums with `dequantize_groups`, in float32 steps of a defined order (one multiply-add chain per
output, which a vector kernel carries in float32 lanes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ASYMMETRIC = "asymmetric"
SYMMETRIC = "symmetric"


def qmax(symmetric: bool, reduce_range: bool) -> int:
    """The largest code: 255/127 (asymmetric uint8), 127/63 (symmetric int8)."""
    if symmetric:
        return 63 if reduce_range else 127
    return 127 if reduce_range else 255


def code_dtype(symmetric: bool) -> np.dtype:
    return np.dtype(np.int8) if symmetric else np.dtype(np.uint8)


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Reduced axes as sorted non-negative ints; ValueError if out of range or repeated."""
    out = sorted(a + rank if a < 0 else a for a in axes)
    if any(a < 0 or a >= rank for a in out) or len(set(out)) != len(out):
        raise ValueError(f"axes {list(axes)} do not fit a rank-{rank} tensor")
    return tuple(out)


def group_count(k: int, group_size: int) -> int:
    """G = ceil(K / g): the number of groups along an inner dimension of length K."""
    return -(-k // group_size)


def split_groups(x: np.ndarray, axis: int, group_size: int) -> np.ndarray:
    """x with `axis` (length K) moved last, zero-padded to G * g and split into [..., G, g]."""
    x = np.moveaxis(x, axis, -1)
    k = x.shape[-1]
    pad = group_count(k, group_size) * group_size - k
    if pad:
        x = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], axis=-1)
    return x.reshape(x.shape[:-1] + (-1, group_size))


def dynamic_params(x: np.ndarray, axes: Sequence[int], symmetric: bool, reduce_range: bool,
                   group_size: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, scale, zero_point) of float32 `x` by the module docstring's formula. Scale and
    zero point keep the reduced axes with length 1 (G with `group_size`), so they broadcast
    against x (against its grouped form)."""
    x = np.asarray(x, np.float32)
    if group_size:
        (axis,) = normalize_axes(axes, x.ndim)
        groups = split_groups(x, axis, group_size)
        q, scale, zero = dynamic_params(groups, [-1], symmetric, reduce_range)
        k = x.shape[axis]
        q = q.reshape(q.shape[:-2] + (-1,))[..., :k]
        return (np.moveaxis(q, -1, axis), np.moveaxis(scale[..., 0], -1, axis),
                np.moveaxis(zero[..., 0], -1, axis))
    ax = normalize_axes(axes, x.ndim)
    top = np.float32(qmax(symmetric, reduce_range))
    nan = np.isnan(x)
    with np.errstate(all="ignore"):
        if symmetric:
            m = np.max(np.where(nan, 0, np.abs(x)), axis=ax, keepdims=True, initial=0.0)
            scale = np.where(m == 0, np.float32(1), m / top).astype(np.float32)
            zero = np.zeros(scale.shape, np.float32)
            low = -top
        else:
            lo = np.min(np.where(nan, 0, x), axis=ax, keepdims=True, initial=0.0)
            hi = np.max(np.where(nan, 0, x), axis=ax, keepdims=True, initial=0.0)
            lo, hi = np.minimum(lo, 0).astype(np.float32), np.maximum(hi, 0).astype(np.float32)
            scale = np.where(hi == lo, np.float32(1), (hi - lo) / top).astype(np.float32)
            zero = np.rint(np.clip(np.float32(0) - lo / scale, 0, top)).astype(np.float32)
            low = np.float32(0)
        q = np.rint(x / scale).astype(np.float64)
    q[nan] = 0.0
    codes = np.clip(q + zero, low, top)
    dtype = code_dtype(symmetric)
    return codes.astype(dtype), scale, zero.astype(dtype)


def dequantize_groups(acc: np.ndarray, a_scale: np.ndarray, b_scale: np.ndarray) -> np.ndarray:
    """The float32 result of a grouped product from its exact integer group sums.

    acc [..., G, M, N] (group j's sum of (a - a_zero)(b - b_zero), integers), a_scale
    [..., M, G] (per row and group), b_scale [..., G, N] (per group and column), batch axes
    broadcasting. Every step in float32, groups in order:

        y = 0;  for j in 0 .. G-1:  y = y + (float32(acc_j) * b_scale_j) * a_scale_j
    """
    acc = np.asarray(acc)
    a_scale = np.asarray(a_scale, np.float32)
    b_scale = np.asarray(b_scale, np.float32)
    y = np.zeros(np.broadcast_shapes(acc.shape[:-3] + acc.shape[-2:],
                                     a_scale.shape[:-2] + acc.shape[-2:],
                                     b_scale.shape[:-2] + acc.shape[-2:]), np.float32)
    for j in range(acc.shape[-3]):
        term = acc[..., j, :, :].astype(np.float32) * b_scale[..., j:j + 1, :]
        y = y + term * a_scale[..., :, j:j + 1]
    return y
