"""Fused attention: the sub-graph lowbit's dynamic quantization makes of multi-head attention,
recognized at its Q.K^T product and computed by one kernel (lb_attention_run).

The pattern, per head h of D values in rows of H*D (the eager attention of exported
transformers):

    Qt = Transpose(Reshape(Qsrc, [B, S, H, D]), [0, 2, 1, 3]);  DynamicQuantize(Qt, axes [3])
    Kt = Transpose(Reshape(Ksrc, ...), [0, 2, 3, 1]);           DynamicQuantize(Kt, axes [2])
    scores = DynamicMatMul(Q, K^T)  [* or / a scalar]  [+ mask]  -> Softmax(axis -1)
    DynamicQuantize(probabilities, axes [3], groups g);  V likewise along the tokens
    out = Reshape(Transpose(DynamicMatMul(P, V), [0, 2, 1, 3]), [B, S, H*D])

all quantized asymmetric (lowbit's defaults). The kernel reads Qsrc, Ksrc, Vsrc where they
are (the transposes become strides), keeps a block of queries' scores in a buffer (the S x S
scores are never stored), and writes `out`; the ops after it that work on whole rows (the
output projection's quantization) join its row chain. Every step is the separate op's, so
results keep the reference's bits. Anything else is left to the generic emitters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu.codegen.lower import Lowering
from lowbit.backends.cpu.codegen.ops_tensor import broadcast_strides
from lowbit.backends.cpu.codegen.program import dim_c, dim_size
from lowbit.backends.cpu.codegen.row_chain import Chain, row_chain
from lowbit.ir.graph import Node, Value
from lowbit.numerics.dynamic_params import normalize_axes, qmax
from lowbit.ops.registry import QUANT_DOMAIN


@dataclass
class Attention:
    qsrc: Value
    ksrc: Value
    vsrc: Value
    out: Value
    heads: int
    dim: int
    group: int
    pgroup: int
    qmax: tuple[int, int, int, int]  # Q, K, V, P
    scale_op: int
    scale: float
    mask: Value | None
    nodes: list[Node]


def _producer(v: Value | None, op_type: str) -> Node | None:
    """The ONNX op `op_type` producing v, if it is one."""
    n = v.producer if v is not None else None
    if n is None or n.op_type != op_type or n.domain not in ("", "ai.onnx"):
        return None
    return n


def _only_user(lw: Lowering, v: Value, node: Node) -> bool:
    return v not in lw.output_values and all(u is node for u, _ in lw.users.get(v, []))


def _dq(lw: Lowering, node: Node | None, axes: tuple, rank: int) -> tuple[int, int] | None:
    """(group, qmax) of an asymmetric DynamicQuantize over `axes`, else None."""
    if node is None or node.domain != QUANT_DOMAIN or node.input_or_none(1) is not None:
        return None
    if node.attrs.get("symmetric", 0) or normalize_axes(node.attrs["axes"], rank) != axes:
        return None
    return int(node.attrs.get("group_size", 0)), qmax(False, bool(node.attrs.get("reduce_range",
                                                                                  0)))


def _head_source(lw: Lowering, dq: Node, perm: list[int]) -> tuple[Value, list[Node]] | None:
    """The [B, S, H*D] value that dq's input is a reshape and transpose `perm` of."""
    t = _producer(dq.inputs[0], "Transpose")
    if t is None or list(t.attrs.get("perm") or []) != perm or not _only_user(lw, dq.inputs[0],
                                                                             dq):
        return None
    r = _producer(t.inputs[0], "Reshape")
    if r is None or not _only_user(lw, t.inputs[0], t):
        return None
    return r.inputs[0], [r, t]


def _operands(lw: Lowering, mm: Node, first: int) -> Node | None:
    """The DynamicQuantize producing inputs first..first+2 of mm, used only by mm."""
    dq = mm.inputs[first].producer
    if dq is None or dq.op_type != "DynamicQuantize":
        return None
    if [mm.inputs[first + i] for i in range(3)] != list(dq.outputs):
        return None
    if not all(_only_user(lw, v, mm) for v in dq.outputs):
        return None
    return dq


