"""Scoring configurations against the float model on the evaluation data, batch by batch, here
or on the workers of a cluster.

A configuration is named by the layers it raises ({name: rung}; the empty one is the config as
given, None the float model itself). Scoring it on some batches quantizes the float graph with
it (reusing the quantization cache), runs the batches and returns, per batch, the per-sample
records of a per-sample metric (every built-in metric, and a user metric with `reduce`), or
the outputs themselves with the float model's for a whole-data user metric. The float model's
outputs are computed once per batch, where the batch is scored.

Models run on lowbit's compiled cpu backend when it compiles and runs them (`backend="auto"`:
its integer kernels give the reference interpreter's results bit for bit, at 10 to 100 times
its speed; the float model within float rounding), else on the reference interpreter (a model
with an op the cpu backend lacks: `used` says which ran). Each configuration is compiled once
per process (the cpu backend caches the built library by content, so a configuration met again
loads in milliseconds).

A scoring may stop early (`Stop`): when the batches already scored (with the scores known for
the others) miss the budget whatever the remaining batches give, the rest are not run. This
holds for the per-sample metrics that a single sample can sink: agreement (each disagreeing row
costs a fixed share of the value) and minimum reductions (cosine, a user metric with
`reduce="min"`); batches run riskiest first, so that a miss shows early.

The work goes through a mapper (`lowbit.mapping`): here, one chunk of batches; on a cluster,
chunks spread over the workers, each of which gets the context (float graph, profile, cache,
evaluation data) once and keeps its float outputs and its last quantized graph. The budget's
value needs a score for every batch; a search fills in the batches it did not re-run with the
base model's scores (an estimate) and checks a configuration on every batch before it claims
the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lowbit import backends
from lowbit.budget.candidates import quantize_raised
from lowbit.budget.metrics import Budget
from lowbit.budget.progress import Progress
from lowbit.errors import LowbitError
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
    backend: str = "auto"
    """"auto" (the cpu backend where it runs the model, else the reference), "cpu" or
    "reference"."""
    reference: dict[int, dict] = field(default_factory=dict, repr=False)
    compiled: tuple[Raised, Any, Any] | None = field(default=None, repr=False)
    """The last configuration run here: (raised, its runner, its QuantResult)."""
    quantized: dict = field(default_factory=dict, repr=False)
    """Configurations quantized before the search ({raised: QuantResult}: the config as given),
    taken instead of quantizing them again (not pickled: a worker quantizes its own)."""
    float_run: Any = field(default=None, repr=False)
    used: set[str] = field(default_factory=set, repr=False)
    """The backends that ran models in this process."""
    profile_checked: bool = field(default=False, repr=False)
    """`profile` checked against `graph` (once per context: they travel together)."""

    def __getstate__(self) -> dict:
        return {**self.__dict__, "reference": {}, "compiled": None, "float_run": None,
                "used": set(), "quantized": {}}

    def float_outputs(self, index: int) -> dict:
        """The float model's outputs on batch `index` (computed once in each process)."""
        if index not in self.reference:
            if self.float_run is None:
                self.float_run = _Runner(self.graph, self.backend, self.used)
            self.reference[index] = self.float_run(self.batches[index])
        return self.reference[index]

    def run(self, raised: Raised, index: int) -> dict:
        """The outputs of configuration `raised` on batch `index`."""
        if raised is None:
            return self.float_outputs(index)
        if self.compiled is None or self.compiled[0] != raised:
            if self.profile is not None and not self.profile_checked:
                self.profile.check(self.graph)
                self.profile_checked = True
            result = self.quantized.pop(raised, None) or quantize_raised(
                self.graph, self.config, dict(raised), self.profile, self.cache, self.dynamic,
                profile_checked=True)
            self.compiled = (raised, _Runner(result.graph, self.backend, self.used), result)
        return self.compiled[1](self.batches[index])


