"""PyTorch's dynamically quantized Linear layers, as the PyTorch import writes them in standard
ONNX ops (`lowbit.frontends.torch_dynamic`: ReduceMin/ReduceMax, IsInf, Where, ... computing
fbgemm's activation scale and zero point, then Round/Clip/Cast codes feeding a MatMulInteger),
turned back into one lowbit `TorchDynamicQuantize` per layer:

    q, s, z = <the import's standard ops>(x)   ->   q, s, z = TorchDynamicQuantize(x)

Exact: TorchDynamicQuantize's formula (`lowbit.numerics.torch_params`) is the one those ops
compute, step for step (tests/backends/cpu/test_torch_dynamic_cpu.py checks the two equal on
ordinary, tiny, zero, empty, NaN and infinite inputs). The MatMulInteger that reads q and z then
becomes the backend's dynamic product (`integer_products`), and the float Mul by s * weight
scale and the bias Add stay float ops of their own.

The exporter's erf-form GELU (Div, Erf, Add, Mul, Mul) becomes one TorchGelu of the same
float32 steps (`rewrite_torch_gelus`), computed by the backend in one pass.

A subgraph is rewritten only when it is exactly the import's form: every node, attribute,
constant and edge from x to q, s and z is compared with the form `torch_dynamic` writes (its own
function builds the template), so an edited or look-alike graph is left alone and the backend
says which op it lacks.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from onnx import helper, numpy_helper

from lowbit.ir import dtypes
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ops.registry import QUANT_DOMAIN

X, P = "x", "t"
"""The template's input name and name prefix."""

DEFAULT_ATTRS = {("Cast", "saturate"): 1, ("ReduceMin", "noop_with_empty_axes"): 0,
                 ("ReduceMax", "noop_with_empty_axes"): 0, ("IsInf", "detect_negative"): 1,
                 ("IsInf", "detect_positive"): 1}
"""Attributes a loaded node may carry beyond the template's, at their ONNX defaults."""


@lru_cache(maxsize=1)
def _template() -> tuple[dict, dict]:
    """(producer of each template value: (op_type, inputs, attrs), constants by name) of the
    activation part of the import's form of one Linear."""
    from lowbit.frontends.torch_dynamic import DynamicLinear, _linear_nodes

    layer = DynamicLinear("template", np.zeros((1, 1), np.int8), np.ones(1, np.float32),
                          np.zeros(1, np.int64), None)
    inits: list = []
    nodes = _linear_nodes(X, "y", layer, P, inits)
    producers = {n.output[0]: (n.op_type, tuple(n.input),
                               {a.name: helper.get_attribute_value(a) for a in n.attribute})
                 for n in nodes}
    consts = {t.name: numpy_helper.to_array(t) for t in inits}
    return producers, consts


def _same_const(got: np.ndarray, want: np.ndarray) -> bool:
    got = np.asarray(got)
    return got.dtype == want.dtype and got.shape == want.shape and \
        np.array_equal(got, want, equal_nan=True)


def _same_attrs(node: Node, want: dict) -> bool:
    for key, value in node.attrs.items():
        if key in want:
            if value != want[key]:
                return False
        elif DEFAULT_ATTRS.get((node.op_type, key), object()) != value:
            return False
    return all(k in node.attrs for k in want)


def _match(name: str, v: Value | None, seen: dict[str, Value]) -> bool:
    """Whether graph value `v` is computed as template value `name` (binding `seen`)."""
    if v is None:
        return False
    if name in seen:
        return seen[name] is v
    producers, consts = _template()
    if name == X:
        ok = v.type is not None and v.type.dtype == dtypes.FLOAT32 and v.type.quant is None \
            and v.type.shape is not None
    elif name in consts:
        ok = v.is_constant and _same_const(v.const_value, consts[name])
    else:
        op_type, inputs, attrs = producers[name]
        node = v.producer
        ok = node is not None and node.op_type == op_type and \
            node.domain in ("", "ai.onnx") and len(node.outputs) == 1 and \
            len(node.inputs) == len(inputs) and _same_attrs(node, attrs)
        if ok:
            seen[name] = v
            return all(_match(i, g, seen) for i, g in zip(inputs, node.inputs, strict=True))
    if ok:
        seen[name] = v
    return ok


