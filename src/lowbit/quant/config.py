r"""QuantConfig: how each node is quantized, as a global default plus ordered override rules.

A rule matches nodes by exactly one of: `name` (exact node name), `regex` (a Python regular
expression that must match the *whole* node name) or `op_type` (exact ONNX op type), and sets
any subset of the settings. `settings_for(node)` starts from the default and applies every
matching rule in order, field by field, so later rules win. In YAML::

    default:                      # every key optional; omitted ones keep lowbit's defaults
      precision: int8             # int8 | uint8 | int16 | fp16 | float (keep the node in float)
      per_channel: true           # weights: one scale per output channel
      calibration: mse            # minmax | percentile | entropy | mse
      percentile: 99.99           # used by calibration: percentile
      scheme: asymmetric          # asymmetric | symmetric | symmetric_uint8 | power_of_2
      weight_precision: int8      # int8 | int16
      weight_scheme: symmetric    # symmetric | asymmetric | power_of_2
      requant: auto               # auto | q31 | prescale (integer rescale encoding)
      bias_correction: true       # static: fold the mean weight-rounding error into the bias
      weight_rounding: gptq       # static: gptq (errors cancel through the inputs) | nearest
      int16_before_bias: true     # static: a product whose only reader adds a constant bias
                                  #   keeps its result in int16 (one 8-bit rounding, after it)
      int16_before_table: true    # static: a result only lookup tables read is int16 (not a Conv's)
      granularity: group          # dynamic: activation parameters per group | row | head | tensor
      group_size: 32              # dynamic, granularity group: inner-dimension elements a group
      reduce_range: false         # dynamic: 7-bit activation codes
      activation_products: true   # dynamic: also MatMuls of two activations (attention)
      smoothing: 0.5              # products reading a LayerNorm: SmoothQuant exponent (0: off)
      equalization: 0.3           # static: convolutions whose input channels differ widely in
                                  #   range: channel equalization exponent (0: off)
      outlier_channels: 2         # dynamic: GELU outlier channels in a product of their own
    rules:
      - name: conv1               # the first conv stays in float
        precision: float
      - regex: 'blocks\.3\..*'  # a whole block in int16
        precision: int16
      - op_type: Softmax
        calibration: minmax

`QuantConfig.from_yaml(path)` reads it; `check(graph)` raises for rules that name a node the
graph lacks and returns warnings for rules that match nothing. Every mistake is a `ConfigError`
naming the file, the rule (`rules[2]`, counted from 0) and the valid choices.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lowbit.errors import ConfigError
from lowbit.fileio import write_atomically
from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Graph, Node

PRECISIONS: tuple[str, ...] = ("int8", "uint8", "int16", "fp16", "float")
"""Activation precisions: the integer ones quantize the node; fp16 and float keep it in floats."""
INTEGER_PRECISIONS: tuple[str, ...] = ("int8", "uint8", "int16")
WEIGHT_PRECISIONS: tuple[str, ...] = ("int8", "int16")
CALIBRATION_METHODS: tuple[str, ...] = ("minmax", "percentile", "entropy", "mse")
SCHEMES: tuple[str, ...] = ("asymmetric", "symmetric", "symmetric_uint8", "power_of_2")
"""asymmetric: any zero point; symmetric: zero point 0 (128 for uint8); symmetric_uint8: like
symmetric, but a tensor that is never negative uses the whole unsigned range; power_of_2:
symmetric with a power-of-two scale."""
WEIGHT_SCHEMES: tuple[str, ...] = ("symmetric", "asymmetric", "power_of_2")

# Defaults: what `lowbit.quantize(graph, profile)` does with no config. They are meant to be the
# best general choice and will be tuned on the real models of the accuracy tests.
DEFAULT_PRECISION = "int8"
DEFAULT_PER_CHANNEL = True
DEFAULT_CALIBRATION = "mse"
"""Activation ranges minimising the expected squared quantization error (clipping included),
as the standard PTQ pipeline of Nagel et al.'s white paper (2021) recommends. Measured with
bias correction: EfficientNet-Lite0 logits SQNR 21.9 dB (minmax 20.9, percentile 21.6,
entropy 17.2); MNISTNet accuracy equal to minmax's (99.825 %)."""
DEFAULT_PERCENTILE = 99.99
DEFAULT_SCHEME = "asymmetric"
DEFAULT_WEIGHT_PRECISION = "int8"
DEFAULT_WEIGHT_SCHEME = "symmetric"
DEFAULT_REQUANT = "auto"
DEFAULT_BIAS_CORRECTION = True
"""Static quantization of Conv/Gemm: subtract the expected output error of the weights'
rounding, (W_q - W) . E[x], from the bias (lowbit.quant.static)."""
DEFAULT_WEIGHT_ROUNDING = "gptq"
DEFAULT_INT16_BEFORE_BIAS = True
"""Static quantization of a Conv/Gemm/MatMul with a constant weight whose only reader is an
integer Add of a constant (a MatMul's bias: ONNX has no MatMul with bias): its result is
rounded to int16 instead of 8 bits, so that the 8-bit rounding happens once, after the bias
(the product stays int8 x int8). On all-MiniLM-L6-v2 (24 such products) the single-word
embedding cosine goes 0.9857 -> 0.9890, long texts 0.9906 -> 0.9943. The exports write such a
product's result as float straight into its bias Add, which ONNX Runtime runs as an integer
product (MatMulIntegerToFloat) with a float bias: no slower than two 8-bit roundings
(docs/static_quantization.md)."""
DEFAULT_INT16_BEFORE_TABLE = True
"""Static quantization: a result that only lookup tables (TABLE ops: Gelu, Sigmoid, Tanh, ...)
computing in integers read is rounded to int16 instead of 8 bits, and those tables get 65536
entries: a table's input range is often set by a few outliers (MiniLM's GELU inputs), and the
table's output is rounded to 8 bits anyway. On all-MiniLM-L6-v2 with int16_before_bias (the 6
GELU inputs) single words go 0.9890 -> 0.9914. ONNX Runtime computes those ops in float from
the dequantized input either way. A Conv's result stays 8-bit (unless channel equalization
needs it, `lowbit.quant.equalization`): ONNX Runtime computes a Conv with an int16 result in
float (PP-OCRv4's direction classifier, exported: 1.12x its float model's latency, 0.75x with
8-bit Conv results), and on PP-OCRv4's HardSwish inputs 16 bits gained nothing (int16 before
tables off altogether: recognizer 13.6 dB either way, detector 10.3 -> 11.0 dB)."""
DEFAULT_GRANULARITY = "group"
DEFAULT_GROUP_SIZE = 32
"""Dynamic quantization with granularity "group": a product's inner dimension K is cut into
groups of this many elements, each with its own activation (per row) and weight (per output
channel) parameters. On all-MiniLM-L6-v2 (benchmarks/dynamic_vs_peers.py) groups of 16 / 32 /
64 / whole rows give a single-word embedding cosine mean of 0.9998 / 0.9997 / 0.9995 / 0.9986
(30 words); 32 is the middle ground between accuracy and the cost of one float
multiply-add per group and output."""
DEFAULT_REDUCE_RANGE = False
DEFAULT_ACTIVATION_PRODUCTS = True
DEFAULT_SMOOTHING = 0.5
"""A product reading a LayerNormalization: exponent alpha of the per-channel smoothing factors
(`lowbit.quant.smoothing`; dynamic quantization takes the channel ranges from the LayerNorm's
constants, static from calibration); 0 turns smoothing off."""
DEFAULT_EQUALIZATION = 0.3
"""Static quantization of a Conv whose input channels differ widely in range (the median
channel's extreme below a quarter of the largest; PP-LCNet and MobileOne blocks after
reparameterization): exponent alpha of the per-channel equalization factors
t_c = a_c ** alpha / w_c ** (1 - alpha) (`lowbit.quant.equalization`); 0 turns it off. On
PaddleOCR's PP-OCRv4 recognizer (60 text lines, strings read as float reads them, measured
when the rule was introduced): off 53 %, alpha 0.3 78 %, 0.5 75 %, 0.7 60 %."""
DEFAULT_OUTLIER_CHANNELS = 2
"""Dynamic quantization of a product reading a GELU: how many estimated outlier channels get
an integer product of their own (`lowbit.quant.smoothing.gelu_outlier_channels`); 0: none."""
GRANULARITIES: tuple[str, ...] = ("group", "row", "head", "tensor")
"""Dynamic quantization: one set of run-time activation parameters per group of `group_size`
elements of a row (with weights per group and output channel; the right operand of a product
of two activations per group of a column), per row (token) of a product's left operand (per
column of a right activation operand), per matrix of a batched product (per attention head
for [B, H, S, D]; per sequence for [B, S, K]), or per tensor."""
WEIGHT_ROUNDINGS: tuple[str, ...] = ("gptq", "nearest")
"""Static quantization of constant weights: gptq picks the weights' codes so that their output
errors cancel through the calibration inputs' second moments (exhaustively for rows of up to 9
weights, by GPTQ for longer ones: lowbit.quant.weight_rounding); nearest rounds each weight on
its own."""
REQUANT_METHODS: tuple[str, ...] = ("auto", "q31", "prescale")
"""auto: the more accurate encoding for the output width (lowbit.numerics.fixed_point)."""

