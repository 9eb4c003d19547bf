"""Lowering quantized graphs to plain ONNX: QDQ and QOperator forms.

Both start from the late-folded graph (integer constants), and rewrite it into ONNX-domain
nodes that `onnx_export.to_onnx` writes as they are.

Both store int8 activations as uint8, the same real values (`uint8_activations`: ONNX Runtime's
fast kernels take uint8 x int8; QDQ keeps symmetric int8 activations); weights stay int8.

QDQ: every 8-bit integer tensor stays an integer tensor; an op computing on integers reads its
operands through DequantizeLinear and writes its result through QuantizeLinear with the result
type's parameters (a fused clamp becomes a Clip before the QuantizeLinear). lowbit's Quantize /
Dequantize become QuantizeLinear / DequantizeLinear, a Requantize a DequantizeLinear +
QuantizeLinear pair. Runtimes fuse these patterns into their integer kernels. They compute ops
on 16-bit values in float, so those are written as float where no runtime fuses anything
(`_float_between_float_ops`, `_Lowering._float_product`).

QOperator: integer ops become ONNX Runtime's QLinear operators (QLinearConv, QLinearMatMul,
QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearSigmoid, QLinearLeakyRelu), integer-exact ops (Reshape, Transpose, MaxPool, ...) run on
the integers directly, Relu/Clip become integer Max/Clip at the quantized bounds, and anything
else falls back to the QDQ form for that node only: so does every node with a 16-bit operand
or result (an int16 layer), which those operators do not take.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from lowbit.backends.lowering import fold_quantized_constants
from lowbit.backends.reference.kernels import integer_params
from lowbit.errors import UnsupportedError
from lowbit.exporters.uint8_activations import move_activations_to_uint8
from lowbit.ir import dtypes
from lowbit.ir.attrs import AFFINE
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.types import TensorType
from lowbit.numerics import arith
from lowbit.ops.product import integer_product
from lowbit.ops.quantized import ONNX_QUANTIZED_OPS
from lowbit.ops.registry import FUSED_CLIP, KEEP, QUANT_DOMAIN, REQUANT, lookup

MS_DOMAIN = "com.microsoft"
FORMATS = ("qdq", "qoperator")

class _Lowering:
    def __init__(self, graph: Graph, form: str) -> None:
        self.g = graph
        self.form = form
        self._scales: dict[tuple, tuple[Value, Value]] = {}

    # -- helpers --------------------------------------------------------------------------------
    def params(self, t: TensorType, before: Node) -> tuple[Value, Value]:
        """Initializers holding t's scale (float32) and zero point (t's dtype)."""
        q = t.quant
        key = (t.dtype, q)
        found = self._scales.get(key)
        if found is None:
            scale = self.g.add_constant(q.scale.astype(np.float32),
                                        "scale", before=self.g.nodes[0])
            zero = self.g.add_constant(q.zero_point.astype(t.dtype.np_dtype),
                                       "zero_point", before=self.g.nodes[0])
            found = (scale, zero)
            self._scales[key] = found
        return found

    def axis_attrs(self, t: TensorType) -> dict:
        return {} if t.quant.axis is None else {"axis": int(t.quant.axis)}

    def dequantize(self, v: Value, before: Node) -> Value:
        """A DequantizeLinear of `v` for the one reader `before`: each reader gets its own, as
        runtimes fuse a DequantizeLinear into its reader only when nothing else reads it."""
        scale, zero = self.params(v.type, before)
        node = self.g.make_node("DequantizeLinear", [v, scale, zero], self.axis_attrs(v.type),
                                name=f"{v.name}_DequantizeLinear",
                                output_names=[f"{v.name}_dequantized"],
                                output_types=[TensorType(dtypes.FLOAT32, v.type.shape)],
                                before=before)
        return node.output

    def quantize_after(self, node: Node, index: int, t: TensorType) -> None:
        """Make output `index` of `node` float and append a QuantizeLinear (after a HardSwish's
        folded Mul and Add, and a Clip for a fused clamp) that produces the original integer
        value."""
        out = node.outputs[index]
        scale, zero = self.params(t, node)
        clip = node.attrs.pop(FUSED_CLIP, None) if index == 0 else None
        bounds = [] if clip is None else [
            self._bound(v, f"{out.name}_clip_{k}", node)
            for v, k in ((clip[0], "min"), (clip[1], "max"))]
        real = Value(self.g.unique_name(f"{out.name}_float"),
                     TensorType(dtypes.FLOAT32, t.shape))
        node.outputs[index] = real
        real.producer = node
        after: list[Node] = []
        source = real
        affine = node.attrs.pop(AFFINE, None) if index == 0 else None
        if affine is not None:  # a HardSwish's folded Mul and Add (float, as before folding)
            for op, c in (("Mul", affine[0]), ("Add", affine[1])):
                k = self.g.add_constant(np.asarray(c, np.float32), f"{out.name}_{op.lower()}",
                                        before=node)
                step = Value(self.g.unique_name(f"{out.name}_{op.lower()}ed"), real.type)
                after.append(Node(op, [source, k], [step], {},
                                  self.g.unique_node_name(f"{node.name}_{op.lower()}")))
                source = step
        if clip is not None:
            clipped = Value(self.g.unique_name(f"{out.name}_clipped"), real.type)
            after.append(Node("Clip", [real, *bounds], [clipped], {},
                              self.g.unique_node_name(f"{node.name}_clip")))
            source = clipped
        after.append(Node("QuantizeLinear", [source, scale, zero], [out], self.axis_attrs(t),
                          self.g.unique_node_name(f"{out.name}_QuantizeLinear")))
        position = self.g.nodes.index(node) + 1
        self.g.nodes[position:position] = after

    def _bound(self, value: float, name: str, node: Node) -> Value | None:
        if math.isinf(value):
            return None
        return self.g.add_constant(np.asarray(value, np.float32), name,
                                   before=node)

    # -- driver ---------------------------------------------------------------------------------
    def run(self) -> Graph:
        for node in list(self.g.nodes):
            if node.op_type == CONSTANT:
                continue
            if node.domain == QUANT_DOMAIN:
                self.lower_conversion(node)
            elif node.domain == "" and node.op_type in ONNX_QUANTIZED_OPS:
                continue
            elif any(_quantized(v) for v in (*node.inputs, *node.outputs)):
                if self.form == "qoperator" and self.qoperator(node):
                    continue
                self.qdq(node)
        return self.g

    def lower_conversion(self, node: Node) -> None:
        src, out = node.inputs[0], node.outputs[0]
        if node.op_type == "Quantize":
            scale, zero = self.params(out.type, node)
            node.op_type, node.domain = "QuantizeLinear", ""
            node.inputs = [src, scale, zero]
            node.attrs = self.axis_attrs(out.type)
        elif node.op_type == "Dequantize":
            scale, zero = self.params(src.type, node)
            node.op_type, node.domain = "DequantizeLinear", ""
            node.inputs = [src, scale, zero]
            node.attrs = self.axis_attrs(src.type)
        elif node.op_type == "Requantize":
            real = self.dequantize(src, node)
            scale, zero = self.params(out.type, node)
            node.op_type, node.domain = "QuantizeLinear", ""
            node.inputs = [real, scale, zero]
            node.attrs = self.axis_attrs(out.type)
        else:
            raise UnsupportedError(f"{node.describe()}: no ONNX form for lowbit op")

    def qdq(self, node: Node) -> None:
        """DequantizeLinear on each integer input, the float op, QuantizeLinear on each integer
        output. A Pad's pad code becomes the real value it stands for. A product that runtimes
        compute in float (`_float_product`) reads its integer constants as float constants, and so
        does any node reading a 16-bit constant (no runtime fuses that into an integer kernel)."""
        if node.op_type == "Pad" and _quantized(node.inputs[0]):
            self._real_pad_value(node)
        in_float = self._float_product(node)
        for i, v in enumerate(node.inputs):
            if _quantized(v):
                node.inputs[i] = self.dequantized_constant(v, node) if v.is_constant and (
                    in_float or v.type.dtype.bits == 16) else self.dequantize(v, node)
        node.attrs.pop(REQUANT, None)
        for i, v in enumerate(list(node.outputs)):
            if _quantized(v):
                self.quantize_after(node, i, v.type)

    def _float_product(self, node: Node) -> bool:
        """A Conv, MatMul or Gemm with a 16-bit operand, or a Conv with a 16-bit result:
        runtimes fuse QDQ products into integer kernels for 8-bit operands and results only
        (ONNX Runtime has no integer convolution with a float result, unlike
        MatMulIntegerToFloat for a MatMul), so these run in float whatever their form. Their
        weights and biases are then written as float constants, which is what
        DequantizeLinear would compute from the integers (float32(q - z) * scale, one rounding,
        as in ONNX Runtime and the ONNX reference): the same model, and the runtime can
        prepack the weight as it does a float model's instead of dequantizing it every run."""
        geometry = integer_product(node)
        if geometry is None or not node.inputs[geometry.weight_input].is_constant:
            return False
        operands = (node.inputs[geometry.data_input], node.inputs[geometry.weight_input])
        if any(_quantized(v) and v.type.dtype.bits == 16 for v in operands):
            return True
        return node.op_type == "Conv" and _quantized(node.outputs[0]) and \
            node.outputs[0].type.dtype.bits == 16

    def dequantized_constant(self, v: Value, before: Node) -> Value:
        """A float32 constant holding what DequantizeLinear makes of the integer constant `v`."""
        return self.g.add_constant(arith.dequantize(np.asarray(v.const_value), v.type),
                                   f"{v.name}_float", before=before)

    def _real_pad_value(self, node: Node) -> None:
        code = node.input_or_none(2)
        if code is None or code.type.dtype.is_float:
            return
        data = node.inputs[0].type
        if not data.quant.per_tensor:
            raise UnsupportedError(f"{node.describe()}: constant padding of a per-channel "
                                   "quantized tensor has no ONNX form; pad in float")
        real = float(arith.scale_of(data)) * (int(code.const_value) - int(arith.zero_of(data)))
        node.inputs[2] = self.g.add_constant(np.asarray(real, np.float32),
                                             f"{node.name}_pad_value", before=node)

    # -- QOperator ------------------------------------------------------------------------------
    def qoperator(self, node: Node) -> bool:
        """Rewrite `node` as an integer ONNX / ONNX Runtime operator; False to fall back to
        QDQ."""
        ins = node.inputs
        out = node.outputs[0]
        if not _quantized(out) or not all(_quantized(v) or v is None or not _float(v)
                                          for v in ins):
            return False
        geometry = integer_product(node)
        bias_at = geometry.bias_input if geometry is not None else None
        data = [v for i, v in enumerate(ins) if i != bias_at]  # not the int32 bias
        if not all(_eight_bit(v) for v in (*data, out)):
            return False  # ONNX Runtime's integer operators (and its MaxPool, Clip) take 8 bits
        op = lookup(node.op_type, node.domain)
        rule = op.quant_rule if op is not None else None
        if node.op_type in ("Relu", "Clip"):
            return self._integer_clamp(node)
        # a product's QLinear form takes its weight in another 8-bit type than its activation
        # and result (which share one); the others take one type for every operand and result
        same_type = (data[0], out) if geometry is not None else (*data, out)
        if len({v.type.dtype for v in same_type if _quantized(v)}) > 1:
            return False  # a graph input or output kept int8 next to uint8 activations
        if rule == KEEP and op.moves_data is not None and _onnx_takes(node, self.g.opset):
            return not node.attrs.get(FUSED_CLIP) and ins[0].type.quant == out.type.quant
        if node.attrs.get(FUSED_CLIP) is not None:
            bounds = arith.output_bounds(node, out.type)
            if bounds != (out.type.dtype.qmin, out.type.dtype.qmax):
                return False
        pq = [self._pq(v, node) for v in ins]
        y = self._pq(out, node)[1:]
        attrs = {k: v for k, v in node.attrs.items() if k not in (FUSED_CLIP, REQUANT)}
        if node.op_type == "Conv":
            new_in = [*pq[0], *pq[1], *y] + ([ins[2]] if len(ins) > 2 and ins[2] else [])
            return self._replace(node, "QLinearConv", "", new_in, attrs)
        if node.op_type == "MatMul" and ins[0].type.quant.per_tensor:
            return self._replace(node, "QLinearMatMul", "", [*pq[0], *pq[1], *y], {})
        if node.op_type == "Gemm" and not geometry.trans_a:
            c = [ins[2]] if len(ins) > 2 and ins[2] is not None else [None]
            gemm_attrs = {"transA": 0, "transB": int(geometry.trans_b),
                          "alpha": float(attrs.get("alpha", 1.0))}
            return self._replace(node, "QGemm", MS_DOMAIN, [*pq[0], *pq[1], *c, *y], gemm_attrs)
        if node.op_type in ("Add", "Mul") and all(v.type.quant.per_tensor for v in ins):
            return self._replace(node, f"QLinear{node.op_type}", MS_DOMAIN,
                                 [*pq[0], *pq[1], *y], {})
        if node.op_type == "Concat" and all(v.type.quant.per_tensor for v in ins):
            flat = [x for v, p in zip(ins, pq, strict=True) for x in p]
            return self._replace(node, "QLinearConcat", MS_DOMAIN, [*y, *flat],
                                 {"axis": int(attrs["axis"])})
        if node.op_type == "GlobalAveragePool":
            return self._replace(node, "QLinearGlobalAveragePool", MS_DOMAIN, [*pq[0], *y],
                                 {"channels_last": 0})
        if node.op_type in ("Sigmoid", "LeakyRelu"):
            extra = {"alpha": float(attrs["alpha"])} if node.op_type == "LeakyRelu" else {}
            return self._replace(node, f"QLinear{node.op_type}", MS_DOMAIN, [*pq[0], *y], extra)
        return False

    def _pq(self, v: Value | None, node: Node) -> list[Value]:
        if v is None or not _quantized(v):
            return []
        scale, zero = self.params(v.type, node)
        return [v, scale, zero]

    def _replace(self, node: Node, op_type: str, domain: str, inputs: list, attrs: dict
                 ) -> bool:
        node.op_type, node.domain = op_type, domain
        node.inputs = [v for v in inputs]
        node.attrs = attrs
        return True

    def _integer_clamp(self, node: Node) -> bool:
        """Relu / Clip as an integer Clip at the bounds their integer kernel clamps to
        (`int_activation.ClampParams`), when the output keeps the input's type."""
        x, out = node.inputs[0], node.outputs[0]
        if x.type.dtype != out.type.dtype or x.type.quant != out.type.quant or \
                not out.type.quant.per_tensor:
            return False
        p = integer_params(node, [None if v is None else v.const_value for v in node.inputs])
        dt = out.type.dtype
        bounds = [self.g.add_constant(np.asarray(b, dt.np_dtype),
                                      f"{out.name}_{k}", before=node)
                  for b, k in ((p.qmin, "qmin"), (p.qmax, "qmax"))]
        node.op_type = "Clip"
        node.inputs = [x, *bounds]
        node.attrs = {}
        return True


