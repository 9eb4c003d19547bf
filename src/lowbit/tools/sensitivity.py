"""Which layers to keep in higher precision: quantize one layer at a time, the rest float.

For each candidate node N (a node the full quantization computes in integers, except the ops
that only move or select data, which add no error of their own), the float graph is quantized
with the user's config plus two rules appended last,

    - regex: '.*'          precision: float      # every node stays in float ...
    - name: N              precision: <N's>      # ... except N, with all its own settings

so N's input is quantized with its calibrated range, N computes in integers and its output,
rounded as in the whole quantized model (static: the whole config decides which results are
worth integers), is dequantized for the float rest. That graph runs on every batch and its
outputs are compared with the float graph's, over all outputs and batches:

    SQNR   = 10 log10(sum f^2 / sum (q - f)^2) dB   (inf when identical)
    cosine = sum f q / sqrt(sum f^2 * sum q^2)

Layers rank by SQNR, lowest (most sensitive) first. `Sensitivity.config(top)` is the user's
config with the `top` most sensitive layers raised to higher precision (static: int16
activations and weights; dynamic: float, since dynamic quantization computes in 8 bits), and
`yaml_rules(top)` the same rules as a YAML snippet to paste under `rules:`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import yaml

from lowbit.backends.reference.resume import RecordedRun
from lowbit.errors import InputError
from lowbit.ir.graph import Graph
from lowbit.mapping import Mapper, local_map
from lowbit.ops.registry import lookup
from lowbit.quant import dynamic as _dynamic
from lowbit.quant import static as _static
from lowbit.quant.blas_threads import one_blas_thread
from lowbit.quant.cache import QuantCache
from lowbit.quant.config import QuantConfig, Rule
from lowbit.quant.profile import Profile

HIGHER_PRECISION = {
    "static": {"precision": "int16", "weight_precision": "int16"},
    "dynamic": {"precision": "float"},
}
"""What `Sensitivity.config` gives the most sensitive layers."""


@dataclass
class LayerSensitivity:
    """The graph outputs' error when only node `name` is quantized."""

    name: str
    op_type: str
    sqnr: float
    cosine: float


@dataclass
class Sensitivity:
    """Layers, most sensitive first, and the config they were measured with."""

    layers: list[LayerSensitivity]
    base: QuantConfig
    mode: str
    """"static" or "dynamic"."""
    all_quantized_sqnr: float = math.nan
    """The outputs' SQNR with every layer quantized, for scale."""
    higher: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.higher:
            self.higher = dict(HIGHER_PRECISION[self.mode])

    def rules(self, top: int) -> list[Rule]:
        """One rule per layer among the `top` most sensitive, raising it to higher precision."""
        return [Rule(name=layer.name, **self.higher) for layer in self.layers[:top]]

    def config(self, top: int) -> QuantConfig:
        """The config measured with, plus `rules(top)` appended (they win over earlier rules)."""
        return QuantConfig(self.base.default, (*self.base.rules, *self.rules(top)),
                           self.base.source)

    def yaml_rules(self, top: int) -> str:
        """`rules(top)` as YAML list items, ready to paste under a config's `rules:`."""
        if top <= 0 or not self.layers:
            return ""
        return yaml.safe_dump([r.to_dict() for r in self.rules(top)], sort_keys=False)

    def table(self, top: int | None = None):
        """A rich Table of the `top` most sensitive layers (all when None)."""
        from rich.table import Table

        table = Table(title=f"{self.mode} quantization, one layer at a time (outputs' SQNR with "
                            f"every layer quantized: {self.all_quantized_sqnr:.2f} dB)")
        for col in ("rank", "layer", "op", "output SQNR dB", "output cosine"):
            table.add_column(col, justify="left" if col in ("layer", "op") else "right")
        for i, s in enumerate(self.layers[:top], 1):
            table.add_row(str(i), s.name, s.op_type, f"{s.sqnr:.2f}", f"{s.cosine:.6f}")
        return table


