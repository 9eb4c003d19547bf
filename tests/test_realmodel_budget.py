"""Quantizing a real model to an accuracy budget (lowbit.budget): EfficientNet-Lite0 on the real
photos meets `agreement>=0.97` with at most 3 layers raised, chosen by `lowbit quantize
--budget` alone. The figure is measured again here, from the config the search writes.
MiniLM's budgets: test_realmodel_budget_minilm.py (a file of its own, so that pytest-xdist
runs the two long searches side by side)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from shared_profiles import shared_cpu_outputs, shared_profile

import lowbit
from lowbit.cli import main
from lowbit.quant.config import QuantConfig
from realmodels import efficientnet, load_photos

pytestmark = pytest.mark.realmodel


def test_efficientnet_meets_agreement_097_with_at_most_3_layers_raised(tmp_path, capsys):
    """`lowbit quantize --budget` run in this process (tests/budget/test_budget_cli.py runs it
    as a subprocess, tests/cli/test_cli.py `lowbit profile`), on the profile every
    EfficientNet-Lite0 test shares (tests/shared_profiles.py), saved as `lowbit profile`
    writes it; latency is measured by tests/budget/test_search.py, not here."""
    photos = load_photos()
    calib = np.arange(0, len(photos), 3)
    rest = np.setdiff1d(np.arange(len(photos)), calib)
    np.save(tmp_path / "eval.npy", photos[rest])
    model = efficientnet(True)
    graph = lowbit.load(model)
    shared_profile(graph, [{"input": photos[i:i + 1]} for i in calib]).save(
        tmp_path / "profile.yaml")
    status = main(["quantize", str(model), "--profile", str(tmp_path / "profile.yaml"),
                   "--eval", str(tmp_path / "eval.npy"), "--budget", "agreement>=0.97",
                   "--config-out", str(tmp_path / "chosen.yaml"), "-o",
                   str(tmp_path / "mixed.onnx"), "--quiet", "--no-latency"])
    out = capsys.readouterr()
    assert status == 0, out.out + out.err
    assert f"budget agreement>=0.97 on {len(rest)} evaluation batches: met" in out.out
    config = QuantConfig.from_yaml(tmp_path / "chosen.yaml")
    raised = yaml.safe_load((tmp_path / "chosen.yaml").read_text())["rules"]
    assert 1 <= len(raised) <= 3, out.out
    assert f"raised {len(raised)} of " in out.out
    assert "size: " in out.out and "latency: not measured (asked not to)" in out.out
    # the figure, measured again from the written config
    prof = lowbit.Profile.load(tmp_path / "profile.yaml", graph)
    float_top1 = shared_cpu_outputs(graph, photos).argmax(1)  # shared with other files
    mixed = lowbit.quantize(graph, prof, config)
    # the cpu backend, as the search ran it: bit-exact with the reference interpreter on
    # quantized models (tests/backends/cpu; checked here on one photo), ~8x faster on this one
    # (its int16 layers) than the reference on the 58 photos
    run_mixed = lowbit.compile(mixed, "cpu")
    logits = np.concatenate([run_mixed({"input": photos[i:i + 1]})["logits"] for i in rest])
    np.testing.assert_array_equal(logits[:1], lowbit.run(mixed, {"input": photos[rest[:1]]})[
        "logits"])
    agree = np.mean(logits.argmax(1) == float_top1[rest])
    assert agree >= 0.97
    assert f"chosen: {agree:.2%}" in out.out
    assert (tmp_path / "mixed.onnx").exists()
