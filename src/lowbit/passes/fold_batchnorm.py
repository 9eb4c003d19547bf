"""Batch-norm folding into the preceding Conv, ConvTranspose or Gemm."""

from __future__ import annotations

import numpy as np

from lowbit.ir.graph import Graph, Node, Value
from lowbit.passes.dead_code import eliminate_dead_code


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
    """The axis of the weight that runs along output channels, when folding is possible."""
    op = producer.op_type
    if op == "Conv":
        return 0
    if op == "ConvTranspose":
        return 1 if int(producer.attrs.get("group", 1)) == 1 else None
    if op == "Gemm":
        if producer.attrs.get("transA", 0) or weight.ndim != 2:
            return None
        return 0 if producer.attrs.get("transB", 0) else 1
    return None


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
        x = bn.inputs[0]
        producer = x.producer if x is not None else None
        if producer is None or producer.op_type not in ("Conv", "ConvTranspose", "Gemm"):
            continue
        if not _single_user(users, x, graph) or producer.attrs.get("fused_clip") is not None:
            continue
        if producer.op_type == "Gemm" and x.type is not None and x.type.rank != 2:
            continue
        w = producer.inputs[1].const_value if producer.inputs[1] is not None else None
        b_in = producer.input_or_none(2)
        b = b_in.const_value if b_in is not None else None
        factors = _bn_factors(bn)
        if w is None or factors is None or (b_in is not None and b is None):
            continue
        axis = _weight_axis(producer, w)
        if axis is None:
            continue
        factor, shift = factors
        channels = w.shape[axis]
        if factor.shape != (channels,):
            continue
        if producer.op_type == "Gemm":
            alpha = float(producer.attrs.get("alpha", 1.0))
            beta = float(producer.attrs.get("beta", 1.0))
            if b is not None and np.asarray(b).size not in (1, channels):
                continue
        else:
            alpha, beta = 1.0, 1.0
        shape = [1] * w.ndim
        shape[axis] = channels
        new_w = (w.astype(np.float64) * factor.reshape(shape)).astype(w.dtype)
        bias = np.zeros(channels) if b is None else np.broadcast_to(
            np.asarray(b, dtype=np.float64).reshape(-1), (channels,)) * beta
        new_b = (bias * factor + shift).astype(w.dtype)
        # Gemm computes alpha*A*B + beta*C: fold the new bias into C with beta = 1.
        if producer.op_type == "Gemm":
            producer.attrs["beta"] = 1.0
            producer.attrs["alpha"] = alpha
        producer.inputs[1] = graph.add_constant(new_w, f"{producer.name}_bnfold_w",
                                                before=producer)
        b_value = graph.add_constant(new_b, f"{producer.name}_bnfold_b", before=producer)
        while len(producer.inputs) < 3:
            producer.inputs.append(None)
        producer.inputs[2] = b_value
        out = bn.outputs[0]
        producer.outputs[0] = out
        out.producer = producer
        folded.append(bn)
    graph.remove_nodes(folded)
    return eliminate_dead_code(graph)
