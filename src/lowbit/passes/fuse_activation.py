"""Fusing Relu and Clip into the preceding op as an output clamp."""

from __future__ import annotations

import math

import numpy as np

from lowbit.ir.graph import Graph, Node
from lowbit.ops import lookup
from lowbit.ops.registry import FUSED_CLIP


def _clamp_of(act: Node) -> tuple[float, float] | None:
    """The [lo, hi] a Relu or a Clip with constant (or absent) bounds clamps to, else None."""
    if act.op_type == "Relu":
        return 0.0, math.inf
    if act.op_type != "Clip":
        return None
    bounds = []
    for i, default in ((1, -math.inf), (2, math.inf)):
        v = act.input_or_none(i)
        if v is None:
            bounds.append(default)
            continue
        c = v.const_value
        if c is None or c.size != 1:
            return None
        bounds.append(float(np.asarray(c, dtype=np.float64).reshape(())))
    return bounds[0], bounds[1]


def fuse_activations(graph: Graph) -> Graph:
    """Fold each Relu, or Clip with constant bounds, into its producer when the producer is a
    fusable op (Conv, ConvTranspose, Gemm, MatMul, Add) with a float output read by nothing
    else. The producer gets `fused_clip = [lo, hi]` (intersected with any clamp it already had)
    and takes over the activation's output value, so names and users are unchanged; the
    producer's old output name is recorded in `graph.fused_names`.

    Guarantees: results are identical (the clamp is applied to the same float values); a
    quantizer later turns the clamp into the output range (ReLU becomes a clamp at the zero
    point).
    """
    users = graph.users()
    fused: list[Node] = []
    for act in graph.nodes:
        clamp = _clamp_of(act)
        if clamp is None or not act.inputs or act.inputs[0] is None:
            continue
        x = act.inputs[0]
        producer = x.producer
        if producer is None or len(producer.outputs) != 1:
            continue
        op = lookup(producer.op_type, producer.domain)
        if op is None or not op.fusable:
            continue
        if len(users.get(x, [])) != 1 or x in graph.outputs:
            continue
        if x.type is None or not x.type.dtype.is_float or x.type.is_quantized:
            continue
        lo, hi = clamp
        if FUSED_CLIP in producer.attrs:
            old_lo, old_hi = producer.attrs[FUSED_CLIP]
            lo, hi = max(lo, old_lo), min(hi, old_hi)
        producer.attrs[FUSED_CLIP] = [lo, hi]
        out = act.outputs[0]
        graph.fused_names[x.name] = out.name
        producer.outputs[0] = out
        out.producer = producer
        fused.append(act)
    graph.remove_nodes(fused)
    return graph
