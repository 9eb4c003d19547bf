"""Random 16-bit quantized convolutions for the tests of lb_qconv16 (W8A16, W16A8, W16A16;
test_property_conv16.py, test_kernel_conv16.py): random shapes, strides, dilations,
asymmetric pads, groups, depthwise and channel multipliers, edge tiles (widths around the
kernel's 8-pixel tiles and channel counts around its 16-channel blocks), int16/uint16/int8/
uint8 activations with zero points, int8/uint8/int16 weights with zero points, per-channel
multipliers in both encodings, fused clamps, float results, and weights large enough that
int32 sums are not exact (the hi/lo split, int64 depthwise sums and the int64 fallback)."""

from __future__ import annotations

import numpy as np
from cpu_graphs import I8, I16, U8, add_node, codes, const, conv_attrs, conv_bias, qtype

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
        inputs.append(conv_bias(g, rng, tx, wq, m, 300000))
    attrs = conv_attrs(rng, groups, (kh, kw), (sh, sw), (dh, dw), pads)
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