MATCHERS: tuple[str, ...] = ("name", "regex", "op_type")
_CHOICES: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS,
    "calibration": CALIBRATION_METHODS,
    "scheme": SCHEMES,
    "weight_precision": WEIGHT_PRECISIONS,
    "weight_scheme": WEIGHT_SCHEMES,
    "requant": REQUANT_METHODS,
    "granularity": GRANULARITIES,
    "weight_rounding": WEIGHT_ROUNDINGS,
}
_DTYPES: dict[str, DType] = {
    "int8": dtypes.INT8, "uint8": dtypes.UINT8, "int16": dtypes.INT16,
    "fp16": dtypes.FLOAT16, "float": dtypes.FLOAT32,
}  # fmt: skip


@dataclass(frozen=True)
class NodeSettings:
    """The resolved quantization settings of one node (or the config's global default).

    `matched_rules` lists the indices of the rules that applied, in order (empty for the
    default); it is for reports and does not take part in equality.
    """

    precision: str = DEFAULT_PRECISION
    per_channel: bool = DEFAULT_PER_CHANNEL
    calibration: str = DEFAULT_CALIBRATION
    percentile: float = DEFAULT_PERCENTILE
    scheme: str = DEFAULT_SCHEME
    weight_precision: str = DEFAULT_WEIGHT_PRECISION
    weight_scheme: str = DEFAULT_WEIGHT_SCHEME
    requant: str = DEFAULT_REQUANT
    bias_correction: bool = DEFAULT_BIAS_CORRECTION
    weight_rounding: str = DEFAULT_WEIGHT_ROUNDING
    int16_before_bias: bool = DEFAULT_INT16_BEFORE_BIAS
    int16_before_table: bool = DEFAULT_INT16_BEFORE_TABLE
    granularity: str = DEFAULT_GRANULARITY
    group_size: int = DEFAULT_GROUP_SIZE
    reduce_range: bool = DEFAULT_REDUCE_RANGE
    activation_products: bool = DEFAULT_ACTIVATION_PRODUCTS
    smoothing: float = DEFAULT_SMOOTHING
    equalization: float = DEFAULT_EQUALIZATION
    outlier_channels: int = DEFAULT_OUTLIER_CHANNELS
    matched_rules: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for key in SETTING_KEYS:
            object.__setattr__(self, key, _check_setting(key, getattr(self, key)))
        object.__setattr__(self, "matched_rules", tuple(self.matched_rules))

    @property
    def quantized(self) -> bool:
        """Whether the node computes in integers (False for fp16 and float)."""
        return self.precision in INTEGER_PRECISIONS

    @property
    def dtype(self) -> DType:
        """The element type of the node's activations."""
        return _DTYPES[self.precision]

    @property
    def weight_dtype(self) -> DType:
        return _DTYPES[self.weight_precision]

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in SETTING_KEYS}


