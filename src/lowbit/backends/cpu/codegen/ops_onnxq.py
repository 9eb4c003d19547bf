"""Emitters of ONNX's quantization ops and ONNX Runtime's QOperator ops, as files from
onnxruntime.quantization.quantize_static import them: QuantizeLinear, DequantizeLinear,
QLinearConv, QLinearMatMul, QGemm, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearGlobalAveragePool, QLinearConcat.

Their arithmetic is ONNX Runtime's (backends/reference/kernels/quantized.py, ort_qlinear.py,
ort_contrib.py): int32 accumulators that wrap (the int8 kernels' wrapping sums give exactly
that), requantization in float32 (LB_RQ_FLOAT32). Multipliers come from the reference's own
helpers; element maps of 8-bit codes (tables of one or two operands) are computed by calling
the reference kernels on every code.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu import packing, params
from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter
from lowbit.backends.cpu.codegen.ops_quant import (
    binary_layout,
    broadcast,
    depthwise_code,
    folded,
    pack_groups,
    tname,
    wants_nhwc,
)
from lowbit.backends.cpu.codegen.ops_shape import concat_into
from lowbit.backends.cpu.codegen.program import Size, Tensor, dim_c, dim_size, numel
from lowbit.backends.reference.kernels import ort_qlinear
from lowbit.errors import UnsupportedError
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.ops.quantized import param_layout

MS = "com.microsoft"


def _scalar(lw: Lowering, v) -> np.ndarray:
    if v is None:
        return np.zeros((), np.int64)
    if not v.is_constant:
        raise UnsupportedError(f"'{v.name}': scales and zero points must be constants")
    return lw.const_array(v)


def _shift(t: Tensor) -> int:
    return 128 if t.biased else 0


def _qrange(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


# -- QuantizeLinear / DequantizeLinear ----------------------------------------------------------


def _axis(lw: Lowering, node, x: Tensor, scale: np.ndarray, zero) -> tuple[str, int]:
    layout = param_layout(node, x.shape, scale.shape, None if zero is None else zero.shape,
                          int(node.attrs["axis"]), int(node.attrs.get("block_size", 0)))
    if layout.kind == "tensor":
        return "(lb_axis){1, 1}", 1
    if layout.kind != "axis":
        raise UnsupportedError("blocked quantization parameters")
    from lowbit.backends.cpu.codegen.ops_quant import axis_of

    return axis_of(x, layout.axis, scale.size), scale.size


@emitter("QuantizeLinear")
def quantize_linear(lw: Lowering, node) -> None:
    """ONNX QuantizeLinear: clamp(rint(x / scale) + zero), NaN and -inf to qmin, +inf to
    qmax (the reference's quantize_linear, float32 scales)."""
    xv = node.inputs[0]
    if xv.type.dtype.np_dtype != np.float32:
        raise UnsupportedError(f"QuantizeLinear of {xv.type.dtype}")
    scale = _scalar(lw, node.inputs[1]).astype(np.float32).ravel()
    zv = node.input_or_none(2)
    zero = _scalar(lw, zv) if zv is not None else None
    if node.attrs.get("precision") or (zero is not None and zero.dtype not in
                                       (np.int8, np.uint8, np.int16, np.uint16)):
        raise UnsupportedError("QuantizeLinear other than to 8- or 16-bit integers in float32")
    x = lw.operand(xv, None)
    four = len(x.shape) == 4
    layout = param_layout(node, x.shape, scale.shape, None if zero is None else zero.shape,
                          int(node.attrs["axis"]), int(node.attrs.get("block_size", 0)))
    want_nhwc = four and x.layout == "plain" and wants_nhwc(lw, node.outputs[0]) and \
        (layout.kind == "tensor" or layout.axis == 1)
    out = lw.result(node.outputs[0], "nhwc" if want_nhwc else (x.layout if four else "plain"))
    lo, hi = _qrange(out.dtype if not out.biased else np.int8)
    z = (zero if zero is not None else np.zeros(scale.shape, np.int64)).astype(np.int64).ravel()
    sh = _shift(out)
    ax, channels = _axis(lw, node, x, scale, zero)
    s_c = cexpr.int_array(lw.prog, scale, np.float32, channels)
    z_c = cexpr.int_array(lw.prog, z + sh, np.int32, channels)
    big = cexpr.flt(1e30)
    tail = (f"{lo + sh}, {hi + sh}, -{big}, -{big}, {big}, {tname(lw, out)}, {out.ptr});")
    if want_nhwc:
        n, c, h, w = x.shape
        lw.prog.step(f"{node.name}: QuantizeLinear into NHWC", [
            f"lb_quantize_f32_nhwc(ctx, {dim_c(n)}, {c}, {h * w}, (const float *){x.ptr}, "
            f"{int(channels > 1)}, {s_c}, {z_c}, {tail}"], [x], [out])
        return
    lw.prog.step(f"{node.name}: QuantizeLinear", [
        f"lb_quantize_f32(ctx, {numel(x.shape).c()}, (const float *){x.ptr}, {ax}, {s_c}, {z_c}, "
        f"{tail}"], [x], [out])


@emitter("DequantizeLinear", dynamic=True)
def dequantize_linear(lw: Lowering, node) -> None:
    """ONNX DequantizeLinear: float32(x - zero) * scale."""
    xv = node.inputs[0]
    scale = _scalar(lw, node.inputs[1])
    if scale.dtype != np.float32 or node.attrs.get("output_dtype"):
        raise UnsupportedError("DequantizeLinear other than to float32")
    zv = node.input_or_none(2)
    zero = _scalar(lw, zv) if zv is not None else None
    x = lw.operand(xv, None)
    if x.dtype.kind == "f":
        raise UnsupportedError("DequantizeLinear of float8 codes")
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    z = (zero if zero is not None else np.zeros(scale.shape, np.int64)).astype(np.int64).ravel()
    ax, channels = _axis(lw, node, x, scale.ravel(), zero)
    lw.prog.step(f"{node.name}: DequantizeLinear", [
        f"lb_dequantize(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, {ax}, "
        f"{cexpr.int_array(lw.prog, scale.ravel(), np.float32, channels)}, "
        f"{cexpr.int_array(lw.prog, z + _shift(x), np.int32, channels)}, (float *){out.ptr});"],
        [x], [out])


# -- products -----------------------------------------------------------------------------------


def _float_epilogue(lw: Lowering, m_values: np.ndarray, channels: int, out: Tensor, zero: int,
                    offset: np.ndarray, zb) -> str:
    """The lb_epilogue of ONNX Runtime's requantization rint(float32(acc) * M) (or, for a
    float32 out, float32(acc) * M)."""
    if out.dtype == np.float32:
        lo = hi = 0
    else:
        lo, hi = _qrange(np.int8 if out.biased else out.dtype)
    sh = _shift(out)
    arrays = packing.float32_arrays(m_values, zero + sh, lo + sh, hi + sh, channels)
    zb_c = cexpr.int_array(lw.prog, zb) if zb is not None else "NULL"
    return (f"const lb_epilogue ep = {{{cexpr.int_array(lw.prog, offset)}, {zb_c}, "
            f"{cexpr.requant(lw.prog, arrays)}, {tname(lw, out)}, NULL, 0, NULL, NULL, "
            f".post = NULL, .residual_split = NULL}};")


def _stored_weights(w: np.ndarray, zw) -> tuple[np.ndarray, np.ndarray]:
    return w, np.broadcast_to(np.asarray(zw, np.int64).ravel(), (w.shape[0],)).copy()


@emitter("QLinearConv")
def qlinear_conv(lw: Lowering, node) -> None:
    xv, _xs, xz, wv, _ws, wz, _ys, yz = node.inputs[:8]
    bv = node.input_or_none(8)
    if not wv.is_constant or (bv is not None and not bv.is_constant):
        raise UnsupportedError("QLinearConv needs constant weights and bias")
    w = lw.const_array(wv)
    if w.ndim != 4 or w.dtype not in (np.int8, np.uint8):
        raise UnsupportedError("QLinearConv other than 2-D with 8-bit weights")
    group = int(node.attrs["group"])
    m, cg, kh, kw = w.shape
    mg, taps = m // group, kh * kw
    x = lw.operand(xv, "nhwc")
    if x.dtype.itemsize != 1:
        raise UnsupportedError("QLinearConv of other than 8-bit inputs")
    n, c, ih, iw = x.shape
    win = window_from_attrs(node, w.shape[2:], 2)
    pads = win.resolved_pads((ih, iw))
    out = lw.result(node.outputs[0], "nhwc")
    oh, ow = out.shape[2], out.shape[3]
    mult = np.broadcast_to(np.asarray(params.of(node).multiplier, np.float32).ravel(),
                           (m,)).copy()
    za = int(_scalar(lw, xz).reshape(())) + _shift(x)
    zw = np.broadcast_to(_scalar(lw, wz).astype(np.int64).ravel(), (m,)).copy()
    bias = lw.const_array(bv).astype(np.int64) if bv is not None else None
    zy = int(_scalar(lw, yz).reshape(()))
    wdesc = cexpr.window(n, ih, iw, c, oh, ow, win, pads)
    if cg == 1 and mg == 1 and taps <= 64:
        centred = (w.reshape(c, taps).astype(np.int64) - zw[:, None]).T
        offset = -za * centred.sum(axis=0) + (bias if bias is not None else 0)
        code = [_float_epilogue(lw, mult, c, out, zy, packing.wrap_int32(offset), None),
                *depthwise_code(lw, centred, c, za, wdesc, win, x, out)]
        lw.prog.step(f"{node.name}: QLinearConv depthwise {kh}x{kw}, {c} channels", code, [x],
                     [out])
        return
    w2 = w.transpose(0, 2, 3, 1).reshape(m, taps * cg)
    pointwise = kh == kw == 1 and win.strides == (1, 1) and not any(pads) and (oh, ow) == (ih, iw)
    if not pointwise and w2.shape[1] % 4:
        extra = np.broadcast_to(zw.reshape(-1, 1), (m, -w2.shape[1] % 4)).astype(w2.dtype)
        w2 = np.concatenate([w2, extra], axis=1)
    offset, zb = folded(w2, zw, za, bias)
    scratch = None if pointwise else lw.prog.scratch(Size(oh * ow * w2.shape[1] * group),
                                                     "im2col")
    rows = dim_size(n) * (ih * iw) if pointwise and group == 1 else Size(oh * ow)
    sums = lw.prog.scratch(rows * 4, "row_sums") if zb is not None else None
    code = [pack_groups(lw, w2, zw, group), _float_epilogue(lw, mult, m, out, zy, offset, zb),
            f"const lb_qconv conv = {{{wdesc}, {group}, {cg}, {mg}, {za}, packed, ep}};",
            f"lb_qconv_run(ctx, &conv, {x.ptr}, {out.ptr}, "
            f"{scratch.ptr if scratch else 'NULL'}, "
            f"{f'(int32_t *){sums.ptr}' if sums else 'NULL'});"]
    lw.prog.step(f"{node.name}: QLinearConv {kh}x{kw} group {group}, {c} -> {m}", code, [x],
                 [out], [t for t in (scratch, sums) if t is not None])


def _qgemm_rows(lw: Lowering, node, av, w_rows: np.ndarray, zw, za_raw: int, bias, mult,
                zy: int) -> None:
    a = lw.operand(av, "plain")
    if a.dtype.itemsize != 1 or w_rows.dtype not in (np.int8, np.uint8):
        raise UnsupportedError(f"{node.op_type} of other than 8-bit operands")
    out = lw.result(node.outputs[0], "plain")
    ncols, k = w_rows.shape
    zw = np.broadcast_to(np.asarray(zw, np.int64).ravel(), (ncols,)).copy()
    za = za_raw + _shift(a)
    offset, zb = folded(w_rows, zw, za, bias)
    rows = numel(a.shape[:-1])
    sums = lw.prog.scratch(rows * 4, "row_sums") if zb is not None else None
    mult = np.broadcast_to(np.asarray(mult, np.float32).ravel(), (ncols,)).copy()
    code = [pack_groups(lw, w_rows, zw, 1), _float_epilogue(lw, mult, ncols, out, zy, offset, zb),
            f"lb_qgemm(ctx, {rows.c()}, {ncols}, {k}, {a.ptr}, {k}, &packed[0], &ep, "
            f"{out.ptr}, {ncols}, {f'(int32_t *){sums.ptr}' if sums else 'NULL'});"]
    lw.prog.step(f"{node.name}: {node.op_type} {k} -> {ncols}", code, [a], [out],
                 [sums] if sums else [])


@emitter("QLinearMatMul")
def qlinear_matmul(lw: Lowering, node) -> None:
    av, a_s, a_z, bv, _b_s, b_z, _y_s, y_z = node.inputs[:8]
    if not bv.is_constant or lw.const_array(bv).ndim != 2:
        raise UnsupportedError("QLinearMatMul with other than a constant 2-D B")
    if _scalar(lw, a_s).size != 1:
        raise UnsupportedError("QLinearMatMul with per-row A parameters")
    mult = params.of(node).multiplier
    b = lw.const_array(bv)
    _qgemm_rows(lw, node, av, np.ascontiguousarray(b.T), _scalar(lw, b_z),
                int(_scalar(lw, a_z).reshape(())), None, mult, int(_scalar(lw, y_z).reshape(())))


@emitter("QGemm", domain=MS)
def qgemm(lw: Lowering, node) -> None:
    av, _a_s, a_z, _b, _b_s, b_z = node.inputs[:6]
    cv, _y_s, y_z = (list(node.inputs[6:]) + [None] * 3)[:3]
    w_rows = lw.dense_weight_rows(node)
    m = params.of(node).multiplier
    bias = lw.const_array(cv).astype(np.int64).ravel() if cv is not None else None
    if bias is not None and bias.size not in (1, w_rows.shape[0]):
        raise UnsupportedError("QGemm with a C that is not one value per column")
    if bias is not None:
        bias = np.broadcast_to(bias, (w_rows.shape[0],))
    _qgemm_rows(lw, node, av, np.ascontiguousarray(w_rows), _scalar(lw, b_z),
                int(_scalar(lw, a_z).reshape(())), bias, m,
                int(_scalar(lw, y_z).reshape(())) if y_z is not None else 0)


# -- element maps ----------------------------------------------------------------------------------


def _stored_table(values: np.ndarray, in_biased: bool, out: Tensor) -> np.ndarray:
    """A table of results for codes min..max, holding stored codes. Its index is the stored
    input code either way: uint8 codes themselves, int8 codes + 128 = code - min."""
    del in_biased  # (the same index in both cases; kept for the call sites' clarity)
    return (values.astype(np.int64) + _shift(out)).astype(np.uint8)


@emitter("QLinearSigmoid", domain=MS)
@emitter("QLinearLeakyRelu", domain=MS)
def qlinear_table(lw: Lowering, node) -> None:
    xv = node.inputs[0]
    dtype = xv.type.dtype.np_dtype
    if np.dtype(dtype).itemsize != 1:
        raise UnsupportedError(f"{node.op_type} of other than 8-bit codes")
    codes = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype)
    kernel = ort_qlinear.qlinear_sigmoid if node.op_type == "QLinearSigmoid" else \
        ort_qlinear.qlinear_leaky_relu
    consts = [_scalar(lw, v) if v is not None else None for v in node.inputs[1:5]]
    table = kernel(node, [codes, *consts])[0]  # the reference on every code, in order
    x = lw.operand(xv, None)
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    data = lw.prog.data(_stored_table(table, x.biased, out))
    lw.prog.step(f"{node.name}: {node.op_type} as a table", [
        f"lb_lookup(ctx, {numel(x.shape).c()}, {x.ptr}, LB_U8, 0, {data}, LB_U8, {out.ptr});"],
        [x], [out])