class _Runner:
    """One graph compiled for `backend` ("auto": the cpu backend, or the reference interpreter
    when the cpu backend refuses the graph, at compile time or at its first run)."""

    def __init__(self, graph: Graph, backend: str, used: set[str]) -> None:
        self.graph, self.used = graph, used
        self.backend = "cpu" if backend in ("auto", "cpu") else "reference"
        self.fallback = backend == "auto"
        self.executable: Any = None
        self.proven = False
        try:
            self.executable = backends.compile(graph, self.backend)
        except LowbitError:
            if not self.fallback:
                raise
            self._reference()

    def _reference(self) -> None:
        self.backend, self.fallback = "reference", False
        self.executable = backends.compile(self.graph)

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict:
        try:
            out = self.executable(batch)
        except LowbitError:
            if not self.fallback or self.proven:
                raise
            self._reference()
            out = self.executable(batch)
        self.proven = True
        self.used.add(self.backend)
        return {k: np.asarray(v) for k, v in out.items()}


@dataclass(frozen=True)
class Stop:
    """When a scoring stops early (module docstring): the budget is missed as soon as the
    misses counted exceed `allowed`; `known` misses are in the batches not being scored.
    A miss is a disagreeing row (agreement) or a sample below the threshold (minimum)."""

    allowed: int
    known: int
    kind: str
    """"rows" (agreement: rows - agreeing rows of a record) or "samples" (risk below 0)."""

    def misses(self, budget: Budget, records: np.ndarray) -> int:
        if self.kind == "rows":
            return round(float(records[:, 1].sum() - records[:, 0].sum()))
        return int((budget.risk(records) < 0).sum())


def score_batches(context: EvalContext, job: tuple) -> Scores:
    """One chunk's scores (runs where the mapper puts it); with a `Stop`, the scores of the
    batches run until the budget was certainly missed."""
    raised, indices, stop = job if len(job) == 3 else (*job, None)
    budget = context.budget
    out: Scores = {}
    misses = 0 if stop is None else stop.known
    for i in indices:
        if stop is not None and misses > stop.allowed:
            break
        got = context.run(raised, i)
        ref = context.float_outputs(i)
        out[i] = budget.records(ref, got) if budget.per_sample else (got, ref)
        if stop is not None:
            misses += stop.misses(budget, out[i])
    return out


