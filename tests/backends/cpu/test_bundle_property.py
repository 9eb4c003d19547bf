"""The cpu backend's random graphs (cpu_graphs.py) as bundles for 64-bit ARM, run under
qemu-user, against the reference interpreter bit for bit: hundreds of convolution shapes
(depthwise, grouped, strided, dilated, padded; 8- and 16-bit; both requantization encodings,
fused clamps) and products, Add/Sub/Mul, pools, conversions, through the NEON and sdot kernels
and the portable path. Each case is one input and one output of a bundle's program."""

from __future__ import annotations

import numpy as np
import pytest
from bundle_tools import build, run
from cpu_graphs import (
    binary_case,
    conv_case,
    convert_case,
    graph_of_cases,
    pool_case,
    product_case,
)

import lowbit
from lowbit.backends.cpu.bundle import export_bundle

CASES = {"conv": conv_case, "product": product_case, "binary": binary_case, "pool": pool_case,
         "convert": convert_case}


@pytest.mark.parametrize("target", ["aarch64", "aarch64-dotprod"])
@pytest.mark.parametrize("kind", sorted(CASES))
def test_random_graphs_on_arm_are_bit_exact(tmp_path, kind, target):
    seed = 7000 + 10 * sorted(CASES).index(kind) + (target == "aarch64-dotprod")
    g, feeds = graph_of_cases(seed, 60, CASES[kind])
    ref = lowbit.run(g, feeds)
    bundle = export_bundle(g, tmp_path / "b", target=target, name="cases")
    got = run(bundle, build(bundle), [feeds[v.name] for v in g.inputs])
    for v, out in zip(g.outputs, got, strict=True):
        want = ref[v.name]
        assert out.dtype == want.dtype and out.shape == want.shape, v.name
        np.testing.assert_array_equal(out, want, err_msg=f"{v.name} on {target}")
