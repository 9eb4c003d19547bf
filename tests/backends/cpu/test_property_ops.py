"""Random quantized Add/Sub/Mul (broadcasting), chains of elementwise functions, pools and
averages, conversions (Quantize with NaN and infinities, Dequantize, Requantize), clamps,
lookup tables, Concat, Gemm and MatMul on the cpu backend against the reference, on every
ISA path; large images of a batch of 1 (long rows cut in pieces for the threads), float
Add/Sub/Mul/Div, Transposes and DepthToSpace, bit-exact too."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import (
    binary_case,
    constant_operand_case,
    convert_case,
    depth_to_space_case,
    eight_bit_add_case,
    float_binary_case,
    graph_of_cases,
    large_binary_case,
    pool_case,
    product_case,
    transpose_case,
    unary_chain_case,
)
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.backends.cpu.codegen.add_linear import linear_add, reference_table

CASES = {"binary": binary_case, "pool": pool_case, "convert": convert_case,
         "product": product_case, "large_binary": large_binary_case,
         "float_binary": float_binary_case, "transpose": transpose_case,
         "constant_binary": constant_operand_case, "unary_chain": unary_chain_case,
         "depth_to_space": depth_to_space_case, "eight_bit_add": eight_bit_add_case}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", sorted(CASES))
def test_random_ops_are_bit_exact(kind, seed):
    g, feeds = graph_of_cases(100 * seed + len(kind), 60, CASES[kind])
    ref = lowbit.run(g, feeds)
    for isa in ISAS:
        got = cpu.compile(g, isa=isa)(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")


def test_unary_chains_become_one_table():
    """The chains of unary_chain_case are computed as one lookup each (and stay bit-exact,
    above): some step of the compiled program looks a chain of several nodes up."""
    g, _ = graph_of_cases(7, 40, unary_chain_case)
    steps = cpu.compile(g).compiled()[0].steps
    chains = [s for s in steps if " + " in s and "-entry table" in s]
    assert chains and len(steps) < len(g.nodes)


def test_eight_bit_adds_take_the_table_form():
    """Most of eight_bit_add_case's Adds and Subs have the table form (so that the bit-exact
    test above runs it on every ISA), and each form found gives the reference's code for
    every pair of codes, computed here as the C computes it."""
    g, _ = graph_of_cases(11, 40, eight_bit_add_case)
    found = 0
    for node in g.nodes:
        lin = linear_add(node)
        if lin is None:
            continue
        found += 1
        y, _, _ = reference_table(node)
        t = np.arange(256)[:, None]
        u = np.arange(256)[None, :]
        q, r = lin.table[:256].astype(np.int64), lin.table[256:].astype(np.int64)
        assert np.all((r >= 0) & (r < 2**lin.shift)) and 8 <= lin.shift <= 14
        got = np.clip(q[t] + ((r[t] + lin.c * u) >> lin.shift), lin.lo, lin.hi)
        np.testing.assert_array_equal(got, y.T if lin.swap else y, err_msg=node.name)
    assert found >= 30
