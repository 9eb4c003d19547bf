"""Emitters of float nodes: Conv and Gemm/MatMul with double accumulation (the reference's
rounding) or, with `Lowering.fma_floats`, as float32 fused multiply-add chains (Conv, Gemm and
MatMul by a constant: lb_fgemm_fma's definition); elementwise ops in float32 as numpy
computes them, means in double."""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter, stored_dtype
from lowbit.backends.cpu.codegen.program import Size, dim_c, dim_size, is_batch, numel
from lowbit.errors import UnsupportedError
from lowbit.ir import dtypes
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.ir.graph import Node, Value
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.ops.registry import QUANT_DOMAIN


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
    # the chains' weights packed once here (one group's product), not on every call
    packed = lw.prog.data(fma_packed(wdata.reshape(m, taps * cg)), "weights") \
        if lw.fma_floats and group == 1 and not depthwise else "NULL"
    lo, hi = _clip(node)
    pointwise = kh == kw == 1 and win.strides == (1, 1) and not any(pads) and (oh, ow) == (ih, iw)
    scratch = None if depthwise or pointwise else \
        lw.prog.scratch(Size(oh * ow * taps * c * 4), "im2col")
    code = [f"const lb_fconv conv = {{{cexpr.window(n, ih, iw, c, oh, ow, win, pads)}, {group}, "
            f"{cg}, {mg}, {lw.prog.data(wdata, 'weights')}, {bias}, {lo}, {hi}, "
            f".fma = {int(lw.fma_floats)}, .wp = {packed}}};",
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
    if lw.fma_floats:  # the weights packed once here, not on every call
        w = lw.prog.data(fma_packed(w_rows), "weights")
        call = (f"lb_fgemm_fma_packed(ctx, {rows.c()}, {ncols}, {k}, (const float *){a.ptr}, "
                f"{k}, {w}, ")
    else:
        w = lw.prog.data(np.ascontiguousarray(w_rows, np.float32), "weights")
        call = f"lb_fgemm(ctx, {rows.c()}, {ncols}, {k}, (const float *){a.ptr}, {k}, {w}, {k}, "
    lw.prog.step(f"{node.name}: {node.op_type} {k} -> {ncols}", [
        f"{call}{b}, {lo}, {hi}, (float *){out.ptr}, {ncols});"], [a], [out])


FMA_PANEL = 32
"""Columns a panel of lb_fgemm_fma_packed's B (LB_FGEMM_PANEL in lowbit_rt.h)."""


def fma_packed(w_rows: np.ndarray) -> np.ndarray:
    """Weight rows [N, K] in lb_fgemm_fma_packed's layout: panels of FMA_PANEL columns, each
    [K][FMA_PANEL] (packed[(n // P * K + k) * P + n % P] = w_rows[n, k]), the last panel's
    columns past N zero."""
    n, k = w_rows.shape
    panels = -(-n // FMA_PANEL)
    padded = np.zeros((panels * FMA_PANEL, k), np.float32)
    padded[:n] = w_rows
    return np.ascontiguousarray(padded.reshape(panels, FMA_PANEL, k).transpose(0, 2, 1)).reshape(-1)


@emitter("Gemm")
def gemm(lw: Lowering, node) -> None:
    _float_only(node, 3)
    av, cv = node.inputs[0], node.input_or_none(2)
    w_rows = lw.dense_weight_rows(node)
    if float(node.attrs["alpha"]) != 1.0 or (cv is not None and float(node.attrs["beta"]) != 1):
        raise UnsupportedError("Gemm with alpha or beta other than 1")
    bias = lw.const_array(cv) if cv is not None else None
    if bias is not None and bias.size not in (1, w_rows.shape[0]):
        raise UnsupportedError("Gemm with a C that is not one value per column")
    _fgemm(lw, node, av, w_rows, bias)


def _batched(lw: Lowering, node) -> tuple:
    """ops_quant.batched for float operands, whose M, N and K may also be run-time
    dimensions (a sequence length) when the program takes them: strides as C expressions."""
    from lowbit.backends.cpu.codegen.ops_quant import batched, runtime_batched

    if not lw.runtime_dims:
        return batched(lw, node)
    batch, m, n, k, sa, sb, sc = runtime_batched(lw, node)
    return batch, dim_c(m), dim_c(n), dim_c(k), sa, sb, sc


@emitter("MatMul", dynamic=True)
def matmul(lw: Lowering, node) -> None:
    from lowbit.backends.cpu.codegen import float_attention

    _float_only(node, 2)
    av, bv = node.inputs
    if bv.is_constant and lw.const_array(bv).ndim == 2:
        return _fgemm(lw, node, av, lw.const_array(bv).T, None)
    fused = float_attention.match(lw, node)
    if fused is not None:
        float_attention.emit(lw, fused)
        return None
    batch, m, n, k, sa, sb, sc = _batched(lw, node)
    a, b = lw.operand(av, "plain"), lw.operand(bv, "plain")
    out = lw.result(node.outputs[0], "plain")
    scratch = lw.prog.scratch(dim_size(n) * dim_size(k) * 4, "b_transposed")
    lw.prog.step(f"{node.name}: MatMul of activations, {batch.c()} x [{m}x{k}] [{k}x{n}]", [
        f"lb_fmatmul_run(ctx, {batch.c()}, {m}, {n}, {k}, (const float *){a.ptr}, {sa}, "
        f"(const float *){b.ptr}, {sb}, (float *){out.ptr}, {sc}, (float *){scratch.ptr});"],
        [a, b], [out], [scratch])


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
    if clip is None:
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
    if axes != list(range(axes[0], len(shape))) or any(map(is_batch, shape[axes[0]:])):
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
    from lowbit.backends.cpu.codegen.ops_shape import pool_setup

    _float_only(node)
    x, out, _, pads, window = pool_setup(lw, node)
    lw.prog.step(f"{node.name}: float AveragePool", [
        window,
        f"lb_favgpool(ctx, &w, {int(node.attrs.get('count_include_pad', 0))}, {pads[2]}, "
        f"{pads[3]}, (const float *){x.ptr}, (float *){out.ptr});"], [x], [out])


# Softmax, LayerNormalization and Gelu: ops_transformer.py (lowbit.numerics.elementary's
# definitions, which the reference follows)


@emitter("BatchNormalization")
def batch_normalization(lw: Lowering, node) -> None:
    """The reference's (x - mean) * (inv * scale) + b in double, inv = 1 / sqrt(var + eps)
    computed here by the same numpy expression."""
    _float_only(node)
    if len(node.outputs) > 1 and any(lw.users.get(v) for v in node.outputs[1:] if v):
        raise UnsupportedError("BatchNormalization in training mode")
    scale, b, mean, var = (lw.const_array(v).astype(np.float64).ravel()
                           for v in node.inputs[1:5])
    inv = 1 / np.sqrt(var + float(node.attrs["epsilon"]))
    k = inv * scale
    x = lw.operand(node.inputs[0], "nhwc" if len(lw.shape(node.inputs[0])) == 4 else "plain")
    if x.layout != "nhwc" and len(x.shape) > 2 and numel(x.shape[2:]).coef != 1:
        raise UnsupportedError("BatchNormalization of other than images or [N, C]")
    out = lw.result(node.outputs[0], x.layout)
    c = x.shape[1]
    lw.prog.step(f"{node.name}: BatchNormalization", [
        f"lb_fbatchnorm(ctx, {(numel(x.shape) * 1).c()} / {c}, {c}, (const float *){x.ptr}, "
        f"{lw.prog.data(mean)}, {lw.prog.data(k)}, {lw.prog.data(b)}, (float *){out.ptr});"],
        [x], [out])


@emitter("ConvTranspose")
def conv_transpose(lw: Lowering, node) -> None:
    from lowbit.ops.conv_geometry import transpose_geometry

    _float_only(node, 3)
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input_or_none(2)
    if not wv.is_constant or (bv is not None and not bv.is_constant):
        raise UnsupportedError("ConvTranspose needs constant weights and bias")
    w = lw.const_array(wv).astype(np.float32)
    if w.ndim != 4 or int(node.attrs["group"]) != 1:
        raise UnsupportedError("ConvTranspose other than 2-D with group 1")
    c, m, kh, kw = w.shape
    x = lw.operand(xv, "nhwc")
    n, _, ih, iw = x.shape
    win = window_from_attrs(node, w.shape[2:], 2)
    output_padding = node.attrs.get("output_padding") or [0, 0]
    output_shape = node.attrs.get("output_shape")
    geo = transpose_geometry(node, win, (ih, iw), output_padding,
                             list(output_shape)[-2:] if output_shape is not None else None)
    out = lw.result(node.outputs[0], "nhwc")
    oh, ow = out.shape[2], out.shape[3]
    (sh, sw), (dh, dw) = win.strides, win.dilations
    fh, fw = sh * (ih - 1) + dh * (kh - 1) + 1, sw * (iw - 1) + dw * (kw - 1) + 1
    if kh * kw > 64:
        raise UnsupportedError("ConvTranspose with more than 64 kernel taps")
    wdata = np.ascontiguousarray(w.transpose(2, 3, 0, 1)).reshape(-1)  # [taps][c][m]
    bias = lw.prog.data(lw.const_array(bv).astype(np.float32)) if bv is not None else "NULL"
    lw.prog.step(f"{node.name}: ConvTranspose {kh}x{kw} /{sh}, {c} -> {m}", [
        f"const lb_fconvt ct = {{{dim_c(n)}, {ih}, {iw}, {c}, {m}, {kh}, {kw}, {sh}, {sw}, "
        f"{dh}, {dw}, {fh}, {fw}, {geo.begins[0]}, {geo.begins[1]}, {oh}, {ow}, "
        f"{lw.prog.data(wdata, 'weights')}, {bias}}};",
        f"lb_fconvt_run(ctx, &ct, (const float *){x.ptr}, (float *){out.ptr});"], [x], [out])
    clamp_result(lw, node, out)


def codes_through(lw: Lowering, node: Node) -> tuple[Value, Node] | None:
    """(codes, the Quantize) when Resize/selection `node` reads the Dequantize of per-tensor
    8- or 16-bit `codes` and its only use is a Quantize to the same type, scale and zero point:
    then quantize(dequantize(k)) = k for every code k (float32 (k - z) * s divided by s is k
    within |k| 2**-23 < 1/2 while nothing is subnormal or infinite, s in [2**-100, 2**100]), so
    selecting the codes themselves gives the reference's result."""
    dq = node.inputs[0].producer
    q = lw.sole_user(node.outputs[0])
    if dq is None or q is None or q in lw.fused or dq.op_type != "Dequantize" or \
            q.op_type != "Quantize" or dq.domain != QUANT_DOMAIN or q.domain != QUANT_DOMAIN:
        return None
    src, t, out_t = dq.inputs[0], dq.inputs[0].type, q.outputs[0].type
    if t is None or out_t is None or t.quant is None or out_t.quant is None or \
            not t.quant.per_tensor or not out_t.quant.per_tensor or t.dtype != out_t.dtype or \
            t.dtype.bits not in (8, 16) or not lw.available(src):
        return None
    s, s_out = np.float32(t.quant.scale), np.float32(out_t.quant.scale)
    if s != s_out or not 2.0**-100 <= s <= 2.0**100 or \
            int(t.quant.zero_point) != int(out_t.quant.zero_point):
        return None
    return src, q


def quantized_after(lw: Lowering, node: Node) -> Node | None:
    """The Quantize that is the only use of float Resize/selection `node`'s result, with its
    parameters per tensor or per channel (axis 1): quantizing the input and selecting codes
    gives the same codes, element for element."""
    q = lw.sole_user(node.outputs[0])
    t = node.inputs[0].type
    if q is None or q in lw.fused or q.op_type != "Quantize" or q.domain != QUANT_DOMAIN or \
            t is None or t.dtype != dtypes.FLOAT32:
        return None
    out_t = q.outputs[0].type
    if out_t is None or out_t.quant is None or \
            (out_t.quant.axis is not None and out_t.quant.axis % 4 != 1):
        return None
    return q


@emitter("Resize")
def resize(lw: Lowering, node) -> None:
    """Nearest-neighbour resizing of images' height and width, with index tables from the
    reference's own coordinate functions."""
    from lowbit.backends.reference.kernels import resize as ref

    if node.attrs["mode"] != "nearest":
        raise UnsupportedError(f"Resize mode '{node.attrs['mode']}' (nearest is compiled)")
    shape = lw.shape(node.inputs[0])
    out_shape = lw.shape(node.outputs[0])
    if len(shape) != 4 or shape[:2] != out_shape[:2]:
        raise UnsupportedError("Resize of other than the height and width of images")
    consts = [lw.const_array(v) if v is not None else None for v in node.inputs[1:4]]
    consts = [None if a is None or a.size == 0 else a for a in consts] + [None] * 3
    _, scales, sizes = consts[:3]  # roi matters only for tf_crop_and_resize
    probe = np.empty((1, *shape[1:]), np.float32)
    plan = ref._plan(node, probe, scales, sizes)
    mode = node.attrs["coordinate_transformation_mode"]
    if mode == "tf_crop_and_resize":
        raise UnsupportedError("Resize with tf_crop_and_resize")
    tables = {2: np.arange(shape[2]), 3: np.arange(shape[3])}
    for axis, out_len, scale in plan:
        if axis not in (2, 3):
            continue  # the output shape's equal batch and channels were checked above
        in_len = shape[axis]
        source = ref.source_coordinates(mode, out_len, in_len, scale, None)
        tables[axis] = np.clip(ref._nearest_index(source, node.attrs["nearest_mode"]), 0,
                               in_len - 1)
    through = codes_through(lw, node)
    after = quantized_after(lw, node) if through is None else None
    if through is not None:  # the codes themselves: Dequantize -> Resize -> Quantize is a copy
        src, quantize = through
        x = lw.operand(src, "nhwc")
        out = lw.result(quantize.outputs[0], "nhwc")
        lw.fused.add(quantize)
    elif after is not None:  # selection commutes with Quantize: quantize the smaller image
        from lowbit.backends.cpu.codegen.ops_quant import quantize_step

        xf = lw.operand(node.inputs[0], "nhwc")
        out_t = after.outputs[0].type
        dtype, biased = stored_dtype(out_t)
        x = lw.prog.tensor(f"{node.name}.codes", dtype, xf.shape, layout="nhwc", biased=biased)
        quantize_step(lw, f"{node.name}: input of {after.name}", xf, x, out_t)
        out = lw.result(after.outputs[0], "nhwc")
        lw.fused.add(after)
    else:
        x = lw.operand(node.inputs[0], "nhwc")
        out = lw.result(node.outputs[0], "nhwc", biased=x.biased)
    n, c, ih, iw = shape
    codes = " of codes" if through is not None or after is not None else ""
    lw.prog.step(f"{node.name}: Resize nearest {ih}x{iw} -> {out_shape[2]}x{out_shape[3]}"
                 f"{codes}", [
        f"lb_resize_nearest(ctx, {dim_c(n)}, {ih}, {iw}, {c}, {out_shape[2]}, {out_shape[3]}, "
        f"{lw.prog.data(tables[2].astype(np.int64))}, {lw.prog.data(tables[3].astype(np.int64))}, "
        f"{x.dtype.itemsize}, {x.ptr}, {out.ptr});"], [x], [out])
