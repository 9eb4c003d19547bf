"""lowbit.from_torch: a PyTorch module computes the same in lowbit."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

import lowbit
from lowbit.errors import UnsupportedError


def small(torch):
    """conv -> batch norm -> ReLU -> mean -> linear."""

    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            return self.fc(y.mean(dim=(2, 3)))

    return Small()


def test_module_matches_pytorch_with_dynamic_batch(torch):
    torch.manual_seed(0)
    model = small(torch).eval()
    graph = lowbit.from_torch(model, (torch.randn(2, 3, 8, 8),), input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "N"}})
    assert graph.inputs[0].type.shape == ("N", 3, 8, 8)
    assert "BatchNormalization" not in graph.op_histogram()  # folded into the conv
    x = np.random.default_rng(0).normal(size=(5, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(lowbit.run(graph, {"x": x})["y"], ref, rtol=1e-4, atol=1e-5)


def test_missing_torch_is_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("no torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(UnsupportedError, match=r"pip install torch==2\.13\.0"):
        lowbit.from_torch(object(), ())
