"""Emitters of ops that move values without computing on them: reshapes (no copy), Transpose,
Concat of same-typed inputs, MaxPool (on codes or floats)."""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter, stored_dtype
from lowbit.backends.cpu.codegen.program import Size, dim_c, dim_size, is_batch, numel
from lowbit.errors import UnsupportedError
from lowbit.ops.pool import pool_window
from lowbit.ops.product import product_of


def _reshape(lw: Lowering, node) -> None:
    if _flatten_nhwc(lw, node):
        return
    src = lw.operand(node.inputs[0], "plain")
    lw.alias_result(node.outputs[0], src)


def _flatten_nhwc(lw: Lowering, node) -> bool:
    """A Flatten/Reshape of an NHWC image into rows [N, C*H*W] read only by a quantized Gemm
    with constant weights: the rows stay in NHWC order (an alias, no layout change) and
    `lw.k_orders` says which logical element each holds, for the Gemm to reorder its weights'
    K axis (its integer sums are the same in any order)."""
    if node.op_type not in ("Flatten", "Reshape") or node.inputs[0].is_constant:
        return False
    t = lw.tensors.get(node.inputs[0])
    out = node.outputs[0]
    user = lw.sole_user(out)
    if t is None or t.layout != "nhwc" or len(t.shape) != 4 or user is None or \
            user.op_type != "Gemm" or user.inputs[0] is not out or product_of(user).trans_a or \
            not user.inputs[1].is_constant or out.type is None or out.type.quant is None:
        return False
    if t.biased != stored_dtype(out.type)[1]:
        return False
    n, c, h, w = t.shape
    shape = lw.shape(out)
    if len(shape) != 2 or shape[0] != n or shape[1] != c * h * w or not isinstance(c * h * w, int):
        return False
    lw.tensors[out] = lw.prog.alias(t, out.name, shape=shape, layout="plain")
    # stored (h, w, c) -> logical c * h * w + h * w + w
    lw.k_orders[out] = np.arange(c * h * w).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)
    return True


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    emitter(_op, dynamic=True)(_reshape)
    emitter(_op, quantized=True, dynamic=True)(_reshape)


def row_major_strides(shape) -> list[Size]:
    """Element strides of a row-major tensor (a stride holds N when the batch dimension is not
    the first)."""
    strides, acc = [], Size(1)
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * dim_size(d)
    strides.reverse()
    return strides


def logical_strides(t) -> list[Size]:
    """Element strides of each logical axis of stored tensor t (plain or nhwc)."""
    if t.layout == "nhwc":
        _, c, h, w = t.shape
        return [Size(h * w * c), Size(1), Size(w * c), Size(c)]
    return row_major_strides(t.shape)


@emitter("Transpose", dynamic=True)
@emitter("Transpose", quantized=True, dynamic=True)
def transpose(lw: Lowering, node) -> None:
    src = lw.operand(node.inputs[0], None)
    perm = node.attrs.get("perm") or list(reversed(range(len(src.shape))))
    strides = logical_strides(src)
    out = lw.result(node.outputs[0], biased=src.biased)
    shape = [src.shape[p] for p in perm]
    lw.permute(out, src, shape, [strides[p] for p in perm], f"{node.name}: Transpose {perm}")


@emitter("DepthToSpace", dynamic=True)
@emitter("DepthToSpace", quantized=True, dynamic=True)
def depth_to_space(lw: Lowering, node) -> None:
    """DCR of an NHWC image as whole runs of b * m values (`lb_depth_to_space`: an upsampling
    ConvTranspose's second half, `passes.upsampling_conv`); CRD as an n-d permutation."""
    src = lw.operand(node.inputs[0], "nhwc")
    b = int(node.attrs["blocksize"])
    n, c, h, w = src.shape
    out = lw.result(node.outputs[0], "nhwc", biased=src.biased)
    m = out.shape[1]
    if node.attrs.get("mode", "DCR") == "DCR":
        lw.prog.step(f"{node.name}: DepthToSpace {b}x{b}, {c} -> {m}", [
            f"lb_depth_to_space(ctx, {dim_c(n)}, {dim_c(h)}, {dim_c(w)}, {b}, {m}, "
            f"{src.dtype.itemsize}, {src.ptr}, {out.ptr});"], [src], [out])
        return
    # CRD: out[n, y * b + i, x * b + j, k] = in[n, y, x, k * b * b + i * b + j]
    cs, ws, hs = Size(1), Size(c), Size(c) * dim_size(w)
    shape = [n, h, b, w, b, m]
    strides = [hs * dim_size(h), hs, cs * b, ws, cs, cs * (b * b)]
    lw.permute(out, src, shape, strides, f"{node.name}: DepthToSpace {b}x{b} CRD")