class Evaluator:
    """Scores configurations on the evaluation batches (module docstring)."""

    def __init__(self, graph: Graph, budget: Budget, batches: Sequence[Mapping[str, np.ndarray]],
                 progress: Progress, *, config: QuantConfig, profile: Profile | None,
                 cache: QuantCache | None, dynamic: bool, mapper: Mapper | None = None,
                 workers: int = 1, backend: str = "auto", base: Any = None) -> None:
        """`base`: the QuantResult of the config as given, when the caller has it (scoring it
        then compiles it without quantizing it again)."""
        if backend not in ("auto", "cpu", "reference"):
            raise ValueError(f"budget backend {backend!r}: use 'auto', 'cpu' or 'reference'")
        self.budget = budget
        self.batches = list(batches)
        self.progress = progress
        self.mapper = mapper or local_map
        self.chunks = 1 if mapper is None else 2 * max(1, workers)
        plain = Budget(budget.metric, budget.threshold, None, budget.at_most, budget.reduce,
                       budget.name)
        self.context = EvalContext(graph, self.batches, plain, config, profile, cache, dynamic,
                                   backend)
        if base is not None:
            self.context.quantized[()] = base
        self.runs = 0
        """Batches run so far on quantized graphs."""

    def quantized(self, raised: Mapping[str, str]) -> Any:
        """The QuantResult of `raised` when it is the configuration last run here (None
        otherwise: on a cluster, or another one ran since)."""
        last = self.context.compiled
        return last[2] if last is not None and last[0] == tuple(raised.items()) else None

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def backends_used(self) -> set[str]:
        """The backends that ran models here (a cluster's workers keep their own)."""
        return set(self.context.used)

    def scores(self, raised: Mapping[str, str] | None, indices: Sequence[int],
               label: str = "") -> Scores:
        """The scores of the configuration raising `raised` (None: the float model) on the
        batches `indices`."""
        return self._scores(raised, list(indices), label, None)

    def scores_until_missed(self, raised: Mapping[str, str], indices: Sequence[int],
                            known: Mapping[int, Any], base: Mapping[int, Any], label: str = ""
                            ) -> tuple[Scores, bool]:
        """The scores of `raised` on `indices`, riskiest first by the `base` scores (those of
        every batch), stopping as soon as the budget is missed whatever the batches left give
        (module docstring), the batches outside `indices` scoring `known`. Returns the scores
        of the batches run and whether the budget is certainly missed (then some batches may
        be absent)."""
        stop = self.stop_rule(known, base)
        indices = list(indices)
        if stop is None:
            return self._scores(raised, indices, label, None), False
        risk = self.batch_risk({i: base[i] for i in indices})
        indices.sort(key=lambda i: (risk[i], i))
        scores = self._scores(raised, indices, label, stop)
        missed = stop.known + sum(stop.misses(self.budget, r) for r in scores.values())
        return scores, missed > stop.allowed

    def stop_rule(self, known: Mapping[int, Any], base: Mapping[int, Any]) -> Stop | None:
        """When a scoring stops early, the batches not scored scoring `known` and every batch
        `base` (whose rows every configuration shares), or None (module docstring)."""
        b = self.budget
        if b.metric == "agreement":
            total = round(sum(float(r[:, 1].sum()) for r in base.values()))
            # the fewest agreeing rows meeting it, by the float division `value` makes
            low = max(0, math.floor(b.threshold * total) - 2)
            needed = next((a for a in range(low, total + 1)
                           if b.met(a / total if total else 1.0)), total + 1)
            stop = Stop(total - needed, 0, "rows")
        elif b.metric == "cosine" or (not b.builtin and b.reduce == "min"):
            stop = Stop(0, 0, "samples")
        else:
            return None
        seen = sum(stop.misses(b, r) for r in known.values())
        return Stop(stop.allowed, seen, stop.kind)

    def _scores(self, raised: Mapping[str, str] | None, indices: list[int], label: str,
                stop: Stop | None) -> Scores:
        key: Raised = None if raised is None else tuple(raised.items())
        size = -(-len(indices) // self.chunks) if indices else 1
        jobs = [(key, indices[i:i + size], stop) for i in range(0, len(indices), size)]
        out: Scores = {}
        with self.progress.step(label or "evaluating", len(indices)) as advance:
            for part in self.mapper(score_batches, self.context, jobs,
                                    lambda job: advance(len(job[1]))):
                out.update(part)
        if raised is not None:
            self.runs += len(out)
        return out

    def value(self, scores: Mapping[int, Any]) -> float:
        """The budget's value from a score for every batch."""
        ordered = [scores[i] for i in range(len(self.batches))]
        if self.budget.per_sample:
            return self.budget.value(np.concatenate(ordered))
        return self.budget.over_all([q for q, _ in ordered], [f for _, f in ordered])

    def best_case(self, scores: Mapping[int, Any], base: Mapping[int, Any]) -> float:
        """The best value the budget could take given `scores` (some batches absent, as a
        stopped scoring leaves them): agreement with every absent row agreeing, the minimum
        over the samples scored; for a stopped scoring, below the threshold."""
        if self.budget.metric == "agreement":
            filled = dict(scores)
            for i in range(len(self.batches)):
                if i not in filled:
                    filled[i] = base[i].copy()
                    filled[i][:, 0] = filled[i][:, 1]
            return self.value(filled)
        return self.budget.value(np.concatenate([scores[i] for i in sorted(scores)]))

    @staticmethod
    def samples(scores: Mapping[int, Any]) -> int:
        """Samples scored (per-sample metrics; batches otherwise)."""
        return sum(len(s) if isinstance(s, np.ndarray) else 1 for s in scores.values())

    def batch_risk(self, scores: Mapping[int, Any]) -> dict[int, float]:
        """Per batch, its riskiest sample's risk (`Budget.risk`; per-sample metrics)."""
        return {i: float(self.budget.risk(r).min()) for i, r in scores.items()}