@emitter("QLinearAdd", domain=MS)
@emitter("QLinearMul", domain=MS)
def qlinear_binary(lw: Lowering, node) -> None:
    """Two 8-bit operands map to a result by a 65536-entry table: the reference kernel
    evaluated on every pair of codes (exactly its float32 arithmetic), then a broadcasting
    lookup."""
    av, sa, za, bv, sb, zb, sc, zc = (list(node.inputs) + [None] * 8)[:8]
    dtype = av.type.dtype.np_dtype
    if np.dtype(dtype).itemsize != 1 or bv.type.dtype.np_dtype != dtype:
        raise UnsupportedError(f"{node.op_type} of other than 8-bit codes of one type")
    codes = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype)
    pa, pb = np.meshgrid(codes, codes, indexing="ij")
    kernel = ort_qlinear.qlinear_add if node.op_type == "QLinearAdd" else ort_qlinear.qlinear_mul
    consts = [_scalar(lw, v) if v is not None else None for v in (sa, za, sb, zb, sc, zc)]
    table = kernel(node, [pa, consts[0], consts[1], pb, consts[2], consts[3], consts[4],
                          consts[5]])[0].reshape(-1)
    layout = binary_layout(lw, node)
    a = lw.operand(av, layout if len(lw.shape(av)) == 4 else "plain")
    b = lw.operand(bv, layout if len(lw.shape(bv)) == 4 else "plain")
    out = lw.result(node.outputs[0], layout)
    data = lw.prog.data(_stored_table(table, a.biased, out))
    code = [f"const lb_bcast bc = {broadcast(lw, a, b, out)};",
            f"const lb_qbinary op = {{LB_QTABLE2, LB_U8, LB_U8, LB_U8, {{0}}, 0, "
            f"(const uint8_t *){data}, 0, 0, 0, 0, 0, 0, NULL}};",
            f"lb_qbinary_run(ctx, &bc, &op, {a.ptr}, {b.ptr}, {out.ptr});"]
    lw.prog.step(f"{node.name}: {node.op_type} as a 65536-entry table", code, [a, b], [out])


