"""The budget search on the bundled MNISTNet: it meets a budget with a set of raised layers no
smaller subset of which meets it, says so when nothing is raised, never claims a budget it did
not meet, and takes a metric of the user's own."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mnist_budget import COARSE
from quant_checks import float_outputs

import lowbit
from lowbit import Budget, BudgetNotMet
from lowbit.budget.candidates import Quantizer
from lowbit.quant.config import QuantConfig


def _sqnr(graph, quant, data) -> float:
    f = np.concatenate([float_outputs(graph, b)["logits"] for b in data]).astype(np.float64)
    q = np.concatenate([lowbit.run(quant, b)["logits"] for b in data]).astype(np.float64)
    return 10 * math.log10((f ** 2).sum() / ((q - f) ** 2).sum())


@pytest.fixture(scope="module")
def searched(mnist):
    graph, prof, data = mnist
    base = _sqnr(graph, lowbit.quantize(graph, prof, COARSE), data)
    budget = Budget("sqnr", math.floor(base) + 3.0, data)
    return base, budget, lowbit.quantize_to_budget(graph, budget, profile=prof, config=COARSE,
                                                   progress=False)


def test_the_budget_is_met_on_every_batch_and_the_figures_are_true(mnist, searched):
    graph, prof, data = mnist
    base, budget, result = searched
    assert result.met and result.raised
    assert result.before == pytest.approx(base, abs=1e-9)
    measured = _sqnr(graph, result.graph, data)
    assert measured >= budget.threshold
    assert result.after == pytest.approx(measured, abs=1e-9)
    # the chosen config, as written for the user, quantizes to the same model
    again = lowbit.quantize(graph, prof, QuantConfig.from_yaml_text(result.config.to_yaml()))
    assert _sqnr(graph, again, data) == pytest.approx(measured, abs=1e-12)
    text = result.text()
    assert "met" in text and f"{base:.2f} dB" in text and f"{measured:.2f} dB" in text
    for name, rung in result.raised.items():
        assert f"{name}" in text and f"-> {rung}" in text
    assert "size:" in text
    # latency measured on the compiled cpu backend, for the chosen, as-given and float models
    assert result.costs is not None and set(result.costs.latency) == {"chosen", "as given",
                                                                      "float"}
    assert all(t > 0 for t in result.costs.latency.values())
    assert "latency (cpu backend, median of 15 runs" in text


def test_no_raised_layer_can_be_dropped_or_lowered(mnist, searched):
    graph, prof, data = mnist
    _, budget, result = searched
    q = Quantizer(graph, COARSE, prof)
    for name in result.raised:
        fewer = {k: v for k, v in result.raised.items() if k != name}
        assert _sqnr(graph, q.quantize(fewer).graph, data) < budget.threshold, name
        if result.raised[name] == "float":
            lower = {**result.raised, name: "int16"}
            assert _sqnr(graph, q.quantize(lower).graph, data) < budget.threshold, name


def test_a_budget_the_config_meets_raises_nothing(mnist, searched):
    graph, prof, data = mnist
    base, _, _ = searched
    result = lowbit.quantize_to_budget(graph, Budget("sqnr", base - 1, data), profile=prof,
                                       config=COARSE, progress=False, latency=False)
    assert result.met and result.raised == {} and len(result.trials) == 1
    assert "nothing raised" in result.text()


def test_an_unreachable_budget_is_never_claimed(mnist):
    graph, prof, data = mnist
    budget = Budget.parse("cosine>=1.01", data)
    result = lowbit.quantize_to_budget(graph, budget, profile=prof, config=COARSE,
                                       progress=False)
    assert not result.met and result.graph is None
    assert "NOT MET" in result.text() and "no choice can meet it" in result.text()
    with pytest.raises(BudgetNotMet, match=r"cosine>=1\.01"):
        lowbit.quantize(graph, prof, COARSE, budget=budget, progress=False)


def test_a_user_metric_over_all_the_data(mnist):
    """Accuracy against the labels: a budget above the float model's own accuracy cannot be
    met (the search measures every layer raised to float); one at it can."""
    graph, prof, data = mnist
    from lowbit.cli.demo import bundled

    labels = np.load(bundled("digits.npz"))["labels"][200:300]

    def accuracy(quantized, reference):
        top = np.concatenate([o["logits"].argmax(1) for o in quantized])
        return float((top == labels).mean())

    float_accuracy = accuracy([float_outputs(graph, b) for b in data], None)
    above = Budget(accuracy, float_accuracy + 0.01, data)
    result = lowbit.quantize_to_budget(graph, above, profile=prof, config=COARSE,
                                       progress=False)
    assert not result.met and "with all 4 layers raised to float" in result.reason
    at = Budget(accuracy, float_accuracy, data)
    graph_q = lowbit.quantize(graph, prof, COARSE, budget=at, progress=False)
    assert accuracy([lowbit.run(graph_q, b) for b in data], None) >= float_accuracy


def test_dynamic_quantization_keeps_products_in_float(mnist):
    graph, _, data = mnist
    base = lowbit.quantize_dynamic(graph, QuantConfig().with_default(granularity="tensor"))
    cos = Budget.parse("cosine>=0.9", data)
    records = np.concatenate([cos.records(float_outputs(graph, b), lowbit.run(base, b))
                              for b in data])
    worst = cos.value(records)
    budget = Budget("cosine", 1 - (1 - worst) / 4, data)
    result = lowbit.quantize_to_budget(graph, budget, dynamic=True, progress=False,
                                       config=QuantConfig().with_default(granularity="tensor"))
    assert result.met and result.raised and set(result.raised.values()) == {"float"}
    records = np.concatenate([cos.records(float_outputs(graph, b),
                                          lowbit.run(result.graph, b))
                              for b in data])
    assert cos.value(records) >= budget.threshold
    # the cpu backend has no dynamic products yet: the summary says so instead of timing
    assert result.costs is not None
    assert result.costs.latency or "no kernel for: DynamicMatMul" in result.text()
