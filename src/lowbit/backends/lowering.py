"""Backend transforms shared by every backend and exporter: the late steps that turn a quantized
Graph into what kernels execute."""

from __future__ import annotations

import numpy as np

from lowbit.identity_memo import IdentityMemo
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import CONSTANT, Graph, Node
from lowbit.ir.types import TensorType
from lowbit.numerics import arith
from lowbit.ops.registry import QUANT_DOMAIN


def fold_quantized_constants(graph: Graph) -> Graph:
    """Replace Quantize(Constant) by an integer Constant of the quantized type (the late fold of
    delayed quantization: until here, passes and backends see the float weights).

    Guarantees: the folded constant equals what the Quantize node would compute at run time
    (`arith.quantize`, the Quantize kernel's definition); subgraphs are folded too.
    """
    for node in graph.nodes:
        for attr, sub in node.subgraphs():
            node.attrs[attr] = fold_quantized_constants(sub)
    for i, node in enumerate(graph.nodes):
        if node.domain != QUANT_DOMAIN or node.op_type != "Quantize" or \
                not node.inputs[0].is_constant:
            continue
        array = _quantized(node.inputs[0].const_value, node.outputs[0].type)
        graph.nodes[i] = Node(CONSTANT, [], [node.output], {"value": array}, node.name)
    return eliminate_dead_code(graph)


_FOLDED = IdentityMemo()
"""Folded constants by (float array, quantization parameters) identity: a budget search folds
the same weights with the same parameters for every candidate (MiniLM's int8 word table: 1 s
each time)."""


def _quantized(array: np.ndarray, qtype: TensorType) -> np.ndarray:
    """arith.quantize(array, qtype), read-only, memoized while both are alive (`_FOLDED`)."""

    def compute() -> np.ndarray:
        out = arith.quantize(array, qtype).copy()
        out.setflags(write=False)
        return out

    if qtype.quant is None or array.flags.writeable:
        return compute()
    return _FOLDED((array, qtype.quant), (qtype.dtype, qtype.shape), compute)


def has_quantized_constants(graph: Graph) -> bool:
    """Whether some Quantize node still reads a constant (`fold_quantized_constants` has work)."""
    return any(n.domain == QUANT_DOMAIN and n.op_type == "Quantize" and n.inputs[0].is_constant
               for n, _ in graph.walk())
