"""Static post-training quantization: a float graph and its profile become a graph whose value
types carry quantization parameters.

Each node is decided in topological order from its QuantConfig settings and its op's
quantization rule (`lowbit.ops.registry`):

- COMPUTE (Conv, Gemm, MatMul) computes in integers whenever its settings are integer: the
  input is quantized per tensor from the profile, a constant weight per output channel (or per
  tensor), the bias to int32 at scale s_in * s_w with zero point 0. Where a bias would not fit
  in +-2**30 at that scale, the channel's weight scale grows until it does
  (`schemes.fit_weight_scale_for_bias`), so the bias never saturates. With `weight_rounding:
  gptq` (the default) the weights' codes are chosen so that their output errors cancel through
  the calibration inputs' second moments (`lowbit.quant.weight_rounding`). With
  `bias_correction` (the default), the float bias then absorbs the mean output error of the
  weights' rounding, `b - (W_q - W) . E[x]`, E[x] the input's channel means in the profile
  (`lowbit.quant.bias_correction`); a Conv/Gemm without bias gets one. A MatMul/Gemm reading a
  LayerNormalization is smoothed first (`smoothing`, SmoothQuant: `_Builder._smooth`).
- RESCALE (Add, Sub, Mul, Concat, averages) and TABLE (Sigmoid, Tanh, ...) compute in integers
  too: their output parameters come from the profile, except the fixed ranges of Sigmoid,
  HardSigmoid and Softmax ([0, 1]) and Tanh ([-1, 1]), which also quantize a float Softmax's
  output for an integer consumer.
- KEEP (Relu, MaxPool, Reshape, Transpose, ...) follows its input: integer in, integer out with
  the same parameters.
- Last, the quantized Muls and Adds of one-element constants right after a quantized HardSwish
  fold into it (`fold_hard_swish_affine`: Y = a * HardSwish(X) + b, one rounding, computed in
  float32 on codes as `int_activation.HardSwishParams` defines).

Integers pay only where an integer node uses them: a RESCALE, TABLE or KEEP node whose results
only float nodes read (not a graph output) stays float, and says so, since rounding its result
would add error and save no float work (a transformer's residual Adds before LayerNorm). A
COMPUTE node whose result no integer node reads (a graph output, or only float nodes) returns
it in float straight from its int32 accumulator (s_in * s_w * acc), so final logits are not
rounded to 8 bits. Two settings, on by default, round a result to int16 instead of 8 bits where
no product reads it directly: with
`int16_before_bias`, a product whose only reader adds a constant (a MatMul's bias, rounded once
after it); with `int16_before_table`, a result only integer lookup tables read (65536-entry
tables).

Float values entering integer nodes get a Quantize (weights too: the float payload stays in the
graph until `fold_quantized_constants`; weights that error-compensating rounding moved are a new
float constant already on the integer grid), integer values read by float nodes or graph
outputs a Dequantize. int16 activations are always symmetric (zero point 0, as TFLite's 16x8
mode), so their products stay within int32. Every node ends up in the summary: how it was
quantized, or why it stayed in float.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from lowbit.errors import ModelError
from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.types import QuantParams, TensorType
from lowbit.ops import infer_node, lookup
from lowbit.ops.product import integer_product
from lowbit.ops.registry import (
    COMPUTE,
    KEEP,
    QUANT_DOMAIN,
    REARRANGES,
    REQUANT,
    RESCALE,
    TABLE,
)
from lowbit.passes.quant_cleanup import fold_hard_swish_affine, simplify_quantize
from lowbit.passes.verifier import verify
from lowbit.quant import (
    bias_correction,
    calibration,
    equalization,
    schemes,
    smoothing,
    weight_rounding,
)
from lowbit.quant.blas_threads import one_blas_thread
from lowbit.quant.cache import QuantCache
from lowbit.quant.config import NodeSettings, QuantConfig
from lowbit.quant.input_moments import moments_problem, moments_shape
from lowbit.quant.observers import divided_stats
from lowbit.quant.profile import Profile, product_input_axis

FIXED_RANGES: dict[str, tuple[float, float]] = {
    "Softmax": (0.0, 1.0),
    "Sigmoid": (0.0, 1.0),
    "HardSigmoid": (0.0, 1.0),
    "Tanh": (-1.0, 1.0),
}
"""Ops whose output range is known without calibration."""


class QuantizationError(ModelError):
    """A node could not be quantized as asked (e.g. `assert_all_quantized`)."""


def check_finite_constants(node: Node) -> None:
    """Refuse a node about to compute in integers whose constant float inputs (weights, bias)
    hold NaN or infinities, naming the tensor and saying what to do: no scale represents them."""
    for i, v in enumerate(node.inputs):
        a = v.const_value if v is not None else None
        if a is None or a.dtype.kind != "f" or a.size == 0:
            continue
        finite = np.isfinite(a)
        if finite.all():
            continue
        bad = a[~finite]
        nan, inf = int(np.isnan(bad).sum()), int(np.isinf(bad).sum())
        first = tuple(int(j) for j in np.argwhere(~finite)[0])
        what = " and ".join(t for t in (f"{nan} NaN" if nan else "",
                                        f"{inf} infinite" if inf else "") if t)
        raise QuantizationError(
            f"initializer '{v.name}' (input {i} of {node.describe()}) holds {what} value(s), "
            f"the first at index {list(first)}; integers cannot represent them. Replace them "
            f"with finite values in the model, or keep the node in float with a config rule "
            f"`- {{name: '{node.name}', precision: float}}` if what it computes stays finite")


@dataclass
class NodeReport:
    """How one node computes after quantization."""

    name: str
    op_type: str
    mode: str
    """"int8", "int16", "uint8" (integer), "fp16", "float", or "-" (no float computation)."""
    detail: str


@dataclass
class QuantSummary:
    rows: list[NodeReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def float_nodes(self) -> list[NodeReport]:
        return [r for r in self.rows if r.mode in ("float", "fp16")]

    @property
    def integer_nodes(self) -> list[NodeReport]:
        return [r for r in self.rows if r.mode.startswith(("int", "uint"))]

    def text(self) -> str:
        """A plain-text table, one line per node."""
        width = max([len(r.name) for r in self.rows] + [4])
        ops = max([len(r.op_type) for r in self.rows] + [2])
        lines = [f"{'node':<{width}}  {'op':<{ops}}  {'mode':<6}  detail"]
        lines += [f"{r.name:<{width}}  {r.op_type:<{ops}}  {r.mode:<6}  {r.detail}"
                  for r in self.rows]
        n_int, n_float = len(self.integer_nodes), len(self.float_nodes)
        lines.append(f"{n_int} nodes compute in integers, {n_float} in float")
        return "\n".join(lines)


@dataclass
class QuantResult:
    graph: Graph
    summary: QuantSummary


@one_blas_thread
def quantize(graph: Graph, profile: Profile, config: QuantConfig | None = None, *,
             assert_all_quantized: bool = False,
             plan_config: QuantConfig | None = None,
             cache: QuantCache | None = None,
             profile_checked: bool = False) -> QuantResult:
    """Quantize a copy of `graph` (see the module docstring); `profile` must have been taken on
    `graph`. With `assert_all_quantized`, any node left computing in float is an error.
    `plan_config` (default: `config`) is the config whose integer nodes decide which results
    are worth integers: `lowbit.sensitivity` quantizes one layer alone with the whole model's
    plan, so that the layer's result is rounded as it is in the whole model. `cache` (made for
    this `profile`) keeps weight roundings and activation parameters for later calls
    (`lowbit.quant.cache`): the same result, without redoing what did not change.
    `profile_checked`: the caller has already checked `profile` against this unchanged `graph`
    (`Profile.check` hashes the whole graph, weights included; `lowbit.sensitivity` checks
    once per ranking, not once per layer)."""
    config = config or QuantConfig()
    if not profile_checked:
        profile.check(graph)
    if cache is not None:
        cache.check(profile)
    warnings = config.check(graph)
    g = graph.copy()
    builder = _Builder(g, profile, config, plan_config or config, cache)
    builder.run()
    g = fold_hard_swish_affine(simplify_quantize(g))
    summary = QuantSummary(builder.rows, list(warnings))
    if assert_all_quantized and summary.float_nodes:
        listed = ", ".join(f"{r.name} ({r.op_type}: {r.detail})" for r in summary.float_nodes)
        raise QuantizationError(f"--assert-all-quantized: {len(summary.float_nodes)} node(s) "
                                f"stay in float: {listed}")
    g.metadata["lowbit.quant_config"] = config.to_yaml()
    verify(g)
    return QuantResult(g, summary)


class _Builder:
    def __init__(self, graph: Graph, profile: Profile, config: QuantConfig,
                 plan_config: QuantConfig, cache: QuantCache | None = None) -> None:
        self.g = graph
        self.cache = cache
        self._original = profile
        self.profile = Profile(profile.graph_hash, profile.stats, profile.batches,
                               profile.samples, profile.constants, profile.moments)
        """A copy that statistics of values made while quantizing (smoothed inputs) join."""
        self._minmax: set[str] = set()
        """Values whose range is min-max whatever the config: no histogram of them exists."""
        self.config = config
        self.rows: list[NodeReport] = []
        self._quantized: dict[tuple[Value, TensorType], Value] = {}
        self._dequantized: dict[Value, Value] = {}
        self._equalized = self._equalize()
        """Conv name -> its input's channel equalization (`lowbit.quant.equalization`)."""
        self._equalizers = {e.mul: e for e in self._equalized.values()}
        """Equalizing Mul -> its equalization."""
        self._readers: dict[Value, list[Node]] = {}
        """The nodes reading each value (in the float graph: quantizing only adds readers of
        new values)."""
        for n in graph.nodes:
            for v in dict.fromkeys(v for v in n.inputs if v is not None):
                self._readers.setdefault(v, []).append(n)
        self._integer_readers = self._plan(plan_config)
        """Values that some node worth computing in integers reads, and graph outputs
        (`_plan`)."""
        self._wide = equalization.wide_chain(self._readers, self._equalizers, _elementwise)
        """Values rounded to int16 because only equalizing Muls read them, directly or
        through elementwise nodes."""

    def _equalize(self) -> dict[str, equalization.Equalized]:
        done = {}
        for node in list(self.g.nodes):
            if not _convolution(node) or not _is_float(node.inputs[0]):
                continue
            producer = node.inputs[0].producer
            if producer is None or not (_elementwise(producer) or _rule(producer) == COMPUTE):
                continue  # an int16 result would cost the producer (a pool, a Concat) its kernel
            s = self.config.settings_for(node)
            if not s.quantized or s.dtype.bits != 8 or s.equalization <= 0:
                continue
            eq = equalization.equalize(self.g, self.profile, node, s.equalization)
            if eq is not None:
                done[node.name] = eq
                self._minmax.add(eq.mul.outputs[0].name)  # no histogram of x / t
        return done

    # -- driver ---------------------------------------------------------------------------------
    def _plan(self, config: QuantConfig) -> set[Value]:
        """The values read by a node worth computing in integers, or that are graph outputs,
        found walking the graph backwards: a COMPUTE node is worth it whenever its settings are
        integer (its product is the work quantization saves); any other node with an integer
        rule only when one of its results is read by a node worth it or is a graph output (an
        integer model end to end stays so). A node whose results only float nodes read stays
        float, since rounding them to integers would add error and save no float work (a
        transformer's residual Adds before LayerNorm); a COMPUTE node whose result no node worth
        it reads returns it in float from its int32 accumulator."""
        read: set[Value] = set(self.g.outputs)
        for node in reversed(self.g.nodes):
            if node.op_type == CONSTANT or node.domain == QUANT_DOMAIN:
                continue
            rule = _rule(node)
            if rule is None or not config.settings_for(node).quantized:
                continue
            if rule == COMPUTE or any(v in read for v in node.outputs):
                read.update(v for v in node.inputs if v is not None)
        return read

    def run(self) -> None:
        with weight_rounding.RoundingPrefetch(self._rounding_ahead()):
            self._run()

    def _rounding_ahead(self) -> list[weight_rounding.Ahead]:
        """The error-compensating roundings to do ahead, in the order of the nodes: those
        whose input moments are used as they are (not smoothed first), with the weight type
        each gets unless its bias needs larger weight scales (`_prepare_compute`)."""
        out = []
        for node in self.g.nodes:
            moments = self.profile.moments.get(node.name)
            if moments is None or _rule(node) != COMPUTE:
                continue
            s = self.config.settings_for(node)
            if not s.quantized or s.weight_rounding == "nearest" or \
                    self._float_reason(node, s) is not None or moments_problem(node) or \
                    (moments.groups, moments.size) != moments_shape(node):
                continue
            if s.smoothing != 0 and smoothing.layernorm_ranges(node.inputs[0]) is not None:
                continue  # smoothed: rounded with moments scaled first
            geometry = integer_product(node)
            w = node.inputs[geometry.weight_input]
            axis = geometry.weight_channel_axis if s.per_channel else None
            b = node.input_or_none(geometry.bias_input) \
                if geometry.bias_input is not None else None
            bias = b.const_value if b is not None else None

            def weight_type(w=w, s=s, axis=axis, bias=bias) -> TensorType | None:
                params = calibration.weight_params(w.const_value, dtype=s.weight_dtype,
                                                   scheme=s.weight_scheme, axis=axis)
                if bias is not None and _may_grow_for_bias(bias, params.scale):
                    return None  # its scales depend on the input's: not foreseeable
                return TensorType(s.weight_dtype, w.type.shape, params)

            out.append(weight_rounding.Ahead(moments, geometry, w.const_value, weight_type))
        return out

    def _run(self) -> None:
        for node in list(self.g.nodes):
            if node.op_type == CONSTANT or node.domain == QUANT_DOMAIN:
                continue
            settings = self.config.settings_for(node)
            reason = self._float_reason(node, settings)
            if reason is None:
                try:
                    self._quantize_node(node, settings)
                except ValueError as exc:  # parameters no integer grid can hold
                    raise QuantizationError(
                        f"cannot quantize {node.describe()}: {exc}; keep it in float with a "
                        f"config rule `- {{name: '{node.name}', precision: float}}`") from exc
            elif settings.precision == "fp16" and reason.startswith("config"):
                self._half(node)
            else:
                self._keep_float(node, reason)
        self._dequantize_outputs()

    def _float_reason(self, node: Node, settings: NodeSettings) -> str | None:
        """Why `node` stays in float, or None if it computes in integers."""
        if node.subgraphs():
            inside = sum(_rule(n) == COMPUTE for sub in node.subgraphs()
                         for n, _ in sub[1].walk())
            return (f"static quantization does not reach into {node.op_type} bodies ({inside} "
                    f"products inside): fix the inputs that decide it (--fix-input, "
                    f"lowbit.load(fixed_inputs=...)) so that it folds, or quantize --dynamic")
        data = [v for v in node.inputs if v is not None and _is_data(node, v)]
        if not any(_is_float(v) or _is_int(v) for v in data):
            return "-"
        if not settings.quantized:
            return f"config: precision {settings.precision}"
        rule = _rule(node)
        if rule is None:
            return f"{node.op_type} has no integer kernel"
        if any(v.type is None or not (_is_float(v) or _is_int(v)) for v in data):
            return "an input is neither float32 nor quantized"
        if rule == COMPUTE:
            return self._compute_reason(node)
        if not any(v in self._integer_readers for v in node.outputs):
            return "only float nodes read its result (integers would add rounding and save " \
                "no float work)"
        if rule == KEEP and not _is_int(node.inputs[0]) and not self._layout_of_profiled(node):
            return "its input is float (it moves values: integer only after an integer node)"
        if not any(not v.is_constant for v in data):
            return "all its inputs are constant"
        if rule in (RESCALE, TABLE) or rule == KEEP:
            if rule == RESCALE and node.op_type == "ReduceMean" and \
                    node.input_or_none(1) is not None and not node.inputs[1].is_constant:
                return "axes are not constant"
            for v in node.outputs:
                if rule != KEEP and node.op_type not in FIXED_RANGES and v.name not in self.profile:
                    return f"no profile statistics for '{v.name}'"
            return None
        return f"unknown quantization rule {rule!r}"

    def _layout_of_profiled(self, node: Node) -> bool:
        """Whether `node` only rearranges (or zero-pads: `ops.registry.REARRANGES`) a float
        value the profile has statistics of, e.g. the explicit Pad legacy exporters put on a
        model's input: its input is then quantized with those statistics, as its result would
        be, and it moves codes."""
        x = node.inputs[0]
        op = lookup(node.op_type, node.domain)
        return op is not None and op.moves_data == REARRANGES and _is_float(x) and \
            x.name in self.profile

    def _compute_reason(self, node: Node) -> str | None:
        x = node.inputs[0]
        if _is_float(x) and x.name not in self.profile:
            return f"no profile statistics for input '{x.name}'"
        if node.outputs[0].name not in self.profile:
            return f"no profile statistics for '{node.outputs[0].name}'"
        problem = integer_problem(node)
        if problem is not None:
            return problem
        geometry = integer_product(node)
        w = node.inputs[geometry.weight_input]
        if not w.is_constant and _is_float(w) and w.name not in self.profile:
            return f"no profile statistics for weight '{w.name}'"
        b = node.input_or_none(geometry.bias_input) if geometry.bias_input is not None else None
        if b is not None and not b.is_constant:
            return "the bias is not constant"
        channels = _channels(node)
        if b is not None and channels is not None and \
                int(np.prod(b.type.shape)) not in (1, channels):
            return "the bias is not a vector over output channels"
        return None

    # -- integer nodes --------------------------------------------------------------------------
    def _quantize_node(self, node: Node, s: NodeSettings) -> None:
        op = lookup(node.op_type, node.domain)
        rule = op.quant_rule
        wide = self._int16_result(node, s, rule)
        if rule == COMPUTE:
            check_finite_constants(node)
            detail = self._prepare_compute(node, s)
        else:
            detail = self._prepare_other(node, s, rule)
        if s.requant != "auto" and op.quant_rule in (COMPUTE, RESCALE):
            node.attrs[REQUANT] = s.requant
        out = node.outputs[0]
        float_out = rule == COMPUTE and (out not in self._integer_readers or (
            out in self.g.outputs and out not in self._readers))
        wide = None if float_out else wide
        for value in node.outputs:
            if not float_out:
                value.type = self._result_type(
                    node, value, dataclasses.replace(s, precision="int16") if wide else s, rule)
        if float_out:
            detail += "; float output from the int32 accumulator (" + (
                "graph output)" if node.outputs[0] in self.g.outputs else
                "only float nodes read it)")
        elif wide:
            detail += f"; int16 result ({wide})"
        mode = s.dtype.name if float_out or (wide and rule == COMPUTE) else out.type.dtype.name
        self.rows.append(NodeReport(node.name, node.op_type, mode, detail))

    def _int16_result(self, node: Node, s: NodeSettings, rule: str) -> str | None:
        """Why `node` (not yet quantized, 8-bit settings) rounds its result to int16 rather
        than 8 bits, or None: `int16_before_bias`, a product with a constant weight whose only
        reader adds a constant to it (its bias), or `int16_before_table`, a result that only
        lookup tables computing in integers read."""
        out = node.outputs[0]
        if out in self._wide and s.dtype.bits == 8 and rule != KEEP:
            return "only a convolution's input channel equalization reads it: rounded to " \
                f"{s.dtype.name} once, after it"
        if not (s.int16_before_bias or s.int16_before_table):
            return None
        readers = self._readers.get(out, [])
        if s.dtype.bits != 8 or rule == KEEP or len(node.outputs) != 1 or not readers or \
                out in self.g.outputs:
            return None
        if s.int16_before_bias and rule == COMPUTE and \
                node.inputs[integer_product(node).weight_input].is_constant and \
                len(readers) == 1 and readers[0].op_type == "Add":
            other = [v for v in readers[0].inputs if v is not out]
            if len(other) == 1 and other[0] is not None and other[0].is_constant:
                return f"its only reader adds a constant bias: rounded to {s.dtype.name} once, " \
                    "after it"
        if s.int16_before_table and not _convolution(node) and all(
                _rule(r) == TABLE and self.config.settings_for(r).quantized for r in readers):
            # (not a Conv's result: config.DEFAULT_INT16_BEFORE_TABLE says why)
            return "only lookup tables read it: 65536 entries, so its rounding is a 16-bit one"
        return None

    def _result_type(self, node: Node, value: Value, s: NodeSettings, rule: str) -> TensorType:
        if rule == KEEP:
            value.type = None
            return infer_node(node)[node.outputs.index(value)]
        shape = value.type.shape if value.type is not None else None
        return self._activation_type(value, s, shape)

    def _activation_type(self, value: Value, s: NodeSettings, shape) -> TensorType:
        fixed = FIXED_RANGES.get(value.producer.op_type) if value.producer is not None else None
        if fixed is not None:
            storage = _storage(s, fixed[0] >= 0)
            return TensorType(storage, shape, schemes.quant_params(*fixed, storage,
                                                                   _scheme(s, storage)))
        stats = self.profile[value.name]
        scheme = _scheme(s, s.dtype)
        method = "minmax" if value.name in self._minmax else s.calibration

        def compute():
            return calibration.activation_params(stats, dtype=s.dtype, scheme=scheme,
                                                 method=method, percentile=s.percentile)

        if self.cache is not None and stats is self._original.stats.get(value.name):
            storage, params = self.cache.activation(
                (value.name, s.dtype.name, scheme, method, s.percentile), compute)
        else:
            storage, params = compute()
        return TensorType(storage, shape, params)

    def _prepare_compute(self, node: Node, s: NodeSettings) -> str:
        smoothed = self._smooth(node, s)
        eq = self._equalized.get(node.name)
        if eq is not None:
            smoothed += f", input channels equalized (alpha {s.equalization:g}, t " \
                f"{eq.t.min():.3g}..{eq.t.max():.3g})"
        x_name = node.inputs[0].name
        x = self._int_input(node, 0, s)
        geometry = integer_product(node)
        w_at = geometry.weight_input
        w = node.inputs[w_at]
        axis = geometry.weight_channel_axis if s.per_channel and w.is_constant else None
        if w.is_constant:
            w_params = calibration.weight_params(w.const_value, dtype=s.weight_dtype,
                                                 scheme=s.weight_scheme, axis=axis)
        else:
            self._int_input(node, w_at, s)
            w_params = None
        bias_at = geometry.bias_input
        b = node.input_or_none(bias_at) if bias_at is not None else None
        s_in = x.type.quant.scale
        corrected = ""
        rounding = ""
        if w_params is not None:
            if b is not None:
                w_params = _fit_for_bias(w.const_value, b.const_value, s_in, w_params,
                                         s.weight_dtype, axis)
            rounder, rounding = self._weight_rounder(node, s)
            if bias_at is not None and s.bias_correction:
                b, w_params, corrected = self._correct_bias(node, x_name, w, b, w_params, s_in,
                                                            s.weight_dtype, axis, rounder)
            wt = TensorType(s.weight_dtype, w.type.shape, w_params)
            rounded = rounder(wt) if rounder is not None else None
            if rounded is not None:
                w = self.g.add_constant(rounded.astype(np.float32),
                                        self.g.unique_name(f"{w.name}_rounded"), before=node)
            node.inputs[w_at] = self._quantize_value(w, wt, node, f"{w.name}_q")
        if b is not None:
            s_w = node.inputs[w_at].type.quant.scale
            if s_w.ndim and int(np.prod(b.type.shape)) != s_w.size:
                b = self.g.add_constant(np.broadcast_to(b.const_value.reshape(-1), s_w.shape),
                                        self.g.unique_name(f"{b.name}_per_channel"), before=node)
            bias_q = schemes.bias_params(s_in, s_w, axis=0 if s_w.ndim else None)
            bt = TensorType(dtypes.INT32, b.type.shape, _bias_shape(bias_q, b.type.shape))
            quantized_bias = self._quantize_value(b, bt, node, f"{b.name}_q")
            while len(node.inputs) <= bias_at:
                node.inputs.append(None)
            node.inputs[bias_at] = quantized_bias
        wt = node.inputs[w_at].type
        granularity = "per-channel" if wt.quant.axis is not None else "per-tensor"
        ranges = "min-max range of the smoothed input" if smoothed else \
            f"{s.calibration} activations"
        return f"{wt.dtype.name} {granularity} weights{rounding}, {ranges}{corrected}{smoothed}"

    def _smooth(self, node: Node, s: NodeSettings) -> str:
        """SmoothQuant for a MatMul/Gemm reading a LayerNormalization (`lowbit.quant.smoothing`):
        with a_k the calibrated extremes of the input's channels along K and w_k the weight's
        row maxima, t_k = a_k ** alpha / w_k ** (1 - alpha); the input becomes Mul(x, 1 / t)
        (float32, before its Quantize), the weight diag(t) W, and the profile's statistics of
        x carry over exactly to x / t: channel ranges and means divided by t, the input moments
        scaled by 1 / t, the tensor range the extremes of the channel ranges (min-max: there
        is no histogram of x / t). Returns the summary's words, or "" when not smoothed."""
        x = node.inputs[0]
        weight = smoothing.weight_of(node)
        axis = product_input_axis(node)
        if s.smoothing == 0 or weight is None or axis is None or not _is_float(x) or \
                smoothing.layernorm_ranges(x) is None or x.name not in self.profile:
            return ""
        geometry = integer_product(node)
        w = node.inputs[geometry.weight_input]
        stats = self.profile[x.name]
        channel = stats.channels.get(axis)
        ranges = None if channel is None else smoothing.calibrated_ranges(channel.min,
                                                                           channel.max)
        if ranges is None or ranges.size != weight.shape[0]:
            return ""
        t = smoothing.smoothing_factors(ranges, [weight], s.smoothing).astype(np.float64)
        inverse = self.g.add_constant((1.0 / t).astype(np.float32),
                                      self.g.unique_name(f"{node.name}_smoothing"), before=node)
        mul = self.g.make_node("Mul", [x, inverse], name=self.g.unique_node_name(
            f"{node.name}_smooth"), output_names=[self.g.unique_name(f"{x.name}_smoothed")],
            output_types=[x.type], before=node)
        node.inputs[0] = mul.output
        scaled = np.asarray(weight, np.float64) * t[:, None]  # [K, N], as weight_of gives it
        scaled = geometry.weight_from_matrix(scaled.T, w.type.shape)
        node.inputs[geometry.weight_input] = self.g.add_constant(
            scaled.astype(np.float32), self.g.unique_name(f"{w.name}_smoothed"), before=node)
        self.profile.stats[mul.output.name] = divided_stats(stats, axis, t, mul.output.name)
        moments = self.profile.moments.get(node.name)
        if moments is not None:
            self.profile.moments[node.name] = moments.scaled(1.0 / t)
        self._minmax.add(mul.output.name)
        return f", smoothed (alpha {s.smoothing:g}, t {t.min():.3g}..{t.max():.3g})"

    def _weight_rounder(self, node: Node, s: NodeSettings
                        ) -> tuple[Callable[[TensorType], np.ndarray] | None, str]:
        """(the function from a weight type to the real values of the codes error-compensating
        rounding picks, or None for nearest rounding; the summary's words for it)."""
        if s.weight_rounding == "nearest":
            return None, ""
        problem = moments_problem(node)
        moments = self.profile.moments.get(node.name)
        if problem is None and moments is None:
            problem = ("the profile has no input moments (taken with --no-moments or by an "
                       "older lowbit: profile the model again)")
        if problem is None and (moments.groups, moments.size) != moments_shape(node):
            problem = "the profile's input moments do not match its weight"
        if problem is not None:
            return None, f" (rounded to nearest: {problem})"
        weight = node.inputs[integer_product(node).weight_input].const_value
        done: dict[bytes, np.ndarray] = {}

        def rounder(wt: TensorType) -> np.ndarray:
            key = wt.quant.scale.tobytes() + wt.quant.zero_point.tobytes()
            if key not in done:
                if self.cache is None:
                    done[key] = weight_rounding.round_weight(node, weight, wt, moments)
                else:
                    weight_rounding.settle(moments)  # S is being unpacked ahead
                    done[key] = self.cache.rounded(
                        (node.name, wt.dtype.name, wt.quant.axis, key,
                         self.cache.digest(weight), self.cache.digest(moments.second)),
                        lambda: weight_rounding.round_weight(node, weight, wt, moments))
            return done[key]

        return rounder, " (GPTQ rounding)"

    def _correct_bias(self, node: Node, x_name: str, w: Value, b: Value | None,
                      w_params: QuantParams, s_in, weight_dtype: DType, axis: int | None,
                      rounder: Callable[[TensorType], np.ndarray] | None
                      ) -> tuple[Value | None, QuantParams, str]:
        """Bias correction: the bias minus the expected output error of the weights' rounding,
        `b' = b - (W_q - W) . E[x]` per output channel (`bias_correction.weight_error`), E[x]
        the per-channel means of the input in the profile. A missing bias starts at 0. Should
        the corrected bias need larger weight scales to fit in int32, the error is computed
        again with them."""
        stats = self.profile.stats.get(x_name)
        channel = stats.channels.get(product_input_axis(node)) if stats is not None else None
        mean = channel.mean if channel is not None else None
        if mean is None:
            return b, w_params, "; no bias correction (the profile has no channel means of " \
                f"'{x_name}': profile the model again)"
        original = None if b is None else np.asarray(b.const_value, np.float64).reshape(-1)
        for _ in range(2):
            wt = TensorType(weight_dtype, w.type.shape, w_params)
            eps = bias_correction.weight_error(node, w.const_value, wt, mean,
                                               rounder(wt) if rounder is not None else None)
            if eps is None:
                return b, w_params, "; no bias correction (input channels do not match)"
            new = (0.0 if original is None else original) - eps
            refit = _fit_for_bias(w.const_value, new, s_in, w_params, weight_dtype, axis)
            if refit is w_params or (np.array_equal(refit.scale, w_params.scale)):
                break
            w_params = refit
        hint = b.name if b is not None else f"{node.name}_bias"
        corrected = self.g.add_constant(new.astype(np.float32),
                                        self.g.unique_name(f"{hint}_corrected"), before=node)
        shift = float(np.abs(eps).max()) if eps.size else 0.0
        return corrected, w_params, f", bias-corrected (max shift {shift:.3g})"

    def _prepare_other(self, node: Node, s: NodeSettings, rule: str) -> str:
        for i, v in enumerate(node.inputs):
            if v is None or not _is_data(node, v) or _is_int(v):
                continue
            if v.is_constant:
                node.inputs[i] = self._quantize_constant_operand(node, v, s)
            else:
                self._int_input(node, i, s)
        if node.op_type == "Pad":
            self._quantize_pad_value(node)
        names = {KEEP: "keeps its input's parameters", RESCALE: "rescaled in integers",
                 TABLE: "lookup table"}
        return names[rule]

    def _int_input(self, node: Node, index: int, s: NodeSettings) -> Value:
        v = node.inputs[index]
        if _is_int(v):
            return v
        t = self._activation_type(v, s, v.type.shape)
        q = self._quantize_value(v, t, node, f"{v.name}_q")
        node.inputs[index] = q
        return q

    def _quantize_constant_operand(self, node: Node, v: Value, s: NodeSettings) -> Value:
        array = v.const_value
        eq = self._equalizers.get(node)
        if eq is not None:  # the constant is already on that int16 grid
            return self._quantize_value(v, eq.constant, node, f"{v.name}_q")
        storage = _storage(s, bool(np.all(array >= 0)))
        params = calibration.weight_params(array, dtype=storage, scheme="asymmetric"
                                           if storage.bits == 8 else "symmetric")
        return self._quantize_value(v, TensorType(storage, v.type.shape, params), node,
                                    f"{v.name}_q")

    def _quantize_pad_value(self, node: Node) -> None:
        data = node.inputs[0].type
        pad_value = node.input_or_none(2)
        real = 0.0 if pad_value is None else float(np.asarray(pad_value.const_value).reshape(()))
        from lowbit.numerics.arith import quantize as quantize_array

        code = quantize_array(np.asarray(real, np.float32), TensorType(data.dtype, (), data.quant))
        const = self.g.add_constant(code, self.g.unique_name(f"{node.name}_pad_value"),
                                    before=node)
        while len(node.inputs) < 3:
            node.inputs.append(None)
        node.inputs[2] = const

    def _quantize_value(self, v: Value, t: TensorType, before: Node, name: str) -> Value:
        key = (v, t)
        done = self._quantized.get(key)
        if done is not None:
            return done
        q = self.g.make_node("Quantize", [v], domain=QUANT_DOMAIN, name=f"{name}_quantize",
                             output_names=[name], output_types=[t], before=before).output
        self._quantized[key] = q
        return q

    # -- float nodes ----------------------------------------------------------------------------
    def _keep_float(self, node: Node, reason: str) -> None:
        for i, v in enumerate(node.inputs):
            if v is not None and _is_int(v):
                node.inputs[i] = self._dequantize(v, node)
        mode = "-" if reason == "-" else "float"
        self.rows.append(NodeReport(node.name, node.op_type, mode,
                                    "not a float computation" if reason == "-" else reason))

    def _half(self, node: Node) -> None:
        for i, v in enumerate(node.inputs):
            if v is None:
                continue
            if _is_int(v):
                v = self._dequantize(v, node)
            if v.type is not None and v.type.dtype == dtypes.FLOAT32 and _is_data(node, v):
                cast = self.g.make_node("Cast", [v], {"to": dtypes.FLOAT16.onnx_code},
                                        name=f"{node.name}_in{i}_fp16", before=node)
                cast.output.type = TensorType(dtypes.FLOAT16, v.type.shape)
                node.inputs[i] = cast.output
        position = self.g.nodes.index(node)
        for value in node.outputs:
            if value.type is None or value.type.dtype != dtypes.FLOAT32:
                continue
            half = self.g.unique_name(f"{value.name}_fp16")
            inner = Value(half, TensorType(dtypes.FLOAT16, value.type.shape))
            node.outputs[node.outputs.index(value)] = inner
            inner.producer = node
            cast = Node("Cast", [inner], [value], {"to": dtypes.FLOAT32.onnx_code},
                        self.g.unique_node_name(f"{node.name}_out_fp32"))
            position += 1
            self.g.nodes.insert(position, cast)
        self.rows.append(NodeReport(node.name, node.op_type, "fp16", "computes in float16"))

    def _dequantize(self, v: Value, before: Node | None) -> Value:
        done = self._dequantized.get(v)
        if done is not None:
            return done
        d = self.g.make_node("Dequantize", [v], domain=QUANT_DOMAIN,
                             name=f"{v.name}_dequantize", output_names=[f"{v.name}_dq"],
                             output_types=[TensorType(dtypes.FLOAT32, v.type.shape)],
                             before=before).output
        self._dequantized[v] = d
        return d

    def _dequantize_outputs(self) -> None:
        """Graph outputs stay float and keep their names: the integer value is renamed."""
        for i, v in enumerate(self.g.outputs):
            if not _is_int(v):
                continue
            d = self._dequantize(v, None)
            v.name, d.name = d.name, v.name
            self.g.outputs[i] = d


