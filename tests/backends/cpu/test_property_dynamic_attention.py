"""lowbit's dynamic attention (`quantize_dynamic` of multi-head attention: Q.K^T and P.V as
grouped dynamic products), which the cpu backend fuses into one kernel (lb_attention_run),
against the reference interpreter bit for bit on every ISA path: random batches, heads, head
sizes and lengths, both multiples of the group (where AVX-512 scales, masks, softmaxes and
quantizes P in one pass, lb_attn_softmax_dq_avx512) and others; masks with -inf, the float32
minimum and -1e4, fully masked rows (a max of -inf), and +inf or NaN entries (rows whose max
is not finite take the separate kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import PRODUCT_ISAS
from transformer_graphs import (
    F32,
    const,
    float_input,
    graph_of_cases,
    merge_heads,
    node_outputs,
    split_heads,
)

import lowbit
from lowbit.backends import cpu
from lowbit.ir.graph import Graph, Value
from lowbit.ir.types import TensorType
from lowbit.quant.dynamic import quantize_dynamic


def _mask(rng, shape: tuple[int, ...]) -> np.ndarray:
    """An additive mask: 0 or a fill, some rows fully masked, now and then +inf or NaN."""
    fill = np.float32(rng.choice([-np.inf, np.finfo(np.float32).min, -1e4]))
    m = np.where(rng.random(shape) < 0.3, fill, 0).astype(np.float32)
    flat = m.reshape(-1, shape[-1])
    if rng.random() < 0.5:
        flat[int(rng.integers(0, len(flat)))] = fill
    if rng.random() < 0.3:
        flat[int(rng.integers(0, len(flat))), int(rng.integers(0, shape[-1]))] = \
            rng.choice([np.inf, np.nan])
    return m


def dynamic_attention_case(g: Graph, rng, feeds: dict, tag: str) -> Value:
    """Float multi-head attention as exporters write it (Reshape + Transpose of Q, K and V
    rows, MatMul, a scalar Mul or Div or none, a broadcast mask Add or none, Softmax, MatMul
    with V, Transpose and Reshape back), lengths half the time multiples of 32."""
    b, h = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    s = int(rng.choice([32, 64, 96, 128])) if rng.random() < 0.5 else int(rng.integers(1, 70))
    d = int(rng.choice([8, 16, 32, 40, 64]))
    srcs = [float_input(g, rng, feeds, f"{tag}{c}", (b, s, h * d)) for c in "qkv"]

    q, k, v = split_heads(g, srcs, (b, s, h, d))
    y = node_outputs(g, "MatMul", [q, k])[0]
    choice = rng.random()
    scale = const(g, np.float32(rng.choice([1 / np.sqrt(d), 0.125, 3.0])))
    if choice < 0.5:
        y = node_outputs(g, "Mul", [y, scale])[0]
    elif choice < 0.8:
        y = node_outputs(g, "Div", [y, scale])[0]
    if rng.random() < 0.8:
        shape = [(b, 1, s, s), (b, 1, 1, s), (1, 1, s, s), (b, h, s, s)][int(rng.integers(0, 4))]
        mask = g.add_input(f"m_{tag}", TensorType(F32, shape))
        feeds[mask.name] = _mask(rng, shape)
        y = node_outputs(g, "Add", [y, mask])[0]
    return merge_heads(g, y, v, (b, s, h, d))


@pytest.mark.parametrize("seed", range(2))
def test_random_dynamic_attention_is_bit_exact(seed):
    g, feeds = graph_of_cases(7000 + seed, 10, dynamic_attention_case)
    q = quantize_dynamic(g).graph
    ref = lowbit.run(q, feeds)
    for isa in PRODUCT_ISAS:
        exe = cpu.compile(q, isa=isa, threads=2)
        got = exe(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
        steps = exe.compiled()[0].steps
        assert sum("fused attention" in s for s in steps) == len(q.outputs)