def match(lw: Lowering, qk: Node) -> Attention | None:
    if len(qk.inputs) < 6 or qk.input_or_none(6) is not None:
        return None
    group = int(qk.attrs.get("group_size", 0))
    out_t = qk.outputs[0].type
    if out_t is None or out_t.shape is None or len(out_t.shape) != 4:
        return None
    qdq, kdq = _operands(lw, qk, 0), _operands(lw, qk, 3)
    q_par, k_par = _dq(lw, qdq, (3,), 4), _dq(lw, kdq, (2,), 4)
    if q_par is None or k_par is None or q_par[0] != group or k_par[0] != group or not group:
        return None
    qs, ks = _head_source(lw, qdq, [0, 2, 1, 3]), _head_source(lw, kdq, [0, 2, 3, 1])
    if qs is None or ks is None:
        return None
    nodes = [qk]
    cur = qk.outputs[0]
    scale_op, scale = 0, 1.0
    user = lw.sole_user(cur)
    if user is not None and user.op_type in ("Mul", "Div") and user.inputs[0] is cur:
        c = user.inputs[1]
        if c.is_constant and np.asarray(lw.const_array(c)).size == 1 and \
                np.asarray(lw.const_array(c)).dtype == np.float32:
            scale_op = 1 if user.op_type == "Mul" else 2
            scale = float(np.asarray(lw.const_array(c)).reshape(()))
            nodes.append(user)
            cur = user.outputs[0]
            user = lw.sole_user(cur)
    mask = None
    if user is not None and user.op_type == "Add":
        other = user.inputs[1] if user.inputs[0] is cur else user.inputs[0]
        if other is not cur and lw.available(other) and other.type is not None and \
                other.type.dtype.np_dtype == np.float32 and other.type.shape is not None and \
                len(other.type.shape) <= 4 and lw.shape(user.outputs[0]) == lw.shape(cur):
            mask = other
            nodes.append(user)
            cur = user.outputs[0]
            user = lw.sole_user(cur)
    if user is None or user.op_type != "Softmax" or int(user.attrs.get("axis", -1)) % 4 != 3:
        return None
    nodes.append(user)
    probs = user.outputs[0]
    pdq = lw.sole_user(probs)
    p_par = _dq(lw, pdq, (3,), 4)
    if p_par is None or not p_par[0]:
        return None
    pv = lw.sole_user(pdq.outputs[0])
    if pv is None or pv.op_type != "DynamicMatMul" or _operands(lw, pv, 0) is not pdq or \
            int(pv.attrs.get("group_size", 0)) != p_par[0] or pv.input_or_none(6) is not None:
        return None
    vdq = _operands(lw, pv, 3)
    v_par = _dq(lw, vdq, (2,), 4)
    if v_par is None or v_par[0] != p_par[0]:
        return None
    vs = _head_source(lw, vdq, [0, 2, 1, 3])
    if vs is None:
        return None
    t = lw.sole_user(pv.outputs[0])
    if t is None or t.op_type != "Transpose" or list(t.attrs.get("perm") or []) != [0, 2, 1, 3]:
        return None
    r = lw.sole_user(t.outputs[0])
    if r is None or r.op_type != "Reshape":
        return None
    qsrc, ksrc, vsrc = qs[0], ks[0], vs[0]
    shape = lw.shape(qsrc)
    heads_shape = lw.shape(qs[1][0].outputs[0])  # [B, S, H, D]
    if len(shape) != 3 or len(heads_shape) != 4 or not all(isinstance(d, int) for d in
                                                          heads_shape[2:]):
        return None
    heads, dim = heads_shape[2], heads_shape[3]
    if shape[2] != heads * dim or lw.shape(r.outputs[0]) != shape or \
            lw.shape(ksrc) != shape or lw.shape(vsrc) != shape:
        return None
    nodes += [pdq, pv, vdq, t, r]
    return Attention(qsrc, ksrc, vsrc, r.outputs[0], heads, dim, group, p_par[0],
                     (q_par[1], k_par[1], v_par[1], p_par[1]), scale_op, scale, mask, nodes)


