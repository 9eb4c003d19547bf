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
    activations,
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


def _extreme(rng, shape: tuple[int, ...]) -> np.ndarray:
    """Rows that drive the codes to their ends: all positive (zero point 0, codes up to 255),
    all negative (zero point 255, codes down to 0), constant, all zero, huge and tiny."""
    x = activations(rng, shape).reshape(-1, shape[-1])
    for row in x:
        kind = int(rng.integers(0, 7))
        if kind == 1:
            row[:] = np.abs(row) + np.float32(0.5)
        elif kind == 2:
            row[:] = -np.abs(row) - np.float32(0.5)
        elif kind == 3:
            row[:] = np.float32(rng.choice([-3.0, 2.0, 7.5]))
        elif kind == 4:
            row[:] = 0
        elif kind == 5:
            row *= np.float32(1e30)
        elif kind == 6:
            row *= np.float32(1e-30)
    return x.reshape(shape)


@pytest.mark.parametrize(
    "b,s,h,d", [(4, 128, 3, 32), (3, 37, 2, 32), (1, 20, 2, 64), (2, 48, 2, 40)])
def test_dynamic_attention_extreme_codes_are_bit_exact(b, s, h, d):
    """Codes at 0 and 255 and zero points at both ends in Q, K, V and P (whole groups of 32
    and not, lengths that are not multiples of 16 for the packs' column blocks); batches that
    run per batch element on two threads and one that does not."""
    rng = np.random.default_rng(100 * b + s)
    g = Graph("extreme")
    feeds: dict = {}
    srcs = []
    for c in "qkv":
        x = g.add_input(f"x_{c}", TensorType(F32, (b, s, h * d)))
        feeds[x.name] = _extreme(rng, (b, s, h * d))
        srcs.append(x)
    q, k, v = split_heads(g, srcs, (b, s, h, d))
    y = node_outputs(g, "MatMul", [q, k])[0]
    y = node_outputs(g, "Mul", [y, const(g, np.float32(1 / np.sqrt(d)))])[0]
    mask = g.add_input("m", TensorType(F32, (b, 1, 1, s)))
    m = np.zeros((b, 1, 1, s), np.float32)
    m[..., s - s // 4:] = np.finfo(np.float32).min
    feeds["m"] = m
    y = node_outputs(g, "Add", [y, mask])[0]
    g.outputs.append(merge_heads(g, y, v, (b, s, h, d)))
    qg = quantize_dynamic(g).graph
    ref = lowbit.run(qg, feeds)
    for isa in PRODUCT_ISAS:
        exe = cpu.compile(qg, isa=isa, threads=2)
        got = exe(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
        assert any("fused attention" in st for st in exe.compiled()[0].steps)
