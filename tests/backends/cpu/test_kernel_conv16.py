"""lb_qconv16's edge cases against the reference on every ISA path (test_sanitizers.py runs
them again under AddressSanitizer and UndefinedBehaviorSanitizer): the mode chosen from the
weights' bound, products at 2**30 in pairs, and a few random 16-bit convolutions of each
kind, small and with sums beyond int32."""

from __future__ import annotations

import numpy as np
from conv16_graphs import I16, add_node, big_case, const, conv16_case
from cpu_graphs import assert_bit_exact_on_every_isa, graph_of_cases

from lowbit.backends.cpu.codegen.ops_conv16 import INT32, INT64, SPLIT, conv16_mode
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph
from lowbit.ir.types import QuantParams, TensorType


def test_a_few_random_16bit_convolutions_are_bit_exact():
    exe = assert_bit_exact_on_every_isa(*graph_of_cases(1650, 16, conv16_case))
    assert "16-bit" in " ".join(exe.compiled()[0].steps)


def test_a_few_16bit_convolutions_beyond_int32_are_bit_exact():
    exe = assert_bit_exact_on_every_isa(*graph_of_cases(1750, 6, big_case))
    assert "int64 sums" in " ".join(exe.compiled()[0].steps)


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
