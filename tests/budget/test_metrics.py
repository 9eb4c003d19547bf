"""Budgets: parsing, and the built-in metrics' values from per-sample records against direct
formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lowbit import Budget
from lowbit.errors import InputError


def test_parse_reads_the_three_metrics_and_percentages():
    assert Budget.parse("agreement>=0.97").threshold == 0.97
    assert Budget.parse(" agreement >= 97% ").threshold == pytest.approx(0.97)
    assert Budget.parse("sqnr>=30").metric == "sqnr"
    assert Budget.parse("cosine>=0.9995").threshold == 0.9995


@pytest.mark.parametrize("text, words", [
    ("agreement", "METRIC>=VALUE"),
    ("accuracy>=0.9", "unknown metric 'accuracy'"),
    ("sqnr<=30", "must reach a value"),
    ("sqnr>=30%", "only agreement takes a percentage"),
    ("cosine>=abc", "METRIC>=VALUE"),
])
def test_parse_refuses_what_it_cannot_read(text, words):
    with pytest.raises(InputError, match=words):
        Budget.parse(text)


def test_user_metrics_are_checked():
    with pytest.raises(InputError, match="reduce"):
        Budget(lambda q, f: 1.0, 0.5, reduce="median")
    with pytest.raises(InputError, match="lower bound"):
        Budget("sqnr", 30, at_most=True)
    assert Budget(lambda q, f: 1.0, 0.1, at_most=True).met(0.05)
    assert not Budget("sqnr", 30).met(float("nan"))


def _outputs(rng, n=6, classes=5):
    f = rng.normal(size=(n, classes))
    q = f + rng.normal(scale=0.4, size=f.shape)
    return {"logits": f}, {"logits": q}


def test_agreement_is_the_share_of_rows_with_the_same_top_index():
    rng = np.random.default_rng(0)
    b = Budget.parse("agreement>=0.5")
    pairs = [_outputs(rng) for _ in range(4)]
    records = np.concatenate([b.records(f, q) for f, q in pairs])
    direct = np.mean([(f["logits"].argmax(1) == q["logits"].argmax(1)).mean() for f, q in pairs])
    assert b.value(records) == pytest.approx(direct)
    assert 0 < direct < 1
    risk = b.risk(records)
    agree = np.concatenate([f["logits"].argmax(1) == q["logits"].argmax(1) for f, q in pairs])
    assert np.all((risk < 0) == ~agree)


def test_sqnr_sums_signal_and_noise_over_everything():
    rng = np.random.default_rng(1)
    b = Budget.parse("sqnr>=10")
    pairs = [_outputs(rng) for _ in range(3)]
    records = np.concatenate([b.records(f, q) for f, q in pairs])
    f = np.concatenate([p[0]["logits"] for p in pairs])
    q = np.concatenate([p[1]["logits"] for p in pairs])
    assert b.value(records) == pytest.approx(10 * math.log10((f ** 2).sum() /
                                                             ((q - f) ** 2).sum()))
    assert b.value(b.records(pairs[0][0], pairs[0][0])) == math.inf


def test_cosine_is_the_smallest_per_sample_cosine():
    rng = np.random.default_rng(2)
    b = Budget.parse("cosine>=0.9")
    f, q = _outputs(rng)
    cos = (f["logits"] * q["logits"]).sum(1) / np.linalg.norm(f["logits"], axis=1) / \
        np.linalg.norm(q["logits"], axis=1)
    assert b.value(b.records(f, q)) == pytest.approx(cos.min())
    zero = {"logits": np.zeros((2, 3))}
    assert b.value(b.records(zero, zero)) == 1.0


def test_a_batch_without_a_common_leading_axis_is_one_sample():
    b = Budget.parse("cosine>=0.9")
    f = {"a": np.ones((2, 3)), "b": np.ones((3,))}
    assert b.records(f, f).shape == (1, 3)


def test_a_per_sample_user_metric_reduces_its_scores():
    def first(q, f):
        return q["y"][:, 0]

    b = Budget(first, 0.0, reduce="min")
    records = np.concatenate([b.records({"y": np.array([[1.0], [2.0]])},
                                        {"y": np.array([[-3.0], [0.5]])})])
    assert b.value(records) == -3.0
    assert b.per_sample and not Budget(lambda q, f: 1.0, 0).per_sample
