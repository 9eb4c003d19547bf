"""Constant folding, including shape sub-graphs over statically known shapes."""

from __future__ import annotations

from collections import deque

import numpy as np

from lowbit.backends.reference.kernels import kernel_for
from lowbit.errors import KernelError, LowbitError
from lowbit.ir import dtypes
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import CONSTANT, Graph, Node
from lowbit.ir.types import TensorType
from lowbit.ops import infer_node, lookup, merge_types
from lowbit.ops.shape_values import as_array, static_value
from lowbit.passes.control_flow import inline_if, sink_constant_captures

NO_FOLD = frozenset({
    # Quantize/Dequantize of constants stay until the late fold, so passes and backends can
    # still see (and re-quantize from) the float payload.
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    # Nondeterministic ops.
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli",
})
MAX_FOLDED_ELEMENTS = 1 << 24
"""Results bigger than this stay computed at run time (an Expand must not bloat the model)."""
MAX_FOLDED_OPS = 1 << 30
"""Nodes costing more operations than this (`OpDef.work`) are not folded at import: loading
a small file must not take minutes."""


def _known_shape_value(node: Node) -> list[np.ndarray] | None:
    """The value of a one-output node computing a small integer tensor whose elements are all
    known from static dims (Shape, or Gather/Slice/Concat/... of shapes where the dims needed
    are static), though not all its inputs are constants."""
    if len(node.outputs) != 1 or node.output.type is None or node.output.type.shape is None:
        return None
    values = static_value(node.output)
    return None if values is None else [as_array(values, node.output)]


def fold_constants(graph: Graph) -> Graph:
    """Replace every node whose inputs are all constants, or whose result is a shape value whose
    elements are all static (`Shape(x)`, `Gather(Shape(x), 2)` when that dim of x is static,
    see `lowbit.ops.shape_values`), by a Constant node holding its result; then drop what
    became dead.

    An If whose condition became constant is replaced by its branch (whose nodes are folded
    in turn), and constants that a control-flow body reads move into the body
    (`lowbit.passes.control_flow`).

    Guarantees: graph outputs compute the same values; Quantize/Dequantize of constants and
    random ops are kept; no folded constant exceeds MAX_FOLDED_ELEMENTS elements.
    """
    new_nodes: list[Node] = []
    pending = deque(graph.nodes)
    while pending:
        node = pending.popleft()
        branch = inline_if(graph, node)
        if branch is not None:
            pending.extendleft(reversed(branch))
            continue
        sink_constant_captures(graph, node)
        result = _try_fold(node)
        if result is None:
            new_nodes.append(node)
            if node.op_type != CONSTANT:
                # Refine types as we go, so later Shape nodes see newly static shapes.
                for value, t in zip(node.outputs, infer_node(node), strict=False):
                    value.type = merge_types(value.type, t)
            continue
        for value, array in zip(node.outputs, result, strict=True):
            array = np.array(array, copy=True)
            array.setflags(write=False)
            value.type = TensorType(dtypes.from_numpy(array.dtype), tuple(array.shape))
            new_nodes.append(Node(CONSTANT, [], [value], {"value": array},
                                  name=graph.unique_node_name(f"{node.name}_folded")))
    graph.nodes = new_nodes
    return eliminate_dead_code(graph)


def _try_fold(node: Node) -> list[np.ndarray] | None:
    if node.op_type == CONSTANT or node.op_type in NO_FOLD or node.domain or node.subgraphs():
        return None
    if not all(v is None or v.is_constant for v in node.inputs):
        return _known_shape_value(node)
    if any(v.type is not None and v.type.is_quantized for v in node.outputs):
        return None
    kernel = kernel_for(node)
    if kernel is None:
        return None
    for v in node.outputs:
        if v.type is not None and v.type.numel is not None and v.type.numel > MAX_FOLDED_ELEMENTS:
            return None
    work = lookup(node.op_type, node.domain)
    if work is not None and work.work(node, [v.type if v is not None else None
                                              for v in node.inputs],
                                      [v.type for v in node.outputs]).ops > MAX_FOLDED_OPS:
        return None  # left to run time, whose preflight weighs it against the inputs
    args = [v.const_value if v is not None else None for v in node.inputs]
    try:
        with np.errstate(all="ignore"):
            results = [np.asarray(r) for r in kernel(node, args)]
    except LowbitError as exc:
        raise type(exc)(f"{node.describe()}: {exc}") from exc
    except Exception as exc:
        raise KernelError(f"{node.describe()} fails on its constant inputs: "
                          f"{type(exc).__name__}: {exc}") from exc
    if any(r.size > MAX_FOLDED_ELEMENTS for r in results):
        return None
    return results[: len(node.outputs)]