@emitter("QLinearConcat", domain=MS)
def qlinear_concat(lw: Lowering, node) -> None:
    sy, zy = (_scalar(lw, v) for v in node.inputs[:2])
    axis = int(node.attrs["axis"]) % len(lw.shape(node.outputs[0]))
    first = lw.operand(node.inputs[2], None)
    layout = first.layout if len(first.shape) == 4 else "plain"
    out = lw.result(node.outputs[0], layout)
    parts = []
    for i in range(2, len(node.inputs), 3):
        xv, sx, zx = node.inputs[i:i + 3]
        t = lw.operand(xv, layout)
        if t.dtype.itemsize != 1:
            raise UnsupportedError("QLinearConcat of other than 8-bit codes")
        dtype = xv.type.dtype.np_dtype
        codes = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype)
        table = ort_qlinear.qlinear_concat(node, [sy, zy, codes, _scalar(lw, sx),
                                                  _scalar(lw, zx)])[0]
        tmp = lw.prog.tensor(f"{xv.name}.requantized", np.uint8, t.shape, layout=layout,
                             biased=out.biased)
        lw.prog.step(f"{node.name}: input {xv.name} to the output's parameters", [
            f"lb_lookup(ctx, {numel(t.shape).c()}, {t.ptr}, LB_U8, 0, "
            f"{lw.prog.data(_stored_table(table, t.biased, out))}, LB_U8, {tmp.ptr});"], [t],
            [tmp])
        parts.append(tmp)
    concat_into(lw, node, parts, out, axis)