def _float_between_float_ops(g: Graph) -> Graph:
    """Drop the QuantizeLinear / DequantizeLinear pairs of 16-bit values that only
    DequantizeLinear nodes read, none of them a graph output's, so the float result goes straight
    to its readers. Runtimes
    compute every op on a 16-bit value in float (their integer kernels take 8 bits), so the pair
    only costs two passes over the tensor: on PP-OCRv4 the int16 chain ahead of each channel
    equalization (Conv, HardSwish, the learnable scale and shift, the equalizing Mul) is one
    pass an op, as in the float model (the recognizer's exports 1.22x -> 0.86x its float model's
    latency). A product whose int16 result only its bias Add reads (`int16_before_bias`) thus
    feeds that Add as float, which ONNX Runtime runs as an integer product with one rounding
    after the bias (MatMulIntegerToFloat, then the Add and the QuantizeLinear).
    This leaves out lowbit's int16 rounding there, a step 1/256 of an 8-bit one over the same
    range, so the 8-bit result the chain ends in stays within one code of lowbit's; and its
    saturation, so a value beyond the calibrated 16-bit range passes on unclipped (a Clip at
    those bounds cost the recognizer 11 % of its latency and did not bring its output closer to
    lowbit's: 19.1 dB from it with the Clip, 19.5 dB without, 20.5 dB with the int16 pairs)."""
    readers = g.users()
    real: dict[Value, Value] = {}  # each dropped DequantizeLinear's result -> the float value
    for node in g.nodes:
        if node.op_type != "QuantizeLinear" or node.domain != "":
            continue
        out = node.outputs[0]
        uses = readers.get(out, [])
        if out.type is None or out.type.dtype.bits != 16 or out in g.outputs or not uses or \
                any(r.op_type != "DequantizeLinear" or r.domain != "" or r.outputs[0] in g.outputs
                    for r, _ in uses):
            continue  # (a graph output keeps its name and lowbit's values)
        real.update((reader.outputs[0], node.inputs[0]) for reader, _ in uses)
    for node in g.nodes:
        node.inputs = [real.get(v, v) if v is not None else None for v in node.inputs]
    return g


