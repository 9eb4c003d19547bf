"""Emitters of float nodes: Conv and Gemm/MatMul with double accumulation (the reference's
rounding), elementwise ops in float32 as numpy computes them, means in double."""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter
from lowbit.backends.cpu.codegen.program import BATCH, Size, dim_c, numel
from lowbit.errors import UnsupportedError
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.ops.conv_geometry import window_from_attrs


def _clip(node) -> tuple[str, str]:
    lo, hi = node.attrs.get(FUSED_CLIP) or (-np.inf, np.inf)
    return cexpr.flt(lo), cexpr.flt(hi)


def _float_only(node, count: int = 1) -> None:
    """Refuse other than float32 data inputs (the first `count` inputs)."""
    for v in node.inputs[:count]:
        if v is not None and v.type is not None and v.type.dtype.np_dtype != np.float32:
            raise UnsupportedError(f"{node.op_type} on {v.type.dtype} (float32 is compiled)")


@emitter("Conv")
def conv(lw: Lowering, node) -> None:
    _float_only(node, 3)
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input_or_none(2)
    if not wv.is_constant or (bv is not None and not bv.is_constant):
        raise UnsupportedError("Conv needs constant weights and bias")
    w = lw.const_array(wv).astype(np.float32)
    if w.ndim != 4:
        raise UnsupportedError("Conv over other than 2 spatial axes")
    group = int(node.attrs["group"])
    m, cg, kh, kw = w.shape
    mg, taps = m // group, kh * kw
    x = lw.operand(xv, "nhwc")
    n, c, ih, iw = x.shape
    win = window_from_attrs(node, w.shape[2:], 2)
    pads = win.resolved_pads((ih, iw))
    out = lw.result(node.outputs[0], "nhwc")
    oh, ow = out.shape[2], out.shape[3]
    depthwise = cg == 1 and mg == 1 and taps <= 64
    if depthwise:  # [taps][c] then a row of zeros for the padded taps
        wdata = np.concatenate([w.reshape(m, taps).T.reshape(-1), np.zeros(c, np.float32)])
    else:
        wdata = w.transpose(0, 2, 3, 1).reshape(-1)
    bias = lw.prog.data(lw.const_array(bv).astype(np.float32)) if bv is not None else "NULL"
    lo, hi = _clip(node)
    pointwise = kh == kw == 1 and win.strides == (1, 1) and not any(pads) and (oh, ow) == (ih, iw)
    scratch = None if depthwise or pointwise else \
        lw.prog.scratch(Size(oh * ow * taps * c * 4), "im2col")
    code = [f"const lb_fconv conv = {{{cexpr.window(n, ih, iw, c, oh, ow, win, pads)}, {group}, "
            f"{cg}, {mg}, {lw.prog.data(wdata)}, {bias}, {lo}, {hi}}};",
            f"lb_fconv_run(ctx, &conv, (const float *){x.ptr}, (float *){out.ptr}, "
            f"{f'(float *){scratch.ptr}' if scratch else 'NULL'});"]
    lw.prog.step(f"{node.name}: Conv {kh}x{kw} group {group}, {c} -> {m}", code, [x], [out],
                 [scratch] if scratch else [])


def _fgemm(lw: Lowering, node, av, w_rows: np.ndarray, bias: np.ndarray | None) -> None:
    a = lw.operand(av, "plain")
    out = lw.result(node.outputs[0], "plain")
    ncols, k = w_rows.shape
    rows = numel(a.shape[:-1])
    lo, hi = _clip(node)
    b = lw.prog.data(np.broadcast_to(bias.astype(np.float32).reshape(-1), (ncols,)).copy()) \
        if bias is not None else "NULL"
    lw.prog.step(f"{node.name}: {node.op_type} {k} -> {ncols}", [
        f"lb_fgemm(ctx, {rows.c()}, {ncols}, {k}, (const float *){a.ptr}, {k}, "
        f"{lw.prog.data(np.ascontiguousarray(w_rows, np.float32))}, {k}, {b}, {lo}, {hi}, "
        f"(float *){out.ptr}, {ncols});"], [a], [out])


