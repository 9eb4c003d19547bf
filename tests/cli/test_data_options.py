"""Bad data options (issue 22 point 3): each is refused in one line before any work, or handled
with a note; run in-process through the CLI's main()."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from hostile.harness import run_verb
from lowbit.cli.demo import bundled

MODEL = str(bundled("mnistnet.onnx"))
DIGITS = np.load(bundled("digits.npz"))["images"][:8]


@pytest.fixture
def fast_config(tmp_path) -> str:
    path = tmp_path / "fast.yaml"
    path.write_text("default: {calibration: minmax, weight_rounding: nearest}\n")
    return str(path)


def _refused(outcome, message: str) -> None:
    assert outcome.problem() is None, outcome.problem()
    assert outcome.code == 1, outcome.stdout + outcome.stderr
    error = [line for line in outcome.stderr.splitlines() if line.startswith("lowbit: error:")]
    assert message in error[0], outcome.stderr


def _quantize(tmp_path, *args: str):
    out = tmp_path / "q.onnx"
    return run_verb(["quantize", MODEL, "-o", str(out), *args], output=out), out


def _images(folder: Path, mode: str = "RGB", count: int = 3) -> Path:
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        bands = len(Image.new(mode, (1, 1)).getbands())
        pixels = rng.integers(0, 256, (28, 28, bands), dtype=np.uint8)
        Image.fromarray(pixels.squeeze(-1) if bands == 1 else pixels, mode).save(
            folder / f"img{i}.png")
    return folder


def test_a_0d_calibration_array(tmp_path, fast_config):
    np.save(tmp_path / "x.npy", np.float32(3.0))
    outcome, _ = _quantize(tmp_path, "--calib", str(tmp_path / "x.npy"), "--config",
                             fast_config)
    _refused(outcome, "x.npy: array 'input' is 0-d (a single number); calibration data needs "
                      "a leading axis of samples")


@pytest.mark.parametrize(("size", "message"), [
    (["0", "0"], "--image-size 0 0: each side must be between 1 and 16384"),
    (["-3", "28"], "--image-size -3 28: each side must be between 1"),
    (["28", "100000"], "--image-size 28 100000: each side must be between 1 and 16384"),
])
def test_image_size_out_of_range(tmp_path, fast_config, size, message):
    folder = _images(tmp_path / "imgs", "L")
    outcome, _ = _quantize(tmp_path, "--calib", str(folder), "--image-size", *size,
                           "--config", fast_config)
    _refused(outcome, message)


def test_mean_with_the_wrong_number_of_channels(tmp_path, fast_config):
    folder = _images(tmp_path / "imgs")
    outcome, _ = _quantize(tmp_path, "--calib", str(folder), "--mean", "1", "2", "3",
                           "--config", fast_config)
    _refused(outcome, "--mean has 3 values; images are read as L (1 channel): give 1 value or 1")


def test_a_zero_std(tmp_path, fast_config):
    folder = _images(tmp_path / "imgs")
    outcome, _ = _quantize(tmp_path, "--calib", str(folder), "--std", "0",
                           "--config", fast_config)
    _refused(outcome, "--std 0: divisors must be finite and non-zero")


def test_rgb_images_for_a_one_channel_model_are_read_as_luminance(tmp_path, fast_config):
    folder = _images(tmp_path / "imgs", "RGB")
    outcome, out = _quantize(tmp_path, "--calib", str(folder), "--mean", "33.3", "--std",
                             "78.6", "--config", fast_config, "--quiet")
    assert outcome.code == 0 and outcome.problem() is None, outcome.stderr
    assert "RGB images read as L, the model's 1 channel (--grayscale says so explicitly)" in \
        outcome.stderr
    assert out.exists()
    outcome, _ = _quantize(tmp_path, "--calib", str(folder), "--grayscale", "--config",
                           fast_config, "--quiet")
    assert outcome.code == 0 and "read as" not in outcome.stderr


def test_grayscale_for_a_three_channel_model(tmp_path, fast_config):
    conv = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], name="conv")
    graph = helper.make_graph(
        [conv], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")])
    path = tmp_path / "rgb.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    folder = _images(tmp_path / "imgs", "L")
    out = tmp_path / "q.onnx"
    outcome = run_verb(["quantize", str(path), "-o", str(out), "--calib", str(folder),
                        "--grayscale", "--config", fast_config], output=out)
    _refused(outcome, "--grayscale gives one channel, but the model's input has 3 (NCHW)")
    outcome = run_verb(["quantize", str(path), "-o", str(out), "--calib", str(folder),
                        "--config", fast_config, "--quiet"], output=out)
    assert outcome.code == 0, outcome.stderr
    assert "L images read as RGB, the model's 3 channels" in outcome.stderr


def test_a_file_that_is_not_an_image_is_skipped_with_a_note(tmp_path, fast_config):
    folder = _images(tmp_path / "imgs", "L")
    (folder / "notes.txt").write_text("not an image")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    outcome, _ = _quantize(tmp_path, "--calib", str(folder), "--config", fast_config,
                             "--quiet")
    assert outcome.code == 0 and outcome.problem() is None, outcome.stderr
    assert "skipped notes.txt (not an image file name)" in outcome.stderr
    assert "skipped broken.png (not a readable image" in outcome.stderr
    (folder / "notes.txt").unlink()
    for f in folder.glob("img*.png"):
        f.unlink()
    outcome, _ = _quantize(tmp_path, "--calib", str(folder), "--config", fast_config)
    _refused(outcome, "imgs: no readable images")


@pytest.mark.parametrize("verb", ["quantize", "profile", "run"])
def test_an_output_folder_that_does_not_exist_is_refused_before_any_work(tmp_path, verb):
    np.save(tmp_path / "x.npy", DIGITS)
    out = tmp_path / "missing" / "out.file"
    data = ["--input", str(tmp_path / "x.npy")] if verb == "run" else [
        "--calib", str(tmp_path / "x.npy")]
    flag = "--output" if verb == "run" else "-o"
    outcome = run_verb([verb, MODEL, flag, str(out), *data], output=out)
    _refused(outcome, f"cannot write {out}: folder {out.parent} does not exist; create it first")
    assert "profiling" not in outcome.stderr and not outcome.stdout


def test_an_output_that_is_a_folder(tmp_path):
    np.save(tmp_path / "x.npy", DIGITS)
    outcome = run_verb(["run", MODEL, "--input", str(tmp_path / "x.npy"), "--output",
                        str(tmp_path)])
    _refused(outcome, "it is a folder; give a file name")


def _no_product_model(tmp_path) -> str:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["y"], name="sigmoid")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "no_products.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_dynamic_with_nothing_to_quantize_needs_allow_float(tmp_path):
    model = _no_product_model(tmp_path)
    out = tmp_path / "d.onnx"
    outcome = run_verb(["quantize", model, "--dynamic", "-o", str(out)], output=out)
    _refused(outcome, "nothing to quantize with dynamic quantization (MatMul and Gemm "
                      "products): the model has no node it applies to. Nothing was written; "
                      "pass --allow-float")
    outcome = run_verb(["quantize", model, "--dynamic", "-o", str(out), "--allow-float"])
    assert outcome.code == 0 and out.exists(), outcome.stderr


def test_dynamic_with_every_product_kept_float(tmp_path):
    config = tmp_path / "float.yaml"
    config.write_text("rules:\n  - op_type: Gemm\n    precision: float\n")
    out = tmp_path / "d.onnx"
    outcome = run_verb(["quantize", MODEL, "--dynamic", "-o", str(out), "--config",
                        str(config)], output=out)
    _refused(outcome, "2 node(s) stay float: /classifier/classifier.0/Gemm (Gemm): config: "
                      "precision float")


def test_static_with_nothing_to_quantize_needs_allow_float(tmp_path):
    model = _no_product_model(tmp_path)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(4, 4)).astype(
        np.float32))
    config = tmp_path / "float.yaml"
    config.write_text("default: {precision: float}\n")
    out = tmp_path / "q.onnx"
    outcome = run_verb(["quantize", model, "-o", str(out), "--calib", str(tmp_path / "x.npy"),
                        "--config", str(config)], output=out)
    _refused(outcome, "nothing to quantize with static quantization: 2 node(s) stay float")


def test_a_config_rule_with_an_unknown_op_type(tmp_path):
    config = tmp_path / "q.yaml"
    config.write_text("rules:\n  - op_type: Convolution\n    precision: float\n")
    out = tmp_path / "d.onnx"
    outcome = run_verb(["quantize", MODEL, "--dynamic", "-o", str(out), "--config",
                        str(config)], output=out)
    _refused(outcome, "rules[0]: op_type 'Convolution' is not an op lowbit knows")
