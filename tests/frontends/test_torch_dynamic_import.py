"""Models quantized by PyTorch's `quantize_dynamic` (qint8 Linear) come in through
`lowbit.from_torch` with their int8 weights, scales and zero points unchanged, and compute what
PyTorch (fbgemm) computes: the same 7-bit activation codes, hence results equal to float
rounding."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from realmodels import MINILM_TEXTS, minilm_module, minilm_tokens

QCONFIGS = {"per-tensor": "default_dynamic_qconfig",
            "per-channel": "per_channel_dynamic_qconfig"}
"""torch.ao.quantization's qconfig of each scheme."""


def _quantized(torch, model, scheme):
    qconfig = getattr(torch.ao.quantization, QCONFIGS[scheme])
    with pytest.warns(Warning):  # torch.ao.quantization announces its move to torchao
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear: qconfig},
                                                      dtype=torch.qint8)


def _int8_constants(graph):
    return [n.attrs["value"] for n in graph.nodes
            if n.op_type == "Constant" and n.attrs["value"].dtype == np.int8 and
            n.attrs["value"].ndim == 2]


@pytest.mark.parametrize("scheme", list(QCONFIGS))
def test_mlp_keeps_weights_and_matches_pytorch_at_every_scale(torch, scheme):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8), torch.nn.Linear(8, 4, bias=False))
    q = _quantized(torch, model.eval(), scheme)
    graph = lowbit.from_torch(q, (torch.randn(2, 16),), dynamic_axes={"input_0": {0: "n"}})
    weights = _int8_constants(graph)
    expected = [m.weight().int_repr().numpy().T for m in q if hasattr(m, "weight")]
    assert len(weights) == len(expected) == 3
    for w, e in zip(weights, expected, strict=True):
        assert np.array_equal(w, e)
    # tiny inputs take fbgemm's smallest-scale branch, all-zero rows its zero-range one
    for size in (0.0, 1e-6, 1e-3, 1.0, 300.0):
        x = torch.randn(6, 16) * size
        ref = q(x).detach().numpy()
        got = next(iter(lowbit.run(graph, {"input_0": x.numpy()}).values()))
        assert np.abs(got - ref).max() <= 1e-6 * max(np.abs(ref).max(), 1e-30), size


@pytest.mark.realmodel
def test_minilm_from_pytorch_quantize_dynamic(torch):
    model = minilm_module("eager")
    q = _quantized(torch, model, "per-channel")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = minilm_tokens(["Ok", "A longer sentence about quantization."])
    graph = lowbit.from_torch(q, tuple(torch.from_numpy(example[k]) for k in names),
                              input_names=names,
                              dynamic_axes={k: {0: "B", 1: "S"} for k in names})
    weights = _int8_constants(graph)
    linears = [m for name, m in q.named_modules()
               if isinstance(m, torch.ao.nn.quantized.dynamic.Linear) and "pooler" not in name]
    assert len(linears) == 36 and len(weights) == 36  # the unused pooler is dropped
    expected = {m.weight().int_repr().numpy().T.tobytes() for m in linears}
    assert {w.tobytes() for w in weights} == expected
    for text in ["Ok", "Thanks a lot!"]:
        enc = minilm_tokens([text])
        with torch.no_grad():
            ref = q(*(torch.from_numpy(enc[k]) for k in names)).numpy()
        got = lowbit.run(graph, {k: enc[k] for k in names})
        assert np.abs(next(iter(got.values())) - ref).max() <= 1e-3, text
    # On a 130-token text, fbgemm's 7-bit per-tensor codes flip wherever lowbit's float32
    # Softmax (a defined evaluation within 1.5e-6, lowbit.numerics.elementary) and PyTorch's
    # differ by an ulp at a rounding boundary, and the flips cascade through six layers: the
    # two land as far from each other as PyTorch's own quantization lands from float. So the
    # long text checks that lowbit loses what PyTorch loses, token by token.
    enc = minilm_tokens([MINILM_TEXTS[2]])
    feeds = tuple(torch.from_numpy(enc[k]) for k in names)
    with torch.no_grad():
        ref, fp = q(*feeds).numpy(), model(*feeds).numpy()
    got = next(iter(lowbit.run(graph, {k: enc[k] for k in names}).values()))
    lowbit_cos, torch_cos = _token_cosines(got, fp), _token_cosines(ref, fp)
    assert abs(lowbit_cos.mean() - torch_cos.mean()) < 0.01, (lowbit_cos.mean(), torch_cos.mean())
    assert lowbit_cos.min() > torch_cos.min() - 0.03, (lowbit_cos.min(), torch_cos.min())


def _token_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
