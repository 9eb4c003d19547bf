"""Emitters of quantized nodes: lowbit's Quantize/Dequantize/Requantize, the products (Conv,
Gemm, MatMul), Add/Sub/Mul, averages, clamps, lookup tables and Concat.

Each derives its integers with lowbit.backends.cpu.params (the reference's definitions) and
moves zero points and bounds into the stored domain (int8 codes + 128) where operands are
stored as uint8.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu import packing, params
from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.column_arrays import ceil_bound, column_arrays
from lowbit.backends.cpu.codegen.lower import Lowering, emitter, stored_dtype
from lowbit.backends.cpu.codegen.ops_conv16 import conv16_code
from lowbit.backends.cpu.codegen.ops_shape import concat_into, logical_strides, pool_setup
from lowbit.backends.cpu.codegen.post_stage import PostStage, hard_swish_map, post_stage
from lowbit.backends.cpu.codegen.program import Size, Tensor, dim_c, dim_size, is_batch, numel
from lowbit.backends.cpu.codegen.se_residual import emit_se_residual, qbinary_c
from lowbit.backends.cpu.codegen.unary_chain import emit_unary_chain
from lowbit.backends.reference.kernels import is_quantized
from lowbit.errors import KernelError, UnsupportedError
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType
from lowbit.numerics.arith import Requant
from lowbit.ops.conv_geometry import Window, window_from_attrs
from lowbit.ops.product import product_of
from lowbit.ops.registry import QUANT_DOMAIN, TABLE, all_ops

INT32_LIMIT = 2**31


def shift_of(t: TensorType) -> int:
    """How much stored codes exceed the type's codes: 128 for int8 stored as uint8."""
    return 128 if stored_dtype(t)[1] else 0


def tname(lw: Lowering, t: Tensor) -> str:
    return cexpr.TYPE_NAMES[lw.type_code(t)]


def axis_of(t: Tensor, logical_axis: int | None, channels: int) -> str:
    """An lb_axis initializer: channel = (i / inner) % channels over t's stored order."""
    if logical_axis is None or channels == 1:
        return "(lb_axis){1, 1}"
    phys = t.physical_shape
    perm = [0, 2, 3, 1] if t.layout == "nhwc" else list(range(len(t.shape)))
    pa = perm.index(logical_axis % len(t.shape))
    inner = numel(phys[pa + 1:])
    if inner.power:
        raise UnsupportedError("per-channel parameters along an axis before the batch axis")
    return f"(lb_axis){{{channels}, {inner.coef}}}"


# -- Quantize / Dequantize / Requantize ---------------------------------------------------------


NHWC_READERS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool")


def wants_nhwc(lw: Lowering, v) -> bool:
    """Whether every reader of `v` works in NHWC (so a producer may write that layout)."""
    uses = lw.users.get(v, [])
    return bool(uses) and v not in lw.output_values and \
        all(n.op_type in NHWC_READERS and i == 0 for n, i in uses)


@emitter("Quantize", domain=QUANT_DOMAIN, dynamic=True)
def quantize(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0], None)
    out_t = node.outputs[0].type
    q = out_t.quant
    four = len(x.shape) == 4
    if four and x.layout == "plain" and wants_nhwc(lw, node.outputs[0]) and \
            (q.axis is None or q.axis % 4 == 1):
        out = lw.result(node.outputs[0], "nhwc")
        n, c, h, w = x.shape
        lw.prog.step(f"{node.name}: Quantize into NHWC", [
            f"lb_quantize_f32_nhwc(ctx, {dim_c(n)}, {c}, {h * w}, (const float *){x.ptr}, "
            f"{int(q.axis is not None)}, {quantize_args(lw, out_t)}, {tname(lw, out)}, "
            f"{out.ptr});"], [x], [out])
        return
    quantize_step(lw, node.name, x, lw.result(node.outputs[0], x.layout if four else "plain"),
                  out_t)


def quantize_args(lw: Lowering, out_t: TensorType) -> str:
    """The scale, zero-point and bounds arguments of lb_quantize_f32(_nhwc) for `out_t`
    (arith.quantize: NaN -> 0, infinities -> the type's range before the zero point)."""
    q = out_t.quant
    sh = shift_of(out_t)
    scale = cexpr.int_array(lw.prog, q.scale, np.float32, q.channels)
    zp = cexpr.int_array(lw.prog, q.zero_point.astype(np.int64) + sh, np.int32, q.channels)
    return (f"{scale}, {zp}, {out_t.dtype.qmin + sh}, {out_t.dtype.qmax + sh}, 0.0f, "
            f"{cexpr.flt(out_t.dtype.qmin)}, {cexpr.flt(out_t.dtype.qmax)}")


def quantize_step(lw: Lowering, name: str, x: Tensor, out: Tensor, out_t: TensorType) -> None:
    """A step quantizing float tensor `x` into `out` (x's shape and layout) with out_t's
    parameters (arith.quantize)."""
    q = out_t.quant
    lw.prog.step(f"{name}: Quantize", [
        f"lb_quantize_f32(ctx, {numel(x.shape).c()}, (const float *){x.ptr}, "
        f"{axis_of(x, q.axis, q.channels)}, {quantize_args(lw, out_t)}, {tname(lw, out)}, "
        f"{out.ptr});"], [x], [out])


@emitter("Dequantize", domain=QUANT_DOMAIN, dynamic=True)
def dequantize(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0], None)
    t = node.inputs[0].type
    q = t.quant
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    scale = cexpr.int_array(lw.prog, q.scale, np.float32, q.channels)
    zp = cexpr.int_array(lw.prog, q.zero_point.astype(np.int64) + shift_of(t), np.int32,
                         q.channels)
    lw.prog.step(f"{node.name}: Dequantize", [
        f"lb_dequantize(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, "
        f"{axis_of(x, q.axis, q.channels)}, {scale}, {zp}, (float *){out.ptr});"], [x], [out])


