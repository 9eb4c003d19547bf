"""The `lowbit` command, run as users run it: in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import lowbit as lb
from lowbit.cli.demo import bundled
from lowbit.quant.config import QuantConfig
from lowbit.quant.dynamic import quantize_dynamic

SRC = str(Path(__file__).resolve().parents[2] / "src")


def lowbit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "lowbit", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


MODEL = str(bundled("mnistnet.onnx"))


def test_inspect_shows_types_ops_and_parameters():
    r = lowbit("inspect", MODEL, "--nodes")
    assert r.returncode == 0, r.stderr
    assert "input: f32<N x 1 x 28 x 28>" in r.stdout
    assert "Conv                     2" in r.stdout
    assert "parameters: 421,642" in r.stdout
    assert "= Gemm(" in r.stdout


@pytest.mark.parametrize("verb", ["inspect", "run", "profile", "quantize", "compare", "bench",
                                  "demo"])
def test_every_verb_help_shows_an_example(verb):
    r = lowbit(verb, "--help")
    assert r.returncode == 0 and "example:" in r.stdout


def test_run_writes_outputs(tmp_path):
    x = np.load(bundled("digits.npz"))["images"][:3]
    np.save(tmp_path / "x.npy", x)
    r = lowbit("run", MODEL, "--input", f"input={tmp_path / 'x.npy'}", "--output",
               str(tmp_path / "out.npz"))
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "out.npz")["logits"].shape == (3, 10)


def test_run_takes_several_inputs_after_one_flag_or_from_an_npz(tmp_path):
    from onnx import TensorProto, helper

    two = helper.make_model(helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["y"])], "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(two, tmp_path / "two.onnx")
    a, b = np.array([5.0, 1.0], np.float32), np.array([2.0, 3.0], np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.savez(tmp_path / "ab.npz", a=a, b=b)
    np.savez(tmp_path / "abc.npz", a=a, b=b, c=b)
    for inputs in ([f"a={tmp_path / 'a.npy'}", f"b={tmp_path / 'b.npy'}"],
                   [str(tmp_path / "ab.npz")]):
        out = tmp_path / "out.npz"
        r = lowbit("run", str(tmp_path / "two.onnx"), "--input", *inputs, "--output", str(out))
        assert r.returncode == 0, r.stderr
        assert np.array_equal(np.load(out)["y"], a - b)
        out.unlink()
    r = lowbit("run", str(tmp_path / "two.onnx"), "--input", str(tmp_path / "abc.npz"))
    assert r.returncode == 1 and "abc.npz" in r.stderr and "c are not inputs" in r.stderr


def test_quantize_writes_a_model_onnxruntime_runs(tmp_path):
    data = np.load(bundled("digits.npz"))
    np.save(tmp_path / "calib.npy", data["images"][:64])
    out = tmp_path / "q.onnx"
    r = lowbit("quantize", MODEL, "-o", str(out), "--calib", str(tmp_path / "calib.npy"),
               "--format", "qoperator", "--assert-all-quantized")
    assert r.returncode == 0, r.stderr
    assert "7 nodes compute in integers, 0 in float" in r.stdout
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert "QLinearConv" in ops
    import onnxruntime as ort

    y = ort.InferenceSession(str(out)).run(None, {"input": data["images"][64:128]})[0]
    assert (y.argmax(1) == data["labels"][64:128]).mean() > 0.95


@pytest.mark.parametrize("moments", [True, False])
def test_profile_then_quantize_with_the_profile(tmp_path, moments):
    np.save(tmp_path / "calib.npy", np.load(bundled("digits.npz"))["images"][:32])
    prof = tmp_path / "p.yaml"
    r = lowbit("profile", MODEL, "--calib", str(tmp_path / "calib.npy"), "-o", str(prof),
               *(() if moments else ("--no-moments",)))
    assert r.returncode == 0, r.stderr
    assert ("products: {}" not in prof.read_text()) == moments
    r = lowbit("quantize", MODEL, "--profile", str(prof), "-o", str(tmp_path / "q.onnx"),
               "--per-tensor")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "q.onnx").exists()
    assert ("GPTQ rounding" in r.stdout) == moments
    assert ("rounded to nearest: the profile has no input moments" in r.stdout) != moments


def test_profile_backend_option_picks_what_runs_the_batches(tmp_path):
    """--backend reference writes the interpreter's profile, the default (auto) the cpu
    backend's: each equal, byte for byte, to the Python API's with that backend."""
    import lowbit as api

    images = np.load(bundled("digits.npz"))["images"][:32]
    np.save(tmp_path / "calib.npy", images)
    graph = api.load(MODEL)
    for option, backend in ((("--backend", "reference"), "reference"), ((), "cpu")):
        out = tmp_path / f"{backend}.yaml"
        r = lowbit("profile", MODEL, "--calib", str(tmp_path / "calib.npy"), "-o", str(out),
                   *option)
        assert r.returncode == 0, r.stderr
        mine = tmp_path / f"{backend}-api.yaml"
        batches = [{"input": images[i:i + 8]} for i in range(0, 32, 8)]  # the CLI's 8
        api.profile(graph, batches, progress=False, backend=backend).save(mine)
        assert out.read_bytes() == mine.read_bytes(), backend


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "missing.onnx", "missing.onnx"),
    (lambda d: (d / "r.onnx").write_bytes(os.urandom(300)) and d / "r.onnx", "r.onnx"),
    (lambda d: (d / "e.onnx").write_bytes(b"") or d / "e.onnx", "e.onnx"),
])
def test_bad_model_is_one_line_error(tmp_path, make, expected):
    path = make(tmp_path)
    r = lowbit("inspect", str(path))
    assert r.returncode == 1
    assert r.stderr.startswith("lowbit: error:") and expected in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_input_spec_and_shape_are_refused(tmp_path):
    r = lowbit("run", MODEL, "--input", "nonsense=missing.npy")
    assert r.returncode == 1 and "missing.npy" in r.stderr
    np.save(tmp_path / "bad.npy", np.zeros((2, 3, 28, 28), np.float32))
    r = lowbit("run", MODEL, "--input", f"input={tmp_path / 'bad.npy'}", "--output",
               str(tmp_path / "o.npz"))
    assert r.returncode == 1 and "input 'input'" in r.stderr
    assert not (tmp_path / "o.npz").exists()


def test_quantize_refusals_write_nothing(tmp_path):
    out = tmp_path / "q.onnx"
    nan = np.zeros((4, 1, 28, 28), np.float32)
    nan[0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    r = lowbit("quantize", MODEL, "-o", str(out), "--calib", str(tmp_path / "nan.npy"))
    assert r.returncode == 1 and "NaN" in r.stderr and not out.exists()
    (tmp_path / "q.yaml").write_text("rules:\n  - name: no_such_node\n    precision: float\n")
    np.save(tmp_path / "ok.npy", np.zeros((4, 1, 28, 28), np.float32))
    r = lowbit("quantize", MODEL, "-o", str(out), "--calib", str(tmp_path / "ok.npy"),
               "--config", str(tmp_path / "q.yaml"))
    assert r.returncode == 1 and "no_such_node" in r.stderr and not out.exists()
    r = lowbit("quantize", MODEL, "-o", str(out), "--calib", str(tmp_path / "ok.npy"),
               "--calibration", "magic")
    assert r.returncode == 2 and "magic" in r.stderr


def test_calibration_batches_follow_a_fixed_batch_dimension(tmp_path):
    """A model fixed at batch 1 calibrates from a stack of samples without --batch-size (a batch
    of 8 would not fit it); an explicit size that does not fit, or a size below 1, is refused."""
    model = onnx.load(MODEL)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    fixed = tmp_path / "batch1.onnx"
    onnx.save(model, fixed)
    np.save(tmp_path / "calib.npy", np.load(bundled("digits.npz"))["images"][:5])
    out = tmp_path / "q.onnx"
    r = lowbit("quantize", str(fixed), "-o", str(out), "--calib", str(tmp_path / "calib.npy"))
    assert r.returncode == 0, r.stderr
    assert out.exists()
    out.unlink()
    r = lowbit("quantize", str(fixed), "-o", str(out), "--calib", str(tmp_path / "calib.npy"),
               "--batch-size", "4")
    assert r.returncode == 1 and "(4, 1, 28, 28)" in r.stderr and not out.exists()
    r = lowbit("quantize", MODEL, "-o", str(out), "--calib", str(tmp_path / "calib.npy"),
               "--batch-size", "0")
    assert r.returncode == 1 and "--batch-size" in r.stderr and not out.exists()


def test_demo_runs_offline():
    """The README's main job: float and int8 accuracy on 300 held-out digits (measured: 99.67 %
    both), the int8 model run on the compiled cpu backend (bit-exact with the reference) and
    its export checked in ONNX Runtime, both timed beside the float model."""
    r = lowbit("demo")
    assert r.returncode == 0, r.stderr
    found = re.search(r"accuracy   float ([\d.]+)%   int8 ([\d.]+)%", r.stdout)
    assert found, r.stdout
    float_acc, int_acc = map(float, found.groups())
    assert float_acc >= 99.0 and int_acc >= float_acc - 0.34, (float_acc, int_acc)  # one digit
    agree = re.search(r"top-1 agreement with lowbit ([\d.]+)%", r.stdout)
    assert agree and float(agree.group(1)) >= 99.0, r.stdout
    assert re.search(r"ONNX Runtime latency, batch 1   float [\d.]+ ms   int8 [\d.]+ ms",
                     r.stdout), r.stdout
    assert "int8 logits bit-exact with the reference interpreter" in r.stdout, r.stdout
    assert re.search(r"cpu backend latency, batch 1   float [\d.]+ ms   int8 [\d.]+ ms",
                     r.stdout), r.stdout


def test_dynamic_quantize_writes_a_model_onnxruntime_runs(tmp_path):
    out = tmp_path / "q.onnx"
    config = tmp_path / "q.yaml"
    config.write_text("default:\n  granularity: row\nrules:\n  - op_type: Gemm\n"
                      "    per_channel: false\n")
    r = lowbit("quantize", MODEL, "--dynamic", "-o", str(out), "--config", str(config),
               "--assert-all-quantized")
    assert r.returncode == 0, r.stderr
    assert "per-tensor weights" in r.stdout and "wrote" in r.stdout
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert "MatMulInteger" in ops
    x = np.load(bundled("digits.npz"))["images"][:8]
    got = ort.InferenceSession(str(out)).run(None, {"input": x})[0]
    cfg = QuantConfig.from_yaml(config)
    want = lb.run(quantize_dynamic(lb.load(MODEL), cfg).graph, {"input": x})["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert (got.argmax(1) == lb.run(lb.load(MODEL), {"input": x})["logits"].argmax(1)).all()


def test_dynamic_refuses_calibration_data_and_writes_nothing(tmp_path):
    out = tmp_path / "q.onnx"
    r = lowbit("quantize", MODEL, "--dynamic", "-o", str(out), "--calib", "x.npy")
    assert r.returncode != 0 and "--dynamic needs no calibration data" in r.stderr
    assert not out.exists()
