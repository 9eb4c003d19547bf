"""Product geometry: the facts about a product op (Conv, ConvTranspose, Gemm, MatMul,
DynamicMatMul) that quantizers, kernels, exporters and tools ask the op for, the way an ONNX
schema carries them, instead of branching on the op type.

A product computes, for each output channel n and each input vector x of length K,

    y[n] = sum_k W[n, k] * x[k]  (+ b[n])

where W is the weight seen as a matrix [N, K] (`weight_matrix`): Conv's W.reshape(C_out, -1)
(K = C_in / group * prod(kernel), in the order of its receptive fields, channel-major), Gemm's
B^T ([N, K] as stored with transB, else the transpose of B [K, N]), MatMul's B^T (K the
second-to-last axis of B). `OpDef.product(node)` returns a node's `ProductGeometry`; every
reading of Gemm's transA / transB attributes happens here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.ir.graph import Node
from lowbit.ir.types import Dim


@dataclass(frozen=True)
class ProductGeometry:
    """Where a product node's operands are and how its weight is laid out (`OpDef.product`)."""

    weight_input: int
    """Index of the weight operand (Conv W, Gemm / MatMul B, DynamicMatMul B)."""
    bias_input: int | None
    """Index of the optional bias operand (added once per output channel), or None."""
    weight_channel_axis: int | None
    """Axis of the weight along the output channels (non-negative), or None when the output
    channels are not one weight axis (ConvTranspose with groups, a 1-D MatMul B)."""
    weight_reduction_axes: tuple[int, ...] | None
    """Axes of the weight summed over, their sizes multiplying to K; None when no weight axes
    do (ConvTranspose, whose taps overlap)."""
    input_channel_axis: int
    """Axis of the data input that the weight reduces over (its input channels): Conv 1, Gemm
    1 (0 with transA), MatMul -1 (the profile keys channel statistics by it)."""
    output_channel_axis: int
    """Axis of the result along the output channels: Conv 1, Gemm 1, MatMul -1."""
    groups: int = 1
    """Convolution groups: each group of C_out / groups output channels reads its own
    C_in / groups input channels (1 for the dense products)."""
    windowed: bool = False
    """The input vectors are receptive fields (convolutions), not rows of the data input."""
    trans_a: bool = False
    trans_b: bool = False

    data_input: int = 0
    """Index of the data (activation) operand."""

    # -- sizes ----------------------------------------------------------------------------------
    def reduction_size(self, weight_shape: tuple[Dim, ...]) -> Dim:
        """K, the number of products summed into each output (None if a dim is unknown)."""
        if self.weight_reduction_axes is None:
            return None
        total = 1
        for axis in self.weight_reduction_axes:
            d = weight_shape[axis]
            if not isinstance(d, int):
                return None
            total *= d
        return total

    def output_channels(self, weight_shape: tuple[Dim, ...] | None) -> Dim:
        """N, the number of output channels the weight holds (None when unknown)."""
        if weight_shape is None or self.weight_channel_axis is None:
            return None
        d = weight_shape[self.weight_channel_axis]
        return d if isinstance(d, int) else None

    # -- layouts --------------------------------------------------------------------------------
    def weight_matrix(self, w: np.ndarray) -> np.ndarray:
        """The weight as rows [N, K], one per output channel, in the order of the input vectors
        (a view where the layout allows): Conv W.reshape(C_out, -1), Gemm B (transB) or B^T,
        MatMul B^T (2-D B)."""
        if self.windowed:
            if self.weight_channel_axis != 0:
                raise ValueError("the weight rows of a grouped ConvTranspose are not defined")
            return w.reshape(w.shape[0], -1)
        return w if self.trans_b else w.T

    def weight_from_matrix(self, rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The inverse of `weight_matrix`: rows [N, K] back in the weight's layout `shape`."""
        if self.windowed:
            return rows.reshape(shape)
        return rows if self.trans_b else rows.T

    def weight_kn(self, w: np.ndarray) -> np.ndarray:
        """A dense product's weight as [K, N] (the right operand of `A @ W`): B itself unless
        transB, then B^T (a view)."""
        return w.T if self.trans_b else w

    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A dense product's operands as `A' @ B'`: A^T with transA, B^T with transB (views)."""
        return (a.T if self.trans_a else a), (b.T if self.trans_b else b)

    def input_rows(self, x: np.ndarray) -> np.ndarray:
        """A dense product's data input as rows [P, K], one input vector each: A's columns
        with transA, else the vectors along its last axis."""
        return x.T if self.trans_a else x.reshape(-1, x.shape[-1])


def weight_rank(node: Node, index: int) -> int | None:
    """The rank of operand `index` of `node`, from its type or its constant value."""
    v = node.input_or_none(index)
    if v is None:
        return None
    if v.type is not None and v.type.shape is not None:
        return len(v.type.shape)
    return None if v.const_value is None else int(np.ndim(v.const_value))


def matrix_product(node: Node, weight_input: int, bias_input: int | None
                   ) -> ProductGeometry:
    """The geometry of a numpy.matmul-like product (MatMul, DynamicMatMul): B [..., K, N]."""
    rank = weight_rank(node, weight_input)
    if rank is None:
        channel, reduce = None, (-2,)
    elif rank == 1:
        channel, reduce = None, (0,)
    else:
        channel, reduce = rank - 1, (rank - 2,)
    return ProductGeometry(weight_input, bias_input, channel, reduce, input_channel_axis=-1,
                           output_channel_axis=-1)


def gemm_product(node: Node, weight_input: int, bias_input: int) -> ProductGeometry:
    """The geometry of a Gemm-like product (Gemm, QGemm), the one reading of transA and transB:
    B is (K, N), or (N, K) with transB; A is (M, K), or (K, M) with transA."""
    trans_a = bool(node.attrs.get("transA", 0))
    trans_b = bool(node.attrs.get("transB", 0))
    return ProductGeometry(weight_input, bias_input, 0 if trans_b else 1,
                           (1,) if trans_b else (0,), input_channel_axis=0 if trans_a else 1,
                           output_channel_axis=1, trans_a=trans_a, trans_b=trans_b)


def product_of(node: Node) -> ProductGeometry | None:
    """The geometry of `node` if its op is a product, else None."""
    from lowbit.ops.registry import lookup

    op = lookup(node.op_type, node.domain)
    return None if op is None else op.product(node)


def integer_product(node: Node) -> ProductGeometry | None:
    """The geometry of `node` if it is a product that computes in integers once quantized (an
    ONNX op with the COMPUTE rule: Conv, Gemm, MatMul), else None."""
    from lowbit.ops.registry import COMPUTE, lookup

    op = lookup(node.op_type, node.domain)
    if op is None or op.quant_rule != COMPUTE:
        return None
    return op.product(node)