ATTN_ROWS = 32
"""Queries per phase-2 task of lb_attention_run (LB_ATTN_ROWS in rt_attn.c)."""


def _al64(n: int) -> int:
    return -(-n // 64) * 64


def _pack_bytes(n: int, k: int, group: int) -> int:
    nb, k4 = -(-n // 16), -(-k // 4)
    G = -(-k // group) if group else 1
    return _al64(nb * k4 * 64) + 2 * _al64(nb * G * 64) + _al64(nb * 64)


def emit(lw: Lowering, a: Attention) -> None:
    shape = lw.shape(a.qsrc)
    q, k, v = (lw.operand(x) for x in (a.qsrc, a.ksrc, a.vsrc))
    batch, seq, width = shape
    reads = [q, k, v]
    mask = "NULL"
    strides = ["0"] * 4
    if a.mask is not None:
        m = lw.operand(a.mask)
        reads.append(m)
        mask = f"(const float *){m.ptr}"
        strides = broadcast_strides(m.shape, (batch, a.heads, seq, seq))
    chain = row_chain(lw, a.out, shape, Chain())
    stored = [op for op in chain.ops if op.kind == "store"]
    if stored and len(chain.ops) == 1:
        out = lw.tensors[a.out]
        rows = "NULL"
        code = []
    else:  # rows nothing else reads go from the kernel's buffer to the chain (out NULL)
        out = lw.tensors.get(a.out)
        rows = "&ro"
        code = [chain.c()]
    lw.fused.update(a.nodes + chain.nodes)
    group, pgroup, heads, dim = a.group, a.pgroup, a.heads, a.dim

    def size(values, seq=seq, batch=batch, chained=rows != "NULL") -> int:
        """lb_attention_scratch: per head its packs and Q, and phase 1's temporaries; per
        block of ATTN_ROWS queries phase 2's temporaries."""
        s, b = dim_size(seq).at(values), dim_size(batch).at(values)
        gd, gv, gp = -(-dim // group), -(-s // pgroup), -(-s // pgroup)
        per = (_al64(_pack_bytes(s, dim, group)) + _al64(_pack_bytes(dim, s, pgroup)) +
               _al64(s * dim) + 2 * _al64(s * gd * 4) + 128)
        tparams = s * gd + gv * dim
        temp = _al64(s * dim * 2) + _al64(tparams * 4) + _al64(tparams) + _al64(s * dim * 4)
        r = ATTN_ROWS
        block = (_al64(r * s * 4) + _al64(r * s) + _al64(r * gp * 4) + _al64(r * gp) +
                 _al64(r * max(gp, gd) * 4) + (_al64(r * heads * dim * 4) if chained else 0))
        return b * heads * (per + temp) + b * -(-s // r) * block + 128

    scratch = lw.prog.scratch(size, "attention")
    qm = a.qmax
    out_c = "NULL" if out is None else f"(float *){out.ptr}"
    outs = [] if out is None else [out]
    code += [
        f"const lb_attn at = {{{dim_c(batch)}, {heads}, {dim_c(seq)}, {dim}, {group}, "
        f"{pgroup}, {pgroup}, (const float *){q.ptr}, (const float *){k.ptr}, "
        f"(const float *){v.ptr}, {width}, {width}, {width}, {qm[0]}, {qm[1]}, {qm[2]}, "
        f"{qm[3]}, {a.scale_op}, {np.float32(a.scale).item().hex()}f, {mask}, "
        f"{{{', '.join(strides)}}}, {out_c}, {width}, {rows}}};",
        f"lb_attention_run(ctx, &at, {scratch.ptr});"]
    lw.prog.step(f"{a.nodes[0].name}: fused attention, {heads} heads of {dim}"
                 f"{' + ' + chain.describe() if chain.nodes else ''}", code,
                 reads + chain.reads, [*outs, *chain.writes], [scratch])
