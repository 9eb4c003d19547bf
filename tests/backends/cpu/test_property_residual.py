"""Random quantized convolutions followed by a residual Add or Sub on the cpu backend against
the reference, on every ISA path. An 8-bit Conv whose only use is an 8-bit per-tensor Add/Sub
with an operand computed earlier is fused: the Add runs in the Conv's epilogue (`residual_of`)
and no intermediate tensor exists; the other cases (16-bit or float results, the Conv's result
used twice, a Sub with the Conv second) run as separate steps. Every result must be the
reference's, bit for bit: real models cover the fused path only for their own shapes."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import I8, U8, add_node, codes, conv_case, graph_of_cases, qtype, random_attrs
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu


def residual_case(g, rng, feeds, tag):
    """A random Conv (cpu_graphs.conv_case), then Add or Sub with a same-shape 8-bit operand: a
    second input, or the Conv's own input when the shapes agree; the Conv first or second; a
    fused clamp on the Add sometimes; one case in eight also reads the Conv's result again."""
    y = conv_case(g, rng, feeds, tag)
    ty = y.type
    if ty.quant is None:
        return y
    op = "Add" if rng.random() < 0.75 else "Sub"
    x = g.inputs[-1]
    if x.type.shape == ty.shape and x.type.dtype.bits == 8 and rng.random() < 0.3:
        other = x
    else:
        dt = rng.choice([I8, U8])
        t = qtype(rng, dt, ty.shape, scale=float(ty.quant.scale) * 2.0 ** rng.uniform(-2, 2))
        other = g.add_input(f"r_{tag}", t)
        feeds[other.name] = codes(rng, dt, ty.shape)
    operands = [y, other] if rng.random() < 0.8 else [other, y]
    out = qtype(rng, rng.choice([I8, U8]), None,
                scale=float(ty.quant.scale) * 2.0 ** rng.uniform(-1, 2))
    z = add_node(g, op, operands, random_attrs(rng), out)
    if rng.random() < 0.125:  # the Conv's result has a second use: not fused
        return add_node(g, "Add", [z, y], random_attrs(rng),
                        qtype(rng, rng.choice([I8, U8]), None, scale=float(out.quant.scale) * 2))
    return z


@pytest.mark.parametrize("seed", range(6))
def test_random_convolutions_with_a_residual_are_bit_exact(seed):
    g, feeds = graph_of_cases(3000 + seed, 60, residual_case)
    ref = lowbit.run(g, feeds)
    for isa in ISAS:
        exe = cpu.compile(g, isa=isa)
        got = exe(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