def requantize_into(lw: Lowering, node, x: Tensor, src: TensorType, rq: Requant, zin,
                    out: Tensor, out_t: TensorType, axis: int | None, comment: str) -> None:
    """y = rq(q - zin) elementwise (per channel along logical `axis`)."""
    channels = int(np.size(rq.encoding.real)) if np.ndim(rq.encoding.real) else 1
    zsrc = np.asarray(zin, np.int64) + shift_of(src)
    channels = max(channels, int(np.size(zsrc)))
    if channels == 1 and np.size(rq.zero_point) == 1 and out.dtype.itemsize <= 2 and \
            np.dtype(src.dtype.np_dtype).itemsize == 1:
        # a function of one byte: the reference's Requant.apply on each of the 256 codes
        codes = np.arange(src.dtype.qmin, src.dtype.qmax + 1, dtype=np.int64)
        tab = rq.apply(codes - int(np.asarray(zin).reshape(-1)[0])).astype(np.int64)
        data = lw.prog.data((tab + shift_of(out_t)).astype(out.dtype))
        lw.prog.step(f"{comment} (a 256-entry table)", [
            f"lb_lookup(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, "
            f"{src.dtype.qmin + shift_of(src)}, {data}, {tname(lw, out)}, {out.ptr});"],
            [x], [out])
        return
    arrays = cexpr.requant_arrays(rq, channels, shift_of(out_t))
    lw.prog.step(comment, [
        f"const lb_requant rq = {cexpr.requant(lw.prog, arrays)};",
        f"lb_requantize(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, "
        f"{axis_of(x, axis, channels)}, {cexpr.int_array(lw.prog, zsrc, np.int32, channels)}, "
        f"&rq, {tname(lw, out)}, {out.ptr});"], [x], [out])


@emitter("Requantize", domain=QUANT_DOMAIN, dynamic=True)
def requantize(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0], None)
    src, out_t = node.inputs[0].type, node.outputs[0].type
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    p = params.of(node)
    requantize_into(lw, node, x, src, p.requant, p.input_zero, out, out_t, p.requant.axis,
                    f"{node.name}: Requantize")


# -- products -----------------------------------------------------------------------------------


@dataclass
class Residual:
    """An Add (or Sub) computed in a product's epilogue: its node, the other operand's stored
    tensor, and the parameters with the product's result as the first operand."""

    node: Node
    other: Tensor
    add: tuple


def residual_of(lw: Lowering, node, layout: str) -> Residual | None:
    """The quantized Add/Sub reading `node`'s result as its only use, with an 8-bit operand
    of the same shape computed earlier: fused into `node`'s epilogue (no Add step, no
    intermediate tensor)."""
    v = node.outputs[0]
    user = lw.sole_user(v)
    if user is None or user.op_type not in ("Add", "Sub") or not is_quantized(user) or \
            user.domain not in ("", "ai.onnx"):
        return None
    first = user.inputs[0] is v
    other_v = user.inputs[1] if first else user.inputs[0]
    if other_v is v or (user.op_type == "Sub" and not first) or not lw.available(other_v):
        return None
    out_t = user.outputs[0].type
    types = (v.type, other_v.type, out_t)
    if any(t is None or t.quant is None or t.dtype.bits != 8 or not t.quant.per_tensor
           for t in types):
        return None
    if lw.shape(other_v) != lw.shape(v) or lw.shape(user.outputs[0]) != lw.shape(v):
        return None
    ps = params.of(user)
    i, j = (0, 1) if first else (1, 0)
    q1, q2 = ps.aligners[i], ps.aligners[j]
    add = (ps.shift, ps.input_zeros[i] + shift_of(types[0]), int(q1.multiplier),
           int(q1.left_shift), int(q1.right_shift), ps.input_zeros[j] + shift_of(types[1]),
           int(q2.multiplier), int(q2.left_shift), int(q2.right_shift),
           int(user.op_type == "Sub"))
    arrays = cexpr.requant_arrays(ps.requant, 1, shift_of(out_t))
    other = lw.operand(other_v, layout)
    return Residual(user, other, (*add, arrays))


def epilogue(lw: Lowering, p: params.Product, out_t: TensorType, channels: int,
             offset: np.ndarray, zb: np.ndarray | None, out: Tensor,
             residual: Residual | None = None, raw_bound: int | None = None,
             post: PostStage | None = None) -> list[str]:
    """C lines declaring `ep`, the lb_epilogue of a product into `out` (with a residual Add:
    `out` is the Add's result). `raw_bound`: a bound of |sum a w| over the stored operands
    the kernel multiplies (before the folded offset), for the VNNI kernels' bounded form of
    the requantization (packing.bounded_arrays); None when the kernel has no such form.
    `post`: nodes after the product computed on each code before the store (`out` is then
    the last one's result, `out_t` still the product's type)."""
    if p.requant is None:
        arrays = packing.dequant_arrays(p.scale, channels, *p.clip)
    else:
        arrays = cexpr.requant_arrays(p.requant, channels, shift_of(out_t))
    bounded = split = None
    if raw_bound is not None and zb is None and "vnni" in lw.isas and \
            p.requant is not None and tname(lw, out) == "LB_U8" and post is None:
        if residual is not None:  # the Add's operands and result are 8-bit codes
            *add, out_arrays = residual.add
            split = packing.residual_split(add, out_arrays)
        if residual is None or split is not None:
            bounded = packing.bounded_arrays(arrays, offset, channels, raw_bound)
    bounded_c = lw.prog.data(bounded, "bounded") if bounded is not None else "NULL"
    split_c = lw.prog.data(split, "bounded") if bounded is not None and split is not None \
        else "NULL"
    zb_c = cexpr.int_array(lw.prog, zb) if zb is not None else "NULL"
    lines = list(post.lines) if post is not None else []
    fused = "NULL, 0, NULL"
    if residual is not None:
        *add, out_arrays = residual.add
        lines.append(f"const lb_add_params add = {{{', '.join(map(str, add))}, "
                     f"{cexpr.requant(lw.prog, out_arrays)}}};")
        fused = f"{residual.other.ptr}, {channels}, &add"
    # fields after `bounded` by name (other branches append theirs there too)
    lines.append(f"const lb_epilogue ep = {{{cexpr.int_array(lw.prog, offset)}, {zb_c}, "
                 f"{cexpr.requant(lw.prog, arrays)}, {tname(lw, out)}, {fused}, "
                 f"{bounded_c}, .post = {'&post' if post is not None else 'NULL'}, "
                 f".residual_split = {split_c}}};")
    return lines