SETTING_KEYS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(NodeSettings) if f.name != "matched_rules"
)
_BOOL_SETTINGS = frozenset(f.name for f in dataclasses.fields(NodeSettings) if f.type == "bool")


@dataclass(frozen=True, repr=False)
class Rule:
    """Match nodes by exactly one of `name`, `regex` (whole-name match) or `op_type`, and set the
    settings given (None leaves a setting to the default and earlier rules).

        Rule(name="conv1", precision="float")
        Rule(regex=r"blocks\\.3\\..*", precision="int16")
        Rule(op_type="Softmax", calibration="minmax")
    """

    name: str | None = None
    regex: str | None = None
    op_type: str | None = None
    precision: str | None = None
    per_channel: bool | None = None
    calibration: str | None = None
    percentile: float | None = None
    scheme: str | None = None
    weight_precision: str | None = None
    weight_scheme: str | None = None
    requant: str | None = None
    bias_correction: bool | None = None
    weight_rounding: str | None = None
    int16_before_bias: bool | None = None
    int16_before_table: bool | None = None
    granularity: str | None = None
    group_size: int | None = None
    reduce_range: bool | None = None
    activation_products: bool | None = None
    smoothing: float | None = None
    equalization: float | None = None
    outlier_channels: int | None = None
    _pattern: re.Pattern | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = [key for key in MATCHERS if getattr(self, key) is not None]
        if len(given) != 1:
            which = ", ".join(given) if given else "none"
            raise ConfigError(
                f"a rule needs exactly one of {', '.join(MATCHERS)} to match nodes; got {which}"
            )
        key = given[0]
        value = getattr(self, key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} must be a non-empty string, got {value!r} (quote it in YAML)")
        if key == "regex":
            try:
                object.__setattr__(self, "_pattern", re.compile(value))
            except re.error as e:
                raise ConfigError(f"regex {value!r} does not compile: {e}") from None
        if key == "op_type":
            from lowbit.ops import all_ops

            known = sorted({op_type for _, op_type in all_ops()})
            if value not in known:
                raise ConfigError(f"op_type {value!r} is not an op lowbit knows"
                                  f"{_suggest(value, known, listing=False)}; op types are "
                                  f"spelled as in ONNX (Conv, MatMul, Gemm, Softmax, ...)")
        if not self.overrides():
            raise ConfigError(
                f"rule {self.matcher()} sets nothing; "
                f"give at least one of {', '.join(SETTING_KEYS)}"
            )
        for setting, setting_value in self.overrides().items():
            object.__setattr__(self, setting, _check_setting(setting, setting_value))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"Rule({fields})"

    def matcher(self) -> str:
        """How the rule selects nodes, as written: `name 'conv1'`, `regex '...'`."""
        key = next(k for k in MATCHERS if getattr(self, k) is not None)
        return f"{key} {getattr(self, key)!r}"

    def matches(self, node: Node) -> bool:
        if self.name is not None:
            return node.name == self.name
        if self._pattern is not None:
            return self._pattern.fullmatch(node.name) is not None
        return node.op_type == self.op_type

    def overrides(self) -> dict[str, Any]:
        """The settings this rule sets."""
        return {k: getattr(self, k) for k in SETTING_KEYS if getattr(self, k) is not None}

    def to_dict(self) -> dict[str, Any]:
        key = next(k for k in MATCHERS if getattr(self, k) is not None)
        return {key: getattr(self, key), **self.overrides()}


