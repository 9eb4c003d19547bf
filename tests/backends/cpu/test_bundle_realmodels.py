"""Real models as standalone C bundles, natively and for 64-bit ARM under qemu-user: outputs equal
the cpu backend's bit for bit, and the weights stay close to the model's int8 parameters.
Nothing is timed (qemu emulates: ../shared/EVAL.md)."""

from __future__ import annotations

import numpy as np
import pytest
from bundle_tools import build, run

from lowbit.backends import cpu
from lowbit.backends.cpu.bundle import export_bundle
from lowbit.backends.cpu.bundle.targets import host_target

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def efficientnet_cpu(efficientnet_int8):
    """Two photos and the cpu backend's logits for each (batch 1: the model's fixed size)."""
    q, photos = efficientnet_int8
    pick = photos[[1, 40]]
    exe = cpu.compile(q, threads=2)
    return pick, [exe({"input": p[None]})["logits"] for p in pick]


@pytest.mark.parametrize("target", [host_target().name, "aarch64", "aarch64-dotprod"])
def test_efficientnet_lite0_bundle_equals_the_cpu_backend(efficientnet_int8, efficientnet_cpu,
                                                          tmp_path, target):
    q, _ = efficientnet_int8
    pick, refs = efficientnet_cpu
    bundle = export_bundle(q, tmp_path / "b", target=target, name="effnet")
    print(bundle.summary())
    program = build(bundle)
    for p, ref in zip(pick, refs, strict=True):
        (got,) = run(bundle, program, [p[None]], args=("--threads", "2"))
        np.testing.assert_array_equal(got, ref)


def test_efficientnet_lite0_weights_size(efficientnet_int8, tmp_path):
    """The weight matrices in the kernels' layouts (packed, padded, one depthwise layout per
    target) stay within 1.1x the int8 parameter bytes; the rest of the weights file is the
    per-channel constants (bias and zero-point offsets, requantization multipliers and shifts),
    reported apart, and for VNNI targets the bounded form of the requantizations (16 bytes per
    output channel, reported apart too)."""
    q, _ = efficientnet_int8
    for target in ("x86-64-avx512vnni", "x86-64", "aarch64-dotprod"):
        bundle = export_bundle(q, tmp_path / target, target=target, name="effnet")
        print(bundle.summary())
        assert bundle.int8_parameter_bytes == 4608992
        assert bundle.weight_data_bytes <= 1.1 * bundle.int8_parameter_bytes
        constants = bundle.weights_bytes - bundle.weight_data_bytes - bundle.bounded_bytes
        assert constants < 0.11 * bundle.int8_parameter_bytes
        if target.endswith("vnni"):
            assert 0 < bundle.bounded_bytes < 0.08 * bundle.int8_parameter_bytes
        else:
            assert bundle.bounded_bytes == 0
    program = build(bundle)
    assert bundle.code_bytes["kernel library"] > bundle.code_bytes["model function"] > 0
    assert program.is_file()
