"""16-bit convolutions on the cpu backend (lb_qconv16: W8A16, W16A8, W16A16) against the
reference, on every ISA path: random shapes, strides, dilations, asymmetric pads, groups,
depthwise and channel multipliers, edge tiles (widths around the kernel's 8-pixel tiles and
channel counts around its 16-channel blocks), int16/uint16/int8/uint8 activations with zero
points, int8/uint8/int16 weights with zero points, per-channel multipliers in both encodings,
fused clamps, float results, and weights large enough that int32 sums are not exact (the
hi/lo split, int64 depthwise sums and the int64 fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import (
    I8,
    I16,
    U8,
    add_node,
    assert_bit_exact_on_every_isa,
    codes,
    const,
    graph_of_cases,
    qtype,
    random_attrs,
)

from lowbit.backends.cpu.codegen.ops_conv16 import INT32, INT64, SPLIT, conv16_mode
from lowbit.ir import dtypes
from lowbit.ir.attrs import REQUANT
from lowbit.ir.types import QuantParams, TensorType

U16 = dtypes.UINT16


def activation_type(rng, dtype, shape) -> TensorType:
    """A per-tensor type with a zero point anywhere in the range (uint16 included)."""
    if dtype == U16:
        z = int(rng.integers(0, 65536))
        return TensorType(U16, shape, QuantParams(float(2.0 ** rng.uniform(-14, -6)), z))
    if dtype == I16 and rng.random() < 0.5:
        z = int(rng.integers(-32768, 32768))
        return TensorType(I16, shape, QuantParams(float(2.0 ** rng.uniform(-14, -6)), z))
    return qtype(rng, dtype, shape)


def weight_codes(rng, dtype, shape, magnitude: str) -> np.ndarray:
    """Weight codes of `dtype`: the whole range, or (`small`) within +-64 of 0 for int16."""
    if dtype == I16 and magnitude == "small":
        return rng.integers(-64, 65, shape).astype(np.int16)
    return codes(rng, dtype, shape)


def conv16_case(g, rng, feeds, tag, big: bool = False):
    """A random quantized Conv with a 16-bit operand (activations, weights or both); `big`:
    many input channels (K up to ~2300) and full-range 16-bit weights, so that int32 sums
    overflow unless split."""
    kind = rng.random()
    groups = int(rng.choice([1, 1, 2, 3])) if kind < 0.7 else 0
    cg = int(rng.integers(1, 20)) if groups else 1
    if big and groups:
        cg = int(rng.integers(100, 260))
    if groups == 0:  # depthwise (channel multiplier 1 or 2)
        groups = int(rng.integers(1, 80))
        mg = int(rng.choice([1, 1, 1, 2]))
    else:
        mg = int(rng.choice([1, 7, 15, 16, 17, 31, 33, int(rng.integers(1, 50))]))
    c, m = cg * groups, mg * groups
    kh, kw = (int(v) for v in rng.integers(1, 6, 2))
    sh, sw = (int(v) for v in rng.integers(1, 3, 2))
    dh, dw = (int(v) for v in rng.choice([1, 1, 1, 2], 2))
    pads = [int(v) for v in rng.integers(0, 3, 4)]
    h = int(rng.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 12))
    w_ = int(rng.choice([int(rng.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 12)),
                         16, 17, 23, 25]))
    n = int(rng.integers(1, 3))
    wide_w = big or rng.random() < 0.6
    xdt = rng.choice([I16, I16, U16, I8, U8]) if wide_w else rng.choice([I16, U16])
    tx = activation_type(rng, xdt, (n, c, h, w_))
    x = g.add_input(f"x_{tag}", tx)
    feeds[x.name] = codes(rng, xdt, (n, c, h, w_))
    if wide_w:
        wdt = I16
        zw = rng.integers(-40, 40, m) if rng.random() < 0.3 else 0
        scale = 2.0 ** rng.uniform(-17, -12, m)
    elif rng.random() < 0.3:
        wdt, zw, scale = U8, rng.integers(0, 256, m), 2.0 ** rng.uniform(-9, -4, m)
    else:
        wdt, zw, scale = I8, 0, 2.0 ** rng.uniform(-9, -4, m)
    wq = QuantParams(scale, zw, axis=0)
    magnitude = "full" if big or rng.random() < 0.5 else "small"
    wcodes = weight_codes(rng, wdt, (m, cg, kh, kw), magnitude)
    if wdt == I16:
        wcodes = np.clip(wcodes.astype(np.int64), -32768 + 40, 32767 - 40).astype(np.int16)
    wv = const(g, wcodes, wdt, wq)
    inputs = [x, wv]
    if rng.random() < 0.8:
        bscale = (np.float64(np.float32(tx.quant.scale)) *
                  wq.scale.astype(np.float64)).astype(np.float32)
        inputs.append(const(g, rng.integers(-300000, 300000, m), dtypes.INT32,
                            QuantParams(bscale, 0, axis=0)))
    attrs = {"group": groups, "kernel_shape": [kh, kw], "strides": [sh, sw],
             "dilations": [dh, dw], "pads": pads, **random_attrs(rng)}
    r = rng.random()
    if r < 0.1:
        out = TensorType(dtypes.FLOAT32, None)
        attrs.pop(REQUANT)
    else:
        wmax = float(np.abs(wcodes.astype(np.int64)).max(initial=1))
        xmax = 32768.0 if tx.dtype.bits == 16 else 128.0
        span = float(tx.quant.scale) * float(np.median(wq.scale)) * xmax * wmax * \
            np.sqrt(cg * kh * kw) / 4
        out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=span * 2.0 ** rng.uniform(-6, 0))
    return add_node(g, "Conv", inputs, attrs, out)


def big_case(g, rng, feeds, tag):
    return conv16_case(g, rng, feeds, tag, big=True)


@pytest.mark.parametrize("seed", range(6))
def test_random_16bit_convolutions_are_bit_exact(seed):
    exe = assert_bit_exact_on_every_isa(*graph_of_cases(1600 + seed, 60, conv16_case))
    steps = " ".join(exe.compiled()[0].steps)
    assert "16-bit" in steps and "16-bit depthwise" in steps, steps


@pytest.mark.parametrize("seed", range(2))
def test_16bit_convolutions_whose_int32_sums_overflow_are_bit_exact(seed):
    """Full-range int16 weights over K in the hundreds or thousands: the hi/lo split of the
    activations, int64 depthwise sums, or (sums beyond even the split) lb_qconv_wide."""
    exe = assert_bit_exact_on_every_isa(*graph_of_cases(1700 + seed, 24, big_case))
    steps = " ".join(exe.compiled()[0].steps)
    assert "int32 hi/lo sums" in steps and "int64 sums" in steps, steps


def test_the_mode_follows_the_weights_bound():
    """int32 exactly while max|a| * max row sum |w| < 2**31, then the split (255 * row sum <
    2**31), then nothing; depthwise takes int64 sums instead of the split."""
    rows = np.full((2, 4), 16383, np.int64)  # row sum 65532: 32768 * 65532 < 2**31
    assert conv16_mode(rows, "LB_I16", 0, False) == INT32
    rows[1, 0] += 5  # 32768 * 65537 > 2**31
    assert conv16_mode(rows, "LB_I16", 0, False) == SPLIT
    assert conv16_mode(rows, "LB_U16", 40000, True) == INT64
    assert conv16_mode(rows, "LB_U8", 3, False) == INT32  # 255 * 65537
    huge = np.full((1, 300), 32767, np.int64)  # 255 * 9830100 > 2**31
    assert conv16_mode(huge, "LB_I16", 0, False) is None
    assert conv16_mode(huge, "LB_I16", 0, True) == INT64
    assert conv16_mode(np.array([[32768]]), "LB_I16", 0, False) is None  # outside int16
    assert conv16_mode(np.array([[1]]), "LB_U8", 300, False) is None  # zero point outside


def test_pairs_whose_products_reach_2_pow_30_are_exact_on_every_isa():
    """Activations at -32768 against weights at -32768 (each product 2**30: a pair of them
    is the one sum vpmaddwd wraps), alone and across the split."""
    from lowbit.ir.graph import Graph

    g = Graph("extremes")
    feeds = {}
    outs = []
    for i, (cg, zero) in enumerate([(1, 0), (2, 0), (4, 0), (64, -32768)]):
        tx = TensorType(I16, (1, cg, 3, 9), QuantParams(2.0 ** -10, zero))
        x = g.add_input(f"x{i}", tx)
        feeds[x.name] = np.full((1, cg, 3, 9), -32768, np.int16)
        feeds[x.name][0, 0, 1, ::2] = 32767
        wq = QuantParams(np.full(3, 2.0 ** -15), 0, axis=0)
        wv = const(g, np.full((3, cg, 1, 1), -32768, np.int16), I16, wq)
        out = TensorType(dtypes.FLOAT32, None)
        outs.append(add_node(g, "Conv", [x, wv], {"group": 1, "kernel_shape": [1, 1]}, out))
    g.outputs = outs
    exe = assert_bit_exact_on_every_isa(g, feeds)
    steps = " ".join(exe.compiled()[0].steps)
    assert "16-bit, int32 sums" in steps and "int32 hi/lo sums" in steps, steps
