"""An upsampling ConvTranspose as a 1x1 Conv followed by DepthToSpace."""

from __future__ import annotations

import numpy as np

from lowbit.ir.graph import Graph, Node
from lowbit.ops import infer_node
from lowbit.ops.registry import FUSED_CLIP


def _block(node: Node) -> int | None:
    """The block size b of a ConvTranspose whose taps tile its output exactly (b x b kernel,
    stride b, no dilation, padding or output padding, one group, constant float weight
    and bias, a 4-D input), else None."""
    if node.op_type != "ConvTranspose" or node.domain or len(node.outputs) != 1:
        return None
    w_in, b_in = node.inputs[1], node.input_or_none(2)
    w = w_in.const_value
    if w is None or w.ndim != 4 or w.dtype.kind != "f" or \
            (b_in is not None and b_in.const_value is None):
        return None
    x = node.inputs[0].type
    if x is None or x.rank != 4 or not x.dtype.is_float or x.quant is not None:
        return None
    a = node.attrs
    b = int(w.shape[2])
    if b < 2 or w.shape[3] != b or int(a.get("group", 1)) != 1:
        return None
    if list(a.get("kernel_shape") or [b, b]) != [b, b] or \
            list(a.get("strides") or [1, 1]) != [b, b]:
        return None
    if any(d != 1 for d in a.get("dilations") or [1, 1]):
        return None
    if a.get("output_shape") is not None or any(p for p in a.get("output_padding") or [0, 0]):
        return None
    pad = a.get("auto_pad", "NOTSET")
    if pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return None
    if pad == "NOTSET" and any(p for p in a.get("pads") or [0] * 4):
        return None
    return b


def upsampling_conv_transpose(graph: Graph) -> Graph:
    """Rewrite each ConvTranspose whose b x b taps tile its output exactly (kernel b x b,
    stride b: the upsampling form, such as PP-OCR det's head) as a 1x1 Conv to b * b * M
    channels followed by DepthToSpace(b, DCR).

    Y[n, m, h * b + i, w * b + j] = B[m] + sum_c X[n, c, h, w] * W[c, m, i, j], and the Conv
    computes channel (i * b + j) * M + m of pixel (h, w) as that sum, with weight
    W'[(i * b + j) * M + m, c, 0, 0] = W[c, m, i, j] and bias B'[(i * b + j) * M + m] = B[m];
    DepthToSpace in DCR mode puts it at (m, h * b + i, w * b + j). Each result is the same
    sum of the same products (float64 in the reference, rounded once), so results are equal
    up to the order of the float64 additions. A fused clamp moves to the Conv (it clamps the
    same values). Guarantees: the DepthToSpace writes the ConvTranspose's output value (same
    name and users). The point: the quantizer computes a Conv in integers (COMPUTE), and
    DepthToSpace keeps its input's codes (KEEP), while a ConvTranspose stays in float.
    """
    for node in list(graph.nodes):
        b = _block(node)
        if b is None:
            continue
        w = node.inputs[1].const_value
        c, m = int(w.shape[0]), int(w.shape[1])
        w2 = np.ascontiguousarray(w.transpose(2, 3, 1, 0)).reshape(b * b * m, c, 1, 1)
        b_in = node.input_or_none(2)
        bias = None if b_in is None else np.tile(
            np.asarray(b_in.const_value, dtype=w.dtype).reshape(-1), b * b)
        inputs = [node.inputs[0], graph.add_constant(w2, f"{node.name}_1x1_w", before=node)]
        if bias is not None:
            inputs.append(graph.add_constant(bias, f"{node.name}_1x1_b", before=node))
        attrs: dict = {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                       "dilations": [1, 1], "group": 1}
        if FUSED_CLIP in node.attrs:
            attrs[FUSED_CLIP] = list(node.attrs[FUSED_CLIP])
        out = node.outputs[0]
        conv = graph.make_node("Conv", inputs, attrs, name=f"{node.name}_1x1",
                               output_names=[f"{out.name}_blocks"], before=node)
        conv.outputs[0].type = infer_node(conv)[0]
        d2s = graph.make_node("DepthToSpace", [conv.outputs[0]],
                              {"blocksize": b, "mode": "DCR"}, name=node.name + "_d2s",
                              before=node)
        d2s.outputs[0] = out
        out.producer = d2s
        graph.remove_nodes([node])
    return graph
