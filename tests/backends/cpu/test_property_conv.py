"""Random quantized convolutions on the cpu backend against the reference, on every ISA path:
about 1500 shapes (strides, dilations, asymmetric pads, groups, depthwise, channel
multipliers), 8- and 16-bit activations, int8 and uint8 weights with zero points, per-channel
multipliers in both encodings, fused clamps, float results. One compiled program holds 75
cases and runs on each ISA's context."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import assert_bit_exact_on_every_isa, conv_case, graph_of_cases
from cpu_kernels import ISAS, PRODUCT_ISAS

import lowbit
from lowbit.backends import cpu

SEEDS = range(20)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_convolutions_are_bit_exact(seed):
    assert_bit_exact_on_every_isa(*graph_of_cases(seed, 75, conv_case))


def banded_conv_case(g, rng, feeds, tag, tall: bool = False):
    """A quantized Conv whose im2col exceeds lb_qconv_run's band (512 KB of window rows), so
    that it runs by bands of output rows: 3x3-5x5 kernels on up to 96 channels a group,
    strides, dilations, pads, batch 2, 8-bit activations, per-channel int8 weights; `tall`:
    taller images (at least 6 bands, so that 3 threads take whole bands each) and uint8
    weights with zero points half the time (the product's row sums)."""
    from cpu_graphs import I8, U8, add_node, codes, const, qtype, random_attrs

    from lowbit.ir.types import QuantParams

    groups = int(rng.choice([1, 1, 2]))
    cg, mg = int(rng.choice([64, 96])), int(rng.choice([8, 24, 40]))
    kh, kw = int(rng.integers(3, 6)), int(rng.integers(3, 6))
    sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    dh = int(rng.choice([1, 2]))
    pads = [int(v) for v in rng.integers(0, 3, 4)]
    h, w_ = int(rng.integers(40, 70)), int(rng.integers(40, 70))
    if tall:
        sh, dh, h = 1, 1, int(rng.integers(130, 200))
    xdt = I8 if rng.random() < 0.5 else U8
    tx = qtype(rng, xdt, (2, cg * groups, h, w_))
    x = g.add_input(f"x_{tag}", tx)
    feeds[x.name] = codes(rng, xdt, (2, cg * groups, h, w_))
    m = mg * groups
    wdt, wz = I8, 0
    if tall and rng.random() < 0.5:
        wdt, wz = U8, rng.integers(100, 156, m)
    wq = QuantParams(2.0 ** rng.uniform(-9, -4, m), wz, axis=0)
    wv = const(g, codes(rng, wdt, (m, cg, kh, kw)), wdt, wq)
    attrs = {"group": groups, "kernel_shape": [kh, kw], "strides": [sh, sw],
             "dilations": [dh, 1], "pads": pads, **random_attrs(rng)}
    span = float(tx.quant.scale) * float(np.median(wq.scale)) * 128 * np.sqrt(cg * kh * kw)
    out = qtype(rng, U8 if rng.random() < 0.5 else I8, None,
                scale=span * 2.0 ** rng.uniform(-6, 0))
    return add_node(g, "Conv", [x, wv], attrs, out)


@pytest.mark.parametrize("seed", range(2))
def test_convolutions_by_bands_of_rows_are_bit_exact(seed):
    assert_bit_exact_on_every_isa(*graph_of_cases(100 + seed, 3, banded_conv_case))


def wide_depthwise_case(g, rng, feeds, tag):
    """A depthwise Conv of 8-bit codes over rows wider than one block of output pixels (the
    4-tap-quad kernels take 32 pixels a block, the column-quad ones up to 32, both several
    pixels at a time with a remainder), 1-70 channels (partial blocks of 32), kernels of 1-8
    rows and columns (the column-quad kernels take one group of 4 rows or two),
    strides, dilations, pads, 8- or 16-bit results, both encodings."""
    from cpu_graphs import I8, I16, U8, add_node, codes, const, qtype, random_attrs

    from lowbit.ir.types import QuantParams

    c = int(rng.integers(1, 71))
    kh, kw = (int(v) for v in rng.integers(1, 9, 2))
    sh, sw = (int(v) for v in rng.integers(1, 3, 2))
    dh, dw = (int(v) for v in rng.choice([1, 1, 2], 2))
    pads = [int(v) for v in rng.integers(0, 3, 4)]
    low = max(1, (kh - 1) * dh + 1 - pads[0] - pads[2])
    h = int(rng.integers(low, low + 5))
    w_ = int(rng.integers(30, 140))
    n = int(rng.integers(1, 3))
    xdt = I8 if rng.random() < 0.5 else U8
    tx = qtype(rng, xdt, (n, c, h, w_))
    x = g.add_input(f"x_{tag}", tx)
    feeds[x.name] = codes(rng, xdt, (n, c, h, w_))
    wq = QuantParams(2.0 ** rng.uniform(-9, -4, c), 0, axis=0)
    wv = const(g, codes(rng, I8, (c, 1, kh, kw)), I8, wq)
    attrs = {"group": c, "kernel_shape": [kh, kw], "strides": [sh, sw],
             "dilations": [dh, dw], "pads": pads, **random_attrs(rng)}
    span = float(tx.quant.scale) * float(np.median(wq.scale)) * 128 * np.sqrt(kh * kw)
    out = qtype(rng, rng.choice([I8, U8, U8, I16]), None, scale=span * 2.0 ** rng.uniform(-6, 0))
    return add_node(g, "Conv", [x, wv], attrs, out)


@pytest.mark.parametrize("seed", range(3))
def test_wide_depthwise_convolutions_are_bit_exact(seed):
    assert_bit_exact_on_every_isa(*graph_of_cases(200 + seed, 30, wide_depthwise_case))


@pytest.mark.parametrize("threads", [2, 3])
def test_bands_of_rows_on_several_threads_are_bit_exact(threads):
    """Threads taking whole bands each (lb_qconv_run with at least 2 bands per thread), each
    with its own part of the im2col scratch and of the row sums, on every ISA path."""
    g, feeds = graph_of_cases(200 + threads, 3,
                              lambda *a: banded_conv_case(*a, tall=True))
    ref = lowbit.run(g, feeds)
    for isa in PRODUCT_ISAS:
        got = cpu.compile(g, isa=isa, threads=threads)(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")


def _float_conv_transpose(g, rng, feeds, tag, shape, weight_shape, attrs):
    """A float ConvTranspose of a random input of `shape` (fed in `feeds`) and random weights,
    with a bias seven times in ten."""
    from cpu_graphs import add_node, const

    from lowbit.ir import dtypes
    from lowbit.ir.types import TensorType

    x = g.add_input(f"x_{tag}", TensorType(dtypes.FLOAT32, shape))
    feeds[x.name] = rng.standard_normal(shape).astype(np.float32)
    inputs = [x, const(g, rng.standard_normal(weight_shape), dtypes.FLOAT32)]
    if rng.random() < 0.7:
        inputs.append(const(g, rng.standard_normal(weight_shape[1]), dtypes.FLOAT32))
    return add_node(g, "ConvTranspose", inputs, attrs)


def conv_transpose_case(g, rng, feeds, tag):
    """A float ConvTranspose: random channels (few, and more than the kernel's 64-channel
    blocks), kernel, strides, dilations, pads, output padding, with and without bias."""


    n, c, m = int(rng.integers(1, 3)), int(rng.integers(1, 20)), \
        int(rng.choice([1, 2, 5, 24, 70]))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    th, tw = int(rng.integers(0, dh * (kh - 1) + 1)), int(rng.integers(0, dw * (kw - 1) + 1))
    bh, bw = int(rng.integers(0, th + 1)), int(rng.integers(0, tw + 1))
    pads = [bh, bw, th - bh, tw - bw]  # at most the kernel's extent: the output is not empty
    attrs = {"strides": [sh, sw], "dilations": [dh, dw], "pads": pads,
             "output_padding": [int(rng.integers(0, sh)), int(rng.integers(0, sw))]}
    ih, iw = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    return _float_conv_transpose(g, rng, feeds, tag, (n, c, ih, iw), (c, m, kh, kw), attrs)


@pytest.mark.parametrize("seed", range(3))
def test_random_float_conv_transposes_match_the_reference(seed):
    g, feeds = graph_of_cases(1000 + seed, 40, conv_transpose_case)
    ref = lowbit.run(g, feeds)
    got = cpu.compile(g)(feeds)
    for name, want in ref.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5 * float(
            np.abs(want).max()), err_msg=name)


def upsampling_transpose_case(g, rng, feeds, tag, few: bool = False):
    """A float ConvTranspose whose taps never overlap (kernel <= stride, no dilation: the
    upsampling form of PP-OCR's detection head), wide rows and more input channels than one
    transposed block of the kernel (64), few and many output channels; `few`: 1 or 2 output
    channels, kernel as wide as the stride half the time (the AVX-512 path's whole blocks of 8
    pixels stored as vectors) and rows up to 90 pixels."""


    n, c, m = int(rng.integers(1, 3)), int(rng.choice([1, 7, 24, 70])), \
        int(rng.choice([1, 2] if few else [1, 2, 5, 8, 24, 70]))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    kh, kw = int(rng.integers(1, sh + 1)), int(rng.integers(1, sw + 1))
    if few and rng.random() < 0.5:
        kw = sw
    bh, bw = int(rng.integers(0, kh)), int(rng.integers(0, kw))
    attrs = {"strides": [sh, sw], "pads": [bh, bw, int(rng.integers(0, kh - bh)),
                                           int(rng.integers(0, kw - bw))],
             "output_padding": [int(rng.integers(0, sh)), int(rng.integers(0, sw))]}
    ih, iw = int(rng.integers(1, 6)), int(rng.integers(1, 90 if few else 40))
    return _float_conv_transpose(g, rng, feeds, tag, (n, c, ih, iw), (c, m, kh, kw), attrs)


@pytest.mark.parametrize("seed", range(3))
def test_upsampling_conv_transposes_match_the_reference_exactly(seed):
    g, feeds = graph_of_cases(2000 + seed, 30, lambda *a: upsampling_transpose_case(
        *a, few=seed == 2))
    ref = lowbit.run(g, feeds)
    for isa in ISAS:
        got = cpu.compile(g, isa=isa)(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
