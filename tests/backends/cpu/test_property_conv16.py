"""16-bit convolutions on the cpu backend (lb_qconv16: W8A16, W16A8, W16A16) against the
reference on every ISA path, many random cases (conv16_graphs.py draws them); the kernel's
edge cases, also run under the sanitizers, are in test_kernel_conv16.py."""

from __future__ import annotations

import pytest
from conv16_graphs import big_case, conv16_case
from cpu_graphs import assert_bit_exact_on_every_isa, graph_of_cases


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