def _onnx_takes(node: Node, opset: int) -> bool:
    """Whether ONNX's schema of `node`'s op at `opset` defines it on its data input's integer
    dtype (ONNX Runtime then moves the codes itself: MaxPool, Gather, ... on int8 and uint8, but
    GlobalMaxPool only on floats)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    formal = schema.inputs[0].type_str
    allowed = next((c.allowed_type_strs for c in schema.type_constraints
                    if c.type_param_str == formal), [formal])
    return f"tensor({node.inputs[0].type.dtype.name})" in allowed


def _quantized(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.quant is not None


def _eight_bit(v: Value | None) -> bool:
    """Not an integer tensor, or an 8-bit one (int8 / uint8)."""
    return not _quantized(v) or v.type.dtype.bits == 8


def _float(v: Value) -> bool:
    return v.type is not None and v.type.dtype.is_float


def lower(graph: Graph, form: str) -> Graph:
    """A plain-ONNX copy of the quantized `graph` in `form` ("qdq" or "qoperator")."""
    if form not in FORMATS:
        raise UnsupportedError(f"unknown quantized export format '{form}'; choose one of "
                               f"{', '.join(FORMATS)}")
    g = fold_quantized_constants(graph.copy())
    move_activations_to_uint8(g, keep_symmetric=form == "qdq")
    lowered = eliminate_dead_code(_float_between_float_ops(_Lowering(g, form).run()))
    for v in lowered.values():
        if v.type is not None and v.type.quant is not None:
            v.type = TensorType(v.type.dtype, v.type.shape)
    for node in lowered.nodes:
        if node.op_type == "Constant":
            t = node.output.type
            if t is not None and t.quant is not None:
                node.output.type = TensorType(t.dtype, t.shape)
    return lowered
