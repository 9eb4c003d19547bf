"""Kernels of lowbit's Quantize, Dequantize and Requantize (formulas in lowbit.ops.requant)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.reference.kernels import Inputs, integer_params, kernel, params
from lowbit.ir.graph import Node
from lowbit.numerics import arith
from lowbit.numerics.arith import Requant
from lowbit.ops.registry import QUANT_DOMAIN


@kernel("Quantize", QUANT_DOMAIN)
def quantize(node, inputs):
    return [arith.quantize(inputs[0], node.outputs[0].type)]


@kernel("Dequantize", QUANT_DOMAIN)
def dequantize(node, inputs):
    return [arith.dequantize(inputs[0], node.inputs[0].type)]


@dataclass(frozen=True, eq=False)
class RequantizeParams:
    """Requantize: `y = requant.apply(q - input_zero)`, M = s_x / s_y; per-channel zero
    points and factors run along `requant.axis` (the input's or the output's channel axis)."""

    input_zero: np.ndarray
    requant: Requant


@params("Requantize", domain=QUANT_DOMAIN, typed=False)
def requantize_params(node: Node, inputs: Inputs) -> RequantizeParams:
    """`RequantizeParams` of a Requantize node."""
    src, out = node.inputs[0].type, node.outputs[0].type
    M = arith.scale_of(src) / arith.scale_of(out)
    axis = src.quant.axis if src.quant.axis is not None else out.quant.axis
    return RequantizeParams(arith.zero_of(src), arith.output_requant(node, M, out, axis=axis))


@kernel("Requantize", QUANT_DOMAIN)
def requantize(node, inputs):
    p = integer_params(node, inputs)
    return [p.requant.apply(arith.centred(inputs[0], node.inputs[0].type))]
