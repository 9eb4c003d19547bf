"""Activation outlier channels of transformers: channel smoothing of products that read a
LayerNormalization (dynamic quantization from the LayerNorm's constants, static quantization
from the calibrated channel ranges), and outlier channels of products that read a GELU
(dynamic quantization).

Transformer LayerNorm outputs have a few channels far larger than the rest (all-MiniLM-L6-v2:
up to 28 where the median channel peaks near 1), most of all on the [CLS]/[SEP] tokens that
make up most of a short input. A per-row activation scale is set by those channels, so the
other channels of the row get only a few codes. SmoothQuant's remedy moves part of each
channel's range into the weights, `x W = (x / t) (diag(t) W)`; lowbit takes the channel ranges
from the LayerNorm's own constants instead of calibration data:

    a_k = |Scale_k| + |B_k|          (the output of channel k is Scale_k * n_k + B_k, n ~ 1)
    w_k = max_n |W_kn|               (the product's own weight; Q, K and V each get theirs)
    t_k = max(a_k, 1e-5) ** alpha / max(w_k, 1e-5) ** (1 - alpha)

The activation is divided by t (float32) before its run-time quantization (`DynamicQuantize`'s
`channel_scale` input), the float weights are multiplied by t before their int8 quantization;
the product is unchanged in exact arithmetic. Measured on MiniLM (alpha 0.5): embedding cosine
on "Ok" 0.9915 -> 0.9957; products reading GELU outputs gain nothing from a weight-derived
estimate, so only LayerNorm-fed products are smoothed.

Static quantization smooths the same products with SmoothQuant's own ranges, the calibrated
channel extremes `a_k = max(|min_k|, |max_k|)` (`calibrated_ranges`); `lowbit.quant.static`
divides by t in a float Mul before the input's Quantize and quantizes that input with the
min-max range of x / t, which the channel extremes give exactly (the profile holds no histogram
of x / t).

GELU outputs (the FFN down projection's input) have "massive" channels instead: one neuron
reaching 24 on the [CLS] token where the row's median is 0.3, which both coarsens that row's
activation codes and multiplies its weight row's rounding error by 24. Those neurons are the
ones a LayerNorm outlier channel drives through one large up-projection weight, so they are
found from constants alone:

    e_k = max_j |W_up[j, k]| * a_j      (a_j the LayerNorm ranges above)

The `count` channels of largest e_k (MiniLM layers 1-4: the measured massive neuron ranks
first) get a product of their own (`lowbit.quant.dynamic`): integer too, with their own
run-time activation scale and weight scales, while the main product no longer sees them.
"""

from __future__ import annotations

import numpy as np

from lowbit.ir.graph import Node, Value, constant_operand
from lowbit.ops.product import integer_product

FLOOR = 1e-5


def layernorm_ranges(v: Value) -> np.ndarray | None:
    """a_k = |Scale_k| + |B_k| when `v` is the normalized output of a LayerNormalization over
    its last axis with constant Scale (and B), else None. The decomposed form older exporters
    write is one LayerNormalization by then (`lowbit.passes.fuse_layer_norms`, run by
    `lowbit.load`)."""
    if v.type is None or v.type.shape is None or not v.type.shape:
        return None
    node = v.producer
    if node is None or node.op_type != "LayerNormalization" or node.outputs[0] is not v:
        return None
    axis = int(node.attrs.get("axis", -1)) % len(v.type.shape)
    if axis != len(v.type.shape) - 1:
        return None
    scale, bias = node.inputs[1], node.input_or_none(2)
    if not scale.is_constant or (bias is not None and not bias.is_constant):
        return None
    channels = v.type.shape[-1]
    a = np.abs(np.broadcast_to(np.asarray(scale.const_value, np.float64).reshape(-1),
                               (channels,)))
    if bias is not None:
        a = a + np.abs(np.broadcast_to(np.asarray(bias.const_value, np.float64).reshape(-1),
                                       (channels,)))
    return a


def smoothing_factors(ranges: np.ndarray, weights: list[np.ndarray], alpha: float
                      ) -> np.ndarray:
    """t_k of the module docstring (float32) for weights [K, N] (already transposed for Gemm);
    with several weights, w_k is the maximum over all of them."""
    w = np.max([np.abs(np.asarray(x, np.float64)).max(axis=1) for x in weights], axis=0)
    return migration(ranges, w, alpha).astype(np.float32)


def migration(ranges: np.ndarray, weights: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's t_k = a_k ** alpha / w_k ** (1 - alpha) (float64), both floored at FLOOR:
    how much of channel k's range moves into the weights (also channel equalization's)."""
    return (np.maximum(np.asarray(ranges, np.float64), FLOOR) ** alpha
            / np.maximum(np.asarray(weights, np.float64), FLOOR) ** (1 - alpha))


def weight_of(node: Node) -> np.ndarray | None:
    """The constant 2-D weight of a MatMul/Gemm as [K, N] (`ProductGeometry.weight_kn`), or
    None (other nodes, other weights)."""
    geometry = integer_product(node)
    b = node.input_or_none(geometry.weight_input) if geometry is not None else None
    if b is None or not b.is_constant or b.type is None or b.type.shape is None or \
            len(b.type.shape) != 2 or geometry.windowed:
        return None
    return geometry.weight_kn(np.asarray(b.const_value))


def gelu_outlier_channels(v: Value, count: int) -> np.ndarray | None:
    """The `count` channels of largest e_k (module docstring), sorted, when `v` is
    Gelu(MatMul(LayerNorm output, W_up) [+ constant bias]); else None."""
    gelu = v.producer
    if count <= 0 or gelu is None or gelu.op_type != "Gelu":
        return None
    up = gelu.inputs[0].producer
    if up is not None and up.op_type == "Add":
        other = constant_operand(up)
        up = other[1].producer if other is not None else None
    w = weight_of(up) if up is not None else None
    if w is None:
        return None
    ranges = layernorm_ranges(up.inputs[0])
    if ranges is None or w.shape[0] != ranges.size or count >= w.shape[1]:
        return None
    e = (np.abs(np.asarray(w, np.float64)) * ranges[:, None]).max(axis=0)
    return np.sort(np.argsort(-e, kind="stable")[:count]).astype(np.int64)


def calibrated_ranges(channel_min: np.ndarray, channel_max: np.ndarray) -> np.ndarray | None:
    """a_k = max(|min_k|, |max_k|) of a product input's calibrated channel ranges (static
    quantization), or None when a channel has no finite value."""
    a = np.maximum(np.abs(np.asarray(channel_min, np.float64)),
                   np.abs(np.asarray(channel_max, np.float64)))
    return a if np.all(np.isfinite(a)) else None
