"""int8 activations rewritten as uint8 for the ONNX exports (QDQ and QOperator).

ONNX Runtime's fast x86 integer kernels (MLAS) multiply uint8 activations by int8 weights; its
QLinearConv and QLinearMatMul on int8 activations take a generic path several times slower
(EfficientNet-Lite0 in QOperator form: 13.3 ms against 1.1 ms, benchmarks/static_latency.py).
For QDQ models ONNX Runtime moves int8 activations to uint8 itself (QDQS8ToU8Transformer), but
not a value two nodes read (a residual branch): the Conv or Add around it then ran in float,
14 of EfficientNet-Lite0's 49 convolutions and all 9 of its Adds (2.1 ms against 1.1 ms).

In the QDQ form an int8 activation with zero point 0 (the symmetric scheme) stays int8: that
is the convention of runtimes that take only symmetric int8 (TensorRT); ONNX Runtime then moves
what it can itself. QOperator models are ONNX Runtime's own format and move every int8
activation.

The move is exact: a code q of an int8 tensor with zero point z is stored as q + 128 with zero
point z + 128, which is the same real value `scale * (q - z)`. Moved: every per-tensor int8
value computed inside the graph and every per-tensor int8 constant except the weights of Conv,
MatMul and Gemm (operand 1), which stay int8; a constant that is both a weight and something
else is split. Graph inputs and outputs keep their types, so the model's interface does not
change; a node reading both kinds (which then has mixed operand types) is written in QDQ form
by the lowering. A Pad whose data moves gets its pad code moved too.

ONNX Runtime documents that its uint8 x int8 kernels on x86 CPUs without VNNI add pairs of
products in int16 (VPMADDUBSW), which can saturate with full-range int8 weights; its own
quantizer offers 7-bit weights (`reduce_range`) for those machines. On this project's machine
(AVX-512 VNNI) both exports agree with lowbit's integer result within one code, with ONNX
Runtime's default graph optimizations (tests/test_realmodel_quant.py).
"""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import QuantParams, TensorType
from lowbit.ops.product import integer_product

SHIFT = 128


def _movable(v: Value, keep_symmetric: bool) -> bool:
    t = v.type
    return (t is not None and t.quant is not None and t.dtype == dtypes.INT8
            and t.quant.axis is None and not (keep_symmetric and int(t.quant.zero_point) == 0))


def _moved_type(t: TensorType) -> TensorType:
    q = t.quant
    return TensorType(dtypes.UINT8, t.shape,
                      QuantParams(q.scale, int(q.zero_point) + SHIFT, None))


def _moved_array(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.int16) + SHIFT).astype(np.uint8)


def _is_weight(node: Node, index: int) -> bool:
    geometry = integer_product(node) if node.domain == "" else None
    return geometry is not None and geometry.weight_input == index


def move_activations_to_uint8(g: Graph, keep_symmetric: bool = False) -> Graph:
    """Rewrite `g` (late-folded, integer constants) in place as described above; returns g.
    `keep_symmetric` leaves int8 values with zero point 0 as they are (the QDQ form)."""
    boundary = {id(v) for v in (*g.inputs, *g.outputs)}
    users = g.users()
    for node in list(g.nodes):
        for v in node.outputs:
            if not _movable(v, keep_symmetric) or id(v) in boundary:
                continue
            if not v.is_constant:
                v.type = _moved_type(v.type)
                continue
            readers = users.get(v, [])
            others = [(n, i) for n, i in readers if not _is_weight(n, i)]
            if not others:
                continue
            if len(others) == len(readers):
                node.attrs["value"] = _read_only(_moved_array(v.const_value))
                v.type = _moved_type(v.type)
                continue
            copy = g.add_constant(_moved_array(v.const_value), f"{v.name}_u8", before=node)
            copy.type = _moved_type(v.type)
            for n, i in others:
                n.inputs[i] = copy
    for node in g.nodes:
        if node.op_type == "Pad":
            _move_pad_code(g, node)
    return g


def _move_pad_code(g: Graph, node: Node) -> None:
    """A pad code stays in its data's type: an int8 one next to data moved to uint8 moves."""
    code = node.input_or_none(2)
    if code is None or code.type.dtype != dtypes.INT8 or \
            node.inputs[0].type.dtype != dtypes.UINT8:
        return
    node.inputs[2] = g.add_constant(_moved_array(code.const_value), f"{node.name}_pad_u8",
                                    before=node)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a
