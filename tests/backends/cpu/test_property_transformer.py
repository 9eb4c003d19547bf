"""Random dynamic quantizations, dynamic products (grouped, per row, per head, per tensor; int8
and uint8 weights with zero points; run-time operands as in attention), the float ops of
transformer encoders, float products of activations and float attention (fused: rt_fattn.c) on
the cpu backend, against the reference interpreter bit for bit, on every ISA path."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS, PRODUCT_ISAS
from transformer_graphs import (
    dynamic_product_case,
    float_attention_case,
    float_case,
    float_matmul_case,
    graph_of_cases,
)

import lowbit
from lowbit.backends import cpu

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
