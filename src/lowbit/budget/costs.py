"""What a mixed-precision choice costs: the size of the model's constants, and its latency on
lowbit's compiled cpu backend when this lowbit has one.

Size is the bytes of every constant once `Quantize(constant)` is folded into its integer
storage (`backends.lowering.fold_quantized_constants`): weights at 1, 2 or 4 bytes, int32 biases,
tables, shapes. Latency is the median of `repeats` runs of one evaluation batch on the cpu
backend, the configurations interleaved run by run so that a load change on the machine
affects them alike; a model with an op the cpu backend lacks is not timed, and the summary
says which op. The reference backend (numpy) is never timed: its speed says nothing of a
deployed model's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from lowbit import backends
from lowbit.backends.lowering import fold_quantized_constants, has_quantized_constants
from lowbit.errors import UnsupportedError
from lowbit.ir.graph import CONSTANT, Graph

LATENCY_BACKEND = "cpu"
DEFAULT_REPEATS = 15


def model_bytes(graph: Graph) -> int:
    """Bytes of the graph's constants in their storage type (module docstring)."""
    if has_quantized_constants(graph):
        graph = fold_quantized_constants(graph.copy())
    return int(sum(np.asarray(n.attrs["value"]).nbytes for n in graph.nodes
                   if n.op_type == CONSTANT))


@dataclass
class Costs:
    """Sizes (bytes) and latencies (seconds, or None when not measured) by label."""

    size: dict[str, int] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    latency_note: str = ""
    """Why latency was not measured, or how it was."""

    def lines(self, chosen: str = "chosen") -> list[str]:
        others = [k for k in self.size if k != chosen]
        size = f"size: {_mb(self.size[chosen])}" + (
            " (" + ", ".join(f"{k}: {_mb(self.size[k])}" for k in others) + ")" if others else "")
        lines = [size]
        if self.latency:
            rest = [k for k in self.latency if k != chosen]
            lines.append(f"latency ({self.latency_note}): {_ms(self.latency[chosen])}" + (
                " (" + ", ".join(f"{k}: {_ms(self.latency[k])}" for k in rest) + ")"
                if rest else ""))
        else:
            lines.append(f"latency: {self.latency_note}")
        return lines


def measure(graphs: Mapping[str, Graph], batch: Mapping[str, np.ndarray] | None,
            latency: bool = True, repeats: int = DEFAULT_REPEATS) -> Costs:
    """Size of each graph, and its latency on the cpu backend when available (module
    docstring)."""
    costs = Costs(size={label: model_bytes(g) for label, g in graphs.items()})
    if not latency:
        costs.latency_note = "not measured (asked not to)"
    elif LATENCY_BACKEND not in backends.BACKENDS:
        costs.latency_note = (f"not measured: this lowbit has no compiled {LATENCY_BACKEND} "
                              f"backend (lowbit.compile(graph, backend=\"{LATENCY_BACKEND}\")); "
                              f"the numpy reference's time says nothing of a deployed model's")
    elif batch is None:
        costs.latency_note = "not measured: no evaluation batch"
    else:
        try:  # the cpu backend lowers a graph at its first run: that may refuse an op too
            runs = {label: backends.compile(g, LATENCY_BACKEND) for label, g in graphs.items()}
            costs.latency = interleaved_medians(runs, batch, repeats)
        except UnsupportedError as exc:  # said in the summary; never timed on the reference
            costs.latency_note = f"not measured: {exc}"
            return costs
        costs.latency_note = f"{LATENCY_BACKEND} backend, median of {repeats} runs, " \
            f"one evaluation batch"
    return costs


def interleaved_medians(runs: Mapping[str, object], batch: Mapping[str, np.ndarray],
                        repeats: int) -> dict[str, float]:
    """Median seconds of each executable on `batch`, run in turn `repeats` times after one
    warm-up run each."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    for run in runs.values():
        run(dict(batch))  # type: ignore[operator]
    for _ in range(repeats):
        for label, run in runs.items():
            start = time.perf_counter()
            run(dict(batch))  # type: ignore[operator]
            times[label].append(time.perf_counter() - start)
    return {label: float(np.median(t)) for label, t in times.items()}


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"
