"""Chains of quantized elementwise functions of one tensor, computed as one lookup table.

A quantized node whose result is a function of one input code alone (a TABLE op such as
HardSwish or Sigmoid; Add, Sub or Mul with a one-element constant; Relu; Clip with constant
bounds), followed by such nodes each reading only the previous one's result (PP-LCNet's
"learnable affine block": HardSwish, Mul by a scalar, Add of a scalar), maps every code of the
chain's 8-bit or 16-bit input to one output code. The code generator computes that map once,
by running the reference kernels of the chain's nodes in order on every input code (256 or
65536 of them), and the program looks each element up once instead of running every node:

    y = table[q - qmin_in],   table[k] = f_n(... f_2(f_1(qmin_in + k)) ...)

with f_i the reference's integer kernel of node i, so the results are the reference's bit for
bit by construction (the intermediate codes are never stored).
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen.lower import Lowering
from lowbit.backends.cpu.codegen.program import numel
from lowbit.backends.reference.kernels import is_quantized, kernel_for
from lowbit.ir.graph import Node, Value
from lowbit.ops.registry import TABLE, lookup

TABLE_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16))


def _varying_input(node: Node) -> Value | None:
    """The one computed input of a node that is a function of its codes alone, else None."""
    if node.domain not in ("", "ai.onnx") or not is_quantized(node) or len(node.outputs) != 1:
        return None
    computed = [v for v in node.inputs if v is not None and not v.is_constant]
    if len(computed) != 1:
        return None
    x = computed[0]
    op = lookup(node.op_type, node.domain)
    if op is not None and op.quant_rule == TABLE:
        ok = len(node.inputs) == 1
    elif node.op_type in ("Add", "Sub", "Mul"):
        ok = len(node.inputs) == 2 and node.inputs.count(x) == 1 and \
            all(v is x or np.size(v.const_value) == 1 for v in node.inputs)
    elif node.op_type in ("Relu", "Clip"):
        ok = node.inputs[0] is x
    else:
        ok = False
    if not ok:
        return None
    for v in (x, node.outputs[0]):
        t = v.type
        if t is None or t.quant is None or not t.quant.per_tensor or \
                np.dtype(t.dtype.np_dtype) not in TABLE_DTYPES:
            return None
    return x


def unary_chain(lw: Lowering, node: Node) -> list[Node]:
    """`node` and the nodes after it that form one elementwise chain (see the module
    docstring); just [node] when none follows, [] when `node` itself is not such a function."""
    x = _varying_input(node)
    if x is None or lw.shape(node.outputs[0]) != lw.shape(x):
        return []
    chain = [node]
    while True:
        nxt = lw.sole_user(chain[-1].outputs[0])
        if nxt is None or nxt in lw.fused or _varying_input(nxt) is not chain[-1].outputs[0] \
                or lw.shape(nxt.outputs[0]) != lw.shape(x):
            return chain
        chain.append(nxt)


def chain_table(chain: list[Node]) -> np.ndarray:
    """Output codes of the chain for every code of its input, in code order (reference
    kernels, node by node)."""
    x = _varying_input(chain[0])
    assert x is not None
    dt = x.type.dtype
    codes = np.arange(dt.qmin, dt.qmax + 1).astype(dt.np_dtype)
    for node in chain:
        rank = len(x.type.shape or (1,))
        arg = codes.reshape((1,) * (rank - 1) + (codes.size,))
        inputs = [None if v is None else (arg if v is x else np.asarray(v.const_value))
                  for v in node.inputs]
        kernel = kernel_for(node)
        assert kernel is not None
        codes = np.asarray(kernel(node, inputs)[0]).reshape(-1)
        x = node.outputs[0]
    assert codes.size == 1 << (8 * np.dtype(chain[0].inputs[0].type.dtype.np_dtype).itemsize) \
        or codes.size == (dt.qmax - dt.qmin + 1)
    return codes


def emit_unary_chain(lw: Lowering, node: Node, least: int = 2) -> bool:
    """Emit `node` and the chain after it as one table lookup when the chain has at least
    `least` nodes; False (nothing emitted) otherwise."""
    chain = unary_chain(lw, node)
    if len(chain) < least:
        return False
    from lowbit.backends.cpu.codegen.ops_quant import shift_of, tname

    x_v = _varying_input(node)
    last = chain[-1].outputs[0]
    src, out_t = x_v.type, last.type
    x = lw.operand(x_v, None)
    out = lw.result(last, x.layout if len(x.shape) == 4 else "plain")
    tab = chain_table(chain).astype(np.int64) + shift_of(out_t)
    data = lw.prog.data(tab.astype(out.dtype))
    in_min = src.dtype.qmin + shift_of(src)
    names = " + ".join(n.op_type for n in chain)
    lw.prog.step(f"{node.name}: {names} as a {tab.size}-entry table", [
        f"lb_lookup(ctx, {numel(x.shape).c()}, {x.ptr}, {tname(lw, x)}, {in_min}, {data}, "
        f"{tname(lw, out)}, {out.ptr});"], [x], [out])
    lw.fused.update(chain[1:])
    return True