@emitter("Gemm")
def gemm(lw: Lowering, node) -> None:
    _float_only(node, 3)
    av, bv, cv = node.inputs[0], node.inputs[1], node.input_or_none(2)
    if node.attrs["transA"] or not bv.is_constant or (cv is not None and not cv.is_constant):
        raise UnsupportedError("Gemm with transA or a non-constant B or C")
    if float(node.attrs["alpha"]) != 1.0 or (cv is not None and float(node.attrs["beta"]) != 1):
        raise UnsupportedError("Gemm with alpha or beta other than 1")
    b = lw.const_array(bv)
    w_rows = b if node.attrs["transB"] else b.T
    bias = lw.const_array(cv) if cv is not None else None
    if bias is not None and bias.size not in (1, w_rows.shape[0]):
        raise UnsupportedError("Gemm with a C that is not one value per column")
    _fgemm(lw, node, av, w_rows, bias)


@emitter("MatMul")
def matmul(lw: Lowering, node) -> None:
    _float_only(node, 2)
    av, bv = node.inputs
    if not bv.is_constant or lw.const_array(bv).ndim != 2:
        raise UnsupportedError("MatMul of two activations (a constant 2-D right operand is "
                               "compiled so far)")
    _fgemm(lw, node, av, lw.const_array(bv).T, None)


# -- elementwise ---------------------------------------------------------------------------------

BINARY = {"Add": "LB_FADD", "Sub": "LB_FSUB", "Mul": "LB_FMUL", "Div": "LB_FDIV",
          "Max": "LB_FMAX", "Min": "LB_FMIN", "Pow": "LB_FPOW"}


def _binary(lw: Lowering, node) -> None:
    from lowbit.backends.cpu.codegen.ops_quant import binary_layout, broadcast

    _float_only(node, 2)
    if len(node.inputs) != 2:
        raise UnsupportedError(f"{node.op_type} of {len(node.inputs)} inputs")
    layout = binary_layout(lw, node)
    a = lw.operand(node.inputs[0], layout if len(lw.shape(node.inputs[0])) == 4 else "plain")
    b = lw.operand(node.inputs[1], layout if len(lw.shape(node.inputs[1])) == 4 else "plain")
    out = lw.result(node.outputs[0], layout)
    lw.prog.step(f"{node.name}: {node.op_type}", [
        f"const lb_bcast bc = {broadcast(lw, a, b, out)};",
        f"lb_fbinary_run(ctx, &bc, {BINARY[node.op_type]}, (const float *){a.ptr}, "
        f"(const float *){b.ptr}, (float *){out.ptr});"], [a, b], [out])
    clamp_result(lw, node, out)


# registered by ops_tensor.elementwise, which hands float32 NHWC operands, fused clips and Pow
# to `_binary`


def clamp_result(lw: Lowering, node, out) -> None:
    """A fused Relu/Clip on a float result, clamped in place (the interpreter clamps after the
    kernel)."""
    clip = node.attrs.get(FUSED_CLIP)
    if clip is None or node.op_type in ("Conv", "Gemm", "MatMul"):
        return
    lw.prog.step(f"{node.name}: fused clamp", [
        f"lb_funary(ctx, {numel(out.shape).c()}, LB_FCLIP, {cexpr.flt(clip[0])}, "
        f"{cexpr.flt(clip[1])}, (const float *){out.ptr}, (float *){out.ptr});"], [out], [out])


UNARY = {"Relu": "LB_FRELU", "LeakyRelu": "LB_FLEAKY", "Sigmoid": "LB_FSIGMOID",
         "HardSigmoid": "LB_FHARDSIGMOID", "HardSwish": "LB_FHARDSWISH", "Tanh": "LB_FTANH",
         "Exp": "LB_FEXP", "Log": "LB_FLOG", "Sqrt": "LB_FSQRT", "Abs": "LB_FABS",
         "Neg": "LB_FNEG", "Reciprocal": "LB_FRECIP", "Clip": "LB_FCLIP", "Erf": "LB_FERF",
         "Floor": "LB_FFLOOR", "Ceil": "LB_FCEIL", "Round": "LB_FROUND",
         "Softplus": "LB_FSOFTPLUS", "Elu": "LB_FELU"}


