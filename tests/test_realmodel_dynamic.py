"""MiniLM (all-MiniLM-L6-v2) dynamically quantized with default settings: sentence embeddings
stay close to float on very short, short and long inputs, every Linear layer computes in
integers, and ONNX Runtime runs the export with the same embeddings."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from shared_profiles import shared_result, source_digest

import lowbit
from lowbit.ir.hashing import graph_hash
from lowbit.quant.config import QuantConfig
from lowbit.quant.dynamic import quantize_dynamic
from realmodels import MINILM_TEXTS, minilm, minilm_tokens

TEXTS = ["Ok", "Thanks a lot!", "The cat sat on the mat.", MINILM_TEXTS[2]]


def _embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    e = (hidden * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _embed_each(run, texts):
    out = []
    for t in texts:
        enc = minilm_tokens([t])
        out.append(_embedding(run(enc), enc["attention_mask"])[0])
    return np.array(out)


def float_reference(graph) -> np.ndarray:
    """The float model's embeddings of TEXTS on the reference interpreter, computed once for
    every test and file while lowbit's sources stay the same (shared_profiles.shared_result)."""
    return shared_result(
        lambda: _embed_each(lambda e: lowbit.run(graph, e)["last_hidden_state"], TEXTS),
        "MiniLM float reference embeddings", source_digest(), graph_hash(graph), TEXTS)


def test_minilm_dynamic_defaults_keep_embeddings(tmp_path):
    graph = lowbit.load(minilm("eager", "dynamo"))
    result = quantize_dynamic(graph)
    weights = [r for r in result.summary.rows if "weights" in r.detail]
    assert len(weights) == 36 and all(r.mode == "int8" for r in weights)
    # and the 12 attention products and 2 embedding tables (words, positions: int8 per column)
    assert len(result.summary.integer_nodes) == 50
    tables = [r for r in result.summary.rows if r.op_type == "Gather"]
    assert [r.detail for r in tables] == ["int8 table per column (30522 rows)",
                                          "int8 table per column (512 rows)"]
    assert sum("GELU channels" in r.detail for r in weights) == 6  # the FFN down projections
    ref = float_reference(graph)
    got = _embed_each(lambda e: lowbit.run(result.graph, e)["last_hidden_state"], TEXTS)
    cos = (ref * got).sum(1)
    # measured: 0.99945 ("Ok"), 0.99925, 0.99988, 0.99969 in groups of 32 (per row, the old
    # default: 0.9971, 0.9965, 0.9995, 0.9994); the issue asks a mean of 0.999 over each kind
    # of text, held here by every text
    assert cos.min() >= 0.999, cos
    rows = quantize_dynamic(graph, QuantConfig().with_default(granularity="row")).graph
    per_row = _embed_each(lambda e: lowbit.run(rows, e)["last_hidden_state"], TEXTS[:2])
    assert np.all((ref[:2] * per_row).sum(1) < cos[:2] - 0.001)  # groups are what helps
    lowbit.save(result.graph, tmp_path / "q.onnx")
    session = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    via_ort = _embed_each(lambda e: session.run(None, {k: e[k] for k in names})[0], TEXTS)
    # ONNX Runtime's float ops round differently in places, so a few codes flip and the
    # difference compounds over 6 layers (0.99983 measured on the long texts, 1.0 on the
    # others); one layer agrees to 1e-5 (tests/quant/test_dynamic.py)
    assert (via_ort * got).sum(1).min() >= 0.999


def test_minilm_sensitivity_names_products_whose_float_keeping_helps():
    """lowbit.sensitivity ranks MiniLM's 48 integer products on three short texts; the config it
    writes, the three most sensitive in float, brings every test text closer to float."""
    graph = lowbit.load(minilm("eager", "dynamo"))
    ranked = lowbit.sensitivity(graph, [minilm_tokens([t]) for t in TEXTS[:3]], dynamic=True,
                                progress=False)
    assert len(ranked.layers) == 48 and ranked.mode == "dynamic"
    assert ranked.layers[0].sqnr < ranked.layers[-1].sqnr
    assert ranked.all_quantized_sqnr < ranked.layers[0].sqnr
    ref = float_reference(graph)
    cos = {}
    for top in (0, 3):
        q = quantize_dynamic(graph, ranked.config(top))
        assert len(q.summary.float_nodes) == top
        assert {r.name for r in q.summary.float_nodes} == {s.name for s in ranked.layers[:top]}
        # the cpu backend: the reference's bits (checked here on the first text; every text
        # and size of the defaults: tests/backends/cpu/test_transformer_cpu.py), in far less
        # time than the reference on the long text
        run = _cpu_hidden(q.graph)
        first = minilm_tokens(TEXTS[:1])
        np.testing.assert_array_equal(run(first), lowbit.run(q.graph, first)[
            "last_hidden_state"])
        got = _embed_each(run, TEXTS)
        cos[top] = (ref * got).sum(1)
    # figures over 210 texts: benchmarks/sensitivity_real_models.py
    assert cos[3].mean() > cos[0].mean() and cos[3].min() > cos[0].min(), cos


def test_minilm_long_repetitive_input_keeps_its_embedding():
    """256 tokens of one repeated word: attention puts a sink on [CLS]/[SEP] and spreads the
    rest evenly, the case where per-row codes of P·V lose most (cosine 0.983 per row, below the
    issue's 0.99 minimum); groups of 32 keys keep it (measured 0.99943)."""
    graph = lowbit.load(minilm("eager", "dynamo"))
    text = [" ".join(["word"] * 300)]
    short = minilm_tokens([" ".join(["word"] * 40)])
    # on the cpu backend: the reference's bits for the float model and both quantizations
    # (checked here on 42 tokens of the same word; the defaults at every size:
    # tests/backends/cpu/test_transformer_cpu.py), the reference taking ~6 s a run on 256
    run = _cpu_hidden(graph)
    np.testing.assert_array_equal(run(short), lowbit.run(graph, short)["last_hidden_state"])
    ref = _embed_each(run, text)
    cos = {}
    for label, cfg in (("group", QuantConfig()),
                       ("row", QuantConfig().with_default(granularity="row"))):
        q = quantize_dynamic(graph, cfg).graph
        run = _cpu_hidden(q)
        np.testing.assert_array_equal(run(short), lowbit.run(q, short)["last_hidden_state"])
        got = _embed_each(run, text)
        cos[label] = float((ref * got).sum())
    assert cos["group"] >= 0.999 and cos["row"] < 0.99, cos


def _cpu_hidden(graph):
    """A function of the tokens giving `graph`'s last hidden state on the cpu backend."""
    exe = lowbit.compile(graph, "cpu")
    return lambda enc: exe(enc)["last_hidden_state"]
