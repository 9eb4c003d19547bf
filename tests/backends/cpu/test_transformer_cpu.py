"""all-MiniLM-L6-v2 with lowbit's default dynamic quantization on the cpu backend: bit for bit
the reference's hidden states on every ISA path, for one text, long texts and padded batches,
from one compiled program; so the embeddings' cosines to float and the Lee Pearson figure are
the reference's."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.quant.dynamic import quantize_dynamic
from realmodels import MINILM_TEXTS, lee_documents, lee_pearson, minilm, minilm_tokens

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def minilm_dynamic():
    return quantize_dynamic(lowbit.load(minilm("eager", "dynamo"))).graph


def _embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    e = (hidden * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


@pytest.mark.parametrize("isa", ISAS)
def test_minilm_dynamic_is_bit_exact_at_every_size(minilm_dynamic, isa):
    exe = cpu.compile(minilm_dynamic, isa=isa, threads=2)
    feeds = [minilm_tokens(["Ok"]), minilm_tokens([MINILM_TEXTS[2]]),
             minilm_tokens(["Thanks a lot!", "The cat sat on the mat.", MINILM_TEXTS[1]])]
    for enc in feeds:
        ref = lowbit.run(minilm_dynamic, enc)["last_hidden_state"]
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
