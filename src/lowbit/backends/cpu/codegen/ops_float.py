"""Emitters of float nodes: Conv and Gemm/MatMul with double accumulation (the reference's
rounding), more to come."""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter
from lowbit.backends.cpu.codegen.program import Size, numel
from lowbit.errors import UnsupportedError
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.ops.conv_geometry import window_from_attrs


def _clip(node) -> tuple[str, str]:
    lo, hi = node.attrs.get(FUSED_CLIP) or (-np.inf, np.inf)
    return cexpr.flt(lo), cexpr.flt(hi)


def _float_only(node) -> None:
    for v in node.inputs:
        if v is not None and v.type is not None and v.type.dtype.np_dtype != np.float32:
            raise UnsupportedError(f"{node.op_type} on {v.type.dtype} (float32 is compiled)")


@emitter("Conv")
def conv(lw: Lowering, node) -> None:
    _float_only(node)
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
            f"{cg}, {mg}, {lw.prog.data(wdata, 'weights')}, {bias}, {lo}, {hi}}};",
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
    w = lw.prog.data(np.ascontiguousarray(w_rows, np.float32), "weights")
    lw.prog.step(f"{node.name}: {node.op_type} {k} -> {ncols}", [
        f"lb_fgemm(ctx, {rows.c()}, {ncols}, {k}, (const float *){a.ptr}, {k}, "
        f"{w}, {k}, {b}, {lo}, {hi}, "
        f"(float *){out.ptr}, {ncols});"], [a], [out])


@emitter("Gemm")
def gemm(lw: Lowering, node) -> None:
    _float_only(node)
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
    _float_only(node)
    av, bv = node.inputs
    if not bv.is_constant or lw.const_array(bv).ndim != 2:
        raise UnsupportedError("MatMul of two activations (a constant 2-D right operand is "
                               "compiled so far)")
    _fgemm(lw, node, av, lw.const_array(bv).T, None)
