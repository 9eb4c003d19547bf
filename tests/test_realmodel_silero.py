"""Silero VAD (issue 22): a real model with an If choosing its 16 or 8 kHz network. lowbit
inspects it, runs it equal to ONNX Runtime on chunks of speech with the state carried, folds
the If once `sr` is fixed, and quantizes it dynamically with speech probabilities within 0.02
of float, on sentences espeak-ng speaks (../shared/EVAL.md). The opset-18 file unrolls its LSTM
cell into Gemms (which dynamic quantization computes in integers); the default file keeps
LSTM layers inside nested Ifs, and runs as well."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import lowbit
from lowbit.quant.dynamic import quantize_dynamic
from realmodels import silero_vad_model, speech_signal

pytestmark = pytest.mark.realmodel

SRC = str(Path(__file__).resolve().parents[1] / "src")
CHUNK = {16000: 512, 8000: 256}
"""New samples per chunk Silero VAD takes at each rate..."""
CONTEXT = {16000: 64, 8000: 32}
"""...after the last samples of the previous chunk (as silero_vad's OnnxWrapper feeds it)."""


def _chunks(rate: int) -> tuple[np.ndarray, np.ndarray]:
    """The speech signal cut into the model's inputs (each chunk after the context of the one
    before, zeros before the first), and which chunks are mostly speech."""
    signal, speech = speech_signal(rate)
    n, context = CHUNK[rate], CONTEXT[rate]
    count = signal.size // n
    padded = np.concatenate([np.zeros(context, np.float32), signal[:count * n]])
    chunks = np.stack([padded[i * n:i * n + context + n] for i in range(count)])[:, None, :]
    return chunks, speech[:count * n].reshape(count, n).mean(axis=1) > 0.5


def _probabilities(run, chunks: np.ndarray, rate: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Speech probability of every chunk and the last state, carrying the state (and
    passing `sr` unless it was fixed)."""
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for x in chunks:
        feeds = {"input": x, "state": state}
        if rate is not None:
            feeds["sr"] = np.array(rate, np.int64)
        prob, state = run(feeds)
        probs.append(float(prob.reshape(-1)[0]))
    return np.array(probs), state


def _ort(path):
    session = ort.InferenceSession(str(path))
    names = {i.name for i in session.get_inputs()}
    return lambda feeds: session.run(None, {k: v for k, v in feeds.items() if k in names})


def _lowbit(graph):
    compiled = lowbit.compile(graph)

    def run(feeds):
        out = compiled(feeds)
        return out["output"], out["stateN"]

    return run


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lowbit", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": SRC})


def test_inspect_shows_the_if_and_its_branches():
    r = _cli("inspect", str(silero_vad_model()), "--nodes")
    assert r.returncode == 0, r.stderr
    assert "sr: i64<>" in r.stdout and "If                       1" in r.stdout
    assert "node_cond__1/then_branch: Conv 6" in r.stdout
    assert "    then_branch: graph true_graph_0 {" in r.stdout
    r = _cli("inspect", str(silero_vad_model()), "--fix-input", "sr=8000")
    assert r.returncode == 0 and "If " not in r.stdout and "sr:" not in r.stdout, r.stderr


@pytest.mark.parametrize("rate", [16000, 8000])
def test_run_equals_onnx_runtime_with_the_state_carried(rate):
    chunks, speech = _chunks(rate)
    want, want_state = _probabilities(_ort(silero_vad_model()), chunks, rate)
    graph = lowbit.load(silero_vad_model())
    got, got_state = _probabilities(_lowbit(graph), chunks, rate)
    assert np.abs(got - want).max() < 1e-4
    # The LSTM cell state grows to |c| ~ 250 over the 249 chunks: within 1e-4 relatively
    # (lowbit accumulates products in float64, ONNX Runtime in float32).
    scale = np.maximum(1.0, np.abs(want_state))
    assert (np.abs(got_state - want_state) / scale).max() < 1e-4
    # The signal is speech where it was placed: the float model says so.
    assert want[speech].mean() > 0.5 and want[~speech].mean() < 0.2, (want, speech)
    # With sr fixed, the If folds to the branch of that rate and computes the same.
    fixed = lowbit.load(silero_vad_model(), fixed_inputs={"sr": rate})
    assert "If" not in fixed.op_histogram()
    folded, _ = _probabilities(_lowbit(fixed), chunks, None)
    assert np.abs(folded - want).max() < 1e-4


@pytest.mark.parametrize("rate", [16000, 8000])
def test_the_default_file_with_lstm_and_nested_ifs_equals_onnx_runtime(rate):
    """silero_vad.onnx, the file silero_vad loads by default: its networks sit in an If on
    the rate, with LSTM layers inside nested Ifs on ranks (torch's export of an RNN)."""
    chunks, _ = _chunks(rate)
    chunks = chunks[:80]
    model = silero_vad_model("silero_vad.onnx")
    want, want_state = _probabilities(_ort(model), chunks, rate)
    got, got_state = _probabilities(_lowbit(lowbit.load(model)), chunks, rate)
    assert np.abs(got - want).max() < 1e-4
    assert (np.abs(got_state - want_state) / np.maximum(1.0, np.abs(want_state))).max() < 1e-4


def test_quantize_dynamic_keeps_speech_probabilities(tmp_path):
    out = tmp_path / "silero.dynamic.onnx"
    r = _cli("quantize", str(silero_vad_model()), "--dynamic", "-o", str(out))
    assert r.returncode == 0, r.stderr
    for scope in ("node_cond__1/then_branch/node_linear ", "node_cond__1/else_branch/"):
        assert scope in r.stdout, r.stdout
    assert "4 nodes compute in integers, 0 in float" in r.stdout
    graph = lowbit.load(silero_vad_model())
    dynamic = quantize_dynamic(graph).graph
    for rate in (16000, 8000):
        chunks, _ = _chunks(rate)
        float_probs, _ = _probabilities(_lowbit(graph), chunks, rate)
        quant_probs, _ = _probabilities(_lowbit(dynamic), chunks, rate)
        # Measured: at most 0.0157 (16 kHz) and 0.0131 (8 kHz), 0.0006 on average.
        assert np.abs(quant_probs - float_probs).max() < 0.02, rate
        assert np.abs(quant_probs - float_probs).mean() < 0.002, rate
        # The exported file, run by ONNX Runtime: its run-time parameters come from float32
        # ONNX ops, so an activation code here and there rounds the other way, and the LSTM
        # state carries that on (measured: 0.0052 at most, 0.0002 on average).
        exported, _ = _probabilities(_ort(out), chunks, rate)
        assert np.abs(exported - quant_probs).max() < 0.01, rate
        assert np.abs(exported - quant_probs).mean() < 0.001, rate
