"""Emitters of the ops that make up a transformer encoder: lowbit's DynamicQuantize and
DynamicMatMul (grouped, per-row, per-head and per-tensor activation parameters; weights
prepacked here, run-time operands such as attention's K and V packed by the generated code),
LayerNormalization, Softmax and Gelu.

Every integer comes from the reference's definitions (lowbit.numerics.dynamic_params, the
weight codes and parameters of the graph), and the float steps are those of
lowbit.numerics.elementary, so results equal the reference interpreter's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu import packing
from lowbit.backends.cpu.codegen.lower import Lowering, emitter
from lowbit.backends.cpu.codegen.ops_tensor import cprod
from lowbit.backends.cpu.codegen.program import Tensor, dim_c, dim_size, numel
from lowbit.backends.cpu.codegen.row_chain import (
    Chain,
    RowOp,
    _float32,
    _row_vector,
    epilogue_adds,
    row_chain,
)
from lowbit.backends.reference.kernels import is_quantized
from lowbit.errors import UnsupportedError
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.numerics import arith
from lowbit.numerics.dynamic_params import normalize_axes, qmax
from lowbit.ops.registry import QUANT_DOMAIN

LANES = 16


def ptr_of(lw: Lowering, t: Tensor | None, ctype: str) -> str:
    return "NULL" if t is None else f"({ctype} *){t.ptr}"


# -- float ops ------------------------------------------------------------------------------


@emitter("LayerNormalization", dynamic=True)
def layer_norm(lw: Lowering, node) -> None:
    if any(v is not None and lw.users.get(v) for v in node.outputs[1:]) or \
            any(v in lw.output_values for v in node.outputs[1:] if v is not None):
        raise UnsupportedError("LayerNormalization's Mean and InvStdDev outputs")
    x = lw.operand(node.inputs[0])
    if x.dtype != np.float32:
        raise UnsupportedError(f"LayerNormalization on {x.dtype} (float32 is compiled)")
    rank = len(x.shape)
    axis = int(node.attrs.get("axis", -1)) % rank
    n = cprod(*x.shape[axis:])
    params = []
    for v in (node.inputs[1], node.input_or_none(2)):
        if v is None:
            params.append(None)
        elif numel(lw.shape(v)) == numel(x.shape[axis:]):
            params.append(lw.operand(v))
        elif v.is_constant and numel(x.shape[axis:]).power == 0:  # broadcast constants out
            full = np.broadcast_to(lw.const_array(v).astype(np.float32), x.shape[axis:])
            params.append(lw.prog.const(np.ascontiguousarray(full).reshape(-1), v.name))
        else:
            raise UnsupportedError("LayerNormalization with a broadcast run-time scale or bias")
    gamma, beta = params
    eps = float(node.attrs.get("epsilon", 1e-5)).hex()
    if axis == rank - 1:  # LayerNorm, then the row ops after it, in one pass over each row
        chain = Chain([RowOp("layernorm", a=f"(const float *){gamma.ptr}",
                             b=ptr_of(lw, beta, "const float"), eps=eps)])
        chain = row_chain(lw, node.outputs[0], x.shape, chain)
        if len(chain.ops) > 2 or chain.ops[-1].kind != "store":
            lw.fused.update(chain.nodes)
            rows = lw.prog.scratch(numel(x.shape) * 4, "rows")
            lw.prog.step(f"{node.name}: LayerNormalization + {chain.describe() or 'store'}", [
                chain.c(), f"lb_rowops_run(ctx, {cprod(*x.shape[:axis])}, {n}, "
                f"(const float *){x.ptr}, {n}, &ro, (float *){rows.ptr});"],
                [x, gamma, beta, *chain.reads], chain.writes, [rows])
            return
    out = lw.tensors.get(node.outputs[0]) or lw.result(node.outputs[0])
    lw.prog.step(f"{node.name}: LayerNormalization", [
        f"lb_layernorm(ctx, {cprod(*x.shape[:axis])}, {n}, (const float *){x.ptr}, {n}, "
        f"(const float *){gamma.ptr}, {ptr_of(lw, beta, 'const float')}, {eps}, "
        f"(float *){out.ptr}, {n});"], [x, gamma, beta], [out])


@emitter("Softmax", dynamic=True)
def softmax(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    if x.dtype != np.float32:
        raise UnsupportedError(f"Softmax on {x.dtype} (float32 is compiled)")
    rank = len(x.shape)
    if rank == 0 or int(node.attrs.get("axis", -1)) % rank != rank - 1:
        raise UnsupportedError("Softmax along other than the last axis")
    out = lw.result(node.outputs[0])
    n = dim_c(x.shape[-1])
    lw.prog.step(f"{node.name}: Softmax", [
        f"lb_softmax(ctx, {cprod(*x.shape[:-1])}, {n}, (const float *){x.ptr}, {n}, "
        f"(float *){out.ptr}, {n});"], [x], [out])


def bias_softmax(lw: Lowering, node) -> bool:
    """Emit a float Add of a constant row vector whose sole user is a Softmax over the last
    axis (directly or through a Flatten/Reshape keeping the rows: a classifier head's bias,
    then its Softmax) as one lb_softmax_bias, each row added then normalised while in cache.
    Returns False (nothing emitted) when `node` is not such an Add."""
    if node.op_type != "Add" or len(node.inputs) != 2 or node.domain not in ("", "ai.onnx") \
            or is_quantized(node) or FUSED_CLIP in node.attrs or \
            not all(_float32(v) for v in (*node.inputs, node.outputs[0])):
        return False
    shape = lw.shape(node.outputs[0])
    if not shape or node.outputs[0] in lw.output_values:
        return False
    n = shape[-1]
    cur, user, fused = node.outputs[0], lw.sole_user(node.outputs[0]), []
    if user is not None and user.op_type in ("Flatten", "Reshape") and \
            user.inputs[0] is cur and user.outputs[0] not in lw.output_values and \
            tuple(lw.shape(user.outputs[0])[-1:]) == (n,):  # the same rows, regrouped
        fused.append(user)
        cur = user.outputs[0]
        user = lw.sole_user(cur)
    if user is None or user.op_type != "Softmax" or user.inputs[0] is not cur or \
            not _float32(user.outputs[0]) or \
            int(user.attrs.get("axis", -1)) % len(lw.shape(cur)) != len(lw.shape(cur)) - 1:
        return False
    for x_v, b_v in (node.inputs, node.inputs[::-1]):
        bias = _row_vector(lw, b_v, n)
        if bias is not None and not x_v.is_constant and lw.shape(x_v) == shape:
            break
    else:
        return False
    fused.append(user)
    lw.fused.update(fused)
    x = lw.operand(x_v)
    out = lw.result(user.outputs[0])
    nc = dim_c(n)
    lw.prog.step(f"{node.name}: Add + {' + '.join(m.op_type for m in fused)}", [
        f"lb_softmax_bias(ctx, {cprod(*shape[:-1])}, {nc}, (const float *){x.ptr}, {nc}, "
        f"{lw.prog.data(bias)}, (float *){out.ptr}, {nc});"], [x], [out])
    return True


@emitter("Gelu", dynamic=True)
def gelu(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    if x.dtype != np.float32:
        raise UnsupportedError(f"Gelu on {x.dtype} (float32 is compiled)")
    out = lw.result(node.outputs[0])
    tanh = int(node.attrs.get("approximate", "none") == "tanh")
    lw.prog.step(f"{node.name}: Gelu", [
        f"lb_gelu(ctx, {numel(x.shape).c()}, (const float *){x.ptr}, {tanh}, "
        f"(float *){out.ptr});"], [x], [out])


# -- dynamic quantization ----------------------------------------------------------------------


@emitter("DynamicQuantize", domain=QUANT_DOMAIN, dynamic=True)
def dynamic_quantize(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    shape = x.shape
    rank = len(shape)
    axes = normalize_axes(node.attrs["axes"], rank)
    symmetric = int(bool(node.attrs.get("symmetric", 0)))
    top = qmax(bool(symmetric), bool(node.attrs.get("reduce_range", 0)))
    group = int(node.attrs.get("group_size", 0))
    cs_v = node.input_or_none(1)
    q = lw.result(node.outputs[0])
    scale = lw.result(node.outputs[1])
    zero = lw.result(node.outputs[2])
    cs = lw.operand(cs_v) if cs_v is not None else None
    trailing = axes == tuple(range(rank - len(axes), rank))
    if trailing:
        k = cprod(*shape[axes[0]:])
        if cs is not None and len(axes) != 1:
            raise UnsupportedError("DynamicQuantize with a channel scale over several axes")
        rows = cprod(*shape[:axes[0]])
        g = str(group) if group else k
        ngroups = f"(({k} + {g} - 1) / {g})" if group else "1"
        lw.prog.step(f"{node.name}: DynamicQuantize over {list(axes)}"
                     f"{f' in groups of {group}' if group else ''}", [
            f"const lb_dq_rows dq = {{{rows}, {k}, {g}, (const float *){x.ptr}, {k}, "
            f"{ptr_of(lw, cs, 'const float')}, {q.ptr}, {k}, (float *){scale.ptr}, "
            f"{zero.ptr}, {ngroups}, {top}, {symmetric}}};",
            "lb_dq_rows_run(ctx, &dq);"], [x, cs], [q, scale, zero])
        return
    if len(axes) != 1 or cs is not None:
        raise UnsupportedError(f"DynamicQuantize over axes {list(axes)} of a rank-{rank} "
                               f"tensor (trailing axes, or one axis, are compiled)")
    a = axes[0]
    outer, r, c = cprod(*shape[:a]), dim_c(shape[a]), cprod(*shape[a + 1:])
    g = str(group) if group else r
    lw.prog.step(f"{node.name}: DynamicQuantize along axis {a}"
                 f"{f' in groups of {group}' if group else ''}", [
        f"const lb_dq_cols dq = {{{outer}, {r}, {c}, {g}, (const float *){x.ptr}, {q.ptr}, "
        f"(float *){scale.ptr}, {zero.ptr}, {top}, {symmetric}}};",
        "lb_dq_cols_run(ctx, &dq);"], [x], [q, scale, zero])


@emitter("DynamicQuantizeLinear", dynamic=True)
def dynamic_quantize_linear(lw: Lowering, node) -> None:
    """ONNX DynamicQuantizeLinear: the whole tensor as one row of lowbit's asymmetric uint8
    DynamicQuantize, whose formula is ONNX's (tests/quant/test_dynamic.py checks the two
    equal): scale = (max(x, 0) - min(x, 0)) / 255, zero = round(-min / scale) saturated,
    y = saturate(round(x / scale) + zero), rounding half to even, in float32."""
    x = lw.operand(node.inputs[0])
    if x.dtype != np.float32:
        raise UnsupportedError(f"DynamicQuantizeLinear of {x.dtype}")
    q, scale, zero = (lw.result(v) for v in node.outputs)
    k = cprod(*x.shape)
    lw.prog.step(f"{node.name}: DynamicQuantizeLinear", [
        f"const lb_dq_rows dq = {{1, {k}, {k}, (const float *){x.ptr}, {k}, NULL, {q.ptr}, "
        f"{k}, (float *){scale.ptr}, {zero.ptr}, 1, 255, 0}};",
        "lb_dq_rows_run(ctx, &dq);"], [x], [q, scale, zero])


# -- dynamic products --------------------------------------------------------------------------


@dataclass
class PackedB:
    """A dynamic product's B in the kernels' layout (lowbit_rt_tf.h, lb_dmm_b)."""

    data: np.ndarray  # int8, lb_packed_b layout
    scale: np.ndarray  # float32 [nblocks][G][16]
    corr: np.ndarray  # int32 [nblocks][G][16]
    zero: np.ndarray  # int32 [nblocks * 16]
    n: int
    k: int


def pack_dynamic_b(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                   group: int) -> PackedB:
    """Pack constant codes B [K, N] with parameters per (group, column) ([G, N], broadcast
    from any shape that broadcasts there) for lb_dmm_run; group 0: one set per column."""
    k, n = codes.shape
    G = -(-k // group) if group else 1
    nb = -(-n // LANES)
    w, zb = packing.weights_int8(np.ascontiguousarray(codes.T), np.asarray(zero))
    zb = np.broadcast_to(np.asarray(zb, np.int64).reshape(
        (G, n) if np.size(zb) == G * n else np.shape(zb)), (G, n))
    sb = np.broadcast_to(np.asarray(scale, np.float32).reshape(
        (G, n) if np.size(scale) == G * n else np.shape(scale)), (G, n))
    wc = w.astype(np.int64)  # [N, K]
    g = group or k
    corr = np.zeros((nb * LANES, G), np.int64)
    scale_out = np.zeros((nb * LANES, G), np.float32)
    zero_out = np.zeros(nb * LANES, np.int32)
    for j in range(G):
        cols = wc[:, j * g:min(k, (j + 1) * g)]
        cs = cols.sum(axis=1)
        if group:
            folded = cs - cols.shape[1] * zb[j]
            if np.abs(folded).max(initial=0) > 32767:
                raise UnsupportedError("group too large for the 16-bit corrections")
            corr[:n, j] = (folded & 0xFFFF) | ((zb[j] & 0xFFFF) << 16)
        else:
            corr[:n, j] = cs
            zero_out[:n] = zb[0]
        scale_out[:n, j] = sb[j]

    def blocks(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.reshape(nb, LANES, G).transpose(0, 2, 1)).reshape(-1)

    return PackedB(packing.pack_weights(w), blocks(scale_out),
                   blocks(packing.wrap_int32(corr)), zero_out, n, k)


def _uniform_param_strides(a_rows: tuple, p_rows: tuple) -> str | None:
    """Stride of a parameter tensor over the flattened rows of A, when uniform: the
    parameters follow every row axis ('row') or none ('none'); else None."""
    if all(p == a for p, a in zip(p_rows, a_rows, strict=True)):
        return "row"
    if all(p == 1 for p in p_rows):
        return "none"
    return None


def _pack_bytes(n: int, k: int, group: int) -> int:
    nb, k4 = -(-n // LANES), -(-k // 4)
    G = -(-k // group) if group else 1
    return -(-nb * k4 * 64 // 64) * 64 + 2 * (-(-nb * G * 64 // 64) * 64) + \
        (-(-nb * 64 // 64) * 64)


DESC_BYTES = 64  # sizeof(lb_dmm_b) rounded up


@emitter("DynamicMatMul", domain=QUANT_DOMAIN, dynamic=True)
def dynamic_matmul(lw: Lowering, node) -> None:
    from lowbit.backends.cpu.codegen import attention

    fused = attention.match(lw, node)
    if fused is not None:
        attention.emit(lw, fused)
        return
    av, sav, zav, bv = node.inputs[:4]
    bsv, bzv, cv = (list(node.inputs[4:]) + [None] * 3)[:3]
    group = int(node.attrs.get("group_size", 0))
    a = lw.operand(av)
    sa, za = lw.operand(sav), lw.operand(zav)
    out_shape = lw.shape(node.outputs[0])
    ashape, pshape = a.shape, sa.shape
    if len(ashape) < 2 or len(pshape) != len(ashape):
        raise UnsupportedError("DynamicMatMul with A of rank < 2 or parameters of another rank")
    K = ashape[-1]
    Gp = pshape[-1]
    p_group = "0" if Gp == 1 else "1"
    a_signed = int(a.dtype == np.int8)
    tb = bv.type
    b_const = bv.is_constant and (tb.quant is not None or (
        bsv is not None and bsv.is_constant and bzv is not None and bzv.is_constant))
    bias = None
    if cv is not None:
        if not cv.is_constant:
            raise UnsupportedError("DynamicMatMul with a run-time bias C")
        bias = np.ascontiguousarray(lw.const_array(cv).astype(np.float32).reshape(-1))
    reads = [a, sa, za]
    code: list[str] = []
    scratch = []
    if b_const:
        codes = lw.const_array(bv)
        if codes.ndim != 2:
            raise UnsupportedError("DynamicMatMul with constant B of rank other than 2")
        n = codes.shape[1]
        if tb.quant is not None:
            if group:
                raise UnsupportedError("grouped DynamicMatMul with B quantized in its type")
            sb, zb = arith.scale_of(tb).astype(np.float32), arith.zero_of(tb)
        else:
            sb = lw.const_array(bsv).astype(np.float32)
            zb = lw.const_array(bzv)
        pb = pack_dynamic_b(codes, sb, zb, group)
        code.append(f"const lb_dmm_b bd = {{{lw.prog.data(pb.data, 'weights')}, {pb.n}, {pb.k}, "
                    f"{-(-pb.k // 4)}, {lw.prog.data(pb.scale)}, {lw.prog.data(pb.corr)}, "
                    f"{lw.prog.data(pb.zero)}}};")
        b_ref, b_step = "&bd", "0"
        rows_mode = _uniform_param_strides(ashape[:-1], pshape[:-1])
        if rows_mode is not None:  # every row of every batch in one product
            batch, M = "1", cprod(*ashape[:-1])
            p_batch, p_row = "0", (dim_c(Gp) if rows_mode == "row" else "0")
        else:
            batch, M = cprod(*ashape[:-2]), dim_c(ashape[-2])
            mode = _uniform_param_strides(ashape[:-2], pshape[:-2])
            if mode is None:
                raise UnsupportedError("DynamicMatMul with parameters broadcast over some "
                                       "batch axes only")
            p_batch = cprod(pshape[-2], Gp) if mode == "row" else "0"
            p_row = dim_c(Gp) if pshape[-2] == ashape[-2] else "0"
        N = str(n)
    else:
        b = lw.operand(bv)
        sb_t, zb_t = lw.operand(bsv), lw.operand(bzv)
        reads += [b, sb_t, zb_t]
        bshape, bp = b.shape, sb_t.shape
        if len(bshape) != len(ashape) or bshape[:-2] != ashape[:-2] or len(bp) != len(bshape):
            raise UnsupportedError("DynamicMatMul of run-time operands with different batch "
                                   "shapes")
        N = dim_c(bshape[-1])
        batch, M = cprod(*ashape[:-2]), dim_c(ashape[-2])
        mode = _uniform_param_strides(ashape[:-2], pshape[:-2])
        bmode = _uniform_param_strides(bshape[:-2], bp[:-2])
        if mode is None or bmode is None:
            raise UnsupportedError("DynamicMatMul with parameters broadcast over some batch "
                                   "axes only")
        p_batch = cprod(pshape[-2], Gp) if mode == "row" else "0"
        p_row = dim_c(Gp) if pshape[-2] == ashape[-2] else "0"
        pb_batch = cprod(bp[-2], bp[-1]) if bmode == "row" else "0"
        pb_group = "0" if bp[-2] == 1 else dim_c(bp[-1])
        pb_n = "0" if bp[-1] == 1 else "1"
        kdim, ndim = bshape[-2], bshape[-1]
        nbatch = numel(bshape[:-2])

        def size(values, kdim=kdim, ndim=ndim, nbatch=nbatch, group=group) -> int:
            nb_ = nbatch.at(values)
            return nb_ * DESC_BYTES + nb_ * _pack_bytes(dim_size(ndim).at(values),
                                                        dim_size(kdim).at(values), group)

        pack = lw.prog.scratch(size, "packed_b")
        scratch.append(pack)
        code += [
            f"lb_dmm_b *bd = (lb_dmm_b *){pack.ptr};",
            f"const lb_dmm_pack pk = {{{batch}, {N}, {dim_c(kdim)}, {group}, {b.ptr}, "
            f"{cprod(kdim, ndim)}, {N}, 1, {int(b.dtype == np.int8)}, "
            f"(const float *){sb_t.ptr}, {zb_t.ptr}, {pb_batch}, {pb_group}, {pb_n}}};",
            f"lb_dmm_pack_run(ctx, &pk, {pack.ptr} + {batch} * {DESC_BYTES}, bd);"]
        b_ref, b_step = "bd", "1"
    adds = [f"{{{lw.prog.data(bias)}, 0, 0}}"] if bias is not None else []
    writes: list[Tensor] = []
    fused = ""
    rows_ptr = "NULL"
    last = node.outputs[0]
    if batch == "1":  # rows of every batch in one product: fuse what follows into it
        more, last = epilogue_adds(lw, node.outputs[0], out_shape, 3 - len(adds))
        for kind, data, user in more:
            if kind == "vec":
                adds.append(f"{{{lw.prog.data(data)}, 0, 0}}")
            else:
                adds.append(f"{{(const float *){data.ptr}, {N}, 0}}")
                reads.append(data)
            lw.fused.add(user)
        if more:
            fused = " + " + " + ".join(u.op_type for _, _, u in more)
        chain = row_chain(lw, last, out_shape)
        if len(chain.ops) == 1 and chain.ops[0].kind == "store":
            out = lw.tensors[last]
        else:
            lw.fused.update(chain.nodes)
            code.append(chain.c())
            rows_ptr = "&ro"
            reads += chain.reads
            writes += chain.writes
            fused += f" + {chain.describe()}" if chain.nodes else ""
            out = None
    else:
        out = lw.result(node.outputs[0])
    if out is not None:
        writes.append(out)
    while len(adds) < 3:
        adds.append("{NULL, 0, 0}")
    mn = cprod(ashape[-2], N) if len(ashape) >= 2 else N
    scratch_ptr = "NULL"
    if rows_ptr != "NULL" or a_signed:  # lb_dmm_scratch_bytes: row buffer, A's codes + 128
        am, n_size, k_size = numel(ashape[:-1]), dim_size(N), dim_size(K)

        def dmm_bytes(values, am=am, n=n_size, k=k_size, rows=rows_ptr != "NULL",
                      signed=a_signed) -> int:
            bm = am.at(values)
            return (-(-bm * n.at(values) * 4 // 64) * 64 if rows else 0) + \
                (bm * k.at(values) if signed else 0)

        work = lw.prog.scratch(dmm_bytes, "dmm")
        scratch.append(work)
        scratch_ptr = work.ptr
    code += [
        f"const lb_dmm mm = {{{batch}, {M}, {N}, {dim_c(K)}, {group}, {a.ptr}, {dim_c(K)}, "
        f"{cprod(ashape[-2], K)}, {a_signed}, (const float *){sa.ptr}, {za.ptr}, {p_batch}, "
        f"{p_row}, {p_group}, {b_ref}, {b_step}, {{{', '.join(adds)}}}, "
        f"{'(float *)' + out.ptr if out is not None else 'NULL'}, {N}, {mn}, {rows_ptr}, "
        f"{scratch_ptr}}};",
        "lb_dmm_run(ctx, &mm);"]
    lw.prog.step(f"{node.name}: DynamicMatMul{f' in groups of {group}' if group else ''}"
                 f"{fused}", code, reads, writes, scratch)