def post_names(post: PostStage | None) -> str:
    """A step description's note of the nodes fused after a product."""
    if post is None:
        return ""
    names = [n.op_type for n in post.nodes]
    if post.float_hard_swish:
        names[0] = "HardSwish in float32"
    return " then " + " + ".join(names)


def raw_bound(w8: np.ndarray) -> int:
    """A bound of |sum_k a_k w_k| for uint8 activations a and the rows of w8 [n, k] (the
    stored weights the kernel multiplies, before any zero-point correction)."""
    return 255 * int(np.abs(w8.astype(np.int64)).sum(axis=1).max(initial=0))


def fast_product(x_t: TensorType, w: np.ndarray, p: params.Product) -> bool:
    """Whether the int8 kernels compute this product exactly: 8-bit operands, no narrowing
    shift, and an accumulator provably inside int32."""
    if x_t.dtype.bits != 8 or w.dtype not in (np.int8, np.uint8) or p.narrow_shift:
        return False
    bound = packing.exact_bound(255, w.reshape(w.shape[0], -1), p.w_zero, p.bias)
    return bound < INT32_LIMIT


def pack_groups(lw: Lowering, w2: np.ndarray, zw: np.ndarray, groups: int) -> str:
    """Pack per-group weight rows W[g*mg:(g+1)*mg, K] into the blob; returns a C array of
    lb_packed_b named `packed`."""
    m, k = w2.shape
    mg = m // groups
    entries = []
    for g in range(groups):
        wg, _ = packing.weights_int8(w2[g * mg:(g + 1) * mg], zw[g * mg:(g + 1) * mg])
        ptr = lw.prog.data(packing.pack_weights(wg), "weights")
        entries.append(f"{{(const int8_t *){ptr}, {mg}, {k}, {-(-k // 4)}}}")
    return f"const lb_packed_b packed[{groups}] = {{{', '.join(entries)}}};"


def folded_weights(w2: np.ndarray, zw: np.ndarray) -> np.ndarray:
    """The int8 weights the kernels store (uint8 ones minus 128)."""
    return packing.weights_int8(w2, zw)[0]


def folded(w2: np.ndarray, zw: np.ndarray, za: int, bias) -> tuple[np.ndarray, np.ndarray | None]:
    """fold_offsets over stored int8 weights (uint8 weights shifted by -128)."""
    w8, zw8 = packing.weights_int8(w2, zw)
    return packing.fold_offsets(w8, zw8, za, bias)


@emitter("Conv", quantized=True)
def conv(lw: Lowering, node) -> None:
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input_or_none(2)
    if not wv.is_constant or (bv is not None and not bv.is_constant):
        raise UnsupportedError("quantized Conv needs constant weights and bias")
    w = lw.const_array(wv)
    if w.ndim != 4:
        raise UnsupportedError("quantized Conv over other than 2 spatial axes")
    tx, out_t = xv.type, node.outputs[0].type
    group = int(node.attrs["group"])
    m, cg, kh, kw = w.shape
    mg = m // group
    p = params.product(node, m)
    x = lw.operand(xv, "nhwc")
    n, c, ih, iw = x.shape
    win = window_from_attrs(node, w.shape[2:], 2)
    pads = win.resolved_pads((ih, iw))
    residual = residual_of(lw, node, "nhwc") if out_t.quant is not None and \
        out_t.dtype.bits == 8 and fast_product(tx, w, p) else None
    taps = kh * kw
    dw = cg == 1 and mg == 1 and taps <= 64
    # not after depthwise convolutions: their fast kernels have no post stage, and the
    # general one cost more than the separate steps (PP-OCR, per-step profiles)
    post = post_stage(lw, node, m, group) \
        if residual is None and not dw and fast_product(tx, w, p) else None
    if residual is not None:
        lw.fused.add(residual.node)
        out = lw.result(residual.node.outputs[0], "nhwc")
    elif post is not None:
        lw.fused.update(post.nodes)
        out = lw.result(post.value, "nhwc")
    else:
        out = lw.result(node.outputs[0], "nhwc")
    oh, ow = out.shape[2], out.shape[3]
    wdesc = cexpr.window(n, ih, iw, c, oh, ow, win, pads)
    za = p.x_zero + shift_of(tx)
    pointwise = kh == kw == 1 and win.strides == (1, 1) and not any(pads) and (oh, ow) == (ih, iw)
    if not fast_product(tx, w, p):
        return wide_conv(lw, node, x, tx, w, p, out, out_t, wdesc, group, za, pointwise)
    reads = [x] + ([residual.other] if residual else [])
    if dw:
        return depthwise(lw, node, x, w, p, out, out_t, wdesc, win, za, taps, residual, reads,
                         post)
    # weights as rows [m, taps * cg] in (tap, channel) order, matching im2col, whose rows
    # are padded to a multiple of 4 with the zero point (zero weights there)
    w2 = w.transpose(0, 2, 3, 1).reshape(m, taps * cg)
    if not pointwise and w2.shape[1] % 4:
        extra = np.broadcast_to(p.w_zero.reshape(-1, 1), (m, -w2.shape[1] % 4))
        w2 = np.concatenate([w2, extra.astype(w2.dtype)], axis=1)  # w = z_w: a zero weight
    offset, zb = folded(w2, p.w_zero, za, p.bias)
    scratch = None if pointwise else lw.prog.scratch(Size(oh * ow * w2.shape[1] * group),
                                                     "im2col")
    rows = dim_size(n) * (ih * iw) \
        if pointwise and group == 1 else Size(oh * ow)
    sums = lw.prog.scratch(rows * 4, "row_sums") if zb is not None else None
    code = [pack_groups(lw, w2, p.w_zero, group),
            *epilogue(lw, p, out_t, m, offset, zb, out, residual,
                      raw_bound(folded_weights(w2, p.w_zero)) if group == 1 else None, post),
            f"const lb_qconv conv = {{{wdesc}, {group}, {cg}, {mg}, {za}, packed, ep}};",
            f"lb_qconv_run(ctx, &conv, {x.ptr}, {out.ptr}, "
            f"{scratch.ptr if scratch else 'NULL'}, "
            f"{f'(int32_t *){sums.ptr}' if sums else 'NULL'});"]
    lw.prog.step(f"{node.name}: Conv {kh}x{kw} /{win.strides[0]} group {group}, {c} -> {m}"
                 f"{' + ' + residual.node.name if residual else ''}{post_names(post)}",
                 code, reads, [out], [s for s in (scratch, sums) if s is not None])


