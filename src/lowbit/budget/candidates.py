"""The layers a budget search may raise, the precisions it raises them to, and a quantizer that
quantizes the float graph again for each choice, reusing what did not change.

Rungs, lowest first (`LADDERS`): static quantization raises a layer from its configured
precision to int16 activations and int16 weights, then to float; dynamic quantization (8-bit
integer products, per group of 32 by default) raises it to float. A choice is a mapping
{layer name: rung}; its config is the user's config with one rule per raised layer appended,
so that they win over the user's rules:

    - name: node_Conv_877
      precision: int16
      weight_precision: int16

Static quantization keeps a `QuantCache` (lowbit.quant.cache): each layer's GPTQ rounding and
each value's calibrated range is computed once for every choice tried, so quantizing another
choice costs the graph walk (EfficientNet-Lite0: about a second, against 20 s the first time).
Dynamic quantization has nothing costly to keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lowbit.errors import InputError
from lowbit.ir.graph import Graph
from lowbit.quant import dynamic as _dynamic
from lowbit.quant import static as _static
from lowbit.quant.cache import QuantCache
from lowbit.quant.config import QuantConfig, Rule
from lowbit.quant.profile import Profile
from lowbit.quant.static import QuantResult
from lowbit.tools.sensitivity import moves_data

LADDERS = {"static": ("int16", "float"), "dynamic": ("float",)}
"""The precisions a layer is raised to, in order."""

RUNG_SETTINGS = {
    "int16": {"precision": "int16", "weight_precision": "int16"},
    "float": {"precision": "float"},
}


@dataclass(frozen=True)
class Layer:
    name: str
    op_type: str
    precision: str
    """What the user's config computes it in ("int8", "int16", ...)."""


class Quantizer:
    """Quantizes `graph` with `config` plus raised layers (module docstring)."""

    def __init__(self, graph: Graph, config: QuantConfig | None = None,
                 profile: Profile | None = None, dynamic: bool = False) -> None:
        if not dynamic and profile is None:
            raise InputError("a budget search of static quantization needs the calibration "
                             "profile (lowbit.profile, or --calib/--profile)")
        self.graph = graph
        self.config = config or QuantConfig()
        self.profile = profile
        self.dynamic = dynamic
        self.mode = "dynamic" if dynamic else "static"
        self.ladder = LADDERS[self.mode]
        self.cache = None if dynamic else QuantCache(profile)
        if profile is not None:
            profile.check(graph)  # once: every candidate quantizes this same graph
        self.base = self.quantize({})
        self.layers = [Layer(r.name, r.op_type, r.mode) for r in self.base.summary.integer_nodes
                       if not moves_data(r.op_type)]
        """The layers that compute in integers with the user's config: those a search may
        raise (ops that only move values add no error of their own)."""
        if not self.layers:
            raise InputError(f"no layer of graph '{graph.name}' computes in integers with this "
                             f"config: there is nothing to raise")

    def config_for(self, raised: Mapping[str, str]) -> QuantConfig:
        """The user's config with one rule per raised layer appended, in the order given."""
        return raised_config(self.config, raised, self.mode)

    def quantize(self, raised: Mapping[str, str]) -> QuantResult:
        """The float graph quantized with `config_for(raised)`."""
        return quantize_raised(self.graph, self.config, raised, self.profile, self.cache,
                               self.dynamic, profile_checked=True)


def raised_config(config: QuantConfig, raised: Mapping[str, str], mode: str) -> QuantConfig:
    """`config` with one rule per raised layer appended, in the order given."""
    ladder = LADDERS[mode]
    rules = []
    for name, rung in raised.items():
        if rung not in ladder:
            raise InputError(f"cannot raise {name} to {rung!r}: {mode} quantization raises a "
                             f"layer to {' then '.join(ladder)}")
        rules.append(Rule(name=name, **RUNG_SETTINGS[rung]))
    return QuantConfig(config.default, (*config.rules, *rules), config.source)


def quantize_raised(graph: Graph, config: QuantConfig, raised: Mapping[str, str],
                    profile: Profile | None, cache: QuantCache | None,
                    dynamic: bool, profile_checked: bool = False) -> QuantResult:
    """`graph` quantized with `raised_config(config, raised)`. `profile_checked`: the caller
    has checked `profile` against `graph` (`Profile.check` hashes the whole graph; a search
    checks once, not once per candidate)."""
    full = raised_config(config, raised, "dynamic" if dynamic else "static")
    if dynamic:
        return _dynamic.quantize_dynamic(graph, full)
    assert profile is not None
    return _static.quantize(graph, profile, full, cache=cache, profile_checked=profile_checked)
