"""Random residual squeeze-excitations x + x * s (PP-OCR's RSE blocks) on the cpu backend
against the reference, on every ISA path. x is an 8-bit NHWC Conv result, s one 8-bit code per
image and channel; a Mul of them whose only use is an Add with x again runs as one step of
per-channel tables (codegen/se_residual.py, lb_qse_residual) when the image has >= 512 pixels.
Cases vary channels (partial 16-lane blocks), batch, image size (below the threshold: the two
ordinary steps), operand order of both nodes, zero points, both requantization encodings and
fused clamps; one case in eight reads the Mul's result again (no fusion)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import (
    I8,
    U8,
    add_node,
    assert_bit_exact_on_every_isa,
    codes,
    const,
    graph_of_cases,
    qtype,
    random_attrs,
)

from lowbit.ir.types import QuantParams


def se_case(g, rng, feeds, tag, fused_only=False):
    """x = an 8-bit 1x1 Conv of a graph input, s a second input [N, C, 1, 1], then
    Add(x, Mul(x, s)) in random operand orders (`fused_only`: always a fusable shape)."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 41))
    big = fused_only or rng.random() < 0.8
    h, w = (int(rng.integers(23, 40)), int(rng.integers(23, 40))) if big else \
        (int(rng.integers(2, 16)), int(rng.integers(2, 16)))
    tin = qtype(rng, I8, (n, 3, h, w))
    xin = g.add_input(f"x_{tag}", tin)
    feeds[xin.name] = codes(rng, I8, (n, 3, h, w))
    wq = QuantParams(2.0 ** rng.uniform(-8, -5, c), 0, axis=0)
    wv = const(g, codes(rng, I8, (c, 3, 1, 1)), I8, wq)
    span = float(tin.quant.scale) * float(np.median(wq.scale)) * 128 * 2
    xt = qtype(rng, rng.choice([I8, U8]), None, scale=span * 2.0 ** rng.uniform(-4, 0))
    x = add_node(g, "Conv", [xin, wv], {"kernel_shape": [1, 1], **random_attrs(rng)}, xt)
    sdt = rng.choice([I8, U8])
    ts = qtype(rng, sdt, (n, c, 1, 1), scale=2.0 ** rng.uniform(-9, -5))
    s = g.add_input(f"s_{tag}", ts)
    feeds[s.name] = codes(rng, sdt, (n, c, 1, 1))
    sx, ss = float(x.type.quant.scale), float(ts.quant.scale)
    mt = qtype(rng, rng.choice([I8, U8]), None, scale=sx * ss * 128 * 2.0 ** rng.uniform(-2, 1))
    m = add_node(g, "Mul", [x, s] if rng.random() < 0.6 else [s, x], random_attrs(rng), mt)
    out = qtype(rng, rng.choice([I8, U8]), None, scale=sx * 2.0 ** rng.uniform(-1, 2))
    y = add_node(g, "Add", [x, m] if rng.random() < 0.7 else [m, x], random_attrs(rng), out)
    if not fused_only and rng.random() < 0.125:  # the Mul's result read again: not fused
        return add_node(g, "Add", [y, m], random_attrs(rng),
                        qtype(rng, I8, None, scale=float(out.quant.scale) * 2))
    return y


@pytest.mark.parametrize("seed", range(4))
def test_random_se_residuals_are_bit_exact(seed):
    assert_bit_exact_on_every_isa(*graph_of_cases(5100 + seed, 24, se_case))


def test_se_residual_is_one_step_of_tables():
    """The pattern becomes one lb_qse_residual step (not a Mul step and an Add step)."""
    g, feeds = graph_of_cases(5199, 3, lambda *a: se_case(*a, fused_only=True))
    exe = assert_bit_exact_on_every_isa(g, feeds)
    steps = list(next(iter(exe._compiled.values())).steps)
    assert sum("per-channel tables" in st for st in steps) == 3, steps
    assert not any(st.endswith((": quantized Mul", ": quantized Add")) for st in steps), steps
