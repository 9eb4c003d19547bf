"""Models quantized by PyTorch's `quantize_dynamic` (imported by `lowbit.from_torch`) on the cpu
backend: the import's standard-op form of fbgemm's activation parameters becomes one
TorchDynamicQuantize per input and its erf-form GELU one TorchGelu (backends/cpu/
torch_products), whose reference results equal the original ops' bit for bit; compiled, they
equal the reference's bits on every ISA path, for all-MiniLM-L6-v2 too."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.backends.cpu.executable import rewrite_imported_products
from lowbit.backends.cpu.torch_products import rewrite_torch_gelus, rewrite_torch_quantizers
from lowbit.errors import UnsupportedError
from realmodels import MINILM_TEXTS, minilm_module, minilm_tokens

NAMES = ["input_ids", "attention_mask", "token_type_ids"]


def _quantized(model, per_channel: bool = True):
    import torch

    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig if per_channel else \
        torch.ao.quantization.default_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization announces its move to torchao
        return torch.ao.quantization.quantize_dynamic(model.eval(), {torch.nn.Linear: qconfig},
                                                      dtype=torch.qint8)


@pytest.fixture(scope="module", params=[True, False], ids=["per-channel", "per-tensor"])
def mlp(request):
    """An MLP with a GELU, quantized by PyTorch and imported, and inputs that reach every
    branch of fbgemm's parameter choice (zero, tiny, huge ranges, empty, NaN, inf)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 4, bias=False))
    q = _quantized(model, request.param)
    graph = lowbit.from_torch(q, (torch.randn(2, 16),), dynamic_axes={"input_0": {0: "n"}})
    rng = np.random.default_rng(1)
    feeds = [(rng.standard_normal((n, 16)) * size).astype(np.float32)
             for size in (0.0, 1e-40, 1e-6, 1e-3, 1.0, 300.0, 1e30) for n in (0, 1, 5, 700)]
    for special in (np.nan, np.inf, -np.inf):
        x = rng.standard_normal((3, 16)).astype(np.float32)
        x[1, 3] = special
        feeds.append(x)
    return q, graph, feeds


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_rewrites_keep_the_reference_bits(mlp):
    q, graph, feeds = mlp
    ops = graph.op_histogram()
    assert ops["IsInf"] == ops["ReduceMin"] == 3 and ops["Erf"] == 1
    rewritten = rewrite_imported_products(graph)
    ops = rewritten.op_histogram()
    assert ops["TorchDynamicQuantize"] == 3 and ops["DynamicMatMul"] == 3
    assert ops["TorchGelu"] == 1
    assert not {"IsInf", "ReduceMin", "ReduceMax", "Where", "Erf", "Round"} & set(ops)
    for x in feeds:
        want = lowbit.run(graph, {"input_0": x})[graph.outputs[0].name]
        got = lowbit.run(rewritten, {"input_0": x})[graph.outputs[0].name]
        assert _same(got, want), x.shape
    import torch

    x = feeds[18]  # 5 rows of ordinary values: PyTorch computes what the graph computes
    want = lowbit.run(graph, {"input_0": x})[graph.outputs[0].name]
    with torch.no_grad():
        ref = q(torch.from_numpy(x)).numpy()
    assert np.abs(want - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("isa", ISAS)
def test_mlp_runs_bit_exact_on_every_isa(mlp, isa):
    _, graph, feeds = mlp
    exe = cpu.compile(graph, isa=isa, threads=2)
    for x in feeds:
        want = lowbit.run(graph, {"input_0": x})[graph.outputs[0].name]
        assert _same(exe({"input_0": x})[graph.outputs[0].name], want), x.shape
    steps = " ".join(exe.compiled()[0].steps)
    assert steps.count("TorchDynamicQuantize") == 3 and "TorchGelu" in steps


def test_a_changed_parameter_rule_is_left_alone(mlp):
    """A graph whose activation-parameter ops differ from the import's (one constant changed)
    is not rewritten: the cpu backend names the ops it lacks instead of running other
    arithmetic."""
    _, graph, _ = mlp
    edited = graph.copy()
    node = next(n for n in edited.nodes if n.name.endswith("_small_f"))
    node.attrs["value"] = np.array(7e-5, np.float32)
    assert rewrite_torch_quantizers(edited).op_histogram()["TorchDynamicQuantize"] == 2
    with pytest.raises(UnsupportedError, match="IsInf"):
        cpu.compile(edited, threads=1)({"input_0": np.ones((2, 16), np.float32)})
    gelu = graph.copy()
    half = next(n for n in gelu.nodes if n.op_type == "Mul" and n.inputs[1] is not None
                and n.inputs[1].is_constant and n.inputs[1].const_value.size == 1
                and float(n.inputs[1].const_value) == 0.5)
    half.inputs[1] = gelu.add_constant(np.ones((1, 1, 1), np.float32), "half_of_rank_3",
                                       before=half)
    assert "TorchGelu" not in rewrite_torch_gelus(gelu).op_histogram()  # broadcasts: rank 3


@pytest.fixture(scope="module")
def minilm_torch():
    import torch

    q = _quantized(minilm_module("eager"))
    example = minilm_tokens(["Ok", "A longer sentence about quantization."])
    graph = lowbit.from_torch(q, tuple(torch.from_numpy(example[k]) for k in NAMES),
                              input_names=NAMES,
                              dynamic_axes={k: {0: "B", 1: "S"} for k in NAMES})
    return q, graph


@pytest.mark.realmodel
@pytest.mark.parametrize("isa", ISAS)
def test_minilm_from_pytorch_runs_bit_exact(minilm_torch, isa):
    """One text, a 130-token text (where fbgemm's 7-bit codes are most fragile) and a padded
    batch of three: the reference's bits; every Linear a dynamic product; one compiled program
    for all three shapes (the import's shapes name the sequence length everywhere)."""
    import torch

    q, graph = minilm_torch
    exe = cpu.compile(graph, isa=isa, threads=2)
    for enc in (minilm_tokens(["Ok"]), minilm_tokens([MINILM_TEXTS[2]]),
                minilm_tokens(["Thanks a lot!", "The cat sat on the mat.", MINILM_TEXTS[1]])):
        want = next(iter(lowbit.run(graph, enc).values()))
        got = next(iter(exe(enc).values()))
        assert _same(got, want), enc["input_ids"].shape
    assert len(exe.compiled()) == 1  # one program for every batch and sequence length
    steps = exe.compiled()[0].steps
    assert sum("DynamicMatMul" in s for s in steps) == 36
    assert sum("TorchDynamicQuantize" in s for s in steps) == 24  # Q, K and V share one
    assert sum("TorchGelu" in s for s in steps) == 6
    enc = minilm_tokens(["Thanks a lot!"])
    with torch.no_grad():
        ref = q(*(torch.from_numpy(enc[k]) for k in NAMES)).numpy()
    assert np.abs(next(iter(exe(enc).values())) - ref).max() <= 1e-3


@pytest.fixture(scope="module")
def gelu_case():
    """One TorchGelu node, 400 000 values over every range its kernels treat apart (the
    portable span's series below |x / sqrt 2| = 2 and up to 4, the AVX-512 span's 8 intervals
    of width 1/2, +-1 beyond 4, values at and around the borders, subnormals, zeros of both
    signs, NaN and infinities) and the reference's results."""
    from lowbit.ir import dtypes
    from lowbit.ir.graph import Graph
    from lowbit.ir.types import TensorType
    from lowbit.ops.registry import QUANT_DOMAIN

    graph = Graph("gelu")
    x = graph.add_input("x", TensorType(dtypes.FLOAT32, ("n",)))
    node = graph.make_node("TorchGelu", [x], {"divisor": float(np.float32(np.sqrt(2))),
                                              "one": 1.0, "half": 0.5}, domain=QUANT_DOMAIN,
                           output_types=[TensorType(dtypes.FLOAT32, ("n",))])
    graph.outputs = [node.output]
    rng = np.random.default_rng(7)
    borders = np.arange(1, 9, dtype=np.float32) / 2 * np.float32(np.sqrt(2))
    near = np.array([np.nextafter(b, np.float32(d)) for b in borders for d in (0, 9)])
    values = np.concatenate([
        rng.standard_normal(200_000).astype(np.float32) * 3,
        rng.uniform(-7, 7, 200_000).astype(np.float32),
        np.array([0.0, -0.0, 1e-45, -1e-45, 1e-38, 3e38, -3e38, np.inf, -np.inf, np.nan],
                 np.float32), borders, -borders, near, -near]).astype(np.float32)
    return graph, values, lowbit.run(graph, {"x": values})[node.output.name]


@pytest.mark.parametrize("isa", ISAS)
def test_torch_gelu_kernel_equals_the_reference_everywhere(gelu_case, isa):
    graph, values, want = gelu_case
    exe = cpu.compile(graph, isa=isa, threads=2)
    assert _same(exe({"x": values})[graph.outputs[0].name], want)


@pytest.mark.parametrize("isa", ISAS)
def test_torch_dynamic_quantize_kernel_equals_the_reference(isa):
    """TorchDynamicQuantize alone (codes, scale and zero point as graph outputs) on sizes from
    empty to several tasks' worth, all-zero, tiny, huge, one-signed, NaN and inf tensors."""
    from lowbit.ir import dtypes
    from lowbit.ir.graph import Graph
    from lowbit.ir.types import TensorType
    from lowbit.ops.registry import QUANT_DOMAIN

    graph = Graph("tdq")
    x = graph.add_input("x", TensorType(dtypes.FLOAT32, ("n",)))
    node = graph.make_node("TorchDynamicQuantize", [x], {"reduce_range": 1},
                           domain=QUANT_DOMAIN, num_outputs=3,
                           output_types=[TensorType(dtypes.UINT8, ("n",)),
                                         TensorType(dtypes.FLOAT32, ()),
                                         TensorType(dtypes.UINT8, ())])
    graph.outputs = list(node.outputs)
    exe = cpu.compile(graph, isa=isa, threads=2)
    rng = np.random.default_rng(5)
    cases = [rng.standard_normal(n).astype(np.float32) * s
             for n in (0, 1, 17, 70_000, 300_001) for s in (1.0, 1e-7, 1e33)]
    cases += [np.zeros(9, np.float32), np.abs(cases[10]), -np.abs(cases[10]),
              np.full(5, 1e-45, np.float32)]
    for special in (np.nan, np.inf, -np.inf):
        c = rng.standard_normal(100_000).astype(np.float32)
        c[77_777] = special
        cases.append(c)
    for c in cases:
        want = lowbit.run(graph, {"x": c})
        got = exe({"x": c})
        for v in graph.outputs:
            assert _same(np.asarray(got[v.name]), np.asarray(want[v.name])), (c.size, v.name)
