"""Kernels of lowbit's Quantize, Dequantize and Requantize (formulas in lowbit.ops.requant)."""

from __future__ import annotations

from lowbit.backends.reference.kernels import kernel
from lowbit.numerics import arith
from lowbit.ops.registry import QUANT_DOMAIN


@kernel("Quantize", QUANT_DOMAIN)
def quantize(node, inputs):
    return [arith.quantize(inputs[0], node.outputs[0].type)]


@kernel("Dequantize", QUANT_DOMAIN)
def dequantize(node, inputs):
    return [arith.dequantize(inputs[0], node.inputs[0].type)]


@kernel("Requantize", QUANT_DOMAIN)
def requantize(node, inputs):
    src, out = node.inputs[0].type, node.outputs[0].type
    M = arith.scale_of(src) / arith.scale_of(out)
    axis = src.quant.axis if src.quant.axis is not None else out.quant.axis
    return [arith.requantize(node, arith.centred(inputs[0], src), M, out, axis=axis)]
