"""Batch-norm folding, and folding of per-channel scales and shifts (batch norm spelled out
as Mul and Add), into the preceding Conv, ConvTranspose or Gemm."""

from __future__ import annotations

import numpy as np

from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ops.product import product_of
from lowbit.ops.registry import lookup


def _single_user(graph_users: dict, value: Value, graph: Graph) -> bool:
    return len(graph_users.get(value, [])) == 1 and value not in graph.outputs


def _bn_factors(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (factor, shift) with BN(y) = factor * y + shift, if all BN params are
    constants: factor = gamma / sqrt(var + eps), shift = beta - mean * factor (float64)."""
    params = [v.const_value if v is not None else None for v in bn.inputs[1:5]]
    if any(p is None for p in params) or bn.attrs.get("training_mode", 0):
        return None
    gamma, beta, mean, var = (np.asarray(p, dtype=np.float64) for p in params)  # type: ignore[arg-type]
    factor = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    return factor, beta - mean * factor


def _weight_axis(producer: Node, weight: np.ndarray) -> int | None:
    """The axis of the weight that runs along output channels, when folding is possible: a
    product with a bias input (Conv, ConvTranspose, Gemm) whose output channels are one axis of
    its weight (not a grouped ConvTranspose) and whose result rows are its data input's rows
    (not a Gemm with transA)."""
    geometry = product_of(producer)
    if geometry is None or geometry.bias_input is None or geometry.trans_a:
        return None
    if not geometry.windowed and weight.ndim != 2:
        return None
    return geometry.weight_channel_axis


def _foldable_producer(graph: Graph, users: dict, x: Value | None) -> Node | None:
    """The Conv, ConvTranspose (group 1) or Gemm writing `x`, when a per-channel scale and
    shift of `x` can move into its constant weight and bias: `x` is its only output, nothing
    else reads it, and it has no fused clamp."""
    producer = x.producer if x is not None else None
    onnx = producer is not None and producer.domain in ("", "ai.onnx")  # float products
    geometry = product_of(producer) if onnx else None
    if geometry is None or geometry.bias_input is None:
        return None
    if not _single_user(users, x, graph) or producer.attrs.get("fused_clip") is not None:
        return None
    w = producer.inputs[geometry.weight_input].const_value \
        if producer.inputs[geometry.weight_input] is not None else None
    b_in = producer.input_or_none(geometry.bias_input)
    if w is None or (b_in is not None and b_in.const_value is None):
        return None
    axis = _weight_axis(producer, w)
    if axis is None:
        return None
    if b_in is not None and np.asarray(b_in.const_value).size not in (1, w.shape[axis]):
        return None
    return producer


def _output_channels(producer: Node) -> int:
    w = producer.inputs[product_of(producer).weight_input].const_value
    return int(w.shape[_weight_axis(producer, w)])


def _scale_and_shift(graph: Graph, producer: Node, factor: np.ndarray, shift: np.ndarray,
                     out: Value, tag: str) -> None:
    """Make `producer` compute factor * y + shift per output channel, y its old result, and
    write `out`: W' = W * factor along the output-channel axis, b' = b * factor + shift
    (float64, stored in the weight's dtype)."""
    geometry = product_of(producer)
    w = producer.inputs[geometry.weight_input].const_value
    b_in = producer.input_or_none(geometry.bias_input)
    b = b_in.const_value if b_in is not None else None
    axis = _weight_axis(producer, w)
    channels = w.shape[axis]
    # a Gemm computes alpha * A B + beta * C: C' = beta * C * factor + shift, then beta = 1
    scaled = "beta" in lookup(producer.op_type, producer.domain).attrs
    alpha = float(producer.attrs.get("alpha", 1.0))
    beta = float(producer.attrs.get("beta", 1.0))
    shape = [1] * w.ndim
    shape[axis] = channels
    new_w = (w.astype(np.float64) * factor.reshape(shape)).astype(w.dtype)
    bias = np.zeros(channels) if b is None else np.broadcast_to(
        np.asarray(b, dtype=np.float64).reshape(-1), (channels,)) * beta
    new_b = (bias * factor + shift).astype(w.dtype)
    if scaled:
        producer.attrs["beta"] = 1.0
        producer.attrs["alpha"] = alpha
    producer.inputs[geometry.weight_input] = graph.add_constant(
        new_w, f"{producer.name}_{tag}_w", before=producer)
    b_value = graph.add_constant(new_b, f"{producer.name}_{tag}_b", before=producer)
    while len(producer.inputs) <= geometry.bias_input:
        producer.inputs.append(None)
    producer.inputs[geometry.bias_input] = b_value
    producer.outputs[0] = out
    out.producer = producer


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold every inference-mode BatchNormalization that reads the sole output of a Conv,
    ConvTranspose (group 1) or Gemm with constant weight (and bias) into that node.

    With factor = gamma / sqrt(var + eps): W' = W * factor along the output-channel axis and
    b' = (b - mean) * factor + beta, computed in float64 and stored in the weight's dtype.
    Guarantees: the BN node is gone, the producer now writes the BN's output value (same name
    and users), results equal the unfolded graph up to float rounding.
    """
    users = graph.users()
    folded: list[Node] = []
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or len(bn.outputs) != 1:
            continue
        producer = _foldable_producer(graph, users, bn.inputs[0])
        factors = _bn_factors(bn)
        if producer is None or factors is None:
            continue
        factor, shift = factors
        if factor.shape != (_output_channels(producer),):
            continue
        _scale_and_shift(graph, producer, factor, shift, bn.outputs[0], "bnfold")
        folded.append(bn)
    graph.remove_nodes(folded)
    return eliminate_dead_code(graph)


def _per_channel(c: np.ndarray, rank: int, channels: int, axis: int) -> np.ndarray | None:
    """`c` as one float64 value per channel, when broadcasting it against a result of `rank`
    dimensions (channels along `axis`) neither grows the result nor varies along another axis."""
    c = np.asarray(c, dtype=np.float64)
    if c.ndim > rank:
        return None
    full = c.reshape((1,) * (rank - c.ndim) + c.shape)
    if any(n != 1 for i, n in enumerate(full.shape) if i != axis):
        return None
    if full.shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(full.reshape(-1), (channels,)).copy()


def _affine_of(node: Node, x: Value, c: np.ndarray, channels: int,
               rank: int, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(factor, shift) with node(x) = factor * x + shift per channel, for Mul, Add, Sub and
    Div between `x` and the constant `c`; None when the node is not of that form."""
    k = _per_channel(c, rank, channels, axis)
    if k is None:
        return None
    x_first = node.inputs[0] is x
    ones, zeros = np.ones(channels), np.zeros(channels)
    op = node.op_type
    if op == "Mul":
        return k, zeros
    if op == "Add":
        return ones, k
    if op == "Sub":
        return (ones, -k) if x_first else (-ones, k)
    if op == "Div" and x_first and np.all(k != 0):
        return 1.0 / k, zeros
    return None


def fold_channel_affine(graph: Graph) -> Graph:
    """Fold a Mul, Add, Sub or Div between the sole result of a Conv, ConvTranspose (group 1)
    or Gemm with constant weight and a constant that is one number per output channel (or one
    for all) into that node's weight and bias: batch norm spelled out as Mul and Add (as
    Paddle2ONNX and TensorFlow converters write it) and learnable scales after a conv.

    With y = factor * x + shift for the elementwise op (Mul: factor c; Add: shift c; Sub x - c:
    shift -c, c - x: factor -1, shift c; Div x / c: factor 1/c): W' = W * factor along the
    output-channel axis, b' = b * factor + shift, in float64. Repeats until nothing folds, so a
    Mul then an Add both fold. Guarantees: the elementwise node is gone, the producer writes
    its output value (same name and users), results equal the unfolded graph up to float
    rounding.
    """
    while True:
        users = graph.users()
        folded: list[Node] = []
        for node in list(graph.nodes):
            if node.op_type not in ("Mul", "Add", "Sub", "Div") or len(node.inputs) != 2:
                continue
            for x, c in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
                if c is None or c.const_value is None or x is None:
                    continue
                if x.type is None or x.type.shape is None or not x.type.dtype.is_float:
                    continue
                producer = _foldable_producer(graph, users, x)
                if producer is None:
                    continue
                axis = product_of(producer).output_channel_axis % x.type.rank
                affine = _affine_of(node, x, c.const_value, _output_channels(producer),
                                    x.type.rank, axis)
                if affine is None or not np.all(np.isfinite(affine[0]) & np.isfinite(affine[1])):
                    continue
                _scale_and_shift(graph, producer, *affine, node.outputs[0], "affine")
                folded.append(node)
                break
        if not folded:
            return eliminate_dead_code(graph)
        graph.remove_nodes(folded)
