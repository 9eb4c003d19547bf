"""Fusing the row-wise ops that follow a product or a LayerNorm into one pass over each row
(the C side is lb_rowops in lowbit_rt_tf.h).

From a float value of rows of n columns, `row_chain` follows its users: Add of a constant
vector or of a same-shaped tensor already computed, Mul by a constant vector, Add or Mul of a
row vector already computed (ONNX Runtime's and PyTorch's run-time rescaling), LayerNorm over
the last axis, Gelu continue the chain (one of them per value); DynamicQuantize over the last
axis and Gather of constant columns end a branch; any other user, or a graph output, makes the
value stored. Each fused node is computed as its own kernel would (the same IEEE steps in the
same order), so results keep the reference's bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lowbit.backends.cpu.codegen.lower import Lowering
from lowbit.backends.cpu.codegen.program import Tensor, dim_c, numel
from lowbit.backends.reference.kernels import is_quantized
from lowbit.ir.attrs import FUSED_CLIP
from lowbit.ir.graph import Node, Value
from lowbit.numerics.dynamic_params import normalize_axes, qmax
from lowbit.ops.registry import QUANT_DOMAIN

KINDS = {"add_vec": 0, "add_rows": 1, "mul_vec": 2, "layernorm": 3, "gelu": 4, "store": 5,
         "gather": 6, "dq": 7}
MAX_OPS = 10


@dataclass
class RowOp:
    kind: str
    flag: int = 0
    a: str = "NULL"
    b: str = "NULL"
    idx: str = "NULL"
    count: int | str = 0
    eps: str = "0.0"
    out: str = "NULL"
    ld: int | str = 0
    scale: str = "NULL"
    zero: str = "NULL"
    ldp: int | str = 0
    qmax: int = 0

    def c(self) -> str:
        return (f"{{{KINDS[self.kind]}, {self.flag}, {self.a}, {self.b}, {self.idx}, "
                f"{self.count}, {self.eps}, {self.out}, {self.ld}, {self.scale}, {self.zero}, "
                f"{self.ldp}, {self.qmax}}}")


@dataclass
class Chain:
    """The row ops, the tensors they read and write, and the nodes they compute."""

    ops: list[RowOp] = field(default_factory=list)
    reads: list[Tensor] = field(default_factory=list)
    writes: list[Tensor] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)

    def c(self, name: str = "ro") -> str:
        return (f"const lb_rowops {name} = {{{len(self.ops)}, "
                f"{{{', '.join(op.c() for op in self.ops)}}}}};")

    def describe(self) -> str:
        return " + ".join(n.op_type for n in self.nodes)


def _float32(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.dtype.np_dtype == np.float32 and \
        v.type.quant is None


def _row_vector(lw: Lowering, v: Value, n) -> np.ndarray | None:
    """`v` as n float32 values per column, if it is a constant broadcasting along the rows."""
    if not v.is_constant or not isinstance(n, int):
        return None
    a = np.asarray(lw.const_array(v), np.float32)
    if a.ndim and any(d != 1 for d in a.shape[:-1]):
        return None
    if a.size not in (1, n):
        return None
    return np.ascontiguousarray(np.broadcast_to(a.reshape(-1), (n,)))


def same_rows(lw: Lowering, v: Value, shape) -> bool:
    return v.type is not None and v.type.shape is not None and lw.shape(v) == tuple(shape)


def epilogue_adds(lw: Lowering, value: Value, shape, limit: int) -> tuple[list, Value]:
    """The float Adds after `value` (its sole user, then that Add's, ...) that a product's
    epilogue can apply: a constant row vector or a computed tensor of the same shape. Returns
    ([(kind, data or tensor, node)], the last value)."""
    adds = []
    cur = value
    n = shape[-1]
    while len(adds) < limit:
        user = lw.sole_user(cur)
        if user is None or user.op_type != "Add" or user.domain not in ("", "ai.onnx") or \
                FUSED_CLIP in user.attrs or is_quantized(user) or \
                not all(_float32(v) for v in (*user.inputs, user.outputs[0])):
            break
        other = user.inputs[1] if user.inputs[0] is cur else user.inputs[0]
        if other is cur or lw.shape(user.outputs[0]) != tuple(shape):
            break
        vec = _row_vector(lw, other, n)
        if vec is not None:
            adds.append(("vec", vec, user))
        elif lw.available(other) and same_rows(lw, other, shape):
            adds.append(("rows", lw.operand(other), user))
        else:
            break
        cur = user.outputs[0]
    return adds, cur


def _dq_terminal(node: Node, cur: Value, rank: int) -> bool:
    if node.op_type != "DynamicQuantize" or node.domain != QUANT_DOMAIN or \
            node.inputs[0] is not cur:
        return False
    return normalize_axes(node.attrs["axes"], rank) == (rank - 1,)


def _gather_terminal(lw: Lowering, node: Node, cur: Value, rank: int) -> bool:
    return (node.op_type == "Gather" and node.inputs[0] is cur and node.inputs[1].is_constant
            and int(node.attrs.get("axis", 0)) % rank == rank - 1
            and np.asarray(lw.const_array(node.inputs[1])).ndim == 1)


def _continuing(lw: Lowering, node: Node, cur: Value, n) -> bool:
    if node.domain not in ("", "ai.onnx") or is_quantized(node) or FUSED_CLIP in node.attrs:
        return False
    if not _float32(node.outputs[0]) or lw.shape(node.outputs[0]) != lw.shape(cur):
        return False
    if node.op_type == "Gelu":
        return True
    if node.op_type == "LayerNormalization":
        rank = len(lw.shape(cur))
        extra = [v for v in node.outputs[1:] if v is not None]
        return (int(node.attrs.get("axis", -1)) % rank == rank - 1 and node.inputs[0] is cur
                and all(not lw.users.get(v) and v not in lw.output_values for v in extra)
                and all(v is None or _row_vector(lw, v, n) is not None
                        for v in node.inputs[1:3]))
    if node.op_type in ("Mul", "Add") and len(node.inputs) == 2:
        other = node.inputs[1] if node.inputs[0] is cur else node.inputs[0]
        if other is cur:
            return False
        return _row_vector(lw, other, n) is not None or _computed_row(lw, other, n) or \
            (node.op_type == "Add" and _float32(other) and lw.available(other)
             and same_rows(lw, other, lw.shape(cur)))
    return False


def _computed_row(lw: Lowering, v: Value, n) -> bool:
    """Whether `v` is a float32 row of n values computed already (a run-time scale vector,
    shaped [n] or [1, ..., 1, n])."""
    if v.is_constant or not _float32(v) or not lw.available(v) or not isinstance(n, int):
        return False
    shape = lw.shape(v)
    return len(shape) >= 1 and shape[-1] == n and all(d == 1 for d in shape[:-1])


def row_chain(lw: Lowering, start: Value, shape, chain: Chain | None = None) -> Chain:
    """The row ops computing what follows `start` (rows of shape[-1] values), see the module
    docstring. The nodes in `chain.nodes` are left to the caller to mark fused."""
    chain = chain or Chain()
    rank = len(shape)
    n = shape[-1]
    cur = start
    while True:
        users = [u for u, _ in lw.users.get(cur, [])]
        unique = list(dict.fromkeys(users))
        cont = [u for u in unique if _continuing(lw, u, cur, n)]
        nxt = cont[0] if len(cont) == 1 else None
        others = False
        for u in unique:
            if u is nxt:
                continue
            if _dq_terminal(u, cur, rank) and len(chain.ops) < MAX_OPS - 1:
                _emit_dq(lw, u, chain, shape)
            elif _gather_terminal(lw, u, cur, rank) and len(chain.ops) < MAX_OPS - 1:
                _emit_gather(lw, u, chain, shape)
            else:
                others = True
        if others or cur in lw.output_values or nxt is None:
            if others or cur in lw.output_values:
                t = lw.tensors.get(cur) or lw.result(cur)
                chain.ops.append(RowOp("store", out=f"(float *){t.ptr}", ld=dim_c(n)))
                chain.writes.append(t)
            if nxt is None or len(chain.ops) >= MAX_OPS - 1:
                return chain
        _emit_continuing(lw, nxt, cur, chain, n)
        chain.nodes.append(nxt)
        cur = nxt.outputs[0]


def _emit_dq(lw: Lowering, node: Node, chain: Chain, shape) -> None:
    n = shape[-1]
    group = int(node.attrs.get("group_size", 0))
    symmetric = int(bool(node.attrs.get("symmetric", 0)))
    top = qmax(bool(symmetric), bool(node.attrs.get("reduce_range", 0)))
    cs = node.input_or_none(1)
    cs_t = lw.operand(cs) if cs is not None else None
    q, scale, zero = (lw.result(v) for v in node.outputs)
    ldp = f"(({dim_c(n)} + {group} - 1) / {group})" if group else "1"
    chain.ops.append(RowOp("dq", flag=symmetric, b=f"(const float *){cs_t.ptr}" if cs_t else
                           "NULL", count=group, out=q.ptr, ld=dim_c(n),
                           scale=f"(float *){scale.ptr}", zero=zero.ptr, ldp=ldp, qmax=top))
    if cs_t is not None:
        chain.reads.append(cs_t)
    chain.writes += [q, scale, zero]
    chain.nodes.append(node)


def _emit_gather(lw: Lowering, node: Node, chain: Chain, shape) -> None:
    idx = np.asarray(lw.const_array(node.inputs[1]), np.int64).reshape(-1)
    n = shape[-1]
    if isinstance(n, int):
        idx = np.where(idx < 0, idx + n, idx)
        if np.any((idx < 0) | (idx >= n)):
            return
    out = lw.result(node.outputs[0])
    chain.ops.append(RowOp("gather", idx=lw.prog.data(idx), count=int(idx.size),
                           out=f"(float *){out.ptr}", ld=int(idx.size)))
    chain.writes.append(out)
    chain.nodes.append(node)


def _emit_continuing(lw: Lowering, node: Node, cur: Value, chain: Chain, n) -> None:
    if node.op_type == "Gelu":
        chain.ops.append(RowOp("gelu", flag=int(node.attrs.get("approximate") == "tanh")))
    elif node.op_type == "LayerNormalization":
        gamma = _row_vector(lw, node.inputs[1], n)
        beta = node.input_or_none(2)
        beta_v = _row_vector(lw, beta, n) if beta is not None else None
        chain.ops.append(RowOp("layernorm", a=lw.prog.data(gamma),
                               b=lw.prog.data(beta_v) if beta_v is not None else "NULL",
                               eps=float(node.attrs.get("epsilon", 1e-5)).hex()))
    else:
        other = node.inputs[1] if node.inputs[0] is cur else node.inputs[0]
        vec = _row_vector(lw, other, n)
        kind = "mul_vec" if node.op_type == "Mul" else "add_vec"
        if vec is not None:
            chain.ops.append(RowOp(kind, a=lw.prog.data(vec)))
            return
        t = lw.operand(other)
        chain.reads.append(t)
        if _computed_row(lw, other, n):  # a run-time row vector
            chain.ops.append(RowOp(kind, a=f"(const float *){t.ptr}"))
        else:  # Add of a same-shaped tensor (a residual)
            chain.ops.append(RowOp("add_rows", a=f"(const float *){t.ptr}", ld=dim_c(n)))


def reorder_for_fusion(nodes: list[Node], users) -> list[Node]:
    """Nodes in an order where the second operand of an Add that follows a product is computed
    before the product, when it does not depend on it (the outlier channels' small product
    summed into the main one), so that the Add joins the product's epilogue."""
    order = list(nodes)
    position = {n: i for i, n in enumerate(order)}
    for d in list(order):
        if d.op_type != "DynamicMatMul" or d.domain != QUANT_DOMAIN:
            continue
        out = d.outputs[0]
        uses = users.get(out, [])
        if len(uses) != 1 or uses[0][0].op_type != "Add":
            continue
        add = uses[0][0]
        other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
        prod = other.producer if hasattr(other, "producer") else None
        if prod is None or position.get(prod, -1) < position[d]:
            continue
        # the ancestors of `other` placed after d, none depending on d
        needed, stack, ok = [], [prod], True
        seen = set()
        while stack:
            n = stack.pop()
            if n in seen or position.get(n, -1) < position[d]:
                continue
            if n is d:
                ok = False
                break
            seen.add(n)
            needed.append(n)
            for v in n.inputs:
                if v is not None and getattr(v, "producer", None) is not None:
                    stack.append(v.producer)
        if not ok:
            continue
        moved = sorted(needed, key=lambda n: position[n])
        rest = [n for n in order if n not in seen]
        at = rest.index(d)
        order = rest[:at] + moved + rest[at:]
        position = {n: i for i, n in enumerate(order)}
    return order


__all__ = ["Chain", "RowOp", "epilogue_adds", "numel", "reorder_for_fusion", "row_chain",
           "same_rows"]
