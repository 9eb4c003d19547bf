"""Real models on the cpu backend, bit for bit against the reference interpreter on every ISA
path: EfficientNet-Lite0 quantized with lowbit's defaults (tests/realmodels.py)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.quant.static import quantize
from realmodels import efficientnet, load_photos

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def efficientnet_int8():
    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib = [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)]
    return quantize(graph, lowbit.profile(graph, calib, progress=False)).graph, photos


@pytest.fixture(scope="module")
def efficientnet_reference(efficientnet_int8):
    q, photos = efficientnet_int8
    pick = photos[[1, 40]]
    return pick, [lowbit.run(q, {"input": p[None]})["logits"] for p in pick]


@pytest.mark.parametrize("isa", ISAS)
def test_efficientnet_lite0_int8_is_bit_exact(efficientnet_int8, efficientnet_reference, isa):
    q, _ = efficientnet_int8
    pick, refs = efficientnet_reference
    exe = cpu.compile(q, isa=isa, threads=2)
    for p, ref in zip(pick, refs, strict=True):
        np.testing.assert_array_equal(exe({"input": p[None]})["logits"], ref)
    steps = exe.compiled()[0].steps
    assert sum("+ node_add" in s for s in steps) == 9  # every residual Add fused
    assert not any("quantized Add" in s for s in steps)


def test_float_models_match_the_reference():
    """EfficientNet-Lite0 and PP-OCR's direction classifier (unknown height and width,
    compiled for the sizes of the call) in float: convolutions, depthwise ones, HardSwish,
    HardSigmoid, averages, Softmax."""
    from realmodels import ocr_model, ocr_text_lines

    cases = [(lowbit.load(efficientnet(True)), {"input": load_photos()[:1]}),
             (lowbit.load(ocr_model("cls")), {"x": ocr_text_lines(2, width=192)})]
    for graph, feeds in cases:
        exe = cpu.compile(graph)
        ref = lowbit.run(graph, feeds)
        for name, want in ref.items():
            np.testing.assert_allclose(exe(feeds)[name], want, rtol=1e-5,
                                       atol=1e-5 * float(np.abs(want).max()))
