"""`lowbit quantize --budget`, run as users run it: the chosen model and config are written when
the budget is met, nothing is written (exit status 3) when it cannot be, unless asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from mnist_budget import COARSE, MODEL

import lowbit
from lowbit.cli.demo import bundled

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _lowbit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lowbit", *(str(a) for a in args)],
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": SRC})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("budget_cli")
    x = np.load(bundled("digits.npz"))["images"]
    np.save(folder / "calib.npy", x[:100])
    np.save(folder / "eval.npy", x[200:260])
    COARSE.to_yaml(folder / "coarse.yaml")
    return folder


def _sqnr(graph, quant, x) -> float:
    f = lowbit.run(graph, {"input": x})["logits"].astype(np.float64)
    q = lowbit.run(quant, {"input": x})["logits"].astype(np.float64)
    return float(10 * np.log10((f ** 2).sum() / ((q - f) ** 2).sum()))


def test_a_met_budget_writes_the_model_and_an_editable_config(files):
    out, chosen = files / "mixed.onnx", files / "chosen.yaml"
    base = _lowbit("quantize", MODEL, "-o", str(files / "base.onnx"), "--calib",
                   str(files / "calib.npy"), "--config", str(files / "coarse.yaml"),
                   "--batch-size", "20", "--quiet")
    assert base.returncode == 0, base.stderr
    graph = lowbit.load(MODEL)
    x = np.load(files / "eval.npy")
    threshold = int(_sqnr(graph, lowbit.load(files / "base.onnx"), x)) + 3
    r = _lowbit("quantize", MODEL, "-o", str(out), "--calib", str(files / "calib.npy"),
                "--config", str(files / "coarse.yaml"), "--eval", str(files / "eval.npy"),
                "--budget", f"sqnr>={threshold}", "--config-out", str(chosen),
                "--batch-size", "20")
    assert r.returncode == 0, r.stderr
    assert f"budget sqnr>={threshold} on 3 evaluation batches, 60 samples: met" in r.stdout
    assert "raised" in r.stdout and "size:" in r.stdout
    assert "configurations tried" in r.stdout
    assert _sqnr(graph, lowbit.load(out), x) >= threshold
    rules = yaml.safe_load(chosen.read_text())["rules"]
    assert rules and all(r["precision"] in ("int16", "float") for r in rules)
    # the user edits nothing and quantizes with it: the same model
    again = _lowbit("quantize", MODEL, "-o", str(files / "again.onnx"), "--calib",
                    str(files / "calib.npy"), "--config", str(chosen), "--batch-size", "20",
                    "--quiet")
    assert again.returncode == 0, again.stderr
    assert np.array_equal(lowbit.run(lowbit.load(out), {"input": x})["logits"],
                          lowbit.run(lowbit.load(files / "again.onnx"), {"input": x})["logits"])


def test_an_unreachable_budget_writes_nothing_unless_asked(files):
    out, chosen = files / "never.onnx", files / "never.yaml"
    args = ("quantize", MODEL, "-o", str(out), "--calib", str(files / "calib.npy"), "--eval",
            str(files / "eval.npy"), "--budget", "cosine>=1.5", "--config-out", str(chosen),
            "--batch-size", "20", "--config", str(files / "coarse.yaml"))
    r = _lowbit(*args)
    assert r.returncode == 3
    assert "NOT MET" in r.stdout and "no choice can meet it" in r.stdout
    assert "nothing written" in r.stderr
    assert not out.exists() and not chosen.exists()
    r = _lowbit(*args, "--write-anyway")
    assert r.returncode == 3 and out.exists() and chosen.exists()


@pytest.mark.parametrize("args, words", [
    (("--budget", "sqnr>=30"), "--budget needs evaluation data"),
    (("--eval", "x.npy"), "--eval go with --budget"),
    (("--budget", "speed>=3", "--eval", "x.npy"), "unknown metric 'speed'"),
])
def test_bad_budget_options_are_refused(files, args, words):
    r = _lowbit("quantize", MODEL, "-o", str(files / "bad.onnx"), "--calib",
                str(files / "calib.npy"), *args)
    assert r.returncode == 1 and words in r.stderr
    assert not (files / "bad.onnx").exists()
