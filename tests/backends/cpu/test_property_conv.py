"""Random quantized convolutions on the cpu backend against the reference, on every ISA path:
about 1500 shapes (strides, dilations, asymmetric pads, groups, depthwise, channel
multipliers), 8- and 16-bit activations, int8 and uint8 weights with zero points, per-channel
multipliers in both encodings, fused clamps, float results. One compiled program holds 75
cases and runs on each ISA's context."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import conv_case, graph_of_cases
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu

SEEDS = range(20)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_convolutions_are_bit_exact(seed):
    g, feeds = graph_of_cases(seed, 75, conv_case)
    ref = lowbit.run(g, feeds)
    for isa in ISAS:
        got = cpu.compile(g, isa=isa)(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