@emitter("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(lw: Lowering, node) -> None:
    if node.attrs["channels_last"]:
        raise UnsupportedError("QLinearGlobalAveragePool with channels_last")
    xv, sx, zx, sy, zy = node.inputs
    x = lw.operand(xv, "nhwc")
    if len(x.shape) != 4 or x.dtype.itemsize != 1:
        raise UnsupportedError("QLinearGlobalAveragePool of other than 8-bit images")
    n, c, h, w = x.shape
    f = np.float32
    # as ort_qlinear.qlinear_global_average_pool
    m = f(f(_scalar(lw, sx).reshape(())) / f(f(_scalar(lw, sy).reshape(())) * f(h * w)))
    out = lw.result(node.outputs[0], "plain")
    lo, hi = _qrange(np.int8 if out.biased else out.dtype)
    sh = _shift(out)
    arrays = packing.float32_arrays(m, int(_scalar(lw, zy).reshape(())) + sh, lo + sh,
                                    hi + sh, 1)
    lw.prog.step(f"{node.name}: QLinearGlobalAveragePool", [
        f"const lb_window w = {{{dim_c(n)}, {h}, {w}, {c}, 1, 1, {h}, {w}, 1, 1, 1, 1, 0, 0}};",
        f"const lb_requant rq = {cexpr.requant(lw.prog, arrays)};",
        f"lb_qavgpool(ctx, &w, LB_U8, {int(_scalar(lw, zx).reshape(())) + _shift(x)}, 0, &rq, "
        f"LB_U8, {x.ptr}, {out.ptr});"], [x], [out])