@dataclass(frozen=True)
class QuantConfig:
    """A global default plus an ordered list of rules; later rules override earlier ones field
    by field. `source` names the file in messages. See the module docstring for the YAML form."""

    default: NodeSettings = field(default_factory=NodeSettings)
    rules: tuple[Rule, ...] = ()
    source: str = field(default="<config>", compare=False)

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        for i, rule in enumerate(rules):
            if not isinstance(rule, Rule):
                raise ConfigError(
                    f"{self.source}: rules[{i}] is a {type(rule).__name__}, not a Rule"
                )
        if not isinstance(self.default, NodeSettings):
            raise ConfigError(f"{self.source}: default must be NodeSettings")
        object.__setattr__(self, "rules", rules)

    # -- resolution ---------------------------------------------------------------------------
    def uses_input_moments(self) -> bool:
        """Whether some node may round its weights by GPTQ, which reads the profile's input
        moments: False only when the default and every rule say `weight_rounding: nearest`, so
        profiling for this config can skip them (`lowbit.profile(..., moments=False)`)."""
        roundings = {self.default.weight_rounding} | {r.weight_rounding for r in self.rules}
        return bool(roundings - {"nearest", None})

    def settings_for(self, node: Node) -> NodeSettings:
        """The default with every rule that matches `node` applied in order."""
        merged = self.default.to_dict()
        applied = []
        for i, rule in enumerate(self.rules):
            if rule.matches(node):
                merged.update(rule.overrides())
                applied.append(i)
        return NodeSettings(**merged, matched_rules=tuple(applied))

    def check(self, graph: Graph) -> list[str]:
        """Check the rules against `graph`: ConfigError for a rule naming a node that does not
        exist (with close matches); one warning per rule that matches no node."""
        nodes = [node for node, _ in graph.walk()]  # the bodies of If, Loop and Scan too
        names = [node.name for node in nodes]
        known = set(names)
        warnings = []
        for i, rule in enumerate(self.rules):
            where = f"{self.source}: rules[{i}]"
            if rule.name is not None and rule.name not in known:
                raise ConfigError(
                    f"{where}: graph '{graph.name}' has no node named {rule.name!r}"
                    f"{_suggest(rule.name, names)}"
                )
            if not any(rule.matches(node) for node in nodes):
                warnings.append(f"{where}: {rule.matcher()} matches no node{_hint(rule, graph)}")
        return warnings

    def with_default(self, **changes: Any) -> QuantConfig:
        """A copy with some default settings changed (as CLI flags do)."""
        _check_keys(changes, SETTING_KEYS, self.source)
        return dataclasses.replace(self, default=dataclasses.replace(self.default, **changes))

    # -- dict and YAML ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, source: str = "<config>") -> QuantConfig:
        """Build a config from the parsed YAML structure `{default: {...}, rules: [...]}`."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"{source}: a config is a mapping with 'default' and 'rules', "
                f"got a {type(data).__name__}"
            )
        _check_keys(data, ("default", "rules"), source)
        default_data = data.get("default") or {}
        if not isinstance(default_data, Mapping):
            raise ConfigError(f"{source}: default must be a mapping of settings")
        _check_keys(default_data, SETTING_KEYS, f"{source}: default")
        try:
            default = NodeSettings(**default_data)
        except ConfigError as e:
            raise ConfigError(f"{source}: default: {e}") from None
        rules_data = data.get("rules") or []
        if not isinstance(rules_data, list):
            raise ConfigError(f"{source}: rules must be a list, got a {type(rules_data).__name__}")
        rules = []
        for i, item in enumerate(rules_data):
            where = f"{source}: rules[{i}]"
            if not isinstance(item, Mapping):
                raise ConfigError(f"{where}: a rule is a mapping, got {item!r}")
            _check_keys(item, MATCHERS + SETTING_KEYS, where)
            try:
                rules.append(Rule(**item))
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None
        return cls(default, tuple(rules), source)

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default.to_dict(), "rules": [r.to_dict() for r in self.rules]}

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> QuantConfig:
        """Read a YAML config; ConfigError (naming the file) if it is missing or malformed."""
        source = os.fspath(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {source} not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read config file {source}: {e}") from None
        return cls.from_yaml_text(text, source)

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<config>") -> QuantConfig:
        try:
            data = yaml.load(text, Loader=_StrictLoader)
        except yaml.YAMLError as e:
            raise ConfigError(f"{source}: malformed YAML: {_yaml_problem(e)}") from None
        return cls.from_dict(data, source)

    def to_yaml(self, path: str | os.PathLike | None = None) -> str:
        """The config as YAML text; also written (atomically) to `path` when given."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)
        if path is not None:
            write_atomically(path, text.encode("utf-8"))
        return text


