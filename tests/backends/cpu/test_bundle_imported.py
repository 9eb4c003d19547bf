"""Standalone C bundles of other tools' dynamic files: ONNX Runtime's `quantize_dynamic` MiniLM
(DynamicQuantizeLinear + MatMulInteger) and a PyTorch `quantize_dynamic` model imported by
`lowbit.from_torch` go through the cpu backend's rewrites (integer_products, torch_products)
into bundles, natively and for 64-bit ARM under qemu-user, with the cpu backend's bits (which
are the reference's, tests/backends/cpu/test_torch_dynamic_cpu.py and test_transformer_cpu.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from bundle_tools import build, run

import lowbit
from lowbit.backends import cpu
from lowbit.backends.cpu.bundle import export_bundle
from lowbit.backends.cpu.bundle.targets import host_target
from realmodels import minilm, minilm_tokens

NAMES = ("input_ids", "attention_mask", "token_type_ids")
TARGETS = [host_target().name, "aarch64"]


@pytest.mark.realmodel
@pytest.mark.parametrize("target", TARGETS)
def test_onnxruntime_dynamic_minilm_bundle(tmp_path, target):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = tmp_path / "ort.onnx"
    quantize_dynamic(str(minilm("eager", "dynamo")), str(path), per_channel=True,
                     weight_type=QuantType.QInt8)
    graph = lowbit.load(path)
    enc = minilm_tokens(["Thanks a lot!"])
    want = cpu.compile(graph, threads=2)(enc)["last_hidden_state"]
    bundle = export_bundle(graph, tmp_path / "b", target=target, name="ortmini",
                           dims={"S": enc["input_ids"].shape[1]})
    assert "DynamicMatMul" in (bundle.directory / "ortmini.c").read_text()
    (got,) = run(bundle, build(bundle), [enc[k] for k in NAMES], args=("--threads", "2"))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_pytorch_dynamic_mlp_bundle(torch_module, tmp_path, target):
    torch = torch_module
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        graph = lowbit.from_torch(q, (torch.randn(2, 16),),
                                  dynamic_axes={"input_0": {0: "n"}})
    x = (np.random.default_rng(3).standard_normal((5, 16)) * 2).astype(np.float32)
    want = cpu.compile(graph, threads=2)({"input_0": x})[graph.outputs[0].name]
    bundle = export_bundle(graph, tmp_path / "b", target=target, name="torchmlp")
    source = (bundle.directory / "torchmlp.c").read_text()
    assert "lb_torch_dq_run" in source and "lb_torch_gelu" in source
    (got,) = run(bundle, build(bundle), [x], args=("--threads", "2"))
    np.testing.assert_array_equal(got, want)


@pytest.fixture
def torch_module():
    import torch

    return torch