@one_blas_thread
def sensitivity(
    float_graph: Graph,
    batches: Sequence[Mapping[str, np.ndarray]],
    *,
    profile: Profile | None = None,
    config: QuantConfig | None = None,
    dynamic: bool = False,
    progress: bool = True,
    cache: QuantCache | None = None,
    mapper: Mapper | None = None,
) -> Sensitivity:
    """Rank the layers of `float_graph` by the error quantizing each alone puts on its outputs
    (module docstring). Static quantization needs the `profile` taken on `float_graph`; with
    `dynamic`, `lowbit.quant.dynamic` quantizes and no profile is used. `batches` is run once
    per layer, so it must be a sequence, not a one-shot iterator.

    Each layer's run resumes from the float model's run on the same batch (the values before
    the layer are the float model's: `lowbit.backends.reference.resume`), so a layer costs the
    part of the model from it to the outputs. `cache` (static: a `QuantCache` of `profile`)
    keeps each layer's weight rounding and ranges for later quantizations. `mapper`
    (`lowbit.mapping`; default: here, one layer after another) runs the layers' evaluations,
    e.g. on a Dask cluster (`lowbit.cluster.mapping.ClusterMapper`)."""
    config = config or QuantConfig()
    batches = list(batches)
    if not batches:
        raise InputError("sensitivity needs at least one batch of inputs")
    if not dynamic and profile is None:
        raise InputError("sensitivity of static quantization needs the calibration profile "
                         "taken on the float model (lowbit.profile, or --profile/--calib)")
    if not dynamic and cache is None:
        cache = QuantCache(profile)
    context = SensitivityContext(float_graph, batches, profile, config, dynamic, cache)
    full = context.quantize(config)
    candidates = [(r.name, r.op_type) for r in full.summary.integer_nodes
                  if not moves_data(r.op_type)]
    if not candidates:
        raise InputError(f"no node of graph '{float_graph.name}' computes in integers with this "
                         f"config: nothing to rank")
    with _progress(progress, len(candidates)) as advance:
        errors = (mapper or local_map)(layer_error, context, [n for n, _ in candidates],
                                       lambda _: advance())
    layers = [LayerSensitivity(name, op_type, sqnr, cosine)
              for (name, op_type), (sqnr, cosine) in zip(candidates, errors, strict=True)]
    layers.sort(key=lambda s: (s.sqnr, s.name))
    everything, _ = output_error(context.recorded(), full.graph)
    return Sensitivity(layers, config, "dynamic" if dynamic else "static", everything)


@dataclass
class SensitivityContext:
    """What every layer's evaluation needs (`layer_error`); picklable, for a mapper that sends
    it to other processes, each of which records the float run once (`recorded`)."""

    graph: Graph
    batches: list
    profile: Profile | None
    config: QuantConfig
    dynamic: bool
    cache: QuantCache | None
    record: RecordedRun | None = field(default=None, repr=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "record": None}

    def recorded(self) -> RecordedRun:
        """The float model's run on the batches (made at the first call in each process)."""
        if self.record is None:
            self.record = RecordedRun(self.graph, self.batches)
        return self.record

    def quantize(self, config: QuantConfig, whole: QuantConfig | None = None):
        """Quantize the graph with `config` (`whole`: the whole model's config, for one
        layer's). The first static call checks the profile against the graph; the layers'
        calls skip that hash of the whole graph (the graph does not change meanwhile)."""
        if self.dynamic:
            return _dynamic.quantize_dynamic(self.graph, config)
        assert self.profile is not None
        return _static.quantize(self.graph, self.profile, config, plan_config=whole,
                                cache=self.cache, profile_checked=whole is not None)


def layer_error(context: SensitivityContext, name: str) -> tuple[float, float]:
    """(SQNR, cosine) of the outputs with layer `name` alone quantized (module docstring)."""
    alone = context.quantize(alone_config(context.graph, context.config, name), context.config)
    return output_error(context.recorded(), alone.graph)


def alone_config(graph: Graph, config: QuantConfig, name: str) -> QuantConfig:
    """`config` with node `name` alone quantized (its own settings), the rest float."""
    node = next(n for n in graph.nodes if n.name == name)
    own = config.settings_for(node).precision
    return QuantConfig(config.default, (*config.rules, Rule(regex=".*", precision="float"),
                                        Rule(name=name, precision=own)), config.source)


def moves_data(op_type: str) -> bool:
    """Whether the (ONNX) op only moves values (`OpDef.moves_data`): it keeps its input's
    parameters (or only unifies them, Concat), adds no error of its own and is not ranked."""
    op = lookup(op_type)
    return op is not None and op.moves_data is not None


def output_error(record: RecordedRun, graph: Graph) -> tuple[float, float]:
    """(SQNR, cosine) of `graph`'s outputs against the recorded float outputs, over all
    outputs and batches (module docstring)."""
    signal = noise = dot = energy = 0.0
    run = record.runner(graph)
    for i, ref in enumerate(record.outputs_of):
        for f, q in zip(ref, run(i), strict=True):
            f, q = np.asarray(f, np.float64), np.asarray(q, np.float64)
            signal += float((f * f).sum())
            noise += float(((q - f) ** 2).sum())
            dot += float((f * q).sum())
            energy += float((q * q).sum())
    sqnr = math.inf if noise == 0 else (-math.inf if signal == 0
                                        else 10 * math.log10(signal / noise))
    cosine = 1.0 if signal == energy == 0 else (
        dot / math.sqrt(signal * energy) if signal and energy else 0.0)
    return sqnr, cosine


@contextlib.contextmanager
def _progress(enabled: bool, total: int):
    """A bar "one layer at a time" on stderr when enabled; yields a function advancing it."""
    if not enabled:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("one layer at a time"), BarColumn(), MofNCompleteColumn(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task("layers", total=total)
        yield lambda: bar.advance(task)
