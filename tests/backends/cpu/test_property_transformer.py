"""Random dynamic quantizations, dynamic products (grouped, per row, per head, per tensor; int8
and uint8 weights with zero points; run-time operands as in attention), the float ops of
transformer encoders, float products of activations and float attention (fused: rt_fattn.c) on
the cpu backend, against the reference interpreter bit for bit, on every ISA path."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS, PRODUCT_ISAS
from transformer_graphs import (
    F32,
    dynamic_product_case,
    float_attention_case,
    float_case,
    float_matmul_case,
    graph_of_cases,
    node_outputs,
)

import lowbit
from lowbit.backends import cpu
from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType

CASES = {"dynamic": dynamic_product_case, "float": float_case, "matmul": float_matmul_case,
         "attention": float_attention_case}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", sorted(CASES))
def test_random_transformer_ops_are_bit_exact(kind, seed):
    g, feeds = graph_of_cases(1000 * seed + len(kind), 60, CASES[kind])
    ref = lowbit.run(g, feeds)
    for isa in PRODUCT_ISAS if kind == "dynamic" else ISAS:
        exe = cpu.compile(g, isa=isa, threads=2)
        got = exe(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
        if kind == "float":  # each Add of a bias then Softmax as one step
            users = g.users()
            adds = sum(n.op_type == "Add" and
                       [u.op_type for u, _ in users.get(n.outputs[0], [])] in
                       (["Softmax"], ["Flatten"]) for n in g.nodes)
            steps = exe.compiled()[0].steps
            assert sum(s.endswith("Softmax") and "Add" in s for s in steps) == adds
        if kind == "attention":  # every case fused
            steps = exe.compiled()[0].steps
            assert sum("fused float attention" in s for s in steps) == len(g.outputs)


def test_softmax_exp_edges_are_bit_exact():
    """Softmax rows whose x - max sweeps exp's edges, on every ISA: results that are
    subnormal (x - max from -87 to -104, AVX-512's vscalefps against the reference's ldexp),
    the cut at -104 and the floats either side of it, 0 and -0 differences, -inf; rows of
    64, 128 and 200 values (four vectors in step, then single vectors and a tail)."""
    f32 = np.float32
    rng = np.random.default_rng(5)
    edge = np.float32(-104.0)
    specials = np.array([0.0, -0.0, edge, np.nextafter(edge, f32(0)),
                         np.nextafter(edge, f32(-np.inf)), -103.97, -87.3, -87.34,
                         -np.inf], f32)
    g = Graph("softmax_edges")
    feeds = {}
    for n in (64, 128, 200):
        rows = rng.uniform(-110, 0, (6, n)).astype(f32)
        rows[:, :len(specials)] = specials
        rows[1] = np.linspace(-104.5, -86.0, n, dtype=f32)  # subnormal results
        rows[1, 0] = 0.0
        rows[2] = np.nextafter(edge, f32(0)) + np.arange(n, dtype=f32) * f32(2 ** -17)
        rows[2, -1] = 0.0
        rows[3] += f32(rng.uniform(-30, 30))  # the max not 0 (x - max rounded)
        rng.shuffle(rows, axis=1)
        x = g.add_input(f"x{n}", TensorType(F32, rows.shape))
        feeds[x.name] = rows
        g.outputs.append(node_outputs(g, "Softmax", [x], {"axis": -1})[0])
    ref = lowbit.run(g, feeds)
    assert any(np.any((v > 0) & (v < np.finfo(f32).tiny)) for v in ref.values())
    for isa in ISAS:
        got = cpu.compile(g, isa=isa, threads=1)(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
