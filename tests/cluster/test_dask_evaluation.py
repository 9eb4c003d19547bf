"""Sensitivity and the budget search on the same real Dask LocalCluster (2 worker processes) as
the profiles: the layers' ranking, every configuration's measured value and the configuration
chosen are those of one process, the progress is shown, and `lowbit quantize --dask` writes
the same model and config as a run without it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from shared_profiles import shared_profile

import lowbit
from lowbit import Budget
from lowbit.cli.demo import bundled

SRC = str(Path(__file__).resolve().parents[2] / "src")

COARSE = lowbit.QuantConfig().with_default(weight_rounding="nearest", calibration="minmax",
                                           per_channel=False, bias_correction=False)
"""Per-tensor weights rounded to nearest: errors large enough for budgets to need raising."""


@pytest.fixture(scope="module")
def setup(mnist):
    graph, x = mnist
    prof = shared_profile(graph, [{"input": x[i:i + 50]} for i in range(0, 200, 50)],
                          moments=False)
    return graph, prof, [{"input": x[i:i + 10]} for i in range(200, 300, 10)]


def _sqnr(graph, quant, data) -> float:
    f = np.concatenate([lowbit.run(graph, b)["logits"] for b in data]).astype(np.float64)
    q = np.concatenate([lowbit.run(quant, b)["logits"] for b in data]).astype(np.float64)
    return 10 * math.log10((f ** 2).sum() / ((q - f) ** 2).sum())


def test_sensitivity_on_the_cluster_equals_one_process(client, setup):
    graph, prof, data = setup
    here = lowbit.sensitivity(graph, data[:4], profile=prof, config=COARSE, progress=False)
    there = lowbit.sensitivity(graph, data[:4], profile=prof, config=COARSE, progress=False,
                               client=client)
    assert len(here.layers) == 4
    assert [(s.name, s.sqnr, s.cosine) for s in there.layers] == [
        (s.name, s.sqnr, s.cosine) for s in here.layers]


def test_the_budget_search_on_the_cluster_chooses_what_one_process_does(client, setup, capsys):
    graph, prof, data = setup
    base = _sqnr(graph, lowbit.quantize(graph, prof, COARSE), data)
    budget = Budget("sqnr", math.floor(base) + 3.0, data)
    here = lowbit.quantize_to_budget(graph, budget, profile=prof, config=COARSE,
                                     progress=False, latency=False)
    capsys.readouterr()
    there = lowbit.quantize_to_budget(graph, budget, profile=prof, config=COARSE,
                                      progress=True, latency=False, client=client)
    shown = " ".join(capsys.readouterr().err.split())  # rich wraps lines at 80 columns
    assert here.met and there.met and there.raised == here.raised and here.raised
    assert (there.before, there.after) == (here.before, here.after)
    assert [(t.raised, t.value, t.batches_run) for t in there.trials] == [
        (t.raised, t.value, t.batches_run) for t in here.trials]
    assert _sqnr(graph, there.graph, data) >= budget.threshold
    # progress: every configuration tried is reported as it is measured
    assert "ranking 4 layers by sensitivity" in shown
    assert shown.count(": meets sqnr>=") + shown.count(": misses sqnr>=") == len(there.trials)


def test_cli_quantize_with_a_budget_on_a_local_cluster_writes_the_same_files(setup, tmp_path):
    graph, _, _ = setup
    x = np.load(bundled("digits.npz"))["images"]
    np.save(tmp_path / "calib.npy", x[:100])
    np.save(tmp_path / "eval.npy", x[200:260])
    COARSE.to_yaml(tmp_path / "coarse.yaml")
    base = lowbit.quantize(graph, lowbit.profile(
        graph, [{"input": x[i:i + 20]} for i in range(0, 100, 20)], progress=False), COARSE)
    threshold = int(_sqnr(graph, base, [{"input": x[200:260]}])) + 3
    env = {**os.environ, "PYTHONPATH": SRC}
    outputs = []
    for extra in ([], ["--dask", "local:2"]):
        out = tmp_path / f"mixed{len(extra)}.onnx"
        chosen = tmp_path / f"chosen{len(extra)}.yaml"
        r = subprocess.run(
            [sys.executable, "-m", "lowbit", "quantize", bundled("mnistnet.onnx"), "-o",
             str(out), "--calib", str(tmp_path / "calib.npy"), "--config",
             str(tmp_path / "coarse.yaml"), "--eval", str(tmp_path / "eval.npy"), "--budget",
             f"sqnr>={threshold}", "--config-out", str(chosen), "--batch-size", "20",
             "--no-latency", *extra], capture_output=True, text=True, env=env, timeout=900)
        assert r.returncode == 0, r.stderr
        assert f"budget sqnr>={threshold} on 3 evaluation batches, 60 samples: met" in r.stdout
        outputs.append((out.read_bytes(), chosen.read_text()))
    assert outputs[0] == outputs[1]
    assert "rules:" in outputs[0][1]