def integer_problem(node: Node) -> str | None:
    """Why `node` cannot compute in integers although its settings ask for them (its op's
    `OpDef.integer_problem`: a Gemm with alpha or beta other than 1, or transA), or None."""
    op = lookup(node.op_type, node.domain)
    return None if op is None else op.integer_problem(node)


def _convolution(node: Node) -> bool:
    """Whether `node` is a convolution computing in integers once quantized (a Conv: the
    windowed product with the COMPUTE rule)."""
    geometry = integer_product(node)
    return geometry is not None and geometry.windowed


def _is_float(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.dtype == dtypes.FLOAT32 and \
        v.type.quant is None


def _is_int(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.quant is not None


def _elementwise(node: Node) -> bool:
    """Whether `node` maps one non-constant input elementwise: a Mul, Add, Sub or Div with a
    constant, or a lookup table (an int16 input makes its table 65536 entries)."""
    data = [v for v in node.inputs if v is not None and not v.is_constant and _is_data(node, v)]
    if len(data) != 1 or len(node.outputs) != 1:
        return False
    return _rule(node) == TABLE or node.op_type in ("Mul", "Add", "Sub", "Div")


def _is_data(node: Node, v: Value) -> bool:
    """Whether input `v` carries real numbers the op computes on (not shapes, indices, axes or
    clip bounds)."""
    index = node.inputs.index(v)
    if node.op_type == "Clip" and index > 0:
        return False
    if node.op_type == "Pad" and index > 0:
        return False
    return v.type is not None and (v.type.dtype.is_float or v.type.quant is not None)


def _rule(node: Node) -> str | None:
    op = lookup(node.op_type, node.domain)
    return op.quant_rule if op is not None else None


def _storage(s: NodeSettings, nonnegative: bool) -> DType:
    return schemes.storage_dtype(_scheme(s, s.dtype), s.dtype, nonnegative)


def _scheme(s: NodeSettings, dtype: DType) -> str:
    """int16 activations are symmetric (see the module docstring)."""
    if dtype.bits == 16 and s.scheme == "asymmetric":
        return "symmetric"
    return s.scheme


def _channels(node: Node) -> int | None:
    """The number of output channels of product `node`'s weight, when static."""
    geometry = integer_product(node)
    w = node.inputs[geometry.weight_input]
    return geometry.output_channels(w.type.shape if w.type is not None else None)


LEAST_INPUT_SCALE = 1e-4
"""Below this input scale `_rounding_ahead` does not expect a product: a bias that would need
larger weight scales for an input scale above it makes the weight type unforeseeable."""


def _may_grow_for_bias(bias: np.ndarray, weight_scale: np.ndarray) -> bool:
    """Whether `_fit_for_bias` could raise these weight scales for an input scale of at least
    LEAST_INPUT_SCALE (dead channels: a bias over weights that are all nearly 0)."""
    b = np.asarray(bias, np.float64).reshape(-1)
    need = schemes.fit_weight_scale_for_bias(b, LEAST_INPUT_SCALE, weight_scale)
    return not np.array_equal(need, np.asarray(weight_scale, np.float32))


def _fit_for_bias(weight: np.ndarray, bias: np.ndarray, s_in, params: QuantParams,
                  dtype: DType, axis: int | None) -> QuantParams:
    """Weight parameters whose scale is large enough that the int32 bias never saturates."""
    b = np.asarray(bias, np.float64).reshape(-1)
    scale = schemes.fit_weight_scale_for_bias(b, float(s_in), params.scale)
    if np.array_equal(scale, params.scale):
        return params
    if np.all(params.zero_point == 0):
        return QuantParams(scale, params.zero_point, params.axis)
    w = np.asarray(weight, np.float64)
    lo = w.min() if axis is None else w.min(axis=tuple(i for i in range(w.ndim) if i != axis))
    zero = np.clip(np.round(dtype.qmin - np.minimum(lo, 0) / scale), dtype.qmin, dtype.qmax)
    return QuantParams(scale, zero.astype(np.int64), params.axis)


def _bias_shape(params: QuantParams, shape) -> QuantParams:
    """Per-channel bias parameters run along the bias's last axis (a [1, N] Gemm bias too)."""
    if params.axis is None or shape is None:
        return params
    return QuantParams(params.scale, params.zero_point, len(shape) - 1)
