"""Static int8 quantization of MiniLM with default settings: it keeps its embeddings, ONNX
Runtime runs its export with the same first-block codes, and it keeps its scores on
human-labelled text."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from quant_checks import int8_codes
from shared_profiles import shared_profile, shared_result, source_digest
from test_realmodel_dynamic import TEXTS, _embed_each, float_reference

import lowbit
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.ir.hashing import graph_hash
from lowbit.quant.static import quantize
from realmodels import (
    MINILM_CALIBRATION_TEXTS,
    lee_documents,
    lee_pearson,
    minilm,
    minilm_tokens,
    polarity_probe,
    polarity_sentences,
)

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def minilm_static():
    """MiniLM and its static quantization with default settings, calibrated on 24 texts."""
    graph = lowbit.load(minilm("eager", "dynamo"))
    calib = [minilm_tokens([t]) for t in MINILM_CALIBRATION_TEXTS]
    return graph, quantize(graph, shared_profile(graph, calib))


def test_minilm_static_defaults_keep_embeddings(tmp_path, minilm_static):
    """MiniLM statically quantized with default settings, as a new user would (calibrated on 24
    short and long texts): all 36 Linear layers and 12 attention products compute in int8;
    the residual Adds and bias Adds before the LayerNorms stay float (only float nodes read
    them), the products before them return float from their accumulators, the products
    reading a LayerNorm are smoothed, the products before an integer bias Add and the GELUs'
    inputs keep int16 results. Measured embedding cosines to float: 0.986 ("Ok"), 0.984,
    0.996, 0.995 (with int16_before_bias and int16_before_table off: 0.978, 0.971, 0.993,
    0.989; every node in integers: 0.62-0.85; ONNX Runtime's quantize_static per channel: 0.75
    mean on single words, benchmarks/static_vs_onnxruntime.py).

    ONNX Runtime runs the QDQ export; its float requantization rounds a few codes the other way
    (0.04-0.4 % of the first layer's codes, one code apart), and 8-bit attention amplifies such
    one-code differences over six layers (the last layers agree on about half their codes, the
    embeddings to 0.98), so agreement is checked where the two start from the same inputs:
    every int8 value of the first attention block within one code."""
    graph, result = minilm_static
    rows = result.summary.rows
    products = [r for r in rows if r.op_type == "MatMul"]
    assert len(products) == 48 and all(r.mode == "int8" for r in products)
    assert sum("smoothed" in r.detail for r in products) == 24  # Q, K, V, FFN up
    # int16_before_bias: Q, K, V and FFN up round once, after their bias Adds
    assert sum("int16 result (its only reader adds a constant bias" in r.detail
               for r in products) == 24
    # int16_before_table: the six GELU inputs (FFN up + bias) are int16, 65536-entry tables
    assert sum(r.mode == "int16" and "only lookup tables read it" in r.detail
               for r in rows) == 6
    kept = [r for r in rows if r.op_type == "Add" and r.mode == "float"]
    assert len(kept) >= 24 and all("only float nodes read its result" in r.detail
                                   for r in kept)
    ref = float_reference(graph)
    got = _embed_each(lambda e: lowbit.run(result.graph, e)["last_hidden_state"], TEXTS)
    cos = (ref * got).sum(1)
    assert cos.min() >= 0.975 and cos.mean() >= 0.985, cos

    lowbit.save(result.graph, tmp_path / "q.onnx", format="qdq")
    enc = minilm_tokens([TEXTS[1]])
    ours = {}

    def keep(node, outputs):
        for v, a in zip(node.outputs, outputs, strict=False):
            ours[v.name] = np.asarray(a)

    Interpreter(result.graph, [keep])(enc)
    model = onnx.load(tmp_path / "q.onnx")
    first_block = []
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and first_block:
            break  # the first attention block ends at its residual LayerNorm
        first_block += [o for o in node.output if o in ours and ours[o].dtype == np.int8]
    assert len(first_block) >= 12
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in first_block)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    theirs = session.run(first_block, {k: enc[k] for k in names})
    for name, values in zip(first_block, theirs, strict=True):
        diff = np.abs(int8_codes(values) - ours[name].astype(np.int64))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.95, (name, (diff == 0).mean())


def cpu_hidden_states(graph, checked: list[str]):
    """A function from MiniLM's inputs to `graph`'s last_hidden_state on the compiled cpu backend,
    after checking that it equals the reference interpreter's bit for bit on the `checked` texts
    (measured equal for the float and the int8 model; the 250 texts of the human-label test
    took about 10 minutes with the reference under load, one compiled run 0.03-0.25 s)."""
    run = lowbit.compile(graph, "cpu")
    for text in checked:
        enc = minilm_tokens([text])
        np.testing.assert_array_equal(run(enc)["last_hidden_state"],
                                      lowbit.run(graph, enc)["last_hidden_state"])
    return lambda e: run(e)["last_hidden_state"]


def test_minilm_static_defaults_keep_scores_on_human_labels(minilm_static):
    """What the embeddings are for, on real human labels (gensim's test data): the Lee
    documents' similarities against human judgements (float Pearson r 0.656, ../shared/EVAL.md)
    and a sentiment probe trained on the float embeddings of 200 labelled sentences, applied to
    the quantized model's (10-fold). Measured: r 0.663 against 0.656, probe 74.0 % against
    74.5 % (one sentence); ONNX Runtime's quantize_static per channel loses 0.058 and 3 points
    (benchmarks/static_vs_onnxruntime.py)."""
    graph, result = minilm_static
    docs, sims = lee_documents()
    sentences, labels = polarity_sentences()

    def float_embeddings():
        float_model = cpu_hidden_states(graph, [docs[0], sentences[0]])
        return _embed_each(float_model, docs), _embed_each(float_model, sentences)

    # the float model's, computed once while lowbit's sources stay the same (shared_profiles)
    float_docs, ref = shared_result(float_embeddings, "MiniLM float embeddings",
                                    source_digest(), graph_hash(graph), docs, sentences)
    int8_model = cpu_hidden_states(result.graph, [docs[0], sentences[0]])
    float_r = lee_pearson(float_docs, sims)
    assert abs(float_r - 0.656) < 0.005, float_r
    assert abs(lee_pearson(_embed_each(int8_model, docs), sims) - float_r) <= 0.02
    float_acc = polarity_probe(ref, ref, labels)
    int8_acc = polarity_probe(ref, _embed_each(int8_model, sentences), labels)
    assert float_acc >= 0.7, float_acc
    assert int8_acc >= float_acc - 0.015, (float_acc, int8_acc)  # at most 3 sentences
