"""Integer kernel parameters of quantized nodes, for the C kernels.

Every multiplier, shift, zero point and bound comes from the reference's parameter function
of the op (`lowbit.backends.reference.kernels.integer_params`, one per integer op, shared with
the reference kernels, `lowbit dump` and the exporters); this module only reshapes them for the
code generator (bias values, float clamps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import integer_params
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.ir.graph import Node
from lowbit.numerics.arith import Requant
from lowbit.ops.product import product_of


def _inputs(node: Node) -> list:
    """The node's inputs as the parameter functions read them: constants' values, and empty
    arrays of the right shape for computed ones (only their shapes are read)."""
    values = []
    for v in node.inputs:
        if v is None:
            values.append(None)
        elif v.is_constant:
            values.append(np.asarray(v.const_value))
        else:
            shape = tuple(d if isinstance(d, int) else 1 for d in (v.type.shape or ()))
            values.append(np.zeros(shape, v.type.dtype.np_dtype))
    return values


def of(node: Node):
    """The reference's integer parameters of `node` (`integer_params`)."""
    return integer_params(node, _inputs(node))


@dataclass
class Product:
    """A quantized Conv/Gemm/MatMul (int_linear.LinearParams): acc = sum (x - zx)(w - zw) +
    bias, then `requant` (a quantized output; `narrow_shift` first shifts a wide accumulator)
    or float32(acc * scale) clamped to `clip` (a float output)."""

    x_zero: int
    w_zero: np.ndarray  # per output channel
    bias: np.ndarray | None  # int64 per output channel
    scale: np.ndarray  # s_x * s_w per output channel (float64)
    requant: Requant | None
    narrow_shift: int
    clip: tuple[float, float]


def product(node: Node, channels: int) -> Product:
    p = of(node)
    geometry = product_of(node)
    at = geometry.bias_input
    bias_value = node.input_or_none(at) if at is not None else None
    bias = None
    if bias_value is not None:
        b = np.asarray(bias_value.const_value, np.int64).reshape(-1)
        bias = np.broadcast_to(b, (channels,)).copy()
    w_zero = np.broadcast_to(np.asarray(p.weight_zero, np.int64).reshape(-1)
                             if np.ndim(p.weight_zero) else np.asarray(p.weight_zero, np.int64),
                             (channels,)).copy()
    scale = np.zeros(channels)
    if p.dequantize_scale is not None:
        scale = np.broadcast_to(np.asarray(p.dequantize_scale, np.float64).reshape(-1)
                                if np.ndim(p.dequantize_scale) else p.dequantize_scale,
                                (channels,)).copy()
    clip = tuple(node.attrs.get(FUSED_CLIP) or (-np.inf, np.inf))
    return Product(int(p.input_zero), w_zero, bias, scale, p.requant, int(p.shift),
                   clip)  # type: ignore[arg-type]
