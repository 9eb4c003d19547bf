"""Text form of types and graphs, the way engineers debug them.

A per-tensor quantized type prints as `i8[S:0.025500000 O:-128][0.000,6.503]<1 x 56 x 56 x 64>`:
dtype, scale, zero point (offset), the real range the integers can represent, and the shape.
A per-channel type shows its axis and the range of its scales and zero points:
`i8[axis:0 S:0.000412000..0.008113000 O:0][-1.030,1.030]<64 x 3 x 3 x 3>`. Float types print as
`f32<1 x 3 x 224 x 224>`; symbolic dimensions print by name and unknown ones as `?`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lowbit.ir.graph import Graph, Node
    from lowbit.ir.types import Dim, QuantParams, TensorType


def format_dim(d: Dim) -> str:
    return "?" if d is None else str(d)


def format_shape(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "<*>"
    return "<" + " x ".join(format_dim(d) for d in shape) + ">"


def format_quant(q: QuantParams, dtype) -> str:
    lo, hi = q.real_range(dtype)
    if q.per_tensor:
        params = f"S:{float(q.scale):.9f} O:{int(q.zero_point)}"
    else:
        zmin, zmax = int(np.min(q.zero_point)), int(np.max(q.zero_point))
        zp = f"O:{zmin}" if zmin == zmax else f"O:{zmin}..{zmax}"
        params = f"axis:{q.axis} S:{float(q.scale.min()):.9f}..{float(q.scale.max()):.9f} {zp}"
    return f"[{params}][{lo:.3f},{hi:.3f}]"


def format_type(t: TensorType | None) -> str:
    if t is None:
        return "?"
    quant = format_quant(t.quant, t.dtype) if t.quant is not None else ""
    return f"{t.dtype.short}{quant}{format_shape(t.shape)}"


def _format_attr(value) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return np.array2string(value.reshape(-1), separator=",", threshold=8)
        return f"tensor{format_shape(tuple(value.shape))}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format_attr(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def format_node(node: Node) -> str:
    outs = ", ".join(f"%{v.name}: {format_type(v.type)}" for v in node.outputs)
    ins = ", ".join("%" + v.name if v is not None else "_" for v in node.inputs)
    attrs = ", ".join(f"{k}={_format_attr(v)}" for k, v in sorted(node.attrs.items()))
    attrs = f" {{{attrs}}}" if attrs else ""
    return f"{outs} = {node.op_type}({ins}){attrs}  # {node.name}"


def format_graph(graph: Graph, constants: bool = False) -> str:
    """The whole graph, one line per node; Constant nodes are listed only if `constants`."""
    lines = [f"graph {graph.name} (opset {graph.opset}) {{"]
    for v in graph.inputs:
        lines.append(f"  input %{v.name}: {format_type(v.type)}")
    for node in graph.nodes:
        if node.op_type == "Constant" and not constants:
            continue
        lines.append("  " + format_node(node))
    for v in graph.outputs:
        lines.append(f"  output %{v.name}: {format_type(v.type)}")
    lines.append("}")
    return "\n".join(lines)
