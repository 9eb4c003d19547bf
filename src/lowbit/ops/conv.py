"""Convolutions: Conv and ConvTranspose (1-D, 2-D, 3-D; groups, dilations, pads, auto_pad)."""

from __future__ import annotations

from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.conv_geometry import WINDOW_ATTRS, Window, window_from_attrs
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types
from lowbit.ops.registry import COMPUTE, Attr, OpDef, fail, register


def _static(d: Dim) -> int | None:
    return d if isinstance(d, int) else None


def check_channels(node: Node, x: TensorType, w: TensorType, group: int, transposed: bool
                   ) -> None:
    """Refuse inconsistent channel counts (when static) and group counts."""
    if group < 1:
        raise fail(node, f"group must be at least 1, got {group}")
    c = _static(x.shape[1])
    if transposed:
        if c is not None and _static(w.shape[0]) is not None and w.shape[0] != c:
            raise fail(node, f"weight has {w.shape[0]} input channels, the input has {c}")
        return
    cg, m = _static(w.shape[1]), _static(w.shape[0])
    if c is not None and cg is not None and cg * group != c:
        raise fail(node, f"input has {c} channels but weight expects {cg} x {group} groups")
    if m is not None and m % group:
        raise fail(node, f"{m} output channels do not divide into {group} groups")


def _shapes(node: Node, in_types: list[TensorType | None]) -> tuple[TensorType, TensorType]:
    x, w = known_types(node, in_types)[:2]
    assert x is not None and w is not None
    check_dtype(node, 0, x, FLOATS)
    check_dtype(node, 1, w, FLOATS)
    if x.shape is None or w.shape is None:
        raise fail(node, "input and weight ranks must be known")
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise fail(node, f"input {list(x.shape)} and weight {list(w.shape)} must have the same "
                   f"rank, at least 3 (N, C, spatial...)")
    return x, w


def conv_window(node: Node, w_shape: tuple[Dim, ...], spatial_rank: int) -> Window:
    kernel = [d for d in w_shape[2:]]
    static_kernel = kernel if all(isinstance(k, int) for k in kernel) else None
    return window_from_attrs(node, static_kernel, spatial_rank)


@register
class Conv(OpDef):
    """Y[n, m] = sum over c in m's group and kernel positions of X[n, c, o*s + k*d - pad] *
    W[m, c, k], plus B[m]; padding reads 0."""

    op_type = "Conv"
    inputs = ("X", "W", "B?")
    attrs = {**WINDOW_ATTRS, "group": Attr("int", 1)}
    fusable = True
    quant_rule = COMPUTE

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, w = _shapes(node, in_types)
        check_channels(node, x, w, int(node.attrs["group"]), transposed=False)
        window = conv_window(node, w.shape, len(x.shape) - 2)
        b = in_types[2] if len(in_types) > 2 else None
        if b is not None and b.shape is not None and len(b.shape) != 1:
            raise fail(node, f"bias must be 1-D, got shape {list(b.shape)}")
        return [TensorType(x.dtype, (x.shape[0], w.shape[0], *window.output_dims(x.shape[2:])))]


@register
class ConvTranspose(OpDef):
    """The gradient of Conv with respect to its input: each input element scatters X * W over a
    kernel-sized window of the output, strided by `strides`; then pads are cropped."""

    op_type = "ConvTranspose"
    inputs = ("X", "W", "B?")
    attrs = {**WINDOW_ATTRS, "group": Attr("int", 1), "output_padding": Attr("ints"),
             "output_shape": Attr("ints")}
    fusable = True

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, w = _shapes(node, in_types)
        group = int(node.attrs["group"])
        check_channels(node, x, w, group, transposed=True)
        n = len(x.shape) - 2
        window = conv_window(node, w.shape, n)
        m = _static(w.shape[1])
        out_spatial = transpose_geometry(node, window, x.shape[2:])[0]
        return [TensorType(x.dtype, (x.shape[0], m * group if m is not None else None,
                                     *out_spatial))]


def transpose_geometry(node: Node, window: Window, spatial) -> tuple[list[Dim], list[int]]:
    """Output spatial sizes and pads (begins then ends) of a ConvTranspose, as ONNX defines
    them: explicit `output_shape` (pads derived as for auto_pad) or
    `s * (i - 1) + output_padding + d * (k - 1) + 1 - pad_begin - pad_end`."""
    n = window.rank
    out_pad = node.attrs.get("output_padding") or [0] * n
    out_shape = node.attrs.get("output_shape")
    if len(out_pad) != n:
        raise fail(node, f"output_padding {list(out_pad)} must have {n} values")
    if out_shape is not None and len(out_shape) not in (n, n + 2):
        raise fail(node, f"output_shape {list(out_shape)} must have {n} values")
    if out_shape is not None:
        out_shape = list(out_shape)[-n:]
    sizes: list[Dim] = []
    begins, ends = [], []
    for a in range(n):
        i = spatial[a]
        s, d, k = window.strides[a], window.dilations[a], window.kernel[a]
        full = None if not isinstance(i, int) else s * (i - 1) + out_pad[a] + d * (k - 1) + 1
        if out_shape is not None or window.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = out_shape[a] if out_shape is not None else (
                i * s if isinstance(i, int) else None)
            sizes.append(target)
            if full is None or target is None:
                begins.append(0)
                ends.append(0)
                continue
            total = max(0, full - target)
            if window.auto_pad == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
            continue
        pads = window.pads if window.auto_pad == "NOTSET" else (0,) * (2 * n)
        begins.append(pads[a])
        ends.append(pads[a + n])
        sizes.append(None if full is None else full - pads[a] - pads[a + n])
    return sizes, begins + ends
