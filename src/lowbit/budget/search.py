"""Quantize to an accuracy budget: raise the fewest layers to higher precision that make the
quantized model meet a metric on evaluation data (automatic mixed precision).

The search, in order:

1. Quantize with the user's config (the base) and score it on every evaluation batch. If the
   budget is met, nothing is raised.
2. Refuse a budget that no choice meets: a built-in metric's best value is the float model's
   own (every layer raised to float gives back the float model); a user metric is computed
   with every layer raised to the top rung.
3. Find the batches at risk: those whose own samples miss the threshold, then the next
   riskiest, `SUBSET` at least. Steps 5 and 6 estimate a configuration by running these
   batches only, the others keeping the base's scores (raising precision seldom hurts a sample
   that was far from the threshold). A whole-data user metric runs every batch every time.
4. Rank the layers by sensitivity (`lowbit.tools.sensitivity`: each layer quantized alone, the
   rest float, resumed from the float model's run) on the `RANK_BATCHES` riskiest batches.
5. Try sets of top-ranked layers, smallest first: for k = 1 .. `SMALL`, the top k at the first
   rung (static: int16), then with the top 1, 2, .. k of them at the next (float). Past
   `SMALL` layers, bisect on k, all k at one rung, rung by rung.
6. Prune the set found: drop each layer, least sensitive first, when the budget is estimated
   to hold without it; then lower each layer above the first rung when it is.
7. Run the set on every batch. When it misses the budget there, the batches that failed join
   the batches at risk and steps 5 to 7 run again.

Static quantization reuses every layer's GPTQ rounding and calibrated ranges across the
configurations tried (`lowbit.quant.cache`). The budget is claimed only for a configuration
run on every evaluation batch; when none meets it, the result says so (`met` False) and
`lowbit quantize --budget` writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lowbit.budget.candidates import Layer, Quantizer
from lowbit.budget.costs import Costs, measure
from lowbit.budget.evaluate import Evaluator, Scores
from lowbit.budget.metrics import Budget
from lowbit.budget.progress import Progress
from lowbit.errors import InputError, LowbitError
from lowbit.ir.graph import Graph
from lowbit.mapping import Mapper
from lowbit.quant.config import QuantConfig
from lowbit.quant.profile import Profile
from lowbit.quant.static import QuantResult
from lowbit.tools.sensitivity import Sensitivity, sensitivity

SUBSET = 8
"""Batches re-run to estimate a configuration, at least (when there are as many)."""
RANK_BATCHES = 4
"""Batches sensitivity ranks the layers on: the riskiest."""
SMALL = 4
"""Sets up to this many layers are tried one by one, with every mix of rungs in rank order."""


@dataclass
class Trial:
    """One configuration tried: the layers raised, the budget's value and on how many batches
    it was run (the others kept the base's scores)."""

    raised: dict[str, str]
    value: float
    batches_run: int
    complete: bool
    """Whether its value is on every batch (else an estimate)."""
    met: bool


@dataclass
class BudgetResult:
    """What a budget search chose and what it measured (`text()` prints it)."""

    budget: Budget
    met: bool
    config: QuantConfig
    """The user's config plus the rules raising the chosen layers."""
    result: QuantResult | None
    """The chosen configuration's quantized graph and summary (None when not met)."""
    raised: dict[str, str]
    layers: list[Layer]
    """Every layer the search could raise, with its precision in the user's config."""
    before: float
    after: float
    mode: str
    batches: int
    samples: int
    ranking: Sensitivity | None = None
    trials: list[Trial] = field(default_factory=list)
    costs: Costs | None = None
    seconds: float = 0.0
    reason: str = ""
    """Why the budget was not met."""
    ranking_batches: int = 0
    best_tried: QuantResult | None = None
    """The configuration with the best value measured on every batch (the chosen one when
    the budget is met): what `lowbit quantize --write-anyway` writes."""
    best_config: QuantConfig | None = None
    evaluated_on: str = ""
    """The backends the configurations ran on ("cpu", "reference" or both)."""

    @property
    def graph(self) -> Graph | None:
        return None if self.result is None else self.result.graph

    def text(self) -> str:
        b = self.budget
        on = f"{self.batches} evaluation batches" + (
            f", {self.samples} samples" if self.samples != self.batches else "")
        lines = [f"budget {b.describe()} on {on}: {'met' if self.met else 'NOT MET'}"]
        if not self.met:
            lines.append(f"  {self.reason}")
        lines.append(f"  {b.name} with the config as given: {b.format(self.before)}" + (
            f"; chosen: {b.format(self.after)}" if self.met else ""))
        by_name = {layer.name: layer for layer in self.layers}
        if self.met:
            if self.raised:
                lines.append(f"  raised {len(self.raised)} of {len(self.layers)} layers:")
                width = max(len(n) for n in self.raised)
                for name, rung in self.raised.items():
                    layer = by_name[name]
                    lines.append(f"    {name:<{width}}  {layer.op_type:<10} "
                                 f"{layer.precision} -> {rung}")
            else:
                lines.append(f"  nothing raised: the config as given meets it "
                             f"({len(self.layers)} layers in integers)")
        if self.costs is not None:
            lines += [f"  {line}" for line in self.costs.lines()]
        estimated = sum(1 for t in self.trials if not t.complete)
        ranked = f"; layers ranked on {self.ranking_batches} batches" if self.ranking else ""
        on = f"; run on the {self.evaluated_on} backend" if self.evaluated_on else ""
        lines.append(f"  search: {len(self.trials)} configurations tried ({estimated} estimated "
                     f"on the batches at risk{on}){ranked}; wall time {self.seconds:.1f} s")
        return "\n".join(lines)


class BudgetNotMet(LowbitError):
    """No configuration the search tried meets the budget (`result` says what it measured)."""

    def __init__(self, result: BudgetResult) -> None:
        super().__init__(result.text())
        self.result = result


def search(graph: Graph, budget: Budget, *, profile: Profile | None = None,
           config: QuantConfig | None = None, dynamic: bool = False,
           data: Sequence[Mapping[str, np.ndarray]] | None = None, progress: bool = True,
           latency: bool = True, mapper: Mapper | None = None, workers: int = 1,
           backend: str = "auto") -> BudgetResult:
    """Quantize float `graph` (statically with `profile`, or `dynamic`) with `config` plus the
    fewest layers raised that meet `budget` on `data` (default `budget.data`); see the module
    docstring. Returns the result whether or not the budget is met (`met`). `mapper`
    (`lowbit.mapping`) runs the evaluations, e.g. on `workers` Dask workers. `backend` runs
    the configurations: "auto" (the cpu backend where it runs the model, else the reference
    interpreter), "cpu" or "reference" (`lowbit.budget.evaluate`)."""
    start = time.perf_counter()
    batches = list(data if data is not None else budget.data or [])
    if not batches:
        raise InputError("a budget needs evaluation data: batches of {input name: array} "
                         "(Budget(data=...), or --eval DATA)")
    show = Progress(progress)
    with show.step("quantizing with the config as given", None):
        quantizer = Quantizer(graph, config, profile, dynamic)
    evaluator = Evaluator(graph, budget, batches, show, config=quantizer.config,
                          profile=profile, cache=quantizer.cache, dynamic=dynamic, mapper=mapper,
                          workers=workers, backend=backend, base=quantizer.base)
    run = _Search(quantizer, evaluator, budget, show, mapper)
    result = run.run()
    if result.met and result.result is not None:
        graphs = {"chosen": result.result.graph, "as given": quantizer.base.graph,
                  "float": graph}
        result.costs = measure(graphs, batches[0], latency=latency)
    result.evaluated_on = " and ".join(sorted(evaluator.backends_used))
    result.seconds = time.perf_counter() - start
    return result


class _Search:
    def __init__(self, quantizer: Quantizer, evaluator: Evaluator, budget: Budget,
                 show: Progress, mapper: Mapper | None) -> None:
        self.mapper = mapper
        self.samples = 0
        self.q = quantizer
        self.ev = evaluator
        self.budget = budget
        self.show = show
        self.trials: list[Trial] = []
        self.base: Scores = {}
        self.at_risk: list[int] = []
        self.best: tuple[dict[str, str], QuantResult, float] | None = None
        """The last configuration that met the budget on every batch."""
        self.best_any: tuple[dict[str, str], QuantResult, float] = ({}, quantizer.base,
                                                                   float("nan"))
        """The configuration with the best value on every batch so far."""
        self._estimates: dict[tuple, tuple[float, Scores]] = {}
        """Per (configuration, batches at risk): the estimated value and the scores of the
        batches at risk."""

    def result(self, met: bool, before: float, reason: str = "",
               ranking: Sensitivity | None = None) -> BudgetResult:
        raised, chosen, after = self.best if met and self.best else ({}, None, before)
        best_raised, best, _ = self.best_any
        return BudgetResult(
            self.budget, met, self.q.config_for(raised), chosen, dict(raised), self.q.layers,
            before, after, self.q.mode, len(self.ev), self.samples, ranking, self.trials,
            reason=reason, ranking_batches=min(RANK_BATCHES, len(self.ev)) if ranking else 0,
            best_tried=best, best_config=self.q.config_for(best_raised))

    def run(self) -> BudgetResult:
        everything = range(len(self.ev))
        self.base = self.ev.scores({}, everything, "the config as given")
        self.samples = self.ev.samples(self.base)
        before = self.ev.value(self.base)
        self.best_any = ({}, self.q.base, before)
        self._note({}, before, len(self.ev), True)
        if self.budget.met(before):
            self.best = ({}, self.q.base, before)
            return self.result(True, before)
        ceiling = self._ceiling()
        if not self.budget.met(ceiling):
            top = self.q.ladder[-1]
            return self.result(False, before, reason=(
                f"no choice can meet it: with all {len(self.q.layers)} layers raised to {top} "
                f"{self.budget.name} is {self.budget.format(ceiling)}"))
        self.at_risk = self._riskiest(self.base, SUBSET)
        ranked = self._rank()
        order = [layer.name for layer in ranked.layers]
        while True:
            found = self._smallest(order)
            if found is None:
                return self.result(False, before, reason="no set of top-ranked layers tried "
                                   "meets it on every batch", ranking=ranked)
            if self._verify(self._prune(found, order)):
                return self.result(True, before, ranking=ranked)
            # batches that failed joined the batches at risk: estimates change, search again

    # -- steps -----------------------------------------------------------------------------------
    def _ceiling(self) -> float:
        everything = range(len(self.ev))
        if self.budget.builtin:  # every layer raised to float gives back the float model
            return self.ev.value(self.ev.scores(None, everything, "the float model"))
        top = {layer.name: self.q.ladder[-1] for layer in self.q.layers}
        value = self.ev.value(self.ev.scores(top, everything, "every layer raised"))
        met = self.budget.met(value)
        self._note(top, value, len(self.ev), True, met)
        if self._better(value, self.best_any[2]):
            self.best_any = (top, self._quantized(top), value)
        return value

    def _quantized(self, raised: dict[str, str]) -> QuantResult:
        """The QuantResult of `raised`: the evaluator's last compiled one when it is that
        configuration, else quantized again."""
        return self.ev.quantized(raised) or self.q.quantize(raised)

    def _riskiest(self, scores: Scores, count: int) -> list[int]:
        """All batches failing alone plus the riskiest others, `count` at least (all batches
        for a whole-data metric)."""
        if not self.budget.per_sample:
            return list(range(len(self.ev)))
        risk = self.ev.batch_risk(scores)
        order = sorted(risk, key=lambda i: (risk[i], i))
        failing = [i for i in order if risk[i] < 0]
        return sorted(order[:max(count, len(failing))])

    def _rank(self) -> Sensitivity:
        if self.budget.per_sample:
            risk = self.ev.batch_risk(self.base)
            indices = sorted(self.at_risk, key=lambda i: (risk[i], i))[:RANK_BATCHES]
        else:
            indices = list(range(min(RANK_BATCHES, len(self.ev))))
        self.show.note(f"ranking {len(self.q.layers)} layers by sensitivity on "
                       f"{len(indices)} batches")
        return sensitivity(self.q.graph, [self.ev.batches[i] for i in indices],
                           profile=self.q.profile, config=self.q.config, dynamic=self.q.dynamic,
                           progress=self.show.enabled, cache=self.q.cache, mapper=self.mapper)

    def _smallest(self, order: list[str]) -> dict[str, str] | None:
        """The first set of top-ranked layers estimated to meet the budget (module
        docstring)."""
        ladder = self.q.ladder
        n = len(order)
        for k in range(1, min(SMALL, n) + 1):
            for upper in range(k + 1 if len(ladder) > 1 else 1):
                raised = {name: ladder[-1] if j < upper else ladder[0]
                          for j, name in enumerate(order[:k])}
                if self._estimate(raised):
                    return raised
        for rung in ladder:
            lo, hi = SMALL, n  # lo misses (or was tried), hi is to be checked
            if hi <= lo or not self._estimate(dict.fromkeys(order[:hi], rung)):
                continue
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._estimate(dict.fromkeys(order[:mid], rung)):
                    hi = mid
                else:
                    lo = mid
            return dict.fromkeys(order[:hi], rung)
        return None

    def _prune(self, raised: dict[str, str], order: list[str]) -> dict[str, str]:
        """`raised` without the layers it is estimated not to need, then each remaining layer
        at the lowest rung estimated to keep the budget, least sensitive first."""
        current = dict(raised)
        for name in sorted(current, key=order.index, reverse=True):
            if len(current) == 1:
                break
            smaller = {k: v for k, v in current.items() if k != name}
            if self._estimate(smaller):
                current = smaller
        ladder = self.q.ladder
        for name in sorted(current, key=order.index, reverse=True):
            position = ladder.index(current[name])
            if position == 0:
                continue
            lower = {**current, name: ladder[position - 1]}
            if self._estimate(lower):
                current = lower
        return current

    def _estimate(self, raised: dict[str, str]) -> bool:
        """Whether `raised` is estimated to meet the budget: run on the batches at risk, the
        base's scores for the others (exact when every batch is at risk)."""
        key = (tuple(sorted(raised.items())), tuple(self.at_risk))
        if key not in self._estimates:
            at_risk = set(self.at_risk)
            known = {i: s for i, s in self.base.items() if i not in at_risk}
            scores, missed = self.ev.scores_until_missed(
                raised, self.at_risk, known, self.base, f"{_describe(raised)}: batches at risk")
            if missed:
                value = self.ev.best_case({**known, **scores}, self.base)
            else:
                value = self.ev.value({**self.base, **scores})
            complete = len(self.at_risk) == len(self.ev)
            self._estimates[key] = (value, scores, missed)
            self._note(raised, value, len(scores), complete and not missed,
                       False if missed else None, stopped=missed)
        value, _, missed = self._estimates[key]
        return not missed and self.budget.met(value)

    def _verify(self, raised: dict[str, str]) -> bool:
        """Whether `raised` (estimated to meet the budget) meets it on every batch; when it
        does not, the batches that fail join the batches at risk."""
        _, scores, _ = self._estimates[(tuple(sorted(raised.items())), tuple(self.at_risk))]
        rest = [i for i in range(len(self.ev)) if i not in scores]
        missed = False
        if rest:
            more, missed = self.ev.scores_until_missed(raised, rest, scores, self.base,
                                                       f"{_describe(raised)}: every batch")
            scores = {**scores, **more}
            rest = [i for i in rest if i in more]
        result = self._quantized(raised)
        if missed:
            value = self.ev.best_case(scores, self.base)
            self._note(raised, value, len(scores), False, False, stopped=True)
        else:
            value = self.ev.value(scores)
            if rest:
                self._note(raised, value, len(self.ev), True, self.budget.met(value))
            if self._better(value, self.best_any[2]):
                self.best_any = (dict(raised), result, value)
        if not missed and self.budget.met(value):
            self.best = (dict(raised), result, value)
            return True
        risk = self.ev.batch_risk({i: scores[i] for i in rest})
        new = [i for i in rest if risk[i] < 0] or [min(rest, key=lambda i: risk[i])]
        self.at_risk = sorted(set(self.at_risk) | set(new))
        self.show.note(f"{len(new)} more batches at risk ({len(self.at_risk)} in all)")
        return False

    def _better(self, value: float, than: float) -> bool:
        if np.isnan(than):
            return True
        return value < than if self.budget.at_most else value > than

    def _note(self, raised: dict[str, str], value: float, batches: int, complete: bool,
              met: bool | None = None, stopped: bool = False) -> None:
        met = self.budget.met(value) if met is None else met
        self.trials.append(Trial(dict(raised), value, batches, complete, met))
        how = "on every batch" if complete else f"estimated on {batches} batches at risk"
        if stopped:
            how = f"at best, stopped after {batches} batches"
        verdict = "meets" if met else "misses"
        self.show.note(f"{_describe(raised)}: {self.budget.name} "
                       f"{self.budget.format(value)} {how}: {verdict} {self.budget.describe()}")


def _describe(raised: Mapping[str, str]) -> str:
    if not raised:
        return "config as given"
    if len(raised) > 3:
        rungs = sorted(set(raised.values()))
        return f"{len(raised)} layers raised ({', '.join(rungs)})"
    return ", ".join(f"{name} {rung}" for name, rung in raised.items())
