"""`lowbit run --backend cpu` and `lowbit bench` (the compiled cpu backend from the CLI)."""

from __future__ import annotations

import numpy as np

from lowbit.cli import main
from lowbit.cli.demo import bundled


def test_run_on_the_cpu_backend_gives_the_reference_outputs(tmp_path, capsys):
    x = np.random.default_rng(0).random((3, 1, 28, 28)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for backend in ("reference", "cpu"):
        out = tmp_path / f"{backend}.npz"
        assert main(["run", str(bundled("mnistnet.onnx")), "--input", str(tmp_path / "x.npy"),
                     "--backend", backend, "--threads", "2", "--output", str(out)]) == 0
        with np.load(out) as data:
            outs[backend] = data["logits"]
    np.testing.assert_allclose(outs["cpu"], outs["reference"], rtol=1e-5, atol=1e-6)
    assert "logits: float32 [3, 10]" in capsys.readouterr().out


def test_bench_prints_latency_percentiles_and_throughput(capsys):
    assert main(["bench", str(bundled("mnistnet.onnx")), "--backend", "cpu", "--batch", "4",
                 "--threads", "1", "--runs", "10"]) == 0
    text = capsys.readouterr().out
    assert "batch 4, cpu, 1 threads" in text
    assert "p50" in text and "p99" in text and "items/s" in text


def test_bench_refuses_bad_options(capsys):
    assert main(["bench", str(bundled("mnistnet.onnx")), "--batch", "0"]) == 1
    assert "--batch and --runs must be at least 1" in capsys.readouterr().err
    assert main(["run", str(bundled("mnistnet.onnx")), "--backend", "cpu", "--threads", "0",
                 "--input", "x.npy"]) == 1
