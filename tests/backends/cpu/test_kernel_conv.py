"""A few random quantized convolutions (depthwise ones with every kernel path among them) on
each ISA, bit-exact with the reference: few enough to run again under the sanitizers
(test_sanitizers.py runs every test_kernel_* file), where tile and channel-block edges,
padded taps and masked loads are checked for out-of-bounds reads."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import conv_case, graph_of_cases
from cpu_kernels import PRODUCT_ISAS

import lowbit
from lowbit.backends import cpu


@pytest.mark.parametrize("seed", [101, 102])
def test_random_convolutions_on_every_isa(seed):
    g, feeds = graph_of_cases(seed, 30, conv_case)
    ref = lowbit.run(g, feeds)
    for isa in PRODUCT_ISAS:
        got = cpu.compile(g, isa=isa, threads=2)(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
