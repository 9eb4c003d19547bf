"""Accuracy budgets: a metric of the quantized model's outputs against the float model's on
evaluation data, and the value it must reach.

Built-in metrics (higher is better; `Budget.parse("agreement>=0.97")`):

    agreement   top-1 agreement: the share of output rows (vectors along the last axis, e.g. a
                classifier's logits) whose largest element sits at the same index as in the
                float model's output (the first one on ties, as numpy's argmax)
    sqnr        10 log10(sum f^2 / sum (q - f)^2) in dB, over every output, sample and batch
                (inf when equal)
    cosine      the smallest over samples of sum f q / sqrt(sum f^2 sum q^2), each sample's
                outputs flattened together (1 when both are all zero, 0 when only one is)

f is the float model's output, q the quantized model's, both in float64. A sample is one item
along the leading axis when every output of the batch has the same leading size, else the
whole batch. Each built-in metric is a reduction of per-sample records (`records`, `value`),
so the search can re-evaluate the samples at risk (`risk`: below 0 for a sample that alone
misses the threshold: it disagrees, or its own cosine or SQNR is below it) and keep the others'
records.

A user metric is a function, in one of two forms:

- `metric(quantized, reference) -> float`, of two lists with one {output name: array} per batch
  of the data (the quantized model's outputs and the float model's, in the order of the data):
  accuracy against labels, a task score. Its value is computed on all the data every time.
- with `reduce="min"` or `"mean"`: `metric(quantized, reference) -> scores` of ONE batch's
  {output name: array} dicts, one score per sample (an embedding's cosine to the float one);
  the budget's value is the minimum or the mean over all samples, and the search re-evaluates
  only the samples at risk, as for the built-in metrics (risk: score - threshold).

`at_most=True` makes the threshold an upper bound (an error rate).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lowbit.errors import InputError

Outputs = list[np.ndarray]
"""One batch's outputs, in graph-output order."""

RECORD_FIELDS = {"agreement": ("agree", "rows", "margin"), "sqnr": ("signal", "noise"),
                 "cosine": ("dot", "ff", "qq")}
BUILTIN = tuple(RECORD_FIELDS)


@dataclass(frozen=True)
class Budget:
    """A metric and the value it must reach on `data` (module docstring).

        Budget.parse("agreement>=0.97")
        Budget(metric=top1_accuracy, threshold=0.75, data=batches)   # a user metric

    `metric` is "agreement", "sqnr", "cosine" or a function (module docstring: over all the
    data, or per sample with `reduce` "min" or "mean"); the value must be >= `threshold` (<=
    with `at_most`, user metrics only). `data` is the evaluation batches ({input name: array}
    each); the CLI's `--eval` gives them.
    """

    metric: str | Callable
    threshold: float
    data: Sequence[Mapping[str, np.ndarray]] | None = field(default=None, repr=False)
    at_most: bool = False
    reduce: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.metric, str):
            if self.metric not in BUILTIN:
                raise InputError(f"unknown budget metric {self.metric!r}; built in: "
                                 f"{', '.join(BUILTIN)}, or pass a function "
                                 f"metric(quantized, reference) -> float")
            if self.at_most:
                raise InputError(f"{self.metric} is better when higher: a budget on it is a "
                                 f"lower bound ({self.metric}>=...)")
            if self.reduce is not None:
                raise InputError(f"reduce is for a metric of your own; {self.metric} is built in")
        elif not callable(self.metric):
            raise InputError(f"a budget metric is a name ({', '.join(BUILTIN)}) or a function, "
                             f"got {type(self.metric).__name__}")
        elif self.reduce not in (None, "min", "mean"):
            raise InputError(f"reduce {self.reduce!r}: a per-sample metric's scores reduce by "
                             f"'min' or 'mean'")
        try:
            threshold = float(self.threshold)
        except (TypeError, ValueError):
            raise InputError(f"a budget threshold is a number, got {self.threshold!r}") from None
        if math.isnan(threshold):
            raise InputError("a budget threshold is a number, got NaN")
        object.__setattr__(self, "threshold", threshold)
        if not self.name:
            label = self.metric if isinstance(self.metric, str) else \
                getattr(self.metric, "__name__", "metric")
            object.__setattr__(self, "name", label)

    @classmethod
    def parse(cls, text: str, data: Sequence[Mapping[str, np.ndarray]] | None = None) -> Budget:
        """`agreement>=0.97` (or `97%`), `sqnr>=30`, `cosine>=0.9995`."""
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(>=|<=|>|<|=)?\s*([-+0-9.eE]+)\s*(%?)\s*", text)
        if m is None or m.group(2) is None:
            raise InputError(f"budget {text!r}: write METRIC>=VALUE, e.g. 'agreement>=0.97', "
                             f"'sqnr>=30' or 'cosine>=0.9995'")
        metric, op, number, percent = m.groups()
        if metric not in BUILTIN:
            raise InputError(f"budget {text!r}: unknown metric {metric!r}; built in: "
                             f"{', '.join(BUILTIN)} (a metric of your own: lowbit.Budget in "
                             f"Python)")
        if op != ">=":
            raise InputError(f"budget {text!r}: {metric} must reach a value: write "
                             f"{metric}>={number}{percent}")
        try:
            value = float(number)
        except ValueError:
            raise InputError(f"budget {text!r}: {number!r} is not a number") from None
        if percent:
            if metric != "agreement":
                raise InputError(f"budget {text!r}: only agreement takes a percentage")
            value /= 100
        return cls(metric, value, data)

    @property
    def builtin(self) -> bool:
        return isinstance(self.metric, str)

    @property
    def per_sample(self) -> bool:
        """Whether the value reduces per-sample records (built-in, or a user metric with
        `reduce`): then samples can be re-evaluated apart."""
        return self.builtin or self.reduce is not None

    def met(self, value: float) -> bool:
        """Whether a metric value meets the budget (NaN never does)."""
        if math.isnan(value):
            return False
        return value <= self.threshold if self.at_most else value >= self.threshold

    def describe(self) -> str:
        return f"{self.name}{'<=' if self.at_most else '>='}{self.threshold:g}"

    def format(self, value: float) -> str:
        """A metric value as the summary prints it."""
        if self.metric == "agreement":
            return f"{value:.2%}"
        if self.metric == "sqnr":
            return f"{value:.2f} dB"
        if self.metric == "cosine":
            return f"{value:.6f}"
        return f"{value:.6g}"

    # -- per-sample records ----------------------------------------------------------------------
    def records(self, reference: Mapping[str, np.ndarray],
                got: Mapping[str, np.ndarray]) -> np.ndarray:
        """One batch's per-sample records [samples, fields] (`RECORD_FIELDS`; a user metric's
        scores as one field) from the float and the quantized model's outputs."""
        if not self.builtin:
            scores = np.asarray(self.metric(dict(got), dict(reference)), np.float64).reshape(-1)
            if scores.size == 0 or not np.all(np.isfinite(scores) | np.isinf(scores)):
                raise InputError(f"budget metric {self.name} returned {scores!r}: one number "
                                 f"per sample of the batch")
            return scores[:, None]
        f_list, q_list = list(reference.values()), [got[k] for k in reference]
        samples = _samples(f_list)
        rows = []
        for i in range(samples):
            f = [_sample(a, i, samples) for a in f_list]
            q = [_sample(a, i, samples) for a in q_list]
            rows.append(_RECORDS[self.metric](f, q))
        return np.array(rows, np.float64).reshape(samples, len(RECORD_FIELDS[self.metric]))

    def value(self, records: np.ndarray) -> float:
        """The metric over all the records given."""
        r = np.asarray(records, np.float64)
        if not self.builtin:
            return float(r[:, 0].min() if self.reduce == "min" else r[:, 0].mean())
        if self.metric == "agreement":
            rows = r[:, 1].sum()
            return float(r[:, 0].sum() / rows) if rows else 1.0
        if self.metric == "sqnr":
            return _sqnr(r[:, 0].sum(), r[:, 1].sum())
        return float(_cosines(r).min()) if len(r) else 1.0

    def risk(self, records: np.ndarray) -> np.ndarray:
        """Per sample, how far it is from failing: below 0 when it misses the threshold alone
        (module docstring); the lowest are re-evaluated first."""
        r = np.asarray(records, np.float64)
        if not self.builtin:
            return self.threshold - r[:, 0] if self.at_most else r[:, 0] - self.threshold
        if self.metric == "agreement":
            return np.where(r[:, 0] < r[:, 1], np.minimum(r[:, 2], 0.0) - 1.0, r[:, 2])
        if self.metric == "sqnr":
            return np.array([_sqnr(s, n) for s, n in r[:, :2]]) - self.threshold
        return _cosines(r) - self.threshold

    def over_all(self, quantized: list[dict], reference: list[dict]) -> float:
        """A whole-data user metric's value."""
        value = self.metric(quantized, reference)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InputError(f"budget metric {self.name} returned {value!r}, not a number") \
                from None


