"""Fusing the decomposed layer normalization older exporters write into LayerNormalization."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node, Value, constant_operand


def fuse_layer_norms(graph: Graph) -> Graph:
    """Replace each layer normalization over the last axis spelled out in elementwise ops (as
    exporters for opsets before 17 write it),

        mean = ReduceMean(x, [-1])           d = Sub(x, mean)
        var  = ReduceMean(Pow(d, 2), [-1])   (or Mul(d, d))
        y    = Div(d, Sqrt(Add(var, eps)))  [ Mul(y, gamma) ] [ Add(., beta) ]

    (both ReduceMeans keeping dims, eps a constant scalar, gamma and beta constants over the
    last axis, every intermediate read only inside the pattern), by one
    `LayerNormalization(x, gamma, beta, axis=-1, epsilon=eps)` (gamma 1 where the pattern has
    none) that takes over the last value, so its name and readers are unchanged.

    Guarantees: the same formula, so results equal up to float32 rounding order. Quantization
    then sees one float op, as in models exported at opset 17 or later: its pieces are not
    rounded to integers one by one, and the products reading it are smoothed.
    """
    users = graph.users()
    matches: list[_Match] = []
    taken: set[int] = set()
    for div in graph.nodes:
        match = _match(div, users, graph)
        if match is not None and not any(id(n) in taken for n in match.nodes):
            taken.update(id(n) for n in match.nodes)
            matches.append(match)
    for m in matches:
        first, last = m.nodes[0], m.nodes[-1]
        gamma = _vector(m.gamma, m.channels, graph, first, "scale")
        beta = _vector(m.beta, m.channels, graph, first, "bias")
        node = Node("LayerNormalization", [m.x, gamma] + ([beta] if beta is not None else []),
                    [last.outputs[0]], {"axis": -1, "epsilon": m.eps, "stash_type": 1},
                    graph.unique_node_name(f"{last.name}_layer_norm"))
        graph.nodes.insert(graph.nodes.index(last), node)
        graph.remove_nodes(m.nodes)
    return graph


@dataclass
class _Match:
    nodes: list[Node]
    """The pattern's nodes in graph order; the last one's output becomes the fused node's."""
    x: Value
    channels: int
    gamma: Value | None
    beta: Value | None
    eps: float


def _match(div: Node, users, graph: Graph) -> _Match | None:
    """The pattern (`fuse_layer_norms`) ending at `div` or just after it, else None."""
    if div.op_type != "Div" or len(div.inputs) != 2:
        return None
    d, std = div.inputs
    sqrt = _sole_producer(std, div, users, graph, "Sqrt")
    add_eps = _sole_producer(sqrt.inputs[0], sqrt, users, graph, "Add") if sqrt else None
    found = constant_operand(add_eps) if add_eps is not None else None
    if found is None or found[0].size != 1:
        return None
    eps, var = found
    mean2 = _sole_producer(var, add_eps, users, graph, "ReduceMean")
    square = _sole_producer(mean2.inputs[0], mean2, users, graph, None) if mean2 else None
    if square is None or not _last_axis_mean(mean2) or not _squares(square, d):
        return None
    sub = d.producer
    readers = sorted(id(n) for n, _ in users.get(d, []))
    expected = sorted([id(div)] + [id(square)] * (2 if square.op_type == "Mul" else 1))
    if sub is None or sub.op_type != "Sub" or d in graph.outputs or readers != expected:
        return None
    x, mean = sub.inputs
    mean1 = _sole_producer(mean, sub, users, graph, "ReduceMean")
    if mean1 is None or mean1.inputs[0] is not x or not _last_axis_mean(mean1):
        return None
    if x.type is None or x.type.dtype != dtypes.FLOAT32 or not x.type.shape or \
            not isinstance(x.type.shape[-1], int):
        return None
    channels = x.type.shape[-1]
    nodes = [mean1, sub, square, mean2, add_eps, sqrt, div]
    gamma = beta = None
    step = _sole_reader(div.outputs[0], users, graph)
    if step is not None and step.op_type == "Mul":
        gamma = _affine_constant(step, div.outputs[0], channels)
        if gamma is not None:
            nodes.append(step)
            step = _sole_reader(step.outputs[0], users, graph)
    if step is not None and step.op_type == "Add":
        beta = _affine_constant(step, nodes[-1].outputs[0], channels)
        if beta is not None:
            nodes.append(step)
    return _Match(nodes, x, channels, gamma, beta, float(eps.reshape(())))


def _affine_constant(node: Node, value: Value, channels: int) -> Value | None:
    """The constant operand of `node` (Mul or Add of `value` and a constant over the last
    axis), else None."""
    found = constant_operand(node)
    if found is None or found[1] is not value or not _per_channel(found[0], channels):
        return None
    return node.inputs[1] if node.inputs[0] is value else node.inputs[0]


def _vector(v: Value | None, channels: int, graph: Graph, before: Node,
            role: str) -> Value | None:
    """`v` as a 1-D float32 constant of `channels` values (LayerNormalization's Scale and B);
    ones for a missing Scale, None for a missing B."""
    if v is None and role == "bias":
        return None
    if v is not None and np.shape(v.const_value) == (channels,) and \
            v.const_value.dtype == np.float32:
        return v
    array = np.ones(channels) if v is None else np.asarray(v.const_value).reshape(-1)
    flat = np.broadcast_to(array, (channels,)).astype(np.float32)
    return graph.add_constant(flat, graph.unique_name(f"{before.name}_{role}"), before=before)


def _per_channel(array: np.ndarray, channels: int) -> bool:
    """A constant that broadcasts over the last axis only: [C] or [1, .., 1, C] (or [1])."""
    shape = np.shape(array)
    return all(d == 1 for d in shape[:-1]) and (not shape or shape[-1] in (1, channels))


def _sole_reader(v: Value, users, graph: Graph) -> Node | None:
    """The one node reading `v` (not a graph output), else None."""
    readers = users.get(v, [])
    if v in graph.outputs or len(readers) != 1:
        return None
    return readers[0][0]


def _sole_producer(v: Value, reader: Node, users, graph: Graph,
                   op_type: str | None) -> Node | None:
    """The producer of `v` when `reader` is the only node reading `v` (once), `v` is no graph
    output, and the producer has one output and is `op_type` (any op when None)."""
    producer = v.producer
    if producer is None or v in graph.outputs or (op_type and producer.op_type != op_type):
        return None
    readers = users.get(v, [])
    if len(readers) != 1 or readers[0][0] is not reader or len(producer.outputs) != 1:
        return None
    return producer


def _last_axis_mean(node: Node) -> bool:
    """A ReduceMean over the last axis only, keeping dims."""
    if not int(node.attrs.get("keepdims", 1)):
        return False
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = node.inputs[1].const_value
    x = node.inputs[0]
    if axes is None or x.type is None or x.type.shape is None:
        return False
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    rank = len(x.type.shape)
    return len(axes) == 1 and axes[0] % rank == rank - 1


def _squares(node: Node, d: Value) -> bool:
    """Pow(d, 2) or Mul(d, d)."""
    if node.op_type == "Mul":
        return len(node.inputs) == 2 and node.inputs[0] is d and node.inputs[1] is d
    if node.op_type != "Pow" or node.inputs[0] is not d:
        return False
    exponent = node.inputs[1].const_value if node.inputs[1] is not None else None
    return exponent is not None and exponent.size == 1 and float(exponent.reshape(())) == 2.0

