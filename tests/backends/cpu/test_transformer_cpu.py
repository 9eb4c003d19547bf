"""all-MiniLM-L6-v2 with lowbit's default dynamic quantization on the cpu backend: bit for bit
the reference's hidden states on every ISA path, for one text, long texts and padded batches,
from one compiled program; so the embeddings' cosines to float and the Lee Pearson figure are
the reference's."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import PRODUCT_ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.errors import InputError
from lowbit.quant.dynamic import quantize_dynamic
from realmodels import (
    MINILM_TEXTS,
    lee_documents,
    lee_pearson,
    minilm,
    minilm_path,
    minilm_tokens,
)

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def minilm_dynamic():
    return quantize_dynamic(lowbit.load(minilm("eager", "dynamo"))).graph


def _embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    e = (hidden * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def reference_sizes(minilm_dynamic):
    """One text, a long text and a padded batch, with the reference's hidden states on them
    (computed once for every ISA path)."""
    feeds = [minilm_tokens(["Ok"]), minilm_tokens([MINILM_TEXTS[2]]),
             minilm_tokens(["Thanks a lot!", "The cat sat on the mat.", MINILM_TEXTS[1]])]
    return [(enc, lowbit.run(minilm_dynamic, enc)["last_hidden_state"]) for enc in feeds]


@pytest.mark.parametrize("isa", PRODUCT_ISAS)
def test_minilm_dynamic_is_bit_exact_at_every_size(minilm_dynamic, reference_sizes, isa):
    exe = cpu.compile(minilm_dynamic, isa=isa, threads=2)
    for enc, ref in reference_sizes:
        got = exe(enc)["last_hidden_state"]
        np.testing.assert_array_equal(got, ref)
    assert len(exe.compiled()) == 1  # one program for every batch and sequence length


def test_minilm_dynamic_lee_pearson_equals_the_reference(minilm_dynamic):
    """Six Lee documents (the reference takes about 10 s a document; the benchmark scores all
    50 with both): embeddings equal, so the Pearson figure over them is the reference's."""
    docs, sims = lee_documents()
    pick = [0, 1, 2, 3, 4, 5]
    docs, sims = [docs[i] for i in pick], sims[np.ix_(pick, pick)]
    exe = cpu.compile(minilm_dynamic, threads=2)
    ref, got = [], []
    for doc in docs:  # one at a time: no padding, so the reference runs each at its length
        enc = minilm_tokens([doc])
        ref.append(_embedding(lowbit.run(minilm_dynamic, enc)["last_hidden_state"],
                              enc["attention_mask"]))
        got.append(_embedding(exe(enc)["last_hidden_state"], enc["attention_mask"]))
    ref, got = np.concatenate(ref), np.concatenate(got)
    np.testing.assert_array_equal(got, ref)
    assert lee_pearson(got, sims) == lee_pearson(ref, sims)


@pytest.fixture(scope="module")
def minilm_cpu(minilm_dynamic):
    return cpu.compile(minilm_dynamic, threads=2)


def _feed(**changes):
    enc = minilm_tokens(["The cat sat on the mat."])
    enc.update(changes)
    return enc


@pytest.mark.parametrize("name, value, message", [
    ("input_ids", 30522, "input 'input_ids' holds 30522 at position (0, 3), outside [-30522, "
                         "30522)"),
    ("input_ids", -30523, "input 'input_ids' holds -30523 at position (0, 3)"),
    ("token_type_ids", 2, "input 'token_type_ids' holds 2 at position (0, 3), outside [-2, 2)"),
])
def test_minilm_ids_outside_the_tables_name_the_input(minilm_cpu, name, value, message):
    ids = _feed()[name].copy()
    ids[0, 3] = value
    with pytest.raises(InputError) as err:
        minilm_cpu(_feed(**{name: ids}))
    assert message in str(err.value)


