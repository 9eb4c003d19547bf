"""Dequantize -> Resize nearest -> Quantize to the same type, scale and zero point (PP-OCR
det's FPN upsampling) on the cpu backend against the reference, on every ISA path: the code
generator resizes the codes themselves (codegen/ops_float.codes_through) since quantizing a
dequantized code gives the code back. Cases vary 8- and 16-bit codes, zero points, scales
(tiny and huge ones included), factors and sizes; some Quantize to other parameters, or read
the float resize again, where the float path must run. Also float Resize -> Quantize (per
tensor or per channel, NaN and infinities in the input), which quantizes the smaller input and
resizes its codes (ops_float.quantized_after)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import (
    I8,
    I16,
    U8,
    _image,
    add_node,
    assert_bit_exact_on_every_isa,
    const,
    graph_of_cases,
)

from lowbit.ir import dtypes
from lowbit.ir.types import QuantParams, TensorType


def float_resize_case(g, rng, feeds, tag):
    """A float image resized, then quantized per tensor or per channel."""
    dt = rng.choice([I8, U8, I16])
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 30)), int(rng.integers(1, 10)),
             int(rng.integers(1, 10)))
    x = g.add_input(f"f_{tag}", TensorType(dtypes.FLOAT32, shape))
    data = rng.normal(0, 3, shape).astype(np.float32)
    data.reshape(-1)[rng.integers(0, data.size, 3)] = [np.nan, np.inf, -np.inf]
    feeds[x.name] = data
    scales = np.array([1, 1, rng.choice([1, 2, 3]), rng.choice([2, 4])], np.float32)
    r = add_node(g, "Resize", [x, None, const(g, scales, dtypes.FLOAT32)], {"mode": "nearest"})
    if rng.random() < 0.5:
        q = QuantParams(2.0 ** rng.uniform(-8, -2), int(rng.integers(dt.qmin, dt.qmax + 1)))
    else:
        q = QuantParams(2.0 ** rng.uniform(-8, -2, shape[1]),
                        rng.integers(dt.qmin // 2, dt.qmax // 2, shape[1]), axis=1)
    y = add_node(g, "Quantize", [r], {}, TensorType(dt, None, q), domain="lowbit")
    if rng.random() < 0.15:  # the float resize read again: no reordering
        f = add_node(g, "Dequantize", [y], {}, TensorType(dtypes.FLOAT32, None), domain="lowbit")
        return add_node(g, "Concat", [f, r], {"axis": 3})
    return y


def resize_case(g, rng, feeds, tag, same_only=False):
    if not same_only and rng.random() < 0.3:
        return float_resize_case(g, rng, feeds, tag)
    dt = rng.choice([I8, U8, I16])
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 40)), int(rng.integers(1, 12)),
             int(rng.integers(1, 12)))
    x, tx = _image(g, rng, feeds, tag, dtype=dt, shape=shape)
    if rng.random() < 0.2:  # extreme scales: still a copy (or not fused below 2**-100)
        tx = TensorType(dt, shape, QuantParams(float(2.0 ** rng.choice([-110, -60, 60])),
                                               int(tx.quant.zero_point)))
        x.type = tx
    f = add_node(g, "Dequantize", [x], {}, TensorType(dtypes.FLOAT32, None), domain="lowbit")
    scales = np.array([1, 1, rng.choice([1, 2, 3]), rng.choice([1, 2, 4])], np.float32)
    attrs = {"mode": "nearest",
             "nearest_mode": str(rng.choice(["round_prefer_floor", "floor", "ceil"]))}
    r = add_node(g, "Resize", [f, None, const(g, scales, dtypes.FLOAT32)], attrs)
    q = tx.quant
    if not same_only and rng.random() < 0.25:
        q = QuantParams(float(q.scale) * float(rng.choice([0.5, 1.0000001, 2])),
                        int(q.zero_point))
    y = add_node(g, "Quantize", [r], {}, TensorType(dt, None, q), domain="lowbit")
    if not same_only and rng.random() < 0.15:  # the float resize read again: no copy
        z = add_node(g, "Quantize", [r], {}, TensorType(dt, None, q), domain="lowbit")
        return add_node(g, "Concat", [y, z], {"axis": 1}, TensorType(dt, None, q))
    return y


@pytest.mark.parametrize("seed", range(4))
def test_resized_codes_are_bit_exact(seed):
    assert_bit_exact_on_every_isa(*graph_of_cases(5300 + seed, 30, resize_case))


def test_dequantize_resize_quantize_is_one_step_of_codes():
    g, feeds = graph_of_cases(5399, 4, lambda *a: resize_case(*a, same_only=True))
    exe = assert_bit_exact_on_every_isa(g, feeds)
    steps = list(next(iter(exe._compiled.values())).steps)
    small = [float(v.type.quant.scale) < 2.0 ** -100 for v in g.inputs]
    assert len(small) == 4
    assert sum("of codes" in st for st in steps) == 4, steps
    # below 2**-100 the codes are not the Dequantize's: the input is quantized, then resized
    assert sum(st.endswith(": Quantize") for st in steps) == small.count(True), steps


def test_float_resize_then_quantize_quantizes_the_input():
    g, feeds = graph_of_cases(5398, 6, float_resize_case)
    exe = assert_bit_exact_on_every_isa(g, feeds)
    steps = list(next(iter(exe._compiled.values())).steps)
    assert sum("of codes" in st for st in steps) >= 4, steps