# -- validation helpers ---------------------------------------------------------------------------


def _check_setting(key: str, value: Any) -> Any:
    if key in _CHOICES:
        choices = _CHOICES[key]
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(
                f"unknown {key} {value!r}{_suggest(str(value), choices, listing=False)}; "
                f"valid: {', '.join(choices)}"
            )
        return value
    if key in _BOOL_SETTINGS:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if key == "outlier_channels":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"outlier_channels must be a whole number >= 0, got {value!r}")
        return value
    if key == "group_size":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"group_size must be a whole number >= 1, got {value!r}")
        return value
    if key in ("smoothing", "equalization"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ConfigError(f"{key} must be a number in [0, 1), got {value!r}")
        return float(value)
    if key == "percentile":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
            raise ConfigError(f"percentile must be a number in (0, 100], got {value!r}")
        return float(value)
    raise ConfigError(f"unknown setting {key!r}")


def _check_keys(data: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in valid:
            raise ConfigError(
                f"{where}: unknown key {key!r}{_suggest(str(key), valid, listing=False)}; "
                f"valid keys: {', '.join(valid)}"
            )


def _suggest(word: str, candidates: Iterable[str], listing: bool = True) -> str:
    """` (did you mean 'a' or 'b'?)` from close matches; else (if `listing`) a few candidates."""
    candidates = list(candidates)
    close = difflib.get_close_matches(word, candidates, n=5, cutoff=0.6)
    if close:
        return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
    if listing and candidates:
        shown = ", ".join(repr(c) for c in candidates[:8])
        more = f" and {len(candidates) - 8} more" if len(candidates) > 8 else ""
        return f"; its nodes are {shown}{more}"
    return ""


def _hint(rule: Rule, graph: Graph) -> str:
    if rule.op_type is not None:
        op_types = sorted({node.op_type for node in graph.nodes})
        return _suggest(rule.op_type, op_types, listing=False) or (
            f" (op types in the graph: {', '.join(op_types)})"
        )
    if rule.regex is not None:
        return " (the regex must match the whole node name)"
    return ""


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    text = f"{context}, {problem}" if context else problem
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {text}"
    return text


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader (no arbitrary objects) that refuses duplicate keys instead of keeping the last
    one silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable: SafeLoader reports it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark,
                )  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping
)
