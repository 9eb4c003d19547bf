"""PyTorch dynamically quantized Linear layers (`torch.ao.quantization.quantize_dynamic`, qint8)
through the ONNX export, keeping their int8 weights and computing what PyTorch computes.

torch's ONNX exporters refuse `quantized::linear_dynamic`. `swapped_dynamic_linears` replaces each
such layer for the export by a marker whose ONNX node (`lowbit.torch::DynamicLinear`) carries only
its index; `expand_markers` then writes, for each marker, standard ONNX ops that compute exactly
what fbgemm's dynamic Linear (x86) computes:

    mn = min(min(x), 0), mx = max(max(x), 0)               (the whole input tensor, float32)
    s  = (double(mx) - mn) / 127                            (reduce_range: 7-bit codes)
    s  = 0.1 if float(s) == 0 or 1 / float(s) is inf
    if s < 6.1e-5: s = 6.1e-5, and mn, mx scale up with it (mn = -6.1e-5 * 127 when mx == 0 ...)
    z  = -mn / s or 127 - mx / s (whichever adds the smaller terms), rounded half to even,
         clamped to [0, 127]
    q  = clamp(round_half_even(float32(x * float32(1 / float32(s)) + z)), 0, 255)   (one rounding
         of the fused multiply-add, as fbgemm's Quantize)
    y  = float32(acc) * float32(float32(s) * s_w) + bias,   acc = (q - z) . (W_q - z_w)  in int32

(with 7-bit activations and int8 weights no pair of products overflows int16, so fbgemm's
vpmaddubsw is exact and acc is the true int32 sum). The int8 weight, its per-tensor or per-channel
scales and zero points and the float bias are taken from the packed parameters unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lowbit.errors import UnsupportedError

MARKER_DOMAIN = "lowbit.torch"
MARKER_OP = "DynamicLinear"
SMALL_SCALE = np.float32(6.1e-5)
QMAX = 127


@dataclass(frozen=True)
class DynamicLinear:
    """One dynamically quantized Linear: int8 weight [N, K], per-output-channel scale and zero
    point (length N, repeated for a per-tensor weight) and float bias [N] or None."""

    name: str
    weight: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    bias: np.ndarray | None


def _packed(module: Any, name: str) -> DynamicLinear:
    import torch

    w = module.weight()
    n = w.shape[0]
    if w.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        scale = np.full(n, w.q_scale(), np.float32)
        zero = np.full(n, w.q_zero_point(), np.int64)
    elif w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric) and \
            w.q_per_channel_axis() == 0:
        scale = w.q_per_channel_scales().numpy().astype(np.float32)
        zero = w.q_per_channel_zero_points().numpy().astype(np.int64)
    else:
        raise UnsupportedError(f"dynamic quantized Linear '{name}': weight scheme "
                               f"{w.qscheme()} is not supported")
    bias = module.bias()
    return DynamicLinear(name, w.int_repr().numpy().copy(), scale, zero,
                         None if bias is None else bias.detach().numpy().astype(np.float32))


@contextmanager
def swapped_dynamic_linears(module: Any) -> Iterator[list[DynamicLinear]]:
    """Within the block, every qint8 `torch.ao.nn.quantized.dynamic.Linear` of `module` is a
    marker that exports as one `lowbit.torch::DynamicLinear` node; yields their parameters in
    marker-index order. The module is restored on exit."""
    import torch
    from torch.ao.nn.quantized.dynamic import Linear as DynLinear

    originals: list[Any] = []

    class Marker(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, index):
            weight, bias = originals[index]  # float stand-in: only the shape matters here
            return torch.nn.functional.linear(x, weight, bias)

        @staticmethod
        def symbolic(g, x, index):
            return g.op(f"{MARKER_DOMAIN}::{MARKER_OP}", x, index_i=index)

    class Stand(torch.nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def forward(self, x):
            return Marker.apply(x, self.index)

    found: list[DynamicLinear] = []
    swaps: list[tuple[Any, str, Any]] = []
    for parent_name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            if not isinstance(child, DynLinear):
                continue
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if child._packed_params.dtype != torch.qint8:
                raise UnsupportedError(f"dynamic quantized Linear '{full}': only qint8 weights "
                                       f"are supported, not {child._packed_params.dtype}")
            found.append(_packed(child, full))
            swaps.append((parent, child_name, child))
            originals.append((child.weight().dequantize(),
                              None if child.bias() is None else child.bias().detach()))
            setattr(parent, child_name, Stand(len(found) - 1))
    try:
        yield found
    finally:
        for parent, child_name, child in swaps:
            setattr(parent, child_name, child)


def expand_markers(model: onnx.ModelProto, layers: list[DynamicLinear]) -> None:
    """Replace each marker node of `model` (in place) by the ops of the module docstring."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for node in model.graph.node:
        if node.domain != MARKER_DOMAIN:
            nodes.append(node)
            continue
        index = next(a.i for a in node.attribute if a.name == "index")
        nodes += _linear_nodes(node.input[0], node.output[0], layers[index], f"dynlinear{index}",
                               inits)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(inits)
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    kept = [o for o in model.opset_import if o.domain != MARKER_DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(kept)


def _linear_nodes(x: str, y: str, layer: DynamicLinear, p: str,
                  inits: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    def const(name: str, value: Any, dtype=np.float64) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), f"{p}_{name}"))
        return f"{p}_{name}"

    nodes: list[onnx.NodeProto] = []

    def op(op_type: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op_type, inputs, [f"{p}_{out}"], name=f"{p}_{out}",
                                      **attrs))
        return f"{p}_{out}"

    def cast(v: str, to: int, out: str) -> str:
        return op("Cast", [v], out, to=to)

    zero_f = const("zero_f", 0.0, np.float32)
    mn = op("Min", [op("ReduceMin", [x], "rmin", keepdims=0), zero_f], "mn")
    mx = op("Max", [op("ReduceMax", [x], "rmax", keepdims=0), zero_f], "mx")
    scale = op("Div", [op("Sub", [cast(mx, TensorProto.DOUBLE, "mx_d"),
                                  cast(mn, TensorProto.DOUBLE, "mn_d")], "range"),
                       const("qmax", float(QMAX))], "scale0")
    scale_f = cast(scale, TensorProto.FLOAT, "scale0_f")
    bad = op("Or", [op("Equal", [scale_f, zero_f], "is_zero"),
                    op("IsInf", [op("Reciprocal", [scale_f], "inv0")], "inv_inf")], "bad")
    scale = op("Where", [bad, const("fallback", 0.1), scale], "scale1")
    small = op("Less", [scale, const("small_d", float(SMALL_SCALE))], "small")
    amp = op("Div", [const("small_f", SMALL_SCALE, np.float32),
                     cast(scale, TensorProto.FLOAT, "scale1_f")], "amp")
    mn_is_0 = op("Equal", [mn, zero_f], "mn_is_0")
    mx_is_0 = op("Equal", [mx, zero_f], "mx_is_0")
    edge = float(SMALL_SCALE * np.float32(QMAX))
    mn_small = op("Where", [mn_is_0, mn, op("Where", [mx_is_0, const("neg_edge", -edge,
                                                                      np.float32),
                                                      op("Mul", [mn, amp], "mn_amp")],
                                            "mn_s1")], "mn_small")
    mx_small = op("Where", [mn_is_0, const("edge", edge, np.float32),
                            op("Where", [mx_is_0, mx, op("Mul", [mx, amp], "mx_amp")], "mx_s1")],
                  "mx_small")
    mn = op("Where", [small, mn_small, mn], "mn2")
    mx = op("Where", [small, mx_small, mx], "mx2")
    scale = op("Where", [small, const("small_s", float(SMALL_SCALE)), scale], "scale")
    r_mn = op("Div", [cast(mn, TensorProto.DOUBLE, "mn2_d"), scale], "r_mn")
    r_mx = op("Div", [cast(mx, TensorProto.DOUBLE, "mx2_d"), scale], "r_mx")
    from_max = op("Sub", [const("qmax2", float(QMAX)), r_mx], "z_from_max")
    err_min = op("Neg", [op("Abs", [r_mn], "abs_rmn")], "err_min")
    err_max = op("Sub", [const("qmax3", float(QMAX)), op("Abs", [r_mx], "abs_rmx")], "err_max")
    z0 = op("Where", [op("Less", [err_min, err_max], "use_min"), op("Neg", [r_mn], "z_from_min"),
                      from_max], "z0")
    zp = op("Clip", [op("Round", [z0], "z_round"), const("zmin", 0.0), const("zmax", float(QMAX))],
            "zp")
    s = cast(scale, TensorProto.FLOAT, "s")
    inv = cast(op("Reciprocal", [s], "inv"), TensorProto.DOUBLE, "inv_d")
    t = cast(op("Add", [op("Mul", [cast(x, TensorProto.DOUBLE, "x_d"), inv], "xs"), zp], "t_d"),
             TensorProto.FLOAT, "t")
    q = cast(op("Clip", [op("Round", [t], "q_round"), zero_f, const("u8max", 255.0, np.float32)],
                "q_clip"), TensorProto.UINT8, "q")
    weight = const("weight", layer.weight.T, np.int8)
    w_zero = layer.zero_point
    w_zero = const("weight_zero", w_zero[0] if np.all(w_zero == w_zero[0]) else w_zero, np.int8)
    acc = op("MatMulInteger", [q, weight, cast(zp, TensorProto.UINT8, "zp_u8"), w_zero], "acc")
    rescale = op("Mul", [s, const("weight_scale", layer.scale, np.float32)], "rescale")
    out = op("Mul", [cast(acc, TensorProto.FLOAT, "acc_f"), rescale], "scaled")
    if layer.bias is None:
        nodes.append(helper.make_node("Identity", [out], [y], name=f"{p}_out"))
    else:
        nodes.append(helper.make_node("Add", [out, const("bias", layer.bias, np.float32)], [y],
                                      name=f"{p}_out"))
    return nodes
