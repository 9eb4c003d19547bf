"""The fused float attention kernel (lb_fattn_run, rt_fattn*.c) against the reference's
separate ops, bit for bit, on every ISA path: edge sizes (one token, one value per head, more
(batch, head) pairs than the kernel's 32 scratch slots, a sequence longer than a block of 32
queries) and random ones. The sanitizer test runs this file too."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS
from transformer_graphs import F32, activations, const, float_attention_case, node_outputs

import lowbit
from lowbit.backends import cpu
from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType


def _attention(g: Graph, rng, feeds: dict, tag: str, b: int, s: int, h: int, d: int):
    """Scaled attention with a [b, 1, 1, s] padding mask of float32 min."""
    srcs = []
    for c in "qkv":
        x = g.add_input(f"x_{tag}{c}", TensorType(F32, (b, s, h * d)))
        feeds[x.name] = activations(rng, (b, s, h * d))
        srcs.append(x)

    def heads(x, perm):
        split = node_outputs(g, "Reshape", [x, const(g, np.array([b, s, h, d], np.int64))])[0]
        return node_outputs(g, "Transpose", [split], {"perm": perm})[0]

    y = node_outputs(g, "MatMul", [heads(srcs[0], [0, 2, 1, 3]), heads(srcs[1], [0, 2, 3, 1])])[0]
    y = node_outputs(g, "Mul", [y, const(g, np.float32(1 / np.sqrt(d)))])[0]
    mask = g.add_input(f"m_{tag}", TensorType(F32, (b, 1, 1, s)))
    feeds[mask.name] = np.where(rng.random((b, 1, 1, s)) < 0.3, np.finfo(np.float32).min,
                                0).astype(np.float32)
    y = node_outputs(g, "Add", [y, mask])[0]
    p = node_outputs(g, "Softmax", [y], {"axis": -1})[0]
    o = node_outputs(g, "MatMul", [p, heads(srcs[2], [0, 2, 1, 3])])[0]
    o = node_outputs(g, "Transpose", [o], {"perm": [0, 2, 1, 3]})[0]
    return node_outputs(g, "Reshape", [o, const(g, np.array([b, s, h * d], np.int64))])[0]


@pytest.fixture(scope="module")
def cases():
    rng = np.random.default_rng(5)
    g = Graph("fattn")
    feeds: dict[str, np.ndarray] = {}
    outs = [_attention(g, rng, feeds, f"e{i}", *shape) for i, shape in enumerate(
        [(1, 1, 1, 1), (1, 1, 3, 5), (2, 7, 1, 1), (3, 5, 12, 4), (1, 45, 2, 16),
         (1, 33, 1, 32)])]
    outs += [float_attention_case(g, rng, feeds, f"r{i}") for i in range(6)]
    g.outputs = outs
    return g, feeds, lowbit.run(g, feeds)


@pytest.mark.parametrize("isa", ISAS)
def test_fused_float_attention_keeps_the_reference_bits(cases, isa):
    g, feeds, ref = cases
    exe = cpu.compile(g, isa=isa, threads=2)
    got = exe(feeds)
    for name, want in ref.items():
        np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
    steps = exe.compiled()[0].steps
    assert sum("fused float attention" in s for s in steps) == len(g.outputs)
