"""Fused float attention: the multi-head attention that imported quantized models keep in
float32 (ONNX Runtime's and PyTorch's `quantize_dynamic` quantize only the Linear layers),
recognized at its Q.K^T MatMul and computed by one kernel (lb_fattn_run, rt_fattn.c).

The pattern, per head h of D values in rows of H*D (the eager attention of exported
transformers):

    Qt = Transpose(Reshape(Qsrc, [B, S, H, D]), [0, 2, 1, 3])
    Kt = Transpose(Reshape(Ksrc, [B, S, H, D]), [0, 2, 3, 1])
    Vt = Transpose(Reshape(Vsrc, [B, S, H, D]), [0, 2, 1, 3])
    scores = MatMul(Qt, Kt)  [* or / a float32 scalar]  [+ mask]  -> Softmax(axis -1)
    out = Reshape(Transpose(MatMul(probabilities, Vt), [0, 2, 1, 3]), [B, S, H*D])

all float32, every intermediate read only by the next op. The kernel reads Qsrc, Ksrc and Vsrc
where they lie (the transposes become strides; the generic transposes, now unread, are pruned),
keeps one head's scores of a block of queries in cache, and writes `out`. Each step computes
what the separate op computes (MatMul: float64 sums rounded once, as the reference; Mul/Div,
Add, Softmax: the same float32 operations as their kernels), so results keep the reference's
bits. Anything else is left to the generic emitters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering
from lowbit.backends.cpu.codegen.ops_tensor import broadcast_strides
from lowbit.backends.cpu.codegen.program import dim_c, dim_size
from lowbit.ir.graph import Node, Value

ROWS, SLOTS = 32, 32
"""LB_FATTN_ROWS and LB_FATTN_SLOTS of rt_fattn.c (the scratch size mirrors it)."""


@dataclass
class FloatAttention:
    qsrc: Value
    ksrc: Value
    vsrc: Value
    out: Value
    heads: int
    dim: int
    scale_op: int
    scale: float
    mask: Value | None
    nodes: list[Node]


def _onnx(node: Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


def _float32(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.quant is None and \
        v.type.dtype.np_dtype == np.float32 and v.type.shape is not None


def _only_user(lw: Lowering, v: Value, node: Node) -> bool:
    uses = lw.users.get(v, [])
    return v not in lw.output_values and len(uses) == 1 and uses[0][0] is node


def _heads(lw: Lowering, v: Value, reader: Node, perm: list[int]
           ) -> tuple[Value, int, int] | None:
    """(the [B, S, H*D] source, H, D) when `v` = Transpose(Reshape(source, [B, S, H, D]),
    perm), each read only by the next op."""
    t = v.producer
    if not _onnx(t, "Transpose") or list(t.attrs.get("perm") or []) != perm or \
            not _only_user(lw, v, reader):
        return None
    r = t.inputs[0].producer
    if not _onnx(r, "Reshape") or not _only_user(lw, t.inputs[0], t):
        return None
    src = r.inputs[0]
    if not _float32(src) or not lw.available(src):
        return None
    shape, split = lw.shape(src), lw.shape(r.outputs[0])
    if len(shape) != 3 or len(split) != 4 or not all(isinstance(d, int) for d in split[2:]):
        return None
    heads, dim = split[2], split[3]
    if shape[2] != heads * dim or split[:2] != shape[:2]:
        return None
    return src, heads, dim


def _sole(lw: Lowering, v: Value) -> Node | None:
    return lw.sole_user(v)


def _scalar(lw: Lowering, v: Value | None) -> float | None:
    if v is None or not v.is_constant:
        return None
    a = np.asarray(lw.const_array(v))
    return float(a.reshape(())) if a.size == 1 and a.dtype == np.float32 else None


def match(lw: Lowering, qk: Node) -> FloatAttention | None:
    """The attention starting at MatMul `qk`, or None."""
    if not _onnx(qk, "MatMul") or len(qk.inputs) != 2 or \
            not all(_float32(v) for v in (*qk.inputs, qk.outputs[0])):
        return None
    q = _heads(lw, qk.inputs[0], qk, [0, 2, 1, 3])
    k = _heads(lw, qk.inputs[1], qk, [0, 2, 3, 1])
    if q is None or k is None or q[1:] != k[1:]:
        return None
    qsrc, heads, dim = q
    ksrc = k[0]
    shape = lw.shape(qsrc)
    if lw.shape(ksrc) != shape:
        return None
    batch, seq, _ = shape
    nodes = [qk]
    cur = qk.outputs[0]
    user = _sole(lw, cur)
    scale_op, scale = 0, 1.0
    if user is not None and user.op_type in ("Mul", "Div") and _onnx(user, user.op_type) and \
            len(user.inputs) == 2 and _float32(user.outputs[0]):
        other = user.inputs[1] if user.inputs[0] is cur else user.inputs[0]
        value = _scalar(lw, other)
        if value is not None and not np.isnan(value) and \
                (user.op_type == "Mul" or user.inputs[0] is cur) and \
                other is not cur:
            scale_op, scale = (1 if user.op_type == "Mul" else 2), value
            nodes.append(user)
            cur = user.outputs[0]
            user = _sole(lw, cur)
    mask = None
    if _onnx(user, "Add") and len(user.inputs) == 2 and _float32(user.outputs[0]):
        other = user.inputs[1] if user.inputs[0] is cur else user.inputs[0]
        if other is not cur and _float32(other) and lw.available(other) and \
                len(lw.shape(other)) <= 4 and lw.shape(user.outputs[0]) == lw.shape(cur):
            mask = other
            nodes.append(user)
            cur = user.outputs[0]
            user = _sole(lw, cur)
    if not _onnx(user, "Softmax") or int(user.attrs.get("axis", -1)) % 4 != 3 or \
            not _float32(user.outputs[0]):
        return None
    nodes.append(user)
    pv = _sole(lw, user.outputs[0])
    if not _onnx(pv, "MatMul") or pv.inputs[0] is not user.outputs[0] or \
            not _float32(pv.outputs[0]):
        return None
    v = _heads(lw, pv.inputs[1], pv, [0, 2, 1, 3])
    if v is None or v[1:] != (heads, dim) or lw.shape(v[0]) != shape:
        return None
    t = _sole(lw, pv.outputs[0])
    if not _onnx(t, "Transpose") or list(t.attrs.get("perm") or []) != [0, 2, 1, 3]:
        return None
    r = _sole(lw, t.outputs[0])
    if not _onnx(r, "Reshape") or lw.shape(r.outputs[0]) != shape:
        return None
    if lw.shape(qk.outputs[0]) != (batch, heads, seq, seq):
        return None
    nodes += [pv, t, r]
    return FloatAttention(qsrc, ksrc, v[0], r.outputs[0], heads, dim, scale_op, scale, mask,
                          nodes)


def _al64(n: int) -> int:
    return -(-n // 64) * 64


def emit(lw: Lowering, a: FloatAttention) -> None:
    batch, seq, width = lw.shape(a.qsrc)
    q, k, v = (lw.operand(x) for x in (a.qsrc, a.ksrc, a.vsrc))
    reads = [q, k, v]
    mask, strides = "NULL", ["0"] * 4
    if a.mask is not None:
        m = lw.operand(a.mask)
        reads.append(m)
        mask = f"(const float *){m.ptr}"
        strides = broadcast_strides(m.shape, (batch, a.heads, seq, seq))
    out = lw.result(a.out)
    lw.fused.update(a.nodes)
    heads, dim = a.heads, a.dim

    def size(values, seq=seq, batch=batch) -> int:
        """lb_fattn_scratch: per slot K^T, V, a block's Q, scores, P and a row of sums."""
        s, b = dim_size(seq).at(values), dim_size(batch).at(values)
        if b <= 0 or s <= 0:
            return 64
        r = min(ROWS, s)
        slot = 2 * _al64(s * dim * 8) + _al64(r * dim * 8) + _al64(r * s * 4) + \
            _al64(r * s * 8) + _al64(max(s, dim) * 8)
        return min(b * heads, SLOTS) * slot + 64

    scratch = lw.prog.scratch(size, "float_attention")
    code = [
        f"const lb_fattn fa = {{{dim_c(batch)}, {heads}, {dim_c(seq)}, {dim}, "
        f"(const float *){q.ptr}, (const float *){k.ptr}, (const float *){v.ptr}, {width}, "
        f"{width}, {width}, {a.scale_op}, {cexpr.flt(a.scale)}, {mask}, "
        f"{{{', '.join(strides)}}}, (float *){out.ptr}, {width}}};",
        f"lb_fattn_run(ctx, &fa, {scratch.ptr});"]
    lw.prog.step(f"{a.nodes[0].name}: fused float attention, {heads} heads of {dim}", code,
                 reads, [out], [scratch])
