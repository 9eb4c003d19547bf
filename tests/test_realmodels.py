"""Real models: lowbit's reference interpreter equals ONNX Runtime on the same exported file
within 1e-4 relative (to the largest output magnitude)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import lowbit
from realmodels import MINILM_TEXTS, efficientnet, minilm, minilm_tokens, mnistnet

pytestmark = pytest.mark.realmodel
RNG = np.random.default_rng(3)


def assert_matches_onnxruntime(path, inputs: dict[str, np.ndarray]) -> None:
    graph = lowbit.load(path)
    ours = lowbit.run(graph, inputs)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = session.run(None, inputs)
    for name, ref in zip([o.name for o in session.get_outputs()], theirs, strict=True):
        got = ours[name]
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_mnistnet(dynamo):
    x = RNG.normal(size=(3, 1, 28, 28)).astype(np.float32)
    assert_matches_onnxruntime(mnistnet(dynamo), {"input": x})


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_efficientnet_lite0(dynamo):
    x = RNG.uniform(-1, 1, size=(1, 3, 224, 224)).astype(np.float32)
    assert_matches_onnxruntime(efficientnet(dynamo), {"input": x})


@pytest.mark.parametrize("exporter", ["dynamo", "legacy14", "legacy17"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_minilm(attention, exporter):
    path = minilm(attention, exporter)
    for texts in (["Ok"], [MINILM_TEXTS[2]], MINILM_TEXTS):  # short, long, batch with padding
        assert_matches_onnxruntime(path, minilm_tokens(texts))


@pytest.mark.parametrize("model", ["mnistnet", "efficientnet", "minilm"])
def test_load_save_round_trip_runs_the_same_in_onnxruntime(model, tmp_path):
    if model == "mnistnet":
        path, inputs = mnistnet(False), {"input": RNG.normal(size=(2, 1, 28, 28))
                                         .astype(np.float32)}
    elif model == "efficientnet":
        path, inputs = efficientnet(False), {"input": RNG.uniform(-1, 1, (1, 3, 224, 224))
                                             .astype(np.float32)}
    else:
        path, inputs = minilm("eager", "legacy17"), minilm_tokens(MINILM_TEXTS)
    saved = tmp_path / "saved.onnx"
    lowbit.save(lowbit.load(path), saved)
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    again = ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"])
    for a, b in zip(original.run(None, inputs), again.run(None, inputs), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * float(np.abs(a).max()))
