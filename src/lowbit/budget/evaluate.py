"""Scoring quantized graphs against the float model on the evaluation data, batch by batch.

The float model runs once on every batch (`Evaluator.reference`). A quantized graph is then
scored on any set of batches: per-sample records for a per-sample metric (every built-in
metric, and a user metric with `reduce`), the outputs themselves for a whole-data user metric.
The budget's value needs a score for every batch; a search fills in the batches it did not
re-run with the base model's scores (an estimate, which only the batches at risk can change
much) and checks a configuration on every batch before it claims the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from lowbit import backends
from lowbit.budget.metrics import Budget
from lowbit.budget.progress import Progress
from lowbit.ir.graph import Graph

Scores = dict[int, Any]
"""Per batch index: its per-sample records, or its outputs {name: array}."""


class Evaluator:
    """The float model's outputs on `batches`, and the scores of quantized graphs on them."""

    def __init__(self, graph: Graph, budget: Budget, batches: Sequence[Mapping[str, np.ndarray]],
                 progress: Progress, backend: str = "reference") -> None:
        self.graph = graph
        self.budget = budget
        self.batches = list(batches)
        self.backend = backend
        self.progress = progress
        self.reference = self._outputs(graph, range(len(self.batches)),
                                       "float model on the evaluation data")
        self.runs = 0
        """Batches run so far on quantized graphs."""

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def samples(self) -> int:
        """Samples in the evaluation data (per-sample metrics; batches otherwise)."""
        if not self.budget.per_sample:
            return len(self.batches)
        return sum(len(self.budget.records(r, r)) for r in self.reference)

    def scores(self, graph: Graph, indices: Iterable[int], label: str = "") -> Scores:
        """`graph`'s scores on the batches `indices`."""
        indices = list(indices)
        outputs = self._outputs(graph, indices, label)
        self.runs += len(indices)
        if not self.budget.per_sample:
            return {i: outputs[n] for n, i in enumerate(indices)}
        return {i: self.budget.records(self.reference[i], outputs[n])
                for n, i in enumerate(indices)}

    def value(self, scores: Mapping[int, Any]) -> float:
        """The budget's value from a score for every batch."""
        ordered = [scores[i] for i in range(len(self.batches))]
        if self.budget.per_sample:
            return self.budget.value(np.concatenate(ordered))
        return self.budget.over_all(ordered, self.reference)

    def ceiling(self) -> float:
        """A built-in metric's value for the float model itself (every layer raised to float
        gives back the float model): 1 for agreement and cosine, inf for SQNR."""
        return self.budget.value(np.concatenate([self.budget.records(r, r)
                                                 for r in self.reference]))

    def batch_risk(self, scores: Mapping[int, Any]) -> dict[int, float]:
        """Per batch, its riskiest sample's risk (`Budget.risk`; per-sample metrics)."""
        return {i: float(self.budget.risk(r).min()) for i, r in scores.items()}

    def _outputs(self, graph: Graph, indices: Sequence[int], label: str) -> dict:
        run = backends.compile(graph, self.backend)
        out = []
        with self.progress.step(label or "evaluating", len(indices)) as advance:
            for i in indices:
                out.append({k: np.asarray(v) for k, v in run(self.batches[i]).items()})
                advance()
        return out
