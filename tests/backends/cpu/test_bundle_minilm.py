"""all-MiniLM-L6-v2 with lowbit's default dynamic quantization as a standalone C bundle (the
sequence length fixed when the bundle is made, the batch a run-time argument), natively and
for 64-bit ARM under qemu-user: hidden states equal the cpu backend's bit for bit. One padded
pair of texts natively (batch 2, then its first row alone), the first row under qemu (slow).
The kernels it runs allocate nothing: only rt_core.o (contexts and their threads) calls
malloc."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from bundle_tools import build, run

import lowbit
from lowbit.backends import cpu
from lowbit.backends.cpu.bundle import export_bundle
from lowbit.backends.cpu.bundle.targets import host_target
from lowbit.quant.dynamic import quantize_dynamic
from realmodels import minilm, minilm_tokens

pytestmark = pytest.mark.realmodel

NAMES = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def minilm_pair():
    """The dynamic model, a padded pair of texts and the cpu backend's hidden states for the
    pair and for its first row."""
    q = quantize_dynamic(lowbit.load(minilm("eager", "dynamo"))).graph
    enc = minilm_tokens(["Thanks a lot!", "Bundles run the model without Python."])
    exe = cpu.compile(q, threads=2)
    first = {k: v[:1] for k, v in enc.items()}
    return q, enc, exe(enc)["last_hidden_state"], exe(first)["last_hidden_state"]


@pytest.mark.parametrize("target", [host_target().name, "aarch64"])
def test_minilm_dynamic_bundle_equals_the_cpu_backend(minilm_pair, tmp_path, target):
    q, enc, ref_pair, ref_first = minilm_pair
    seq = enc["input_ids"].shape[1]
    bundle = export_bundle(q, tmp_path / "b", target=target, name="minilm", dims={"S": seq})
    print(bundle.summary())
    assert bundle.weight_data_bytes <= 1.1 * bundle.int8_parameter_bytes
    header = (bundle.directory / "minilm.h").read_text()
    assert f"#define MINILM_INPUT0_SHAPE {{-1, {seq}}}" in header
    program = build(bundle)
    nm = "aarch64-linux-gnu-nm" if bundle.target.arch == "aarch64" else "nm"
    for obj in sorted(bundle.directory.glob("rt_*.o")):
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True,
                                   check=True).stdout.split()
        allocating = {"malloc", "calloc", "realloc", "aligned_alloc"} & set(undefined)
        assert obj.name == "rt_core.o" or not allocating, f"{obj.name} calls {allocating}"
    runs = [([enc[k][:1] for k in NAMES], ref_first)]
    if bundle.target.arch != "aarch64":  # qemu is slow: one run there
        runs.insert(0, ([enc[k] for k in NAMES], ref_pair))
    for inputs, ref in runs:
        (got,) = run(bundle, program, inputs, args=("--threads", "2"))
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_lowbit_compile_dynamic_cli(minilm_pair, tmp_path):
    """`lowbit compile --dynamic --dim S=N` quantizes as `lowbit quantize --dynamic` does: the
    same weights as export_bundle of the dynamic graph, byte for byte; a missing --dim is
    refused naming the dimension, before any file is written."""
    q, enc, _, _ = minilm_pair
    model = str(minilm("eager", "dynamo"))
    seq = enc["input_ids"].shape[1]
    out = tmp_path / "cli"
    command = [sys.executable, "-m", "lowbit", "compile", model, "-o", str(out), "--dynamic",
               "--target", "aarch64", "--name", "minilm"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "symbolic dimension 'S'" in done.stderr, done.stderr
    assert not out.exists()
    done = subprocess.run([*command, "--dim", f"S={seq}"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    same = export_bundle(q, tmp_path / "api", target="aarch64", name="minilm", dims={"S": seq})
    assert (out / "minilm.weights").read_bytes() == (same.directory / "minilm.weights").read_bytes()
    assert (out / "minilm.c").read_text() == (same.directory / "minilm.c").read_text()