@pytest.mark.parametrize("shape, message", [
    ((1, 5), "dimension 'S' is 5 in input 'attention_mask' but"),
    ((2, 9), "dimension 'B' is 2 in input 'attention_mask' but 1 in input 'input_ids'"),
    ((1, 9, 1), "attention_mask"),
])
def test_minilm_mask_of_the_wrong_shape_names_the_input(minilm_cpu, shape, message):
    assert _feed()["input_ids"].shape == (1, 9)
    with pytest.raises(InputError) as err:
        minilm_cpu(_feed(attention_mask=np.ones(shape, np.int64)))
    assert message in str(err.value)


def test_minilm_sequence_longer_than_the_position_table(minilm_cpu):
    """513 tokens: refused before any kernel runs, naming the inputs and the 512 positions;
    512 tokens of real text run, the embedding's cosine to the float model's (ONNX Runtime)
    above 0.999 (0.99974 measured; one word repeated 512 times measured 0.9987, 0.9986 with a
    float position table: the int8 word table's error on that one row, repeated)."""
    import onnxruntime as ort

    def tokens(n):
        return {"input_ids": np.full((1, n), 2023, np.int64),
                "attention_mask": np.ones((1, n), np.int64),
                "token_type_ids": np.zeros((1, n), np.int64)}

    with pytest.raises(InputError) as err:
        minilm_cpu(tokens(513))
    text = str(err.value)
    assert "'input_ids' axis 1" in text and "513 is more than the model holds, at most 512" in text
    from transformers import AutoTokenizer

    docs, _ = lee_documents()
    enc = AutoTokenizer.from_pretrained(minilm_path())([" ".join(docs[:6])], truncation=True,
                                                       max_length=512, return_tensors="np")
    enc = {k: np.asarray(enc[k], np.int64) for k in ("input_ids", "attention_mask",
                                                     "token_type_ids")}
    assert enc["input_ids"].shape == (1, 512)
    got = _embedding(minilm_cpu(enc)["last_hidden_state"], enc["attention_mask"])
    session = ort.InferenceSession(str(minilm("eager", "dynamo")),
                                   providers=["CPUExecutionProvider"])
    ref = _embedding(session.run(None, enc)[0], enc["attention_mask"])
    assert float((got * ref).sum()) > 0.999


def test_minilm_dynamic_file_is_at_most_25_mb(minilm_dynamic, tmp_path):
    """The word and position tables in int8 per column (47 MB of float words before): the
    file with its external data holds at most 25 MB (24.6 MB measured)."""
    lowbit.save(minilm_dynamic, tmp_path / "q.onnx")
    files = list(tmp_path.iterdir())
    assert sum(f.stat().st_size for f in files) <= 25_000_000, [(f.name, f.stat().st_size)
                                                                 for f in files]
    steps = cpu.compile(minilm_dynamic, threads=1).compiled()[0].steps
    assert any("Dequantize" in s for s in steps)  # the compiled program gathers int8 rows


@pytest.mark.parametrize("per_channel", [True, False])
def test_onnxruntime_quantize_dynamic_minilm_runs_bit_exact(tmp_path, per_channel):
    """ONNX Runtime's own dynamic MiniLM (DynamicQuantizeLinear + MatMulInteger + Cast, int8
    weights per channel or per tensor, int8 word table) on the cpu backend: the reference's
    bits, every MatMulInteger computed by the dynamic product kernel, one compiled program."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic

    path = tmp_path / "ort.onnx"
    ort_quantize_dynamic(str(minilm("eager", "dynamo")), str(path), per_channel=per_channel,
                         weight_type=QuantType.QInt8)
    graph = lowbit.load(path)
    exe = cpu.compile(graph, threads=2)
    for enc in (minilm_tokens(["Ok"]),
                minilm_tokens(["Thanks a lot!", "The cat sat on the mat.", MINILM_TEXTS[1]])):
        ref = lowbit.run(graph, enc)["last_hidden_state"]
        np.testing.assert_array_equal(exe(enc)["last_hidden_state"], ref)
    assert len(exe.compiled()) == 1  # one program for every batch and sequence length
    steps = exe.compiled()[0].steps
    assert sum("DynamicMatMul" in s for s in steps) == 36
    assert sum("DynamicQuantizeLinear" in s for s in steps) == 24
