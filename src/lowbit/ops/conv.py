"""Convolutions: Conv and ConvTranspose (ONNX version 22; float operands).

Layouts are ONNX's: X is (N, C, D1, ..., Dn), Conv's W is (M, C / group, k1, ..., kn) and
ConvTranspose's W is (C, M / group, k1, ..., kn); B is (M,). Window geometry (pads, auto_pad,
strides, dilations, output sizes) is in `conv_geometry`. Quantized operands (X, W and B of
different integer dtypes) are accepted: the COMPUTE rule decides how they are computed.
"""

from __future__ import annotations

import math

from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.conv_geometry import (
    WINDOW_ATTRS,
    Window,
    transpose_geometry,
    window_from_attrs,
)
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types, same_dtype
from lowbit.ops.product import ProductGeometry, weight_rank
from lowbit.ops.registry import COMPUTE, Attr, OpDef, Work, fail, numel, register, sizes
from lowbit.ops.work import window_work


def _static(d: Dim) -> int | None:
    return d if isinstance(d, int) else None


def conv_window(node: Node, w_shape: tuple[Dim, ...], spatial_rank: int) -> Window:
    """The validated window of a Conv-like node whose weight has shape `w_shape` (the kernel
    comes from kernel_shape or from W's static spatial dims, which must agree)."""
    w_kernel = [_static(d) for d in w_shape[2:]]
    kernel = None if any(k is None for k in w_kernel) else w_kernel
    attr = node.attrs.get("kernel_shape")
    if attr and kernel is not None and list(attr) != kernel:
        raise fail(node, f"kernel_shape {list(attr)} does not match the weight's spatial "
                         f"shape {kernel}")
    return window_from_attrs(node, kernel, spatial_rank)


def check_channels(node: Node, x: TensorType, w: TensorType, group: int, transposed: bool
                   ) -> None:
    """Refuse a non-positive group and channel counts that do not fit the groups (when
    static): Conv's W is (M, C / group, ...), ConvTranspose's W is (C, M / group, ...)."""
    if group <= 0:
        raise fail(node, f"group must be positive, got {group}")
    assert w.shape is not None
    c = _static(x.shape[1]) if x.shape is not None and len(x.shape) > 1 else None
    if transposed:
        wc = _static(w.shape[0])
        if wc is not None and wc % group:
            raise fail(node, f"{wc} input channels do not split into {group} groups")
        if c is not None and wc is not None and c != wc:
            raise fail(node, f"the input has {c} channels but the weight expects {wc}")
        return
    m, cg = _static(w.shape[0]), _static(w.shape[1])
    if m is not None and m % group:
        raise fail(node, f"{m} output channels do not split into {group} groups")
    if c is not None and cg is not None and c != cg * group:
        raise fail(node, f"the input has {c} channels but the weight expects {cg} per group x "
                         f"{group} groups = {cg * group}")


def conv_operands(node: Node, in_types: list[TensorType | None]
                  ) -> tuple[TensorType, TensorType, Window]:
    """Check X, W and B of a Conv-like node and resolve its window.

    X and W must have equal ranks of at least 3 and float dtypes, equal unless quantized.
    """
    types = known_types(node, in_types)[:3]
    x, w = types[0], types[1]
    assert x is not None and w is not None
    for i, t in enumerate(types):
        if t is not None:
            check_dtype(node, i, t, FLOATS)
    if not any(t is not None and t.quant is not None for t in types):
        same_dtype(node, types, range(len(types)))
    if w.shape is None:
        raise fail(node, "the weight's rank is unknown")
    if len(w.shape) < 3:
        raise fail(node, f"the weight has rank {len(w.shape)}; it needs (out, in, kernel...) "
                         f"with at least one spatial axis")
    if x.shape is not None and len(x.shape) != len(w.shape):
        raise fail(node, f"input rank {len(x.shape)} differs from weight rank {len(w.shape)}")
    check_channels(node, x, w, int(node.attrs.get("group", 1)),
                   transposed=node.op_type == "ConvTranspose")
    return x, w, conv_window(node, w.shape, len(w.shape) - 2)


def conv_work(node: Node, x: TensorType | None, w: TensorType | None,
              out: TensorType | None) -> Work:
    """A convolution's cost: C / group input channels times the kernel per output element."""
    if w is None or w.shape is None or not all(isinstance(d, int) for d in w.shape[1:]):
        return Work(numel(out))
    kernel = w.shape[2:]
    pads = node.attrs.get("pads") or []
    group = int(node.attrs.get("group", 1))
    return window_work(x, out, kernel, pads, w.shape[1],  # type: ignore[arg-type]
                       im2col=x is not None and x.shape is not None and len(x.shape) > 1
                       and x.shape[1] != group)


def _check_bias(node: Node, bias: TensorType | None, channels: Dim) -> None:
    if bias is None or bias.shape is None:
        return
    if len(bias.shape) != 1:
        raise fail(node, f"the bias must be 1-D, got shape {bias.shape}")
    b = bias.shape[0]
    if isinstance(b, int) and isinstance(channels, int) and b != channels:
        raise fail(node, f"the bias has {b} values for {channels} output channels")


