"""Dynamic quantization: weights quantized ahead of time, activation parameters at run time.

No calibration data is needed. Every MatMul and Gemm whose QuantConfig settings are integer
becomes a `DynamicMatMul` (`lowbit.ops.dynamic`) reading 8-bit codes:

- a constant weight is quantized ahead of time to int8 (`weight_scheme`, per output channel
  with `per_channel`, else per tensor), kept as `Quantize(constant)` with its parameters in its
  type until `fold_quantized_constants`;
- an activation operand goes through a `DynamicQuantize` computing its parameters from the
  values it holds: per group of `group_size` (32) consecutive elements of each row (token)
  by default, per row, per matrix ("head") or per tensor (`granularity`); uint8 asymmetric
  (`scheme: asymmetric`, the default) or int8 symmetric (`scheme: symmetric`), 7-bit with
  `reduce_range`;
- with groups, the weights are quantized per group of the same rows (along K) and output
  channel (`group_weights`): int8 codes with a [G, N] scale and zero point, held as
  constants beside them (the tensor type carries per-tensor or per-axis parameters only), and
  each group's integer sum is dequantized with its own s_a * s_w (`lowbit.ops.dynamic`);
- a product reading a LayerNormalization is smoothed (`smoothing`, lowbit.quant.smoothing):
  its activation is divided by constant per-channel factors before quantization, its weight
  rows multiplied by them, so outlier channels no longer set every token's scale;
- a product reading a GELU gives its (estimated) outlier channels a separate integer product
  (`outlier_channels`, lowbit.quant.smoothing), so they neither set the row's scale nor
  multiply their weights' rounding error;
- the product accumulates exactly in int32 and is dequantized once with s_a * s_w; a Gemm's
  bias C is added in float;
- a Gather along the rows of a constant float table of at least `EMBEDDING_ROWS` rows (a
  vocabulary's or the positions' embeddings) reads the table in int8, one scale per column
  (`weight_scheme`): `Quantize(table) -> Gather -> Dequantize`. Each gathered row holds the
  table's codes and every column keeps its own scale and zero point, so the result is exactly
  `dequantize(quantize(table))[ids]`, x = (q - zero_point) * scale in float32; the table
  takes a quarter of its float bytes (MiniLM's file: 61.6 MB -> 24.6 MB, 47 MB of word
  embeddings becoming 12 MB; sentence-embedding cosine to float on 25 single words 0.99967 ->
  0.99964 mean, 0.99928 -> 0.99926 minimum; Lee Pearson 0.6567 -> 0.6570).
  A rule setting the Gather's `precision: float` keeps its table in float.

MatMuls of two activations (attention Q·Kᵀ and P·V) are quantized the same way on both sides
when `activation_products` is set (the right operand per column for "row", per group of a
column for "group"). Groups matter for P·V, whose inner dimension is the sequence: with an
attention sink (one key taking half of a row's probability) and many near-equal small
probabilities, per-row uint8 codes give the small ones one or two levels, all rounded the same
way; on 256 repetitions of one word the embedding cosine was 0.983 per row and is 0.9994 in
groups of 32 (a Lorem-ipsum paragraph repeated 4 times: 0.9987 -> 0.9998). Everything else
(LayerNorm, Softmax, GELU, residual adds) stays in float, as the integer-free parts of dynamic
quantization always do.

Why per group of a row is the default: a per-tensor range is set by the largest token in the
batch (and outlier channels of a few tokens), so a short sentence padded to a long batch, or a
token with small activations, is coded with a handful of levels; per-row parameters give every
token its own range, which is what keeps short inputs ("Ok") as accurate as long ones. Within
a token, a few channels still set the range of all 384 or 1536 (transformer activations have
outlier channels beyond the two a GELU split and the LayerNorm smoothing take care of); groups
of 32 confine each to its group. On all-MiniLM-L6-v2 (benchmarks/dynamic_vs_peers.py, 70
texts a kind) the single-word embedding cosine mean goes from 0.9987 per row to 0.9997 in
groups of 32 (minimum 0.9965 -> 0.9993), long texts from 0.9993 to 0.9998.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lowbit.errors import ModelError
from lowbit.identity_memo import IdentityMemo
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import TensorType
from lowbit.numerics import arith
from lowbit.numerics.dynamic_params import split_groups
from lowbit.ops import infer_node
from lowbit.ops.product import integer_product
from lowbit.ops.registry import FUSED_CLIP, QUANT_DOMAIN
from lowbit.passes.verifier import verify
from lowbit.quant import calibration, smoothing
from lowbit.quant.config import NodeSettings, QuantConfig
from lowbit.quant.static import (
    NodeReport,
    QuantizationError,
    QuantResult,
    QuantSummary,
    check_finite_constants,
    integer_problem,
)

EMBEDDING_ROWS = 256
"""Constant tables gathered by rows with at least this many rows are quantized (word and
position embeddings); smaller ones (token types) stay float: a negligible part of a file."""


def _dense_product(node: Node) -> bool:
    """Whether `node` is a product dynamic quantization computes in integers: an integer
    product (`ops.product.integer_product`) of a weight matrix, not a convolution (MatMul,
    Gemm)."""
    geometry = integer_product(node)
    return geometry is not None and not geometry.windowed


def quantize_dynamic(graph: Graph, config: QuantConfig | None = None, *,
                     assert_all_quantized: bool = False) -> QuantResult:
    """Dynamically quantize a copy of float `graph` (see the module docstring); returns the
    graph and a per-product summary. With `assert_all_quantized`, a MatMul/Gemm left in float
    raises QuantizationError."""
    config = config or QuantConfig()
    warnings = config.check(graph)
    for v in graph.values():
        if v.type is not None and v.type.quant is not None:
            raise ModelError(f"value '{v.name}' is already quantized; dynamic quantization "
                             f"takes a float graph")
    g = graph.copy()
    rows: list[NodeReport] = []
    for scope_graph, scope in list(g.scopes()):  # products inside If/Loop/Scan bodies too
        rows += _quantize_scope(scope_graph, scope, config)
    summary = QuantSummary(rows, list(warnings))
    if assert_all_quantized and summary.float_nodes:
        listed = ", ".join(f"{r.name} ({r.detail})" for r in summary.float_nodes)
        raise QuantizationError(f"{len(summary.float_nodes)} product(s) stay in float: {listed}")
    g.metadata["lowbit.quant_config"] = config.to_yaml()
    g.metadata["lowbit.quantization"] = "dynamic"
    verify(g)
    return QuantResult(g, summary)


def _quantize_scope(g: Graph, scope: str, config: QuantConfig) -> list[NodeReport]:
    """Quantize the products of one graph (the model, or a body of one of its control-flow
    nodes); the rows name a body's nodes with their scope, `If_node/then_branch/MatMul_3`."""
    builder = _Builder(g, config)
    products = [n for n in g.nodes if _dense_product(n)]
    for node in products:  # estimated from the float up-projections, before they change
        if builder.config.settings_for(node).quantized:  # only an integer product splits
            builder.find_outliers(node)
    for node in products:
        if not builder.config.settings_for(node).quantized:
            builder.product(node)  # reports why it stays float; keeps its fused clamp
            continue
        builder.unfuse_clamp(node)
        builder.product(node)
    for node in [n for n in g.nodes if _embedding_gather(n)]:
        builder.embedding(node)
    if not scope:
        return builder.rows
    return [dataclasses.replace(r, name=f"{scope}/{r.name}") for r in builder.rows]


