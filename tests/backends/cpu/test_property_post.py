"""Random convolutions followed by elementwise nodes the code generator computes in the
product's epilogue (codegen/post_stage.py, lb_post): a chain of one-input quantized ops (one
table) and/or a quantized Mul by a per-channel (or one-element) constant, from 8- and 16-bit
codes, against the reference on every ISA path. Some cases read a value inside the chain again,
or end in a Mul that cannot be fused (a non-constant operand), so the fusion must stop there.
A HardSwish alone after a 16-bit result (with a folded scalar Mul and Add, `affine`) is
computed by its float32 formula in the epilogue (lb_post.hsw)."""

from __future__ import annotations

import numpy as np
from cpu_graphs import (
    I8,
    I16,
    U8,
    add_node,
    assert_bit_exact_on_every_isa,
    codes,
    const,
    conv_case,
    graph_of_cases,
    qtype,
)

from lowbit.ir import dtypes
from lowbit.ir.attrs import AFFINE, REQUANT
from lowbit.ir.types import QuantParams, TensorType


def _affine(rng) -> dict:
    """No `affine` attribute, or a random folded Mul and Add (either sign, any size)."""
    if rng.random() < 0.3:
        return {}
    return {AFFINE: [float(rng.choice([-1, 1]) * 2.0 ** rng.uniform(-4, 4)),
                     float(rng.uniform(-3, 3)) if rng.random() < 0.8 else 0.0]}


def _chain(g, rng, cur):
    """One to three table ops or scalar Add/Mul after `cur` (unary_chain's kinds)."""
    for _ in range(int(rng.integers(1, 4))):
        t = cur.type
        new = qtype(rng, rng.choice([I8, U8, I16]), None,
                    scale=float(t.quant.scale) * 2.0 ** rng.uniform(-2, 2))
        if rng.random() < 0.6:
            op = str(rng.choice(["HardSwish", "Sigmoid", "Tanh", "Relu"]))
            cur = add_node(g, op, [cur], _affine(rng) if op == "HardSwish" else {}, new)
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
        exe = assert_bit_exact_on_every_isa(*graph_of_cases(1000 + seed, 60, post_case))
        fused += sum(" then " in s for s in exe.compiled()[0].steps)
    assert fused >= 20  # so many convolutions computed a table or Mul in their epilogue


def hard_swish_case(g, rng, feeds, tag):
    """A quantized Conv with one group (1x1 or k x k, any number of output channels: edge
    column blocks, odd pixel counts) or a depthwise one into 16 bits, then a HardSwish
    (folded affine or not) into any 8- or 16-bit type, sometimes then a per-channel Mul."""
    n, c, m = int(rng.integers(1, 3)), int(rng.integers(1, 40)), int(rng.integers(1, 70))
    k = int(rng.choice([1, 1, 3]))
    depthwise = rng.random() < 0.35  # no epilogue stage: the HardSwish is a step (lb_post_map)
    if depthwise:
        c, m, k = m, m, 3
    h, w = (int(v) for v in rng.integers(k, 12, 2))
    xdt = rng.choice([I8, U8, I16])
    tx = qtype(rng, xdt, (n, c, h, w))
    x = g.add_input(f"x_{tag}", tx)
    feeds[x.name] = codes(rng, xdt, (n, c, h, w))
    wq = QuantParams(2.0 ** rng.uniform(-9, -4, m), 0, axis=0)
    inputs = [x, const(g, codes(rng, I8, (m, 1 if depthwise else c, k, k)), I8, wq)]
    if rng.random() < 0.8:
        bscale = (np.float64(np.float32(tx.quant.scale)) * wq.scale).astype(np.float32)
        inputs.append(const(g, rng.integers(-3000, 3000, m), dtypes.INT32,
                            QuantParams(bscale, 0, axis=0)))
    span = float(tx.quant.scale) * float(np.median(wq.scale)) * 128 * np.sqrt(
        (1 if depthwise else c) * k * k)
    ty = qtype(rng, I16, None, scale=span * 2.0 ** rng.uniform(-16, -6))
    attrs = {"group": m if depthwise else 1, "kernel_shape": [k, k], "strides": [1, 1],
             "dilations": [1, 1], "pads": [k // 2] * 4,
             REQUANT: str(rng.choice(["q31", "prescale"]))}
    y = add_node(g, "Conv", inputs, attrs, ty)
    affine = _affine(rng)
    a, b = affine.get(AFFINE, (1.0, 0.0))
    reach = abs(a) * float(ty.quant.scale) * 32767 + abs(b)  # the real output's extent
    dt = rng.choice([I8, U8, I16])
    out = qtype(rng, dt, None, scale=reach / (dt.qmax - dt.qmin) * 2.0 ** rng.uniform(-2, 1))
    cur = add_node(g, "HardSwish", [y], affine, out)
    if rng.random() < 0.4:
        cur = _channel_mul(g, rng, cur)
    return cur


def test_hard_swish_in_the_epilogue_is_bit_exact():
    computed = steps = 0
    for seed in range(3):
        exe = assert_bit_exact_on_every_isa(*graph_of_cases(2000 + seed, 40, hard_swish_case))
        computed += sum("then HardSwish in float32" in s for s in exe.compiled()[0].steps)
        steps += sum(": HardSwish in float32" in s for s in exe.compiled()[0].steps)
    assert computed >= 30  # so many HardSwish nodes computed in float32 in an epilogue
    assert steps >= 10  # and as steps of their own (lb_post_map, after depthwise convs)