def pool_setup(lw: Lowering, node, keep_bias: bool = False):
    """A 2-D pool's NHWC operand and result, its window and resolved pads, and the C line
    declaring that window as `w`. `keep_bias`: the result keeps the operand's stored code bias
    (a pool that only selects codes)."""
    x = lw.operand(node.inputs[0], "nhwc")
    if len(x.shape) != 4:
        raise UnsupportedError(f"{node.op_type} over other than 2 spatial axes")
    n, c, ih, iw = x.shape
    win = pool_window(node, 2)
    pads = win.resolved_pads((ih, iw))
    out = lw.result(node.outputs[0], "nhwc", **({"biased": x.biased} if keep_bias else {}))
    _, _, oh, ow = out.shape
    window = f"const lb_window w = {cexpr.window(n, ih, iw, c, oh, ow, win, pads)};"
    return x, out, win, pads, window


@emitter("MaxPool")
@emitter("MaxPool", quantized=True)
def max_pool(lw: Lowering, node) -> None:
    if len(node.outputs) > 1 and node.outputs[1] is not None:
        raise UnsupportedError("MaxPool's Indices output")
    x, out, _, _, window = pool_setup(lw, node, keep_bias=True)
    lw.prog.step(f"{node.name}: MaxPool", [
        window,
        f"lb_maxpool(ctx, &w, {cexpr.TYPE_NAMES[lw.type_code(x)]}, {x.ptr}, {out.ptr});"],
        [x], [out])


def concat_into(lw: Lowering, node, parts, out, axis: int) -> None:
    """Copy stored tensors `parts` (already in out's dtype and layout) into their slices of
    `out` along logical `axis`."""
    perm = [0, 2, 3, 1] if out.layout == "nhwc" else list(range(len(out.shape)))
    phys = out.physical_shape
    pa = perm.index(axis)
    outer = numel(phys[:pa])
    inner_out = (numel(phys[pa:]) * out.dtype.itemsize).c()
    offset = "0"
    code = []
    for t in parts:
        tp = t.physical_shape
        row = (numel(tp[pa:]) * t.dtype.itemsize).c()
        code.append(f"lb_copy_rows(ctx, {outer.c()}, {row}, {t.ptr}, {row}, {out.ptr} + "
                    f"{offset}, {inner_out});")
        offset = f"{offset} + {row}" if offset != "0" else row
    lw.prog.step(f"{node.name}: Concat", code, parts, [out])


@emitter("Concat", dynamic=True)
def concat(lw: Lowering, node) -> None:
    axis = int(node.attrs["axis"]) % len(lw.shape(node.outputs[0]))
    first = lw.operand(node.inputs[0], None)
    layout = first.layout if len(first.shape) == 4 else "plain"
    parts = [lw.operand(v, layout) for v in node.inputs]
    out = lw.result(node.outputs[0], layout)
    concat_into(lw, node, parts, out, axis)


def _slice(lw: Lowering, node) -> None:
    """Slice with constant starts, ends, axes and steps: a strided view copied (lb_permute)."""
    from lowbit.ops.symbolic import clamped_slice

    src = lw.operand(node.inputs[0], "plain")
    shape = src.shape
    consts = []
    for v in node.inputs[1:5]:
        if v is not None and not v.is_constant:
            raise UnsupportedError("Slice with computed starts, ends, axes or steps")
        consts.append(None if v is None else lw.const_array(v).astype(np.int64).ravel())
    starts, ends, axes, steps = consts + [None] * (4 - len(consts))
    axes = range(len(starts)) if axes is None else axes
    steps = np.ones(len(starts), np.int64) if steps is None else steps
    strides = row_major_strides(shape)
    offset = Size(0)
    out_strides = list(strides)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = int(axis) % len(shape)
        if is_batch(shape[axis]):
            raise UnsupportedError("Slice along the batch axis")
        sl = clamped_slice(int(start), int(end), int(step), int(shape[axis]))
        offset = offset + strides[axis] * sl.start
        out_strides[axis] = strides[axis] * int(step)
    out = lw.result(node.outputs[0], biased=src.biased)
    lw.permute_from(out, src, offset, out.shape, out_strides, f"{node.name}: Slice")


emitter("Slice")(_slice)
emitter("Slice", quantized=True)(_slice)


def _dims(shape) -> str:
    return ", ".join(dim_c(d) for d in shape)


__all__ = ["concat_into", "logical_strides", "np"]