def _embedding_gather(node: Node) -> bool:
    """Whether `node` gathers rows of a constant float32 table of at least EMBEDDING_ROWS rows
    by run-time indices."""
    if node.op_type != "Gather" or node.domain not in ("", "ai.onnx"):
        return False
    table, ids = node.inputs[0], node.inputs[1]
    t = table.type
    if not table.is_constant or ids.is_constant or t is None or t.dtype != dtypes.FLOAT32 or \
            t.shape is None or len(t.shape) != 2 or t.quant is not None:
        return False
    return int(node.attrs.get("axis", 0)) % 2 == 0 and int(t.shape[0]) >= EMBEDDING_ROWS


def activation_axes(granularity: str, rank: int, right: bool = False) -> list[int]:
    """The axes one set of run-time parameters spans: "row" (and "group", whose groups cut
    that axis) reduces the inner dimension only (the last axis of a left operand, the
    second-to-last of a right one), "head" the last two, "tensor" all of them."""
    if granularity == "tensor":
        return list(range(rank))
    if granularity == "head":
        return [rank - 2, rank - 1] if rank >= 2 else [0]
    return [rank - 2] if right else [rank - 1]


def group_weights(w: np.ndarray, s: NodeSettings, group: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights w [K, N] quantized per group of `group` rows (along K) and, with `per_channel`,
    per output channel: int8 codes [K, N] and the scale and zero point [G, N], G = ceil(K / g),
    by `lowbit.quant.calibration.weight_params` (`weight_scheme`) applied to each block."""
    k, n = w.shape
    blocks = np.moveaxis(split_groups(np.asarray(w, np.float32), 0, group), 0, -1)  # [G, g, N]
    count = blocks.shape[0]
    if s.per_channel:
        flat = blocks.transpose(1, 0, 2).reshape(group, count * n)
    else:
        flat = blocks.transpose(1, 2, 0).reshape(group * n, count)
    params = calibration.weight_params(flat, dtype=s.weight_dtype, scheme=s.weight_scheme,
                                       axis=1)
    codes = arith.quantize(flat, TensorType(s.weight_dtype, flat.shape, params))
    if s.per_channel:
        codes = codes.reshape(group, count, n).transpose(1, 0, 2)
    else:
        codes = codes.reshape(group, n, count).transpose(2, 0, 1)
    scale = np.broadcast_to(params.scale.reshape(count, -1), (count, n))
    zero = np.broadcast_to(params.zero_point.reshape(count, -1), (count, n))
    return (np.ascontiguousarray(codes.reshape(count * group, n)[:k]),
            np.ascontiguousarray(scale, np.float32),
            np.ascontiguousarray(zero).astype(s.weight_dtype.np_dtype))


def _weights_text(s: NodeSettings, group: int) -> str:
    if group:
        return f"int8 weights per group of {group}" + (" and output channel" if s.per_channel
                                                       else "")
    return f"int8 {'per-channel' if s.per_channel else 'per-tensor'} weights"


_TABLE_PARAMS = IdentityMemo()
"""An embedding table's per-column parameters by the (read-only) table's identity: quantizing
one float graph again (a budget search) reuses them, and the cpu backend then reuses the folded
int8 table (`backends.lowering`)."""



def _table_params(table: np.ndarray, s: NodeSettings):
    """An embedding table's int8 parameters per column (`calibration.weight_params`, axis 1),
    memoized for a read-only table (`_TABLE_PARAMS`)."""

    def compute():
        return calibration.weight_params(table, dtype=s.weight_dtype, scheme=s.weight_scheme,
                                         axis=1)

    if table.flags.writeable:
        return compute()
    return _TABLE_PARAMS((table,), (s.weight_dtype, s.weight_scheme), compute)


class _Builder:
    def __init__(self, graph: Graph, config: QuantConfig) -> None:
        self.g = graph
        self.config = config
        self.rows: list[NodeReport] = []
        self._quantized: dict[tuple, tuple[Value, Value, Value]] = {}
        self._outliers: dict[str, np.ndarray] = {}

    def find_outliers(self, node: Node) -> None:
        count = self.config.settings_for(node).outlier_channels
        found = smoothing.gelu_outlier_channels(node.inputs[0], count)
        if found is not None:
            self._outliers[node.name] = found

    def unfuse_clamp(self, node: Node) -> None:
        """A Relu/Clip the optimizer fused into `node` (`fused_clip`) becomes a float Clip of
        its own after it, writing the node's output: the integer product replacing `node` has
        no output clamp."""
        clip = node.attrs.pop(FUSED_CLIP, None)
        if clip is None:
            return
        out = node.outputs[0]
        raw = Value(self.g.unique_name(f"{out.name}_unclamped"), out.type)
        node.outputs[0] = raw
        bounds: list[Value | None] = [None, None]
        for i, bound in enumerate(clip):
            if np.isfinite(bound):
                bounds[i] = self.g.add_constant(np.array(bound, np.float32), self.g.unique_name(
                    f"{out.name}_clip_{'min' if i == 0 else 'max'}"), before=node)
        while bounds and bounds[-1] is None:
            bounds.pop()
        clamp = Node("Clip", [raw, *bounds], [out], {}, self.g.unique_node_name(
            f"{node.name}_clip"))
        self.g.nodes.insert(self.g.nodes.index(node) + 1, clamp)

    def product(self, node: Node) -> None:
        s = self.config.settings_for(node)
        reason = self._float_reason(node, s)
        if reason is not None:
            self.rows.append(NodeReport(node.name, node.op_type, "float", reason))
            return
        check_finite_constants(node)
        geometry = integer_product(node)
        a = node.inputs[geometry.data_input]
        b = node.inputs[geometry.weight_input]
        if b.is_constant and geometry.weight_kn(b.const_value) is not b.const_value:
            b = self.g.add_constant(np.ascontiguousarray(geometry.weight_kn(b.const_value)),
                                    self.g.unique_name(f"{b.name}_t"), before=node)
        smooth = self._smoothing(a, s, node) if b.is_constant else None
        if smooth is not None:
            b = self.g.add_constant(b.const_value * smooth.reshape(-1, 1),
                                    self.g.unique_name(f"{b.name}_smoothed"), before=node)
        outliers = None
        if b.is_constant and smooth is None and len(b.type.shape) == 2:
            outliers = self._outliers.get(node.name)
        bias = node.input_or_none(geometry.bias_input) if geometry.bias_input is not None \
            else None
        group = s.group_size if s.granularity == "group" else 0
        if outliers is not None:
            self._split_product(node, a, b, bias, outliers, s, group)
            weights = (f"{_weights_text(s, group)} (GELU channels {outliers.tolist()} in a "
                       f"product of their own)")
        else:
            qa = self._dynamic(a, s, right=False, before=node, channel_scale=smooth, group=group)
            if b.is_constant:
                qb: tuple[Value | None, ...] = self._weights(b, s, group, node)
                weights = _weights_text(s, group)
            else:
                qb = self._dynamic(b, s, right=True, before=node, group=group)
                weights = {"row": "two activations (right operand per column)",
                           "group": "two activations (right operand per group of a column)"
                           }.get(s.granularity, "two activations")
            self._int_product(qa, qb, bias, node.outputs, node.name, node, group)
            self.g.nodes.remove(node)
        codes = "int8 symmetric" if s.scheme == "symmetric" else "uint8 asymmetric"
        bits = ", 7-bit" if s.reduce_range else ""
        bits += ", LayerNorm-smoothed" if smooth is not None else ""
        per = f"group of {group}" if group else s.granularity
        self.rows.append(NodeReport(node.name, node.op_type, "int8",
                                    f"{weights}; activations {codes}{bits} per {per}"))

    def embedding(self, node: Node) -> None:
        """Quantize(table) -> Gather -> Dequantize: the table in int8 per column."""
        s = self.config.settings_for(node)
        if not s.quantized or s.weight_precision != "int8":
            self.rows.append(NodeReport(node.name, node.op_type, "float",
                                        f"config: precision {s.precision}"))
            return
        table = node.inputs[0]
        check_finite_constants(node)
        params = _table_params(table.const_value, s)
        codes = self.g.make_node("Quantize", [table], domain=QUANT_DOMAIN,
                                 name=f"{table.name}_quantize", output_names=[f"{table.name}_q"],
                                 output_types=[TensorType(s.weight_dtype, table.type.shape,
                                                          params)], before=node).output
        out = node.outputs[0]
        node.inputs[0] = codes
        rows = Value(self.g.unique_name(f"{out.name}_q"), infer_node(node)[0])
        node.outputs[0] = rows
        rows.producer = node
        self.g.nodes.insert(self.g.nodes.index(node) + 1, Node(
            "Dequantize", [rows], [out], {}, self.g.unique_node_name(f"{node.name}_dequantize"),
            QUANT_DOMAIN))
        self.rows.append(NodeReport(node.name, node.op_type, "int8",
                                    f"int8 table per column ({table.type.shape[0]} rows)"))

    def _weights(self, b: Value, s: NodeSettings, group: int,
                 before: Node) -> tuple[Value | None, ...]:
        """B's operands of a DynamicMatMul: (Quantize(b), None, None), or with groups the int8
        codes and their [G, N] scale and zero point as constants (`group_weights`)."""
        if not group:
            return (self._weight(b, s, before), None, None)
        codes, scale, zero = group_weights(b.const_value, s, group)
        return tuple(self.g.add_constant(array, self.g.unique_name(f"{b.name}_{hint}"),
                                         before=before)
                     for array, hint in ((codes, "q"), (scale, "scale"), (zero, "zero_point")))

    def _weight(self, b: Value, s: NodeSettings, before: Node) -> Value:
        """Quantize(b): int8 per output channel (the last axis) or per tensor."""
        w_params = calibration.weight_params(
            b.const_value, dtype=s.weight_dtype, scheme=s.weight_scheme,
            axis=len(b.type.shape) - 1 if s.per_channel else None)
        wt = TensorType(s.weight_dtype, b.type.shape, w_params)
        return self.g.make_node("Quantize", [b], domain=QUANT_DOMAIN,
                                name=f"{b.name}_quantize", output_names=[f"{b.name}_q"],
                                output_types=[wt], before=before).output

    def _int_product(self, qa, qb, bias: Value | None, outputs: list[Value] | None,
                     name: str, before: Node, group: int = 0) -> Node:
        inputs = [*qa, *qb, bias]
        while inputs[-1] is None:
            inputs.pop()
        attrs = {"group_size": group} if group else {}
        if outputs is None:
            new = self.g.make_node("DynamicMatMul", inputs, attrs, name=name,
                                   domain=QUANT_DOMAIN, before=before)
        else:
            new = Node("DynamicMatMul", inputs, outputs, attrs, name, QUANT_DOMAIN)
            self.g.nodes.insert(self.g.nodes.index(before), new)
        new.outputs[0].type = infer_node(new)[0]
        return new

    def _split_product(self, node: Node, a: Value, b: Value, bias: Value | None,
                       outliers: np.ndarray, s: NodeSettings, group: int) -> None:
        """a W = (a * mask) W_main + a[..., outliers] W[outliers], both integer products; the
        mask zeroes the outlier channels, W_main their weight rows."""
        k = b.type.shape[0]
        mask = np.ones(k, np.float32)
        mask[outliers] = 0
        w = np.asarray(b.const_value)
        const = self.g.add_constant
        main_w = const(w * mask[:, None], self.g.unique_name(f"{b.name}_main"), before=node)
        out_w = const(w[outliers], self.g.unique_name(f"{b.name}_outliers"), before=node)
        masked = self.g.make_node("Mul", [a, const(mask, self.g.unique_name(f"{a.name}_mask"),
                                                   before=node)],
                                  name=f"{node.name}_main_input", before=node)
        gathered = self.g.make_node("Gather", [a, const(outliers, self.g.unique_name(
            f"{a.name}_outlier_index"), before=node)], {"axis": -1},
                                    name=f"{node.name}_outlier_input", before=node)
        for helper in (masked, gathered):
            helper.outputs[0].type = infer_node(helper)[0]
        main = self._int_product(self._dynamic(masked.outputs[0], s, False, node, group=group),
                                 self._weights(main_w, s, group, node), bias, None,
                                 f"{node.name}_main", node, group)
        extra = self._int_product(self._dynamic(gathered.outputs[0], s, False, node),
                                  (self._weight(out_w, s, node), None, None), None, None,
                                  f"{node.name}_outliers", node)
        add = Node("Add", [main.outputs[0], extra.outputs[0]], node.outputs, {},
                   self.g.unique_node_name(f"{node.name}_sum"))
        self.g.nodes[self.g.nodes.index(node)] = add

    def _float_reason(self, node: Node, s: NodeSettings) -> str | None:
        if s.precision in ("float", "fp16"):
            return f"config: precision {s.precision}"
        if s.precision not in ("int8", "uint8"):
            raise QuantizationError(f"{node.describe()}: dynamic quantization computes in 8 "
                                    f"bits; precision {s.precision} is for static quantization")
        if s.scheme not in ("asymmetric", "symmetric"):
            raise QuantizationError(f"{node.describe()}: dynamic activations are asymmetric "
                                    f"(uint8) or symmetric (int8), not {s.scheme}")
        if s.weight_precision != "int8":
            raise QuantizationError(f"{node.describe()}: dynamic quantization takes int8 "
                                    f"weights, not {s.weight_precision}")
        geometry = integer_product(node)
        a, b = node.inputs[geometry.data_input], node.inputs[geometry.weight_input]
        for v in (a, b):
            if v.type is None or v.type.dtype != dtypes.FLOAT32 or v.type.shape is None:
                return "an operand is not float32 of known rank"
        if a.is_constant:
            return "the left operand is constant"
        if len(a.type.shape) < 2 or len(b.type.shape) < 2:
            return "a 1-D operand"
        problem = integer_problem(node)
        if problem is not None:
            return problem
        if node.op_type == "Gemm" and not b.is_constant:
            return "Gemm with a non-constant B"
        if not b.is_constant and not s.activation_products:
            return "a product of two activations (config: activation_products false)"
        return None

    def _smoothing(self, a: Value, s: NodeSettings, node: Node) -> np.ndarray | None:
        """Channel smoothing factors of product `node` reading LayerNorm output `a`, or None.
        Each product gets its own factors (its own weight's row maxima): sharing one set among
        the Q, K and V projections, so that they share one DynamicQuantize, measured worse on
        MiniLM ("Ok": cosine 0.9937 shared, 0.9957 per product)."""
        if s.smoothing == 0:
            return None
        ranges = smoothing.layernorm_ranges(a)
        weight = smoothing.weight_of(node)
        if ranges is None or weight is None:
            return None
        return smoothing.smoothing_factors(ranges, [weight], s.smoothing)

    def _dynamic(self, v: Value, s: NodeSettings, right: bool, before: Node,
                 channel_scale: np.ndarray | None = None,
                 group: int = 0) -> tuple[Value, Value, Value]:
        axes = activation_axes(s.granularity, len(v.type.shape), right)
        symmetric = int(s.scheme == "symmetric")
        key = (v, tuple(axes), symmetric, int(s.reduce_range), group,
               None if channel_scale is None else channel_scale.tobytes())
        found = self._quantized.get(key)
        if found is not None:
            return found
        inputs = [v]
        if channel_scale is not None:
            inputs.append(self.g.add_constant(channel_scale, self.g.unique_name(
                f"{v.name}_channel_scale"), before=self._first_reader(v, before)))
        node = self.g.make_node(
            "DynamicQuantize", inputs,
            {"axes": axes, "symmetric": symmetric, "reduce_range": int(s.reduce_range),
             **({"group_size": group} if group else {})},
            domain=QUANT_DOMAIN, name=f"{v.name}_dynamic_quantize",
            output_names=[f"{v.name}_q", f"{v.name}_scale", f"{v.name}_zero_point"],
            before=self._first_reader(v, before))
        for out, t in zip(node.outputs, infer_node(node), strict=True):
            out.type = t
        found = (node.outputs[0], node.outputs[1], node.outputs[2])
        self._quantized[key] = found
        return found

    def _first_reader(self, v: Value, fallback: Node) -> Node:
        """Shared DynamicQuantize nodes go before the first node reading `v`, so every later
        reader (Q, K and V projections of one input) finds them already computed."""
        for node in self.g.nodes:
            if v in node.inputs:
                return node
        return fallback