def pair_weights(centred: np.ndarray) -> np.ndarray:
    """Depthwise weights [taps, c] (int16, centred) in the AVX-512 kernel's order: per 32
    channels, per pair of taps, 16 int32 lanes of (w_t, w_t+1) for channels 0-3, 8-11, 16-19,
    24-27, then 16 for channels 4-7, 12-15, 20-23, 28-31 (unpacklo/hi's lane order)."""
    taps, c = centred.shape
    pairs = -(-taps // 2)
    cb = -(-c // 32)
    full = np.zeros((pairs * 2, cb * 32), np.int16)
    full[:taps, :c] = centred
    lanes = np.arange(16)
    lo = 8 * (lanes // 4) + lanes % 4
    order = np.concatenate([lo, lo + 4])  # channel of each int32 lane, lo then hi
    out = np.empty((cb, pairs, 32, 2), np.int16)
    for b in range(cb):
        ch = b * 32 + order
        out[b, :, :, 0] = full[0::2, ch]
        out[b, :, :, 1] = full[1::2, ch]
    return out.reshape(-1)


def quad_weights(centred: np.ndarray) -> np.ndarray:
    """Depthwise weights [taps, c] (centred, inside int8) in the VNNI kernel's order: per 32
    channels, per 4 taps (zero weights past the last), 4 accumulators x 8 int32 lanes x the 4
    taps' int8 weights, accumulator X lane j holding channel 16 (j // 4) + 4 X + j % 4 (the
    lane order of unpacklo/hi_epi8 then _epi16 within 128-bit lanes)."""
    taps, c = centred.shape
    quads = -(-taps // 4)
    cb = -(-c // 32)
    full = np.zeros((quads * 4, cb * 32), np.int8)
    full[:taps, :c] = centred
    x, j = np.meshgrid(np.arange(4), np.arange(8), indexing="ij")
    lane_channel = (16 * (j // 4) + 4 * x + j % 4).reshape(-1)  # [32]
    out = np.empty((cb, quads, 32, 4), np.int8)
    for b in range(cb):
        block = full[:, b * 32 + lane_channel]  # [quads * 4, 32]
        out[b] = block.reshape(quads, 4, 32).transpose(0, 2, 1)
    return out.reshape(-1)


DW_TAPS, DW_COLUMNS = 0, 1


def quad_taps(kh: int, kw: int) -> np.ndarray:
    """The kernel taps (row-major indices, -1 for a zero weight) in lb_dwconv's LB_DW_COLUMNS
    order (lowbit_rt.h): for each kernel column, its kh <= 8 rows' taps in groups of 4 (one
    group for kh <= 5, two for 6-8), padded with -1 to whole groups; for kh = 5, row 4 after
    them, 4 columns a quad, padded with -1 to whole quads."""
    rows = 4 if kh <= 5 else 8
    taps = [ky * kw + dx if ky < kh else -1 for dx in range(kw) for ky in range(rows)]
    if kh == 5:
        taps += [4 * kw + dx if dx < kw else -1 for dx in range(-(-kw // 4) * 4)]
    return np.array(taps, np.int64)


def quad_order(win: Window) -> int:
    """The tap order of the VNNI depthwise kernel's weights for window `win`: columns (an
    input pixel interleaved once per output row, not once per 4 taps of each output pixel)
    where the kernel takes them: kh <= 4 rows and no more products than row-major taps,
    kw <= ceil(kh kw / 4) (3 x 3: 3 column quads as 3 row-major ones); 5 rows and kw >= 3
    (4-row column quads and row 4 by 4 columns: 5 x 5 takes 7 quads, as row-major taps); or
    6-8 rows and kw >= 3 where two groups of 4 rows take at most 1.5x the products of
    row-major quads, saving the interleaving of every quad of every pixel."""
    (kh, kw), (_, sw), (_, dw) = win.kernel, win.strides, win.dilations
    if kw > 8 or sw > 2 or dw > 2:
        return DW_TAPS
    if kh <= 4 and kw <= -(-kh * kw // 4):
        return DW_COLUMNS
    if kh == 5 and kw >= 3:
        return DW_COLUMNS
    if 5 < kh <= 8 and kw >= 3 and 2 * kw <= 1.5 * -(-kh * kw // 4):
        return DW_COLUMNS
    return DW_TAPS


def depthwise(lw: Lowering, node, x, w, p: params.Product, out, out_t, wdesc, win: Window,
              za, taps, residual: Residual | None, reads: list[Tensor],
              post: PostStage | None = None) -> None:
    c = w.shape[0]
    centred = (w.reshape(c, taps).astype(np.int64) - p.w_zero[:, None]).T  # [taps, c]
    offset = -za * centred.sum(axis=0)
    if p.bias is not None:
        offset = offset + p.bias
    code = [*epilogue(lw, p, out_t, c, packing.wrap_int32(offset), None, out, residual,
                      raw_bound(centred.T), post),
            *depthwise_code(lw, centred, c, za, wdesc, win, x, out)]
    kh, kw = w.shape[2:]
    lw.prog.step(f"{node.name}: depthwise Conv {kh}x{kw}, {c} channels"
                 f"{' + ' + residual.node.name if residual else ''}{post_names(post)}", code,
                 reads, [out])


def depthwise_code(lw: Lowering, centred: np.ndarray, c: int, za: int, wdesc: str,
                   win: Window, x: Tensor, out: Tensor) -> list[str]:
    """C lines running lb_dwconv with centred weights [taps, c] and the epilogue `ep`."""
    # the portable kernel reads `plain`, the AVX-512 one `pairs`: a bundle keeps its target's
    plain, pairs = "NULL", "NULL"
    if lw.isas - {"vnni"}:
        plain = lw.prog.data(centred.astype(np.int16), "weights")
    if "vnni" in lw.isas:
        pairs = lw.prog.data(pair_weights(centred.astype(np.int16)), "weights")
    quads, order = "NULL", DW_TAPS
    if "vnni" in lw.isas and centred.min(initial=0) >= -128 and centred.max(initial=0) <= 127:
        # the column kernel stores 8-bit codes; 16-bit results take the row-major one
        order = quad_order(win) if tname(lw, out) == "LB_U8" else DW_TAPS
        ordered = centred
        if order == DW_COLUMNS:
            taps = quad_taps(*win.kernel)
            ordered = np.where((taps >= 0)[:, None], centred[np.maximum(taps, 0)], 0)
        quads = lw.prog.data(quad_weights(ordered), "weights")
    zero_row = lw.prog.data(np.full(c, za, np.uint8))
    return [f"const lb_dwconv conv = {{{wdesc}, {plain}, {pairs}, {zero_row}, ep, {quads}, "
            f"{order}}};",
            f"lb_dwconv_run(ctx, &conv, {x.ptr}, {out.ptr});"]


def wide_params(lw: Lowering, p: params.Product, x: Tensor, out: Tensor, out_t: TensorType,
                centred: np.ndarray, za: int) -> str:
    """An lb_wide_params initializer: int64 accumulation of `centred` weights [m, k]."""
    m = centred.shape[0]
    if np.abs(centred).max(initial=0) >= 2**31:
        raise UnsupportedError("weights wider than 32 bits")
    bias = lw.prog.data(np.asarray(p.bias, np.int64)) if p.bias is not None else "NULL"
    return (f"{{{tname(lw, x)}, {tname(lw, out)}, {za}, {p.narrow_shift}, "
            f"{lw.prog.data(centred.astype(np.int32))}, {bias}, "
            f"{wide_requant(lw, p, out_t, m)}}}")


def wide_requant(lw: Lowering, p: params.Product, out_t: TensorType, m: int) -> str:
    """The lb_requant initializer of a product summed exactly (lb_qgemm_wide, lb_qconv16):
    the requantization, or the dequantization of a float output."""
    if p.requant is None:
        arrays = packing.dequant_arrays(p.scale, m, *p.clip)
    else:
        arrays = cexpr.requant_arrays(p.requant, m, shift_of(out_t))
    return cexpr.requant(lw.prog, arrays)


def wide_conv(lw, node, x, tx, w, p, out, out_t, wdesc, group, za, pointwise) -> None:
    """Convolutions the int8 kernels cannot compute exactly: 16-bit operands, or an
    accumulator bound beyond int32 (lb_qconv_wide: int64 sums, as the reference)."""
    m, cg, kh, kw = w.shape
    if x.dtype == np.int8:
        raise UnsupportedError("raw int8 activations")
    centred = (w.astype(np.int64) - p.w_zero.reshape(-1, 1, 1, 1)).transpose(0, 2, 3, 1)
    found = conv16_code(lw, centred, group, tname(lw, x), tname(lw, out), za, p.narrow_shift,
                        p.bias, wide_requant(lw, p, out_t, m), wdesc, x, out,
                        out.shape[2], out.shape[3], pointwise)
    if found is not None:
        code16, scratch, how = found
        lw.prog.step(f"{node.name}: Conv {kh}x{kw} group {group}, {tx.dtype} ({how})", code16,
                     [x], [out], scratch)
        return
    code = [f"const lb_qconv_wide conv = {{{wdesc}, {group}, {cg}, {m // group}, "
            f"{wide_params(lw, p, x, out, out_t, centred.reshape(m, -1), za)}}};",
            f"lb_qconv_wide_run(ctx, &conv, {x.ptr}, {out.ptr});"]
    lw.prog.step(f"{node.name}: Conv {kh}x{kw} group {group}, {tx.dtype} (int64 sums)", code,
                 [x], [out])


def _gemm_like(lw: Lowering, node, a_value, w_rows: np.ndarray, tw: TensorType,
               w_channel_axis: int, bias_value) -> None:
    """A quantized product of activations A [..., K] (plain rows) and constant weight rows
    W [N, K] into [..., N]."""
    ta, out_t = a_value.type, node.outputs[0].type
    ncols, k = w_rows.shape
    p = params.product(node, ncols)
    order = lw.k_orders.get(a_value)
    if order is not None:  # rows in NHWC order (ops_shape._flatten_nhwc)
        w_rows = np.ascontiguousarray(w_rows[:, order])
        a = lw.tensors[a_value]
    else:
        a = lw.operand(a_value, "plain")
    out = lw.result(node.outputs[0], "plain")
    za = p.x_zero + shift_of(ta)
    rows = numel(a.shape[:-1])
    if not fast_product(ta, w_rows, p):
        centred = w_rows.astype(np.int64) - p.w_zero.reshape(-1, 1)
        lw.prog.step(f"{node.name}: {node.op_type} {k} -> {ncols}, {ta.dtype} (int64 sums)", [
            f"const lb_wide_params wp = {wide_params(lw, p, a, out, out_t, centred, za)};",
            f"lb_qgemm_wide(ctx, {rows.c()}, {ncols}, {k}, {a.ptr}, {k}, &wp, {out.ptr}, "
            f"{ncols});"], [a], [out])
        return
    offset, zb = folded(w_rows, p.w_zero, za, p.bias)
    sums = lw.prog.scratch(rows * 4, "row_sums") if zb is not None else None
    code = [pack_groups(lw, w_rows, p.w_zero, 1),
            *epilogue(lw, p, out_t, ncols, offset, zb, out,
                      raw_bound=raw_bound(folded_weights(w_rows, p.w_zero))),
            f"lb_qgemm(ctx, {rows.c()}, {ncols}, {k}, {a.ptr}, {k}, &packed[0], &ep, "
            f"{out.ptr}, {ncols}, {f'(int32_t *){sums.ptr}' if sums else 'NULL'});"]
    lw.prog.step(f"{node.name}: {node.op_type} {k} -> {ncols}", code, [a], [out],
                 [sums] if sums else [])


@emitter("Gemm", quantized=True, dynamic=True)
def gemm(lw: Lowering, node) -> None:
    av, bv, cv = node.inputs[0], node.inputs[1], node.input_or_none(2)
    w_rows = lw.dense_weight_rows(node)
    if float(node.attrs["alpha"]) != 1.0 or (cv is not None and float(node.attrs["beta"]) != 1.0):
        raise KernelError("quantized Gemm needs alpha = beta = 1")
    _gemm_like(lw, node, av, np.ascontiguousarray(w_rows), bv.type,
               product_of(node).weight_channel_axis, cv)


def batched(lw: Lowering, node) -> tuple[Size, int, int, int, int, int, int]:
    """(batch count, M, N, K, and the per-batch element strides of A, B and C) of a MatMul of
    two activations: equal leading dimensions, or one operand without them (reused)."""
    a_shape, b_shape = lw.shape(node.inputs[0]), lw.shape(node.inputs[1])
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise UnsupportedError("MatMul of 1-D operands")
    (m, k), (_, n) = a_shape[-2:], b_shape[-2:]
    if any(map(is_batch, (m, k, n))):
        raise UnsupportedError("MatMul over the batch axis")
    lead_a, lead_b = numel(a_shape[:-2]), numel(b_shape[:-2])
    if lead_a != lead_b and Size(1) not in (lead_a, lead_b):
        raise UnsupportedError("MatMul with partly broadcast leading dimensions")
    batch = lead_a if lead_a != Size(1) else lead_b
    return (batch, m, n, k, m * k if lead_a != Size(1) else 0, k * n if lead_b != Size(1)
            else 0, m * n)


def activation_matmul(lw: Lowering, node) -> None:
    """A quantized MatMul of two activations (lb_qmatmul_run: B packed at run time). With
    run-time dimensions, M, N and K may be dimension variables (attention over a run-time
    sequence length): the per-column arrays are then filled at run time (column_arrays),
    scratch sizes are bounds, and the int64 path is chosen in C from K."""
    av, bv = node.inputs
    ta, tb, out_t = av.type, bv.type, node.outputs[0].type
    for t in (ta, tb):
        if t.quant is None or not t.quant.per_tensor:
            raise KernelError("both operands of a quantized MatMul of activations must be "
                              "quantized per tensor")
    if lw.runtime_dims:
        batch, m, n, k, sa, sb, sc = runtime_batched(lw, node)
    else:
        batch, m, n, k, sa, sb, sc = batched(lw, node)
    static_n = isinstance(n, int)
    if not isinstance(k, int):
        lw.bound(k, _most_terms(ta, tb), f"{node.describe()} sums over it with integer "
                                         f"parameters made for at most that many terms")
    p = params.product(node, n if static_n else 1)
    a, b = lw.operand(av, "plain"), lw.operand(bv, "plain")
    out = lw.result(node.outputs[0], "plain")
    za = p.x_zero + shift_of(ta)
    zb_raw = int(p.w_zero[0]) + shift_of(tb)
    zb = zb_raw - 128  # packed: stored code ^ 0x80
    narrow_only = ta.dtype.bits > 8 or tb.dtype.bits > 8 or p.narrow_shift > 0
    if isinstance(k, int):
        wide: int | str = int(narrow_only or k * 255 * 255 >= INT32_LIMIT)
    else:  # the int32 bound of K sums of 255 x 255, checked when K is known
        wide = "1" if narrow_only else f"(int32_t)(({dim_c(k)}) * 65025 >= {INT32_LIMIT}LL)"
    if p.requant is None:
        arrays = packing.dequant_arrays(p.scale, n if static_n else 1, *p.clip)
    else:
        arrays = cexpr.requant_arrays(p.requant, n if static_n else 1, shift_of(out_t))
    fill: list[str] = []
    scratch = []
    if static_n:
        zb_c = cexpr.int_array(lw.prog, np.full(n, zb)) if zb and wide not in (1, "1") else "NULL"
        rq = cexpr.requant(lw.prog, arrays)
    else:
        fill, rq, zb_c, columns = column_arrays(lw.prog, arrays, zb if zb else None, n,
                                                "columns")
        scratch.append(columns)
    n16 = ceil_bound(n, 16)
    packed = lw.prog.scratch(n16 * ceil_bound(k, 4) * 64, "packed_b")
    offsets = lw.prog.scratch(n16 * 64 + Size(64) if static_n else n16 * 128, "offsets")
    sums = lw.prog.scratch(dim_size(m) * 4, "row_sums")
    code = [*fill,
            f"const lb_qmatmul mm = {{{batch.c()}, {dim_c(m)}, {dim_c(n)}, {dim_c(k)}, {sa}, "
            f"{sb}, {sc}, {tname(lw, a)}, {tname(lw, b)}, 1, {za}, {zb}, {wide}, "
            f"{p.narrow_shift}, {zb_raw}, {{NULL, {zb_c}, {rq}, {tname(lw, out)}, NULL, 0, "
            f"NULL, NULL, .post = NULL, .residual_split = NULL}}}};",
            f"lb_qmatmul_run(ctx, &mm, {a.ptr}, {b.ptr}, {out.ptr}, (int8_t *){packed.ptr}, "
            f"(int32_t *){offsets.ptr}, (int32_t *){sums.ptr});"]
    lw.prog.step(f"{node.name}: MatMul of activations, {batch.c()} x [{m}x{k}] [{k}x{n}]"
                 f"{' (int64 sums)' if wide in (1, '1') else ''}", code, [a, b], [out],
                 [packed, offsets, sums, *scratch])


def runtime_batched(lw: Lowering, node) -> tuple[Size, object, object, object, str, str, str]:
    """`batched` for run-time dimensions: M, N and K as lowered dimensions (ints or C
    products of dimension variables), the batch strides as C expressions."""
    a_shape, b_shape = lw.shape(node.inputs[0]), lw.shape(node.inputs[1])
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise UnsupportedError("MatMul of 1-D operands")
    (m, k), (_, n) = a_shape[-2:], b_shape[-2:]
    lead_a, lead_b = numel(a_shape[:-2]), numel(b_shape[:-2])
    if lead_a != lead_b and Size(1) not in (lead_a, lead_b):
        raise UnsupportedError("MatMul with partly broadcast leading dimensions")
    batch = lead_a if lead_a != Size(1) else lead_b
    mk, kn, mn = (dim_size(x) * dim_size(y) for x, y in ((m, k), (k, n), (m, n)))
    return (batch, m, n, k, mk.c() if lead_a != Size(1) else "0",
            kn.c() if lead_b != Size(1) else "0", mn.c())


def _most_terms(ta: TensorType, tb: TensorType) -> int:
    """The largest reduction size K whose accumulator bound needs no narrowing shift
    (int_linear.narrowing_shift is 0: K * 2**bits_a * 2**(bits_b - 1) < 2**31)."""
    return ((1 << 31) - 1) // ((1 << ta.dtype.bits) * (1 << (tb.dtype.bits - 1)))


def _runtime_matmul(node: Node) -> bool:
    """Whether a quantized MatMul takes run-time dimensions: constant weights (K is fixed),
    or 8-bit activations (the integer parameters of any K up to `_most_terms` are the same;
    wider operands narrow the accumulator by a shift that depends on K)."""
    a, b = node.inputs[0].type, node.inputs[1].type
    if node.inputs[1].is_constant or (a.shape and isinstance(a.shape[-1], int)):
        return True
    return a.dtype.bits <= 8 and b.dtype.bits <= 8


@emitter("MatMul", quantized=True, dynamic=_runtime_matmul)
def matmul(lw: Lowering, node) -> None:
    av, bv = node.inputs
    if not bv.is_constant:
        return activation_matmul(lw, node)
    if lw.const_array(bv).ndim != 2:
        raise UnsupportedError("quantized MatMul with a constant right operand of more than "
                               "2 dimensions")
    if av.type.quant is None or not av.type.quant.per_tensor:
        raise KernelError("the left operand of a quantized MatMul must be quantized per tensor")
    b = lw.const_array(bv)
    _gemm_like(lw, node, av, np.ascontiguousarray(b.T), bv.type, -1, None)


# -- Add / Sub / Mul ----------------------------------------------------------------------------


def broadcast(lw: Lowering, a: Tensor, b: Tensor, out: Tensor) -> str:
    """An lb_bcast initializer iterating out's stored order, with a's and b's element strides
    (0 along broadcast axes), adjacent axes merged."""
    nd = len(out.shape)
    perm = [0, 2, 3, 1] if out.layout == "nhwc" else list(range(nd))
    dims = []
    for t in (a, b):
        strides = logical_strides(t)
        pad = nd - len(t.shape)
        full_shape = (1,) * pad + tuple(t.shape)
        full = [Size(0)] * pad + strides
        dims.append([Size(0) if full_shape[ax] == 1 and out.shape[ax] != 1 else full[ax]
                     for ax in perm])
    shape = [out.shape[ax] for ax in perm]
    # merge axis i into i-1 when both operands step through them contiguously
    merged_shape, sa, sb = [shape[0]], [dims[0][0]], [dims[1][0]]
    for i in range(1, nd):
        d = shape[i]
        if d == 1:
            continue
        if not is_batch(d) and not is_batch(merged_shape[-1]) and \
                sa[-1] == dims[0][i] * d and sb[-1] == dims[1][i] * d:
            merged_shape[-1] = merged_shape[-1] * d
            sa[-1], sb[-1] = dims[0][i], dims[1][i]
        else:
            merged_shape.append(d)
            sa.append(dims[0][i])
            sb.append(dims[1][i])
    if len(merged_shape) > 6:
        raise UnsupportedError("broadcasting over more than 6 axes")
    return (f"{{{len(merged_shape)}, {{{', '.join(dim_c(d) for d in merged_shape)}}}, "
            f"{{{', '.join(x.c() for x in sa)}}}, {{{', '.join(x.c() for x in sb)}}}}}")


def binary_layout(lw: Lowering, node) -> str:
    out_shape = lw.shape(node.outputs[0])
    if len(out_shape) != 4:
        return "plain"
    for v in node.inputs:
        t = lw.tensors.get(v)
        if t is not None and not v.is_constant and t.layout == "nhwc":
            return "nhwc"
    return "plain"


@emitter("Add", quantized=True, dynamic=True)
@emitter("Sub", quantized=True, dynamic=True)
@emitter("Mul", quantized=True, dynamic=True)
def qbinary(lw: Lowering, node) -> None:
    if emit_unary_chain(lw, node) or emit_se_residual(lw, node):
        return
    t1, t2 = node.inputs[0].type, node.inputs[1].type
    layout = binary_layout(lw, node)
    a = lw.operand(node.inputs[0], layout if len(t1.shape) == 4 else "plain")
    b = lw.operand(node.inputs[1], layout if len(t2.shape) == 4 else "plain")
    out = lw.result(node.outputs[0], layout)
    init = qbinary_c(lw, node, (tname(lw, a), tname(lw, b), tname(lw, out)))
    code = [f"const lb_bcast bc = {broadcast(lw, a, b, out)};",
            f"const lb_qbinary op = {init};",
            f"lb_qbinary_run(ctx, &bc, &op, {a.ptr}, {b.ptr}, {out.ptr});"]
    lw.prog.step(f"{node.name}: quantized {node.op_type}", code, [a, b], [out])


# -- averages -------------------------------------------------------------------------------------


def _global_average(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0], "nhwc")
    n, c, ih, iw = x.shape
    tx, out_t = node.inputs[0].type, node.outputs[0].type
    pa = params.of(node)
    (rq,) = pa.requants.values()
    arrays = cexpr.requant_arrays(rq, 1, shift_of(out_t))
    out = lw.result(node.outputs[0], "plain")
    if numel(out.shape) != numel((n, c)):
        raise UnsupportedError("an average whose output is not one value per (batch, channel)")
    code = [f"const lb_window w = {{{dim_c(n)}, {ih}, {iw}, {c}, 1, 1, {ih}, {iw}, 1, 1, 1, 1, "
            f"0, 0}};",
            f"const lb_requant rq = {cexpr.requant(lw.prog, arrays)};",
            f"lb_qavgpool(ctx, &w, {tname(lw, x)}, {pa.input_zero + shift_of(tx)}, 0, "
            f"&rq, {tname(lw, out)}, {x.ptr}, {out.ptr});"]
    lw.prog.step(f"{node.name}: quantized global average", code, [x], [out])


@emitter("GlobalAveragePool", quantized=True)
def global_average_pool(lw: Lowering, node) -> None:
    if len(lw.shape(node.inputs[0])) != 4:
        raise UnsupportedError("GlobalAveragePool over other than 2 spatial axes")
    _global_average(lw, node)


@emitter("ReduceMean", quantized=True)
def reduce_mean(lw: Lowering, node) -> None:
    shape = lw.shape(node.inputs[0])
    axes_v = node.input_or_none(1)
    axes = [] if axes_v is None else [int(a) % len(shape) for a in lw.const_array(axes_v).ravel()]
    if len(shape) != 4 or sorted(axes) != [2, 3]:
        raise UnsupportedError("quantized ReduceMean other than over the spatial axes of a 4-D "
                               "tensor")
    _global_average(lw, node)


@emitter("AveragePool", quantized=True)
def average_pool(lw: Lowering, node) -> None:
    x, out, win, pads, window = pool_setup(lw, node)
    (ih, iw), (oh, ow) = x.shape[2:], out.shape[2:]
    count_pad = int(node.attrs.get("count_include_pad", 0))
    overhang = [(o - 1) * s + d * (k - 1) + 1 - (i + pads[a] + pads[a + 2])
                for a, (o, s, d, k, i) in enumerate(zip((oh, ow), win.strides, win.dilations,
                                                        win.kernel, (ih, iw), strict=True))]
    if count_pad and any(e > 0 for e in overhang):
        raise UnsupportedError("AveragePool with count_include_pad and ceil_mode overhang")
    tx, out_t = node.inputs[0].type, node.outputs[0].type
    pa = params.of(node)
    any_rq = next(iter(pa.requants.values()))  # counts that never occur take any entry
    rqs = [cexpr.requant(lw.prog, cexpr.requant_arrays(pa.requants.get(c, any_rq), 1,
                                                       shift_of(out_t)))
           for c in range(1, win.kernel[0] * win.kernel[1] + 1)]
    code = [window,
            f"const lb_requant rq[{len(rqs)}] = {{{', '.join(rqs)}}};",
            f"lb_qavgpool(ctx, &w, {tname(lw, x)}, {pa.input_zero + shift_of(tx)}, "
            f"{count_pad}, rq, {tname(lw, out)}, {x.ptr}, {out.ptr});"]
    lw.prog.step(f"{node.name}: quantized AveragePool", code, [x], [out])


# -- clamps, tables, Concat ----------------------------------------------------------------------


@emitter("Relu", quantized=True, dynamic=True)
@emitter("Clip", quantized=True, dynamic=True)
def clamp(lw: Lowering, node) -> None:
    if emit_unary_chain(lw, node):
        return
    pc = params.of(node)
    qlo, qhi = pc.qmin, pc.qmax
    src, out_t = node.inputs[0].type, node.outputs[0].type
    x = lw.operand(node.inputs[0], None)
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    so = shift_of(out_t)
    if src.dtype == out_t.dtype and src.quant == out_t.quant:
        lw.prog.step(f"{node.name}: quantized {node.op_type}", [
            f"lb_clamp(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, {qlo + so}, "
            f"{qhi + so}, {out.ptr});"], [x], [out])
        return
    rq = dataclasses.replace(pc.rescale, qmin=qlo, qmax=qhi)  # the clamp, after rescaling
    requantize_into(lw, node, x, src, rq, pc.input_zero, out, out_t, None,
                    f"{node.name}: quantized {node.op_type} to new parameters")


def table(lw: Lowering, node) -> None:
    stage = hard_swish_map(lw, node)
    if stage is not None:
        x = lw.operand(node.inputs[0], None)
        out = lw.result(stage.value, "nhwc")
        rows = numel((x.shape[0], x.shape[2], x.shape[3])).c()
        lw.prog.step(f"{node.name}: {post_names(stage)[len(' then '):]}", [
            *stage.lines,
            f"lb_post_map(ctx, {rows}, {x.shape[1]}, {x.ptr}, {tname(lw, x)}, &post, "
            f"{tname(lw, out)}, {out.ptr});"], [x], [out])
        lw.fused.update(stage.nodes[1:])
        return
    if emit_unary_chain(lw, node):
        return
    src, out_t = node.inputs[0].type, node.outputs[0].type
    if src.quant is None or out_t.quant is None:
        raise UnsupportedError("a lookup table between non-quantized types")
    x = lw.operand(node.inputs[0], None)
    out = lw.result(node.outputs[0], x.layout if len(x.shape) == 4 else "plain")
    tab = np.asarray(params.of(node).table).astype(np.int64) + shift_of(out_t)
    data = lw.prog.data(tab.astype(out.dtype))
    in_min = src.dtype.qmin + shift_of(src)
    lw.prog.step(f"{node.name}: {node.op_type} as a {tab.size}-entry table", [
        f"lb_lookup(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, {in_min}, {data}, "
        f"{tname(lw, out)}, {out.ptr});"], [x], [out])


for (_domain, _op_type), _op in all_ops().items():
    if _op.quant_rule == TABLE:
        emitter(_op_type, quantized=True, domain=_domain, dynamic=True)(table)


@emitter("Concat", quantized=True)
def qconcat(lw: Lowering, node) -> None:
    out_t = node.outputs[0].type
    if out_t.quant is None or not out_t.quant.per_tensor:
        raise KernelError("operands must be quantized per tensor")
    axis = int(node.attrs["axis"]) % len(lw.shape(node.outputs[0]))
    first = lw.operand(node.inputs[0], None)
    layout = first.layout if len(first.shape) == 4 else "plain"
    out = lw.result(node.outputs[0], layout)
    parts = []
    pc = params.of(node)
    for v, zin, rq in zip(node.inputs, pc.input_zeros, pc.rescales, strict=True):
        t = lw.operand(v, layout)
        if rq is None:
            parts.append(t)
            continue
        tmp = lw.prog.tensor(f"{v.name}.rescaled", out.dtype, t.shape, layout=layout,
                             biased=out.biased)
        requantize_into(lw, node, t, v.type, rq, zin, tmp, out_t, None,
                        f"{node.name}: Concat input {v.name} to the output's parameters")
        parts.append(tmp)
    concat_into(lw, node, parts, out, axis)
