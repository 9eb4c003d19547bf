"""Dequantize -> Resize nearest -> Quantize to the same type, scale and zero point (PP-OCR
det's FPN upsampling) on the cpu backend against the reference, on every ISA path: the code
generator resizes the codes themselves (codegen/ops_float.codes_through) since quantizing a
dequantized code gives the code back. Cases vary 8- and 16-bit codes, zero points, scales
(tiny and huge ones included), factors and sizes; some Quantize to other parameters, or read
the float resize again, where the float path must run."""

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


def resize_case(g, rng, feeds, tag, same_only=False):
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
    assert sum("of codes" in st for st in steps) == small.count(False), steps
    assert sum(st.endswith(": Quantize") for st in steps) == small.count(True), steps