def rewrite_torch_quantizers(graph: Graph) -> Graph:
    """A copy of `graph` with the activation quantization of each imported PyTorch dynamic
    Linear replaced by TorchDynamicQuantize (module docstring); `graph` itself when there is
    none."""
    if not any(n.op_type == "IsInf" for n in graph.nodes) or \
            not any(n.op_type == "MatMulInteger" for n in graph.nodes):
        return graph
    graph = graph.copy()
    changed = False
    quantizers: dict[Value, Node] = {}  # one per input: Q, K and V read the same x
    for node in list(graph.nodes):
        if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx") or \
                len(node.inputs) != 4:
            continue
        seen: dict[str, Value] = {}
        if not (_match(f"{P}_q", node.inputs[0], seen) and
                _match(f"{P}_zp_u8", node.inputs[2], seen)):
            continue
        q, s, z = seen[f"{P}_q"], seen[f"{P}_s"], seen[f"{P}_zp_u8"]
        x = seen[X]
        if any(v in graph.outputs for v in (q, s, z)):
            continue
        old = [q.producer, s.producer, z.producer]
        readers = [n for n in graph.nodes if n not in old and any(v in (q, s, z)
                                                                  for v in n.inputs)]
        earliest = min((graph.nodes.index(n) for n in readers), default=len(graph.nodes))
        if x in quantizers and graph.nodes.index(quantizers[x]) < earliest:
            graph.remove_nodes(old)
            for mine, theirs in zip((q, s, z), quantizers[x].outputs, strict=True):
                graph.replace_all_uses(mine, theirs)
            quantize = quantizers[x]
        else:
            first = min(graph.nodes.index(n) for n in old)
            quantize = Node("TorchDynamicQuantize", [x], [q, s, z], {"reduce_range": 1},
                            graph.unique_node_name(f"{node.name}_torch_quantize"), QUANT_DOMAIN)
            graph.nodes.insert(first, quantize)
            graph.remove_nodes(old)
            quantizers[x] = quantize
        _hoist_rescales(graph, quantize)
        changed = True
    return eliminate_dead_code(graph) if changed else graph


def _hoist_rescales(graph: Graph, quantize: Node) -> None:
    """Move the nodes that read only the quantizer's scale and constants (the Mul by the weight
    scales) right after it, so that the rescaling vector exists before the product runs and
    its Mul can join the product's epilogue."""
    s = quantize.outputs[1]
    at = graph.nodes.index(quantize) + 1
    for n in [n for n in graph.nodes if s in n.inputs]:
        if all(v is s or (v is not None and v.is_constant) for v in n.inputs) and \
                graph.nodes.index(n) > at:
            consts = [v.producer for v in n.inputs if v is not None and v.is_constant
                      and graph.nodes.index(v.producer) > at]
            for c in consts + [n]:
                graph.nodes.remove(c)
                graph.nodes.insert(at, c)
                at += 1


def _scalar(v: Value | None, rank: int) -> float | None:
    """The value of a float32 constant holding one number that broadcasts into rank `rank`."""
    if v is None or not v.is_constant:
        return None
    a = np.asarray(v.const_value)
    if a.dtype != np.float32 or a.size != 1 or a.ndim > rank:
        return None
    return float(a.reshape(()))


def _other(node: Node, v: Value) -> Value | None:
    if len(node.inputs) != 2 or (node.inputs[0] is v) == (node.inputs[1] is v):
        return None
    return node.inputs[1] if node.inputs[0] is v else node.inputs[0]


def _float_op(node: Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx") \
        and not node.attrs and all(v is not None and v.type is not None and
                                   v.type.dtype == dtypes.FLOAT32 and v.type.quant is None
                                   for v in (*node.inputs, *node.outputs))


def rewrite_torch_gelus(graph: Graph) -> Graph:
    """A copy of `graph` with each erf-form GELU as PyTorch's exporter writes it,
    Mul(Mul(x, Add(Erf(Div(x, c)), one)), half) (operands of Add and the Muls in either order,
    constants float32 scalars, intermediate values read by nothing else), replaced by one
    TorchGelu of the same float32 steps; `graph` itself when there is none."""
    if not any(n.op_type == "Erf" for n in graph.nodes):
        return graph
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)

    def sole(v: Value) -> Node | None:
        uses = users.get(v, [])
        return uses[0][0] if len(uses) == 1 and v not in outputs else None

    changed = False
    for erf in [n for n in graph.nodes if n.op_type == "Erf"]:
        div = erf.inputs[0].producer if erf.inputs and erf.inputs[0] is not None else None
        if not (_float_op(erf, "Erf") and _float_op(div, "Div") and sole(div.outputs[0]) is erf):
            continue
        x = div.inputs[0]
        rank = len(x.type.shape) if x.type.shape is not None else 0
        add = sole(erf.outputs[0])
        mul = sole(add.outputs[0]) if _float_op(add, "Add") else None
        half_mul = sole(mul.outputs[0]) if _float_op(mul, "Mul") else None
        if not _float_op(half_mul, "Mul") or _other(mul, add.outputs[0]) is not x:
            continue
        divisor = _scalar(div.inputs[1], rank)
        one = _scalar(_other(add, erf.outputs[0]), rank)
        half = _scalar(_other(half_mul, mul.outputs[0]), rank)
        if divisor is None or one is None or half is None or x.type.shape is None:
            continue
        y = half_mul.outputs[0]
        gelu = Node("TorchGelu", [x], [y], {"divisor": divisor, "one": one, "half": half},
                    graph.unique_node_name(f"{erf.name}_gelu"), QUANT_DOMAIN)
        graph.nodes.insert(graph.nodes.index(half_mul), gelu)
        graph.remove_nodes([div, erf, add, mul, half_mul])
        changed = True
    return eliminate_dead_code(graph) if changed else graph
