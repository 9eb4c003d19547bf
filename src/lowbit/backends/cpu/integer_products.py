"""ONNX integer products as the cpu backend's dynamic product: `MatMulInteger` whose int32
result only goes through `Cast(to=float)` (ONNX Runtime's `quantize_dynamic` files:
DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scales) -> Add(bias)).

    Cast(MatMulInteger(A, B, a_zero, b_zero), float) = DynamicMatMul(A, 1, a_zero, B_q)

with B_q the constant int8 B typed with scale 1 and zero point b_zero (per tensor, or per
output column). Exact: the reference's DynamicMatMul is
`float32(float64(acc) * (float64(1) * float64(1)))` = float32(acc), the Cast's single rounding
of the same exact int32 sum acc = sum_k (A - a_zero)(B - b_zero); the Mul by the scales and the
bias Add stay float ops of their own. Anything else (a run-time B, an int32 result read as
such) is left alone, and the backend says which op it lacks.
"""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import QuantParams, TensorType
from lowbit.ops.registry import QUANT_DOMAIN


def _cast_to_float(graph: Graph, node: Node, users: dict) -> Node | None:
    y = node.outputs[0]
    uses = users.get(y, [])
    if y in graph.outputs or len(uses) != 1:
        return None
    cast = uses[0][0]
    if cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx") or \
            int(cast.attrs.get("to", 0)) != dtypes.FLOAT32.onnx_code:
        return None
    return cast


def rewrite_integer_products(graph: Graph) -> Graph:
    """A copy of `graph` with every MatMulInteger + Cast(float) of a constant int8 B replaced
    by a DynamicMatMul (see the module docstring); `graph` itself when there is none."""
    if not any(n.op_type == "MatMulInteger" for n in graph.nodes):
        return graph
    graph = graph.copy()
    users = graph.users()
    changed = False
    for node in list(graph.nodes):
        if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
            continue
        a, b = node.inputs[0], node.inputs[1]
        az, bz = node.input_or_none(2), node.input_or_none(3)
        cast = _cast_to_float(graph, node, users)
        if cast is None or not b.is_constant or a.type is None or a.type.shape is None:
            continue
        w = np.asarray(b.const_value)
        rank = len(a.type.shape)
        if w.dtype != np.int8 or w.ndim != 2 or rank < 2 or \
                a.type.dtype not in (dtypes.UINT8, dtypes.INT8):
            continue
        if bz is not None and not bz.is_constant:
            continue
        zb = np.zeros((), np.int8) if bz is None else np.asarray(bz.const_value)
        if zb.size not in (1, w.shape[1]):
            continue
        if az is not None and (az.type is None or az.type.shape is None or
                               int(np.prod([d if isinstance(d, int) else 2
                                            for d in az.type.shape])) != 1):
            continue
        ones = (1,) * rank
        scale = graph.add_constant(np.ones(ones, np.float32),
                                   graph.unique_name(f"{node.name}_unit_scale"), before=node)
        if az is None:
            zero = graph.add_constant(np.zeros(ones, a.type.dtype.np_dtype),
                                      graph.unique_name(f"{node.name}_a_zero"), before=node)
        else:
            shape = graph.add_constant(np.array(ones, np.int64),
                                       graph.unique_name(f"{node.name}_a_zero_shape"),
                                       before=node)
            zero = graph.make_node("Reshape", [az, shape], {"allowzero": 0},
                                   name=f"{node.name}_a_zero",
                                   output_types=[TensorType(az.type.dtype, ones)],
                                   before=node).outputs[0]
        params = QuantParams(np.ones(w.shape[1], np.float32), zb.reshape(-1), 1) \
            if zb.size > 1 else QuantParams(np.float32(1), zb.reshape(()))
        bq = graph.add_constant(w, graph.unique_name(f"{b.name}_codes"), before=node)
        bq.type = TensorType(dtypes.INT8, tuple(w.shape), params)
        out: Value = cast.outputs[0]
        product = Node("DynamicMatMul", [a, scale, zero, bq], [out], {},
                       graph.unique_node_name(f"{node.name}_dynamic"), QUANT_DOMAIN)
        graph.nodes[graph.nodes.index(node)] = product
        graph.nodes.remove(cast)
        changed = True
    return eliminate_dead_code(graph) if changed else graph