def _unary(lw: Lowering, node) -> None:
    _float_only(node)
    x = lw.operand(node.inputs[0], None)
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    op = UNARY[node.op_type]
    alpha, beta = 0.0, 0.0
    if node.op_type in ("LeakyRelu", "Elu", "HardSigmoid"):
        alpha = float(node.attrs["alpha"])
        beta = float(node.attrs.get("beta", 0.0))
    elif node.op_type == "Clip":
        bounds = [lw.const_array(v) if v is not None else None for v in node.inputs[1:3]]
        bounds += [None] * (2 - len(bounds))
        alpha = float(bounds[0]) if bounds[0] is not None else -np.inf
        beta = float(bounds[1]) if bounds[1] is not None else np.inf
    lw.prog.step(f"{node.name}: {node.op_type}", [
        f"lb_funary(ctx, {numel(x.shape).c()}, {op}, {cexpr.flt(alpha)}, {cexpr.flt(beta)}, "
        f"(const float *){x.ptr}, (float *){out.ptr});"], [x], [out])
    clamp_result(lw, node, out)


for _op in UNARY:
    emitter(_op)(_unary)


# -- reductions, pools, softmax, normalization ----------------------------------------------------


def _spatial_mean(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0], "nhwc")
    n, c, h, w = x.shape
    out = lw.result(node.outputs[0], "plain")
    lw.prog.step(f"{node.name}: float mean over {h}x{w}", [
        f"lb_fmean_nhwc(ctx, {dim_c(n)}, {h * w}, {c}, (const float *){x.ptr}, "
        f"(float *){out.ptr});"], [x], [out])


@emitter("GlobalAveragePool")
def global_average_pool(lw: Lowering, node) -> None:
    _float_only(node)
    if len(lw.shape(node.inputs[0])) != 4:
        raise UnsupportedError("GlobalAveragePool over other than 2 spatial axes")
    _spatial_mean(lw, node)


@emitter("ReduceMean")
def reduce_mean(lw: Lowering, node) -> None:
    _float_only(node)
    shape = lw.shape(node.inputs[0])
    axes_v = node.input_or_none(1)
    if axes_v is not None:
        axes = sorted(int(a) % len(shape) for a in lw.const_array(axes_v).ravel())
    else:
        axes = sorted(int(a) % len(shape) for a in node.attrs.get("axes") or range(len(shape)))
    if len(shape) == 4 and axes == [2, 3]:
        return _spatial_mean(lw, node)
    if axes != list(range(axes[0], len(shape))) or BATCH in shape[axes[0]:]:
        raise UnsupportedError(f"float ReduceMean over axes {axes} (trailing axes or the "
                               f"spatial axes of an image are compiled)")
    x = lw.operand(node.inputs[0], "plain")
    out = lw.result(node.outputs[0], "plain")
    cols = numel(shape[axes[0]:]).coef
    lw.prog.step(f"{node.name}: float mean of rows of {cols}", [
        f"lb_fmean_rows(ctx, {numel(shape[:axes[0]]).c()}, {cols}, (const float *){x.ptr}, "
        f"(float *){out.ptr});"], [x], [out])


@emitter("AveragePool")
def average_pool(lw: Lowering, node) -> None:
    from lowbit.ops.pool import pool_window

    _float_only(node)
    x = lw.operand(node.inputs[0], "nhwc")
    if len(x.shape) != 4:
        raise UnsupportedError("AveragePool over other than 2 spatial axes")
    n, c, ih, iw = x.shape
    win = pool_window(node, 2)
    pads = win.resolved_pads((ih, iw))
    out = lw.result(node.outputs[0], "nhwc")
    oh, ow = out.shape[2], out.shape[3]
    lw.prog.step(f"{node.name}: float AveragePool", [
        f"const lb_window w = {cexpr.window(n, ih, iw, c, oh, ow, win, pads)};",
        f"lb_favgpool(ctx, &w, {int(node.attrs.get('count_include_pad', 0))}, {pads[2]}, "
        f"{pads[3]}, (const float *){x.ptr}, (float *){out.ptr});"], [x], [out])


# Softmax, LayerNormalization and Gelu: ops_transformer.py (lowbit.numerics.elementary's
# definitions, which the reference follows)