@register
class Conv(OpDef):
    """Y[n, m, o] = B[m] + sum over c in m's group and kernel offsets k of
    X_padded[n, c, o * strides + k * dilations] * W[m, c - group_start, k].

    Channels are split into `group` groups: C / group input channels feed each of the M / group
    output channels of a group (group = C = M is a depthwise convolution). Padding is zero.
    """

    op_type = "Conv"
    inputs = ("X", "W", "B?")
    attrs = {**WINDOW_ATTRS, "group": Attr("int", 1, low=1)}
    fusable = True
    quant_rule = COMPUTE

    def product(self, node: Node) -> ProductGeometry:
        """W (M, C / group, k1, ..., kn) reduces over every axis but the first: K = C / group *
        k1 * ... * kn, the receptive field of one output element."""
        rank = weight_rank(node, 1) or weight_rank(node, 0)
        return ProductGeometry(1, 2, 0, tuple(range(1, rank)) if rank else None,
                               input_channel_axis=1,
                               output_channel_axis=1, groups=int(node.attrs.get("group", 1)),
                               windowed=True)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, w, window = conv_operands(node, in_types)
        m = w.shape[0]  # type: ignore[index]
        _check_bias(node, in_types[2] if len(in_types) > 2 else None, m)
        if x.shape is None:
            shape = None
        else:
            spatial = window.output_dims(x.shape[2:])
            if any(isinstance(d, int) and d <= 0 for d in spatial):
                raise fail(node, f"the window does not fit the input {x.shape}: output "
                                 f"spatial size {spatial}")
            shape = (x.shape[0], m, *spatial)
        return [TensorType(x.dtype, shape)]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return conv_work(node, in_types[0], in_types[1], out_types[0])


@register
class ConvTranspose(OpDef):
    """The gradient of Conv with respect to its input: every input element X[n, c, i] adds
    X[n, c, i] * W[c, m - group_start, k] to Y_full[n, m, i * strides + k * dilations];
    Y is Y_full cropped by the pads (or grown by output_padding) plus B[m].

    Output size per spatial axis: s * (i - 1) + output_padding + d * (k - 1) + 1 - pads,
    or `output_shape` when given, or i * s for SAME_* (see `transpose_geometry`).
    """

    op_type = "ConvTranspose"
    inputs = ("X", "W", "B?")
    attrs = {**WINDOW_ATTRS, "group": Attr("int", 1, low=1),
             "output_padding": sizes(0), "output_shape": sizes(1)}
    fusable = True

    def product(self, node: Node) -> ProductGeometry:
        """W (C, M / group, k...): its axis 1 runs along the output channels with one group
        only; the taps of neighbouring inputs overlap, so no weight axes multiply to K."""
        group = int(node.attrs.get("group", 1))
        return ProductGeometry(1, 2, 1 if group == 1 else None, None, input_channel_axis=1,
                               output_channel_axis=1, groups=group, windowed=True)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, w, window = conv_operands(node, in_types)
        group = int(node.attrs.get("group", 1))
        n_sp = window.rank
        mg = w.shape[1]  # type: ignore[index]
        m = mg * group if isinstance(mg, int) else None
        _check_bias(node, in_types[2] if len(in_types) > 2 else None, m)
        output_padding = list(node.attrs.get("output_padding") or [0] * n_sp)
        if len(output_padding) != n_sp:
            raise fail(node, f"output_padding {output_padding} must have {n_sp} values")
        for a, (p, s, d) in enumerate(zip(output_padding, window.strides, window.dilations,
                                          strict=True)):
            if p < 0 or (p >= s and p >= d):
                raise fail(node, f"output_padding {output_padding} along axis {a} must be "
                                 f"non-negative and smaller than the stride or the dilation")
        output_shape = node.attrs.get("output_shape")
        if output_shape is not None:
            output_shape = list(output_shape)
            if len(output_shape) == n_sp + 2:
                output_shape = output_shape[2:]
            if len(output_shape) != n_sp or any(o <= 0 for o in output_shape):
                raise fail(node, f"output_shape {node.attrs['output_shape']} must have "
                                 f"{n_sp} positive values")
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        out = transpose_output_dims(node, window, x.shape[2:], output_padding, output_shape)
        if any(isinstance(o, int) and o <= 0 for o in out):
            raise fail(node, f"output spatial size {out} is empty")
        return [TensorType(x.dtype, (x.shape[0], m, *out))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        """Every input element times the kernel of each of its group's outputs, into a full
        float64 output before cropping."""
        x, w, out = in_types[0], in_types[1], out_types[0]
        if w is None or w.shape is None or not all(isinstance(d, int) for d in w.shape[1:]):
            return Work(numel(out))
        per_input = math.prod(w.shape[1:])  # type: ignore[arg-type]
        return Work(numel(x) * per_input, 8 * (numel(x) * per_input + 2 * numel(out)))


def transpose_output_dims(node: Node, window: Window, spatial: tuple[Dim, ...],
                          output_padding: list[int], output_shape: list[int] | None
                          ) -> tuple[Dim, ...]:
    """ConvTranspose output spatial dims; a symbolic input dim gives a symbolic output dim only
    for SAME_* with stride 1, else None (unless output_shape fixes it)."""
    out: list[Dim] = []
    for a, size in enumerate(spatial):
        if output_shape is not None:
            out.append(output_shape[a])
        elif isinstance(size, int):
            geo = transpose_geometry(node, window.axis(a), [size], output_padding[a:a + 1], None)
            out.append(geo.out[0])
        elif window.auto_pad in ("SAME_UPPER", "SAME_LOWER") and window.strides[a] == 1:
            out.append(size)
        else:
            out.append(None)
    return tuple(out)
