"""Lowering lowbit's dynamic-quantization ops to standard ONNX, so ONNX Runtime runs them.

DynamicQuantize becomes (after a Div by its channel scale, if any) DynamicQuantizeLinear where
it is that op (per tensor, uint8, 8 bits),
else the formula of `lowbit.numerics.dynamic_params` in float32 ONNX ops (ReduceMin/ReduceMax with
keepdims, Div, Round = round half to even, Clip, Cast). DynamicMatMul becomes:

- with int8 weights (B a constant): MatMulInteger(A, B, -, B_zero) on the codes, minus the zero
  point correction A_zero * colsum(B - B_zero) (a constant int32 vector) in int32, exactly
  sum((A - A_zero)(B - B_zero));
- with two activations: QDQ form, MatMul((A - A_zero) * A_scale, (B - B_zero) * B_scale) in
  float32 (an int32 MatMul of the centred codes is exact but ONNX Runtime runs it with a plain
  loop: MiniLM's export took 50 ms against 37 ms this way);

then Y = float32(acc) * (A_scale * B_scale) + C. ONNX Runtime's float32 product can differ from
lowbit's float64 one in the last bits (and int32 -> float32 rounds above 2**24).

Grouped ops (`group_size` g, groups along the last axis of A and the second-to-last of B, B
int8 weights as constants or an activation): DynamicQuantize zero-pads x to G * g (by an
amount computed at run time when K is not fixed), reshapes it to [..., G, g] and applies the
formula per group. DynamicMatMul is written in QDQ form, since ONNX has no per-group integer
product: A_real = (A - A_zero_j) * A_scale_j and W_real = (W - W_zero_j) * W_scale_j per group (the
weights stay int8 in the file, their padding rows equal to the zero point so that they stand
for 0; ONNX Runtime folds their dequantization when it loads the model), then
Y = MatMul(A_real, W_real) + C in float32. In real arithmetic that is exactly
sum_j A_scale_j W_scale_j acc_j; in float32 it differs from lowbit's float64 sum of exact
int32 group sums in the last bits. (A batched MatMulInteger over the groups, with the
dequantization on [G, M, N] sums, was measured 17x slower than ONNX Runtime's own dynamic
MiniLM; this form runs at the speed of a float MatMul.)
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.lowering import fold_quantized_constants
from lowbit.backends.reference.kernels import integer_params
from lowbit.errors import ModelError
from lowbit.ir import dtypes
from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph, Node, Value
from lowbit.numerics.dynamic_params import group_count, normalize_axes, qmax
from lowbit.ops import infer_graph
from lowbit.ops.registry import QUANT_DOMAIN, REQUIRED, lookup

DYNAMIC_OPS = ("DynamicQuantize", "DynamicMatMul")


def has_dynamic_ops(graph: Graph) -> bool:
    return any(n.domain == QUANT_DOMAIN and n.op_type in DYNAMIC_OPS for n, _ in graph.walk())


def lower_dynamic(graph: Graph) -> Graph:
    """A copy of `graph` with DynamicQuantize/DynamicMatMul written in standard ONNX ops, in
    its subgraphs too."""
    g = _lower(fold_quantized_constants(graph.copy()))
    infer_graph(g, keep_quant=False)
    return g


def _lower(g: Graph) -> Graph:
    for node in g.nodes:
        for attr, sub in node.subgraphs():
            node.attrs[attr] = _lower(sub)
    floats: dict[Value, Value] = {}
    grouped: dict[Value, tuple[Value, Value]] = {}
    for node in list(g.nodes):
        lowering = _LOWERINGS.get(node.op_type) if node.domain == QUANT_DOMAIN else None
        if lowering is not None:
            lowering(_Emit(g, node, floats, grouped))
    return eliminate_dead_code(g)


class _Emit:
    def __init__(self, graph: Graph, node: Node, floats: dict[Value, Value],
                 grouped: dict[Value, tuple[Value, Value]]) -> None:
        self.g = graph
        self.node = node
        self.floats = floats  # codes -> the same integers in float32, before their Cast
        self.grouped = grouped  # grouped codes -> (centred codes [..., G, g], scale [..., G, 1])

    def real(self, codes: Value) -> Value:
        """float32 of integer `codes`: the float value the formula cast them from, if this
        lowering made them (a Cast back would give exactly it), else a Cast."""
        return self.floats.get(codes) or self.one("Cast", codes, to=dtypes.FLOAT32.onnx_code)

    def cast(self, value: Value, code) -> Value:
        """Cast(value) to integer dtype `code`, remembering `value` as its float form."""
        out = self.one("Cast", value, to=code.onnx_code)
        self.floats[out] = value
        return out

    def op(self, op_type: str, inputs: list[Value | None], attrs: dict | None = None,
           outputs: int = 1) -> list[Value]:
        n = self.g.make_node(op_type, inputs, attrs or {}, num_outputs=outputs,
                             name=f"{self.node.name}_{op_type}", before=self.node)
        for key, spec in lookup(op_type).attrs.items():
            if key not in n.attrs and spec.default is not None and spec.default is not REQUIRED:
                n.attrs[key] = spec.default
        return n.outputs

    def one(self, op_type: str, *inputs: Value | None, **attrs) -> Value:
        return self.op(op_type, list(inputs), attrs)[0]

    def const(self, array, hint: str) -> Value:
        return self.g.add_constant(np.asarray(array), self.g.unique_name(f"{self.node.name}_"
                                                                         f"{hint}"),
                                   before=self.node)

    def reduce(self, op_type: str, x: Value, axes: tuple[int, ...]) -> Value:
        if self.g.opset >= 18 or (op_type == "ReduceSum" and self.g.opset >= 13):
            return self.one(op_type, x, self.const(np.array(axes, np.int64), "axes"),
                            keepdims=1)
        return self.one(op_type, x, axes=list(axes), keepdims=1)

    def replace(self, values: list[Value]) -> None:
        """Make `values` the node's outputs (keeping the output names) and drop the node."""
        self.g.nodes.remove(self.node)
        for old, new in zip(self.node.outputs, values, strict=True):
            if old in self.g.outputs:
                old.name, new.name = self.g.unique_name(f"{old.name}_lowered"), old.name
            self.g.replace_all_uses(old, new)

    # -- DynamicQuantize ------------------------------------------------------------------------
    def quantize(self) -> None:
        x = self.node.inputs[0]
        if self.node.input_or_none(1) is not None:
            x = self.one("Div", x, self.node.inputs[1])
        rank = len(self.node.outputs[1].type.shape)  # x may be a fresh, untyped value
        axes = normalize_axes(self.node.attrs["axes"], rank)
        symmetric = bool(self.node.attrs.get("symmetric", 0))
        reduce_range = bool(self.node.attrs.get("reduce_range", 0))
        group = self.node.attrs.get("group_size", 0)
        if group:
            self._quantize_groups(x, rank, axes, symmetric, reduce_range, group)
            return
        if not symmetric and not reduce_range and axes == tuple(range(rank)):
            q, s, z = self.op("DynamicQuantizeLinear", [x], outputs=3)
            shape = np.ones(rank, np.int64)
            self.replace([q, self.one("Reshape", s, self.const(shape, "shape")),
                          self.one("Reshape", z, self.const(shape, "shape"))])
            return
        self.replace(self._formula(x, axes, symmetric, reduce_range))

    def _quantize_groups(self, x: Value, rank: int, axes: tuple[int, ...], symmetric: bool,
                         reduce_range: bool, group: int) -> None:
        """Groups along the last axis (a left operand) or the second-to-last (a right operand,
        transposed to put it last), of fixed or run-time length K. The codes, zero-padded to
        G * g and centred on their zero points, stay available in float in that grouped form
        [..., G, g] (`self.grouped`) for the product, where the padding adds exact zeros."""
        (axis,) = axes
        if axis not in (rank - 1, rank - 2):
            raise ModelError(f"{self.node.describe()}: groups along axis {axis} of a rank-{rank} "
                             f"tensor do not export to ONNX (only the last two axes)")
        swap = list(range(rank - 2)) + [rank - 1, rank - 2]
        right = axis == rank - 2
        if right:
            x = self.one("Transpose", x, perm=swap)
        k = self.node.outputs[0].type.shape[axis]
        keep = [0] * (rank - 1)
        grouped = self.one("Reshape", self._pad_to_groups(x, rank, group, k),
                           self.const(np.array(keep + [-1, group], np.int64), "groups"))
        q, scale, zero = self._formula(grouped, (rank,), symmetric, reduce_range)
        centred = self.one("Sub", self.real(q), self.real(zero))
        merge = self.const(np.array(keep + [-1], np.int64), "merge")
        codes = self.one("Reshape", q, merge)
        if not isinstance(k, int) or k % group:
            end = self.const(np.array([k], np.int64), "end") if isinstance(k, int) else \
                self.one("Shape", x, start=-1)
            codes = self.one("Slice", codes, self.const(np.array([0], np.int64), "start"), end,
                             self.const(np.array([-1], np.int64), "axis"))
        outs = [codes, self.one("Reshape", scale, merge), self.one("Reshape", zero, merge)]
        if right:
            outs = [self.one("Transpose", v, perm=swap) for v in outs]
        self.grouped[outs[0]] = (centred, scale)
        self.replace(outs)

    def _pad_to_groups(self, x: Value, rank: int, group: int, k) -> Value:
        """x zero-padded at the end of its last axis to a multiple of `group`; the amount is
        computed at run time when the length k is not fixed."""
        if isinstance(k, int):
            return self._pad_last(x, rank, group_count(k, group) * group - k)
        g = self.const(np.array([group], np.int64), "group")
        short = self.one("Mod", self.one("Sub", g, self.one("Mod", self.one("Shape", x,
                                                                            start=-1), g)), g)
        pads = self.one("Concat", self.const(np.zeros(2 * rank - 1, np.int64), "pads"), short,
                        axis=0)
        return self.one("Pad", x, pads)

    def _pad_last(self, x: Value, rank: int, pad: int) -> Value:
        """x zero-padded by `pad` elements at the end of its last axis."""
        if not pad:
            return x
        pads = np.zeros(2 * rank, np.int64)
        pads[-1] = pad
        return self.one("Pad", x, self.const(pads, "pads"))

    def _formula(self, x: Value, axes: tuple[int, ...], symmetric: bool,
                 reduce_range: bool) -> list[Value]:
        """[codes, scale, zero point] of x by lowbit.numerics.dynamic_params, in float32 ops."""
        top = np.float32(qmax(symmetric, reduce_range))
        f0, f1 = self.const(np.float32(0), "zero"), self.const(np.float32(1), "one")
        ftop = self.const(top, "qmax")
        if symmetric:
            m = self.reduce("ReduceMax", self.one("Abs", x), axes)
            scale = self.one("Where", self.one("Equal", m, f0), f1, self.one("Div", m, ftop))
            rounded = self.one("Round", self.one("Div", x, scale))
            q = self.one("Clip", rounded, self.const(-top, "qmin"), ftop)
            zero = self.one("Mul", scale, f0)
            code = dtypes.INT8
        else:
            lo = self.one("Min", self.reduce("ReduceMin", x, axes), f0)
            hi = self.one("Max", self.reduce("ReduceMax", x, axes), f0)
            scale = self.one("Where", self.one("Equal", hi, lo), f1,
                             self.one("Div", self.one("Sub", hi, lo), ftop))
            zero = self.one("Round", self.one("Clip", self.one("Sub", f0,
                                                               self.one("Div", lo, scale)),
                                              f0, ftop))
            q = self.one("Clip", self.one("Add", self.one("Round", self.one("Div", x, scale)),
                                          zero), f0, ftop)
            code = dtypes.UINT8
        return [self.cast(q, code), scale, self.cast(zero, code)]

    # -- DynamicMatMul --------------------------------------------------------------------------
    def matmul(self) -> None:
        ins = list(self.node.inputs) + [None] * 3
        a, a_scale, a_zero, b, b_scale, b_zero, c = ins[:7]
        i32 = dtypes.INT32.onnx_code
        if self.node.attrs.get("group_size", 0):
            self._matmul_groups(a, a_scale, a_zero, b, b_scale, b_zero, c)
            return
        za = self.one("Cast", a_zero, to=i32)
        if b.is_constant:
            p = integer_params(self.node, [None if v is None else v.const_value
                                           for v in self.node.inputs])
            plain = self.const(np.asarray(b.const_value), "weight")
            bz = None
            if np.any(p.weight_zero != 0):
                bz = self.const(p.weight_zero.astype(b.type.dtype.np_dtype), "weight_zero_point")
            acc = self.one("Sub", self.op("MatMulInteger", [a, plain, None, bz])[0],
                           self.one("Mul", za, self.const(p.weight_sums.astype(np.int32),
                                                          "colsum")))
            scale_b = self.const(p.weight_scale.astype(np.float32), "weight_scale")
        else:  # two activations: QDQ form, ONNX Runtime has no fast int32 MatMul
            real = [self.one("Mul", self.one("Sub", self.real(q), self.real(zero)), scale)
                    for q, zero, scale in ((a, a_zero, a_scale), (b, b_zero, b_scale))]
            y = self.one("MatMul", *real)
            if c is not None:
                y = self.one("Add", y, c)
            self.replace([y])
            return
        y = self.one("Mul", self.one("Cast", acc, to=dtypes.FLOAT32.onnx_code),
                     self.one("Mul", a_scale, scale_b))
        if c is not None:
            y = self.one("Add", y, c)
        self.replace([y])

    def _matmul_groups(self, a, a_scale, a_zero, b, b_scale, b_zero, c) -> None:
        g = self.node.attrs["group_size"]
        rank = len(self.node.outputs[0].type.shape)
        keep = [0] * (rank - 1)
        merge = self.const(np.array(keep + [-1], np.int64), "merge")
        real = []
        for codes in (a, b) if not b.is_constant else (a,):
            if codes not in self.grouped:
                raise ModelError(f"{self.node.describe()}: a grouped operand exports to ONNX only "
                                 f"from a grouped DynamicQuantize of the same graph")
            centred, scale = self.grouped[codes]
            real.append(self.one("Reshape", self.one("Mul", centred, scale), merge))
        if b.is_constant:
            real.append(self._grouped_weights(b, b_scale, b_zero, g))
        else:  # the right operand's groups were formed on its transpose
            real[1] = self.one("Transpose", real[1],
                               perm=list(range(rank - 2)) + [rank - 1, rank - 2])
        y = self.one("MatMul", *real)
        if c is not None:
            y = self.one("Add", y, c)
        self.replace([y])

    def _grouped_weights(self, b: Value, b_scale: Value, b_zero: Value, g: int) -> Value:
        """The int8 weights dequantized per group, [G * g, N] with zero padding rows."""
        if not (b_scale.is_constant and b_zero.is_constant):
            raise ModelError(f"{self.node.describe()}: grouped weights need constant scales")
        k, n = b.type.shape[-2:]
        count = group_count(k, g)
        f32 = dtypes.FLOAT32.onnx_code
        zero = np.asarray(b_zero.const_value)
        w = np.asarray(b.const_value)
        w = np.concatenate([w, np.repeat(zero[-1:], count * g - k, axis=0)])  # padding: 0.0
        w = w.reshape(count, g, n)
        real_w = self.one("Cast", self.const(w, "weight_groups"), to=f32)
        if np.any(zero):  # symmetric weights (the default) have none to subtract: x - 0 = x
            real_w = self.one("Sub", real_w, self.const(zero.astype(np.float32)[:, None, :],
                                                        "weight_zero"))
        real_w = self.one("Mul", real_w,
                          self.const(np.asarray(b_scale.const_value, np.float32)[:, None, :],
                                     "weight_scale"))
        return self.one("Reshape", real_w, self.const(np.array([count * g, n], np.int64),
                                                      "weight_shape"))


_LOWERINGS = {"DynamicQuantize": _Emit.quantize, "DynamicMatMul": _Emit.matmul}
"""How each of lowbit's dynamic ops is written in standard ONNX ops."""