def _samples(outputs: Outputs) -> int:
    leading = {a.shape[0] if a.ndim else None for a in outputs}
    if len(leading) == 1:
        n = leading.pop()
        if n is not None and n > 0:
            return int(n)
    return 1


def _sample(a: np.ndarray, i: int, samples: int) -> np.ndarray:
    a = np.asarray(a, np.float64)
    return a[i] if samples > 1 or (a.ndim and a.shape[0] == 1) else a


def _agreement(f: Outputs, q: Outputs) -> tuple[float, float, float]:
    agree = rows = 0
    margin = math.inf
    for a, b in zip(f, q, strict=True):
        if a.size == 0:
            continue
        a2 = a.reshape(-1, a.shape[-1] if a.ndim else 1)
        b2 = b.reshape(a2.shape)
        top = a2.argmax(1)
        agree += int((b2.argmax(1) == top).sum())
        rows += len(a2)
        if a2.shape[1] > 1:
            at_top = np.take_along_axis(b2, top[:, None], 1)[:, 0]
            others = b2.copy()
            np.put_along_axis(others, top[:, None], -np.inf, 1)
            margin = min(margin, float((at_top - others.max(1)).min()))
    return agree, rows, margin if math.isfinite(margin) else 0.0


def _sqnr_record(f: Outputs, q: Outputs) -> tuple[float, float]:
    signal = sum(float((a * a).sum()) for a in f)
    noise = sum(float(((b - a) ** 2).sum()) for a, b in zip(f, q, strict=True))
    return signal, noise


def _cosine_record(f: Outputs, q: Outputs) -> tuple[float, float, float]:
    return (sum(float((a * b).sum()) for a, b in zip(f, q, strict=True)),
            sum(float((a * a).sum()) for a in f), sum(float((b * b).sum()) for b in q))


_RECORDS = {"agreement": _agreement, "sqnr": _sqnr_record, "cosine": _cosine_record}


def _sqnr(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


def _cosines(r: np.ndarray) -> np.ndarray:
    dot, ff, qq = r[:, 0], r[:, 1], r[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = dot / np.sqrt(ff * qq)
    return np.where((ff == 0) & (qq == 0), 1.0, np.where((ff == 0) | (qq == 0), 0.0, cos))
