"""Scoring configurations against the float model on the evaluation data, batch by batch, here
or on the workers of a cluster.

A configuration is named by the layers it raises ({name: rung}; the empty one is the config as
given, None the float model itself). Scoring it on some batches quantizes the float graph with
it (reusing the quantization cache), runs the batches and returns, per batch, the per-sample
records of a per-sample metric (every built-in metric, and a user metric with `reduce`), or
the outputs themselves with the float model's for a whole-data user metric. The float model's
outputs are computed once per batch, where the batch is scored.

The work goes through a mapper (`lowbit.mapping`): here, one chunk of batches; on a cluster,
chunks spread over the workers, each of which gets the context (float graph, profile, cache,
evaluation data) once and keeps its float outputs and its last quantized graph. The budget's
value needs a score for every batch; a search fills in the batches it did not re-run with the
base model's scores (an estimate) and checks a configuration on every batch before it claims
the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lowbit import backends
from lowbit.budget.candidates import quantize_raised
from lowbit.budget.metrics import Budget
from lowbit.budget.progress import Progress
from lowbit.ir.graph import Graph
from lowbit.mapping import Mapper, local_map
from lowbit.quant.cache import QuantCache
from lowbit.quant.config import QuantConfig
from lowbit.quant.profile import Profile

Scores = dict[int, Any]
"""Per batch index: its per-sample records, or (quantized outputs, float outputs)."""

Raised = tuple[tuple[str, str], ...] | None
"""A configuration as a task carries it: raised layers in order, or None for the float model."""


@dataclass
class EvalContext:
    """What scoring needs, picklable (`lowbit.mapping`); each process keeps the float outputs
    and the last configuration's compiled graph it made (not pickled)."""

    graph: Graph
    batches: list
    budget: Budget
    config: QuantConfig
    profile: Profile | None
    cache: QuantCache | None
    dynamic: bool
    reference: dict[int, dict] = field(default_factory=dict, repr=False)
    compiled: tuple[Raised, Any] | None = field(default=None, repr=False)
    float_run: Any = field(default=None, repr=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "reference": {}, "compiled": None, "float_run": None}

    def float_outputs(self, index: int) -> dict:
        """The float model's outputs on batch `index` (computed once in each process)."""
        if index not in self.reference:
            if self.float_run is None:
                self.float_run = backends.compile(self.graph)
            self.reference[index] = _run(self.float_run, self.batches[index])
        return self.reference[index]

    def run(self, raised: Raised, index: int) -> dict:
        """The outputs of configuration `raised` on batch `index`."""
        if raised is None:
            return self.float_outputs(index)
        if self.compiled is None or self.compiled[0] != raised:
            result = quantize_raised(self.graph, self.config, dict(raised), self.profile,
                                     self.cache, self.dynamic)
            self.compiled = (raised, backends.compile(result.graph))
        return _run(self.compiled[1], self.batches[index])


def _run(executable: Any, batch: Mapping[str, np.ndarray]) -> dict:
    return {k: np.asarray(v) for k, v in executable(batch).items()}


def score_batches(context: EvalContext, job: tuple[Raised, list[int]]) -> Scores:
    """One chunk's scores (runs where the mapper puts it)."""
    raised, indices = job
    budget = context.budget
    out: Scores = {}
    for i in indices:
        got = context.run(raised, i)
        ref = context.float_outputs(i)
        out[i] = budget.records(ref, got) if budget.per_sample else (got, ref)
    return out


class Evaluator:
    """Scores configurations on the evaluation batches (module docstring)."""

    def __init__(self, graph: Graph, budget: Budget, batches: Sequence[Mapping[str, np.ndarray]],
                 progress: Progress, *, config: QuantConfig, profile: Profile | None,
                 cache: QuantCache | None, dynamic: bool, mapper: Mapper | None = None,
                 workers: int = 1) -> None:
        self.budget = budget
        self.batches = list(batches)
        self.progress = progress
        self.mapper = mapper or local_map
        self.chunks = 1 if mapper is None else 2 * max(1, workers)
        plain = Budget(budget.metric, budget.threshold, None, budget.at_most, budget.reduce,
                       budget.name)
        self.context = EvalContext(graph, self.batches, plain, config, profile, cache, dynamic)
        self.runs = 0
        """Batches run so far on quantized graphs."""

    def __len__(self) -> int:
        return len(self.batches)

    def scores(self, raised: Mapping[str, str] | None, indices: Sequence[int],
               label: str = "") -> Scores:
        """The scores of the configuration raising `raised` (None: the float model) on the
        batches `indices`."""
        indices = list(indices)
        key: Raised = None if raised is None else tuple(raised.items())
        size = -(-len(indices) // self.chunks)
        jobs = [(key, indices[i:i + size]) for i in range(0, len(indices), size)]
        out: Scores = {}
        with self.progress.step(label or "evaluating", len(indices)) as advance:
            for part in self.mapper(score_batches, self.context, jobs,
                                    lambda job: advance(len(job[1]))):
                out.update(part)
        if raised is not None:
            self.runs += len(indices)
        return out

    def value(self, scores: Mapping[int, Any]) -> float:
        """The budget's value from a score for every batch."""
        ordered = [scores[i] for i in range(len(self.batches))]
        if self.budget.per_sample:
            return self.budget.value(np.concatenate(ordered))
        return self.budget.over_all([q for q, _ in ordered], [f for _, f in ordered])

    @staticmethod
    def samples(scores: Mapping[int, Any]) -> int:
        """Samples scored (per-sample metrics; batches otherwise)."""
        return sum(len(s) if isinstance(s, np.ndarray) else 1 for s in scores.values())

    def batch_risk(self, scores: Mapping[int, Any]) -> dict[int, float]:
        """Per batch, its riskiest sample's risk (`Budget.risk`; per-sample metrics)."""
        return {i: float(self.budget.risk(r).min()) for i, r in scores.items()}
