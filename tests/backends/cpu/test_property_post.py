"""Random convolutions followed by elementwise nodes the code generator computes in the
product's epilogue (codegen/post_stage.py, lb_post): a chain of one-input quantized ops (one
table) and/or a quantized Mul by a per-channel (or one-element) constant, from 8- and 16-bit
codes, against the reference on every ISA path. Some cases read a value inside the chain again,
or end in a Mul that cannot be fused (a non-constant operand), so the fusion must stop there."""

from __future__ import annotations

import numpy as np
from cpu_graphs import I8, I16, U8, add_node, codes, const, conv_case, graph_of_cases, qtype
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.ir.types import TensorType


def _chain(g, rng, cur):
    """One to three table ops or scalar Add/Mul after `cur` (unary_chain's kinds)."""
    for _ in range(int(rng.integers(1, 4))):
        t = cur.type
        new = qtype(rng, rng.choice([I8, U8, I16]), None,
                    scale=float(t.quant.scale) * 2.0 ** rng.uniform(-2, 2))
        if rng.random() < 0.6:
            op = str(rng.choice(["HardSwish", "Sigmoid", "Tanh", "Relu"]))
            cur = add_node(g, op, [cur], {}, new)
        else:
            op = str(rng.choice(["Add", "Mul"]))
            tc = qtype(rng, I8, (1,))
            c = const(g, codes(rng, I8, (1,)), I8, tc.quant)
            s = float(t.quant.scale) * (float(tc.quant.scale) * 64 if op == "Mul" else 2)
            out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=s * 2.0 ** rng.uniform(-2, 2))
            cur = add_node(g, op, [cur, c] if rng.random() < 0.5 else [c, cur], {}, out)
    return cur


def _channel_mul(g, rng, cur):
    """A quantized Mul of `cur` by a constant per channel (or one value), any 8-bit type."""
    t = cur.type
    m = t.shape[1]
    cdt = rng.choice([I8, U8])
    shape = [(1, m, 1, 1), (m, 1, 1), (1,)][int(rng.integers(0, 3))]
    tc = qtype(rng, cdt, shape)
    c = const(g, codes(rng, cdt, shape), cdt, tc.quant)
    s = float(t.quant.scale) * float(tc.quant.scale) * 64
    out = qtype(rng, rng.choice([I8, I8, U8, I16]), None, scale=s * 2.0 ** rng.uniform(-2, 2))
    return add_node(g, "Mul", [cur, c] if rng.random() < 0.6 else [c, cur], {}, out)


def post_case(g, rng, feeds, tag):
    """A random quantized Conv (conv_case: depthwise, grouped, 8- and 16-bit) then a chain,
    a per-channel Mul, both or neither."""
    y = conv_case(g, rng, feeds, tag)
    if y.type.quant is None:
        return y
    wide = y.type.dtype.bits == 16  # 8-bit results keep their table as a step of its own
    cur = y
    if rng.random() < (0.8 if wide else 0.3):
        cur = _chain(g, rng, cur)
    if rng.random() < (0.8 if wide or cur is y else 0.3):
        cur = _channel_mul(g, rng, cur)
    if rng.random() < 0.15:  # read the conv's result again: nothing may be fused
        out = TensorType(I16, None, qtype(rng, I16, None, scale=float(cur.type.quant.scale) * 8)
                         .quant)
        cur = add_node(g, "Add", [cur, y], {}, out) if cur.type.shape == y.type.shape else cur
    return cur


def test_convolutions_with_epilogue_post_stages_are_bit_exact():
    fused = 0
    for seed in range(6):
        g, feeds = graph_of_cases(1000 + seed, 60, post_case)
        ref = lowbit.run(g, feeds)
        for isa in ISAS:
            exe = cpu.compile(g, isa=isa)
            got = exe(feeds)
            for name, want in ref.items():
                np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
        fused += sum(" then " in s for s in exe.compiled()[0].steps)
    assert fused >= 20  # so many convolutions computed a table or Mul in their epilogue
