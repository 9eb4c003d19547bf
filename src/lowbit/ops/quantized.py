"""ONNX's quantized-operator family, for importing already-quantized models.

QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv, QLinearMatMul,
MatMulInteger and ConvInteger carry their scales and zero points as inputs, so they compute the
same on any tensor types. Where a QuantizeLinear (or a QLinear op) has constant per-tensor or
per-axis parameters and an integer result, its output type carries them as `QuantParams`, so
an imported QDQ graph is typed-quantized like one lowbit quantized itself; DequantizeLinear
gives plain float.

Scale and zero point layouts (QuantizeLinear / DequantizeLinear), chosen by the scale's shape:
- per tensor: one element (a scalar or a 1-element vector);
- per axis: a 1-D vector as long as dimension `axis` of x;
- blocked (`block_size` B > 0): x's shape with dimension `axis` replaced by ceil(D / B); each
  scale covers B consecutive elements along `axis` (the last block may be shorter).
The zero point has the scale's shape (or one element when the scale has one).

The exact formulas and rounding are in the kernels' docstrings
(`lowbit.backends.reference.kernels.quantized`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.errors import UnsupportedError
from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, QuantParams, TensorType
from lowbit.ops.common import broadcast_shapes
from lowbit.ops.conv import check_channels, conv_window, conv_work
from lowbit.ops.conv_geometry import WINDOW_ATTRS
from lowbit.ops.elementwise_rules import FLOAT8, dtype_names, known_types
from lowbit.ops.linalg import inner_dim, matmul_shape
from lowbit.ops.registry import Attr, OpDef, Work, const_input, fail, flag, register
from lowbit.ops.work import product_work

INTEGER_CODES = frozenset({dt.INT8, dt.UINT8, dt.INT16, dt.UINT16, dt.INT4, dt.UINT4, dt.INT2,
                           dt.UINT2})
FLOAT_CODES = FLOAT8 | {dt.FLOAT4E2M1}
"""Float quantized types: their zero point must be 0 (lowbit refuses others, see check)."""
QUANTIZED = INTEGER_CODES | FLOAT_CODES
SCALES = frozenset({dt.FLOAT32, dt.FLOAT16, dt.BFLOAT16})
QUANTIZE_INPUTS = SCALES | {dt.INT32}
EIGHT_BIT = frozenset({dt.INT8, dt.UINT8})

ONNX_QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
    "QLinearMatMul", "MatMulInteger", "ConvInteger",
})
"""Ops that take quantization parameters as inputs: their quantized result types are
annotations, and they export to ONNX as they are."""


def _require(node: Node, index: int, t: TensorType, allowed: frozenset[DType]) -> None:
    if t.dtype not in allowed:
        raise fail(node, f"input {index} ('{node.inputs[index].name}') has dtype {t.dtype}; "
                         f"{node.op_type} accepts {dtype_names(allowed)} there")


def _same_dtype(node: Node, in_types: list[TensorType | None], i: int, j: int) -> None:
    a, b = in_types[i], in_types[j] if j < len(in_types) else None
    if a is not None and b is not None and a.dtype != b.dtype:
        raise fail(node, f"inputs {i} and {j} must have the same dtype, got {a.dtype} and "
                         f"{b.dtype}")


def _size(shape: tuple[Dim, ...] | None) -> int | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _single(shape: tuple[Dim, ...] | None) -> bool:
    """Whether a parameter of this shape is known to hold exactly one element."""
    return _size(shape) == 1


def _require_single(node: Node, in_types: list[TensorType | None], *indices: int) -> None:
    for i in indices:
        t = in_types[i] if i < len(in_types) else None
        if t is None or t.shape is None:
            continue
        size = _size(t.shape)
        if len(t.shape) > 1 or (size is not None and size != 1):
            raise fail(node, f"input {i} ('{node.inputs[i].name}') must be a scalar or a "
                             f"1-element vector (per tensor), got shape {list(t.shape)}")


# -- scale / zero point layouts ---------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """How a scale (and zero point) maps onto x: "tensor", "axis" or "block" (`axis`
    normalised to [0, rank)), or "unknown" when shapes are not known yet."""

    kind: str
    axis: int | None = None
    block_size: int = 0


def param_layout(node: Node, x: tuple[Dim, ...] | None, scale: tuple[Dim, ...] | None,
                 zero: tuple[Dim, ...] | None, axis: int, block_size: int) -> Layout:
    """The layout of a QuantizeLinear / DequantizeLinear's parameters, refusing shapes that
    fit none (checked as far as the shapes are known)."""
    if zero is not None and scale is not None and tuple(zero) != tuple(scale) and \
            not (_single(zero) and _single(scale)):
        raise fail(node, f"zero point shape {list(zero)} differs from scale shape "
                         f"{list(scale)}; they must match")
    if block_size < 0:
        raise fail(node, f"block_size must be positive (or 0 for no blocking), got {block_size}")
    if scale is None:
        return Layout("unknown")
    if block_size == 0 and _single(scale):
        return Layout("tensor")
    if x is None:
        return Layout("unknown")
    rank = len(x)
    if not -rank <= axis < rank:
        raise fail(node, f"axis {axis} is out of range for x of rank {rank}")
    ax = axis % rank
    if block_size == 0:
        if len(scale) != 1:
            raise fail(node, f"scale of shape {list(scale)} needs block_size for blocked "
                             f"quantization, or a 1-D scale for per-axis quantization")
        if isinstance(scale[0], int) and isinstance(x[ax], int) and scale[0] != x[ax]:
            raise fail(node, f"per-axis scale has {scale[0]} elements but dimension {ax} of x "
                             f"has {x[ax]}")
        return Layout("axis", ax)
    if len(scale) != rank:
        raise fail(node, f"blocked quantization needs a scale of x's rank {rank}, got shape "
                         f"{list(scale)}")
    for i, (d, s) in enumerate(zip(x, scale, strict=True)):
        if not (isinstance(d, int) and isinstance(s, int)):
            continue
        want = -(-d // block_size) if i == ax else d
        if s != want:
            raise fail(node, f"blocked scale shape {list(scale)} does not fit x {list(x)} with "
                             f"block_size {block_size} along axis {ax} (dimension {i} should "
                             f"be {want})")
    return Layout("block", ax, block_size)


def _shape(t: TensorType | None) -> tuple[Dim, ...] | None:
    return None if t is None else t.shape


def _quant_params(out: DType, layout: Layout, scale: np.ndarray | None,
                  zero: np.ndarray | None) -> QuantParams | None:
    """QuantParams for an integer result whose constant parameters are per tensor or per axis
    with positive finite scales; None otherwise (the kernel computes the same either way)."""
    if out not in INTEGER_CODES or scale is None or layout.kind not in ("tensor", "axis"):
        return None
    s = scale.astype(np.float32)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        return None
    z = np.zeros(s.shape, np.int64) if zero is None else zero.astype(np.int64)
    if layout.kind == "tensor":
        return QuantParams(s.reshape(()), z.reshape(()))
    return QuantParams(s.reshape(-1), z.reshape(-1), layout.axis)


def _refuse_float_zero_point(node: Node, index: int, dtype: DType | None) -> None:
    if dtype not in FLOAT_CODES:
        return
    zero = const_input(node, index)
    if zero is not None and np.any(zero.astype(np.float32) != 0):
        raise UnsupportedError(f"{node.describe()}: a {dtype} zero point must be 0 (ONNX leaves "
                               f"nonzero float zero points loosely defined); fold it into the "
                               f"scale or the data")


# -- QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear --------------------------------
def quantize_output_dtype(node: Node, zero: DType | None) -> DType:
    """QuantizeLinear's result type: the zero point's dtype, else `output_dtype`, else
    uint8."""
    code = int(node.attrs.get("output_dtype") or 0)
    if zero is not None:
        if code and code != zero.onnx_code:
            raise fail(node, f"output_dtype {code} differs from the zero point's dtype {zero}; "
                             f"drop one of them")
        out = zero
    elif code:
        try:
            out = dt.from_onnx(code)
        except ValueError as exc:
            raise UnsupportedError(f"{node.describe()}: output_dtype: {exc}") from None
    else:
        out = dt.UINT8
    if out not in QUANTIZED:
        raise fail(node, f"cannot quantize to {out}; {node.op_type} produces "
                         f"{dtype_names(QUANTIZED)}")
    return out


def precision_dtype(node: Node, scale: DType) -> DType:
    """The dtype QuantizeLinear divides in: the `precision` attribute, else the scale's."""
    code = int(node.attrs.get("precision") or 0)
    if not code:
        return scale
    try:
        prec = dt.from_onnx(code)
    except ValueError as exc:
        raise UnsupportedError(f"{node.describe()}: precision: {exc}") from None
    if prec not in SCALES:
        raise fail(node, f"precision must be one of {dtype_names(SCALES)}, got {prec}")
    return prec


def dequantize_output_dtype(node: Node, scale: DType) -> DType:
    """DequantizeLinear's result type: `output_dtype`, else the scale's dtype."""
    code = int(node.attrs.get("output_dtype") or 0)
    if not code:
        return scale
    try:
        out = dt.from_onnx(code)
    except ValueError as exc:
        raise UnsupportedError(f"{node.describe()}: output_dtype: {exc}") from None
    if out not in SCALES:
        raise fail(node, f"output_dtype must be one of {dtype_names(SCALES)}, got {out}")
    return out


@register
class QuantizeLinear(OpDef):
    """y = saturate(round_half_even(x / y_scale) + y_zero_point), per tensor, per axis or per
    block; to float8/float4 types x / y_scale is converted with round-to-nearest-even instead.
    The result type is the zero point's (or `output_dtype`, default uint8)."""

    op_type = "QuantizeLinear"
    inputs = ("x", "y_scale", "y_zero_point?")
    outputs = ("y",)
    # precision (version 23+) is checked when present but not filled in, so exports at
    # opset 21 stay valid.
    attrs = {"axis": Attr("int", 1), "saturate": flag(1), "block_size": Attr("int", 0),
             "output_dtype": Attr("int", 0), "precision": Attr("int")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        zero = in_types[2] if len(in_types) > 2 else None
        out = quantize_output_dtype(node, zero.dtype if zero is not None else None)
        _refuse_float_zero_point(node, 2, out)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, scale, zero = (known_types(node, in_types) + [None])[:3]
        assert x is not None and scale is not None
        _require(node, 0, x, QUANTIZE_INPUTS)
        _require(node, 1, scale, SCALES)
        precision_dtype(node, scale.dtype)
        out = quantize_output_dtype(node, zero.dtype if zero is not None else None)
        layout = param_layout(node, x.shape, scale.shape, _shape(zero), int(node.attrs["axis"]),
                              int(node.attrs["block_size"]))
        zero_value = const_input(node, 2)
        quant = None
        if zero is None or zero_value is not None:
            quant = _quant_params(out, layout, const_input(node, 1), zero_value)
        return [TensorType(out, x.shape, quant)]


@register
class DequantizeLinear(OpDef):
    """y = (x - x_zero_point) * x_scale, computed in float32 and rounded to the result type
    (`output_dtype`, else the scale's dtype), per tensor, per axis or per block."""

    op_type = "DequantizeLinear"
    inputs = ("x", "x_scale", "x_zero_point?")
    outputs = ("y",)
    # output_dtype (version 23+) is not filled in, so exports at opset 21 stay valid.
    attrs = {"axis": Attr("int", 1), "block_size": Attr("int", 0), "output_dtype": Attr("int")}

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        x = in_types[0]
        _refuse_float_zero_point(node, 2, x.dtype if x is not None else None)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, scale, zero = (known_types(node, in_types) + [None])[:3]
        assert x is not None and scale is not None
        _require(node, 0, x, QUANTIZED | {dt.INT32})
        _require(node, 1, scale, SCALES)
        _same_dtype(node, in_types, 0, 2)
        param_layout(node, x.shape, scale.shape, _shape(zero), int(node.attrs["axis"]),
                     int(node.attrs["block_size"]))
        return [TensorType(dequantize_output_dtype(node, scale.dtype), x.shape)]


@register
class DynamicQuantizeLinear(OpDef):
    """uint8 quantization of a float32 tensor with parameters from its own range, as ONNX
    Runtime computes them (see the kernel for the formulas): y, y_scale (float32 scalar),
    y_zero_point (uint8 scalar)."""

    op_type = "DynamicQuantizeLinear"
    inputs = ("x",)
    outputs = ("y", "y_scale", "y_zero_point")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        (x,) = known_types(node, in_types)
        assert x is not None
        _require(node, 0, x, frozenset({dt.FLOAT32}))
        return [TensorType(dt.UINT8, x.shape), TensorType(dt.FLOAT32, ()),
                TensorType(dt.UINT8, ())]


# -- integer convolution and matrix products --------------------------------------------------
def _conv_shape(node: Node, x: TensorType, w: TensorType) -> tuple[Dim, ...] | None:
    if x.shape is None or w.shape is None:
        raise fail(node, "input and weight ranks must be known")
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise fail(node, f"input {list(x.shape)} and weight {list(w.shape)} must have the same "
                         f"rank, at least 3 (N, C, spatial...)")
    check_channels(node, x, w, int(node.attrs["group"]), transposed=False)
    window = conv_window(node, w.shape, len(x.shape) - 2)
    return (x.shape[0], w.shape[0], *window.output_dims(x.shape[2:]))


def _per_channel(node: Node, in_types: list[TensorType | None], index: int, channels: Dim,
                 what: str) -> None:
    """Input `index` is a scalar, a 1-element vector, or a 1-D vector of `channels` elements."""
    t = in_types[index] if index < len(in_types) else None
    if t is None or t.shape is None or _single(t.shape):
        return
    if len(t.shape) != 1:
        raise fail(node, f"input {index} ('{node.inputs[index].name}') must be a scalar or 1-D "
                         f"per {what}, got shape {list(t.shape)}")
    n = t.shape[0]
    if isinstance(n, int) and isinstance(channels, int) and n != channels:
        raise fail(node, f"input {index} ('{node.inputs[index].name}') has {n} elements for "
                         f"{channels} {what}s")


def _matmul_param(node: Node, in_types: list[TensorType | None], index: int,
                  operand: TensorType, rows: bool) -> None:
    """A MatMul operand's scale or zero point: one element, a vector per row of A / per column
    of B (2-D), or an N-D tensor of shape [..., M, 1] / [..., 1, N] (`rows` selects A's)."""
    t = in_types[index] if index < len(in_types) else None
    if t is None or t.shape is None or _single(t.shape) or operand.shape is None:
        return
    name = f"input {index} ('{node.inputs[index].name}')"
    if len(operand.shape) < 2:
        raise fail(node, f"{name} must have one element for a 1-D operand")
    dim = operand.shape[-2] if rows else operand.shape[-1]
    what = "row" if rows else "column"
    if len(t.shape) == 1:
        n = t.shape[0]
        if isinstance(n, int) and isinstance(dim, int) and n != dim:
            raise fail(node, f"{name} has {n} elements for {dim} {what}s")
        return
    want_one = t.shape[-1] if rows else t.shape[-2]
    if (isinstance(want_one, int) and want_one != 1) or len(t.shape) > len(operand.shape):
        raise fail(node, f"{name} of shape {list(t.shape)} must be [..., M, 1] per row of A or "
                         f"[..., 1, N] per column of B")
    try:
        broadcast_shapes(t.shape, operand.shape)
    except ValueError:
        raise fail(node, f"{name} of shape {list(t.shape)} does not broadcast with the operand "
                         f"{list(operand.shape)}") from None


def _output_quant(node: Node, out: DType, scale_index: int, zero_index: int
                  ) -> QuantParams | None:
    scale, zero = const_input(node, scale_index), const_input(node, zero_index)
    if scale is None or zero is None:
        return None
    return _quant_params(out, Layout("tensor"), scale, zero)


@register
class ConvInteger(OpDef):
    """y = conv(x - x_zero_point, w - w_zero_point) as exact int32 (two's complement wrap on
    overflow); padding reads x_zero_point, i.e. 0 after the subtraction."""

    op_type = "ConvInteger"
    inputs = ("x", "w", "x_zero_point?", "w_zero_point?")
    attrs = {**WINDOW_ATTRS, "group": Attr("int", 1, low=1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        x, w = known_types(node, in_types)[:2]
        assert x is not None and w is not None
        _require(node, 0, x, EIGHT_BIT)
        _require(node, 1, w, EIGHT_BIT)
        _same_dtype(node, in_types, 0, 2)
        _same_dtype(node, in_types, 1, 3)
        _require_single(node, in_types, 2)
        shape = _conv_shape(node, x, w)
        _per_channel(node, in_types, 3, w.shape[0], "output channel")
        return [TensorType(dt.INT32, shape)]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return conv_work(node, in_types[0], in_types[1], out_types[0])


@register
class QLinearConv(OpDef):
    """y = saturate(round_half_even(float32(acc) * M) + y_zero_point) with
    acc = conv(x - x_zero_point, w - w_zero_point) + B in int32 and
    M = x_scale * w_scale / y_scale in float32, per output channel when w's parameters are."""

    op_type = "QLinearConv"
    inputs = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
              "y_zero_point", "B?")
    attrs = {**WINDOW_ATTRS, "group": Attr("int", 1, low=1)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = (known_types(node, in_types) + [None])[:9]
        x, w, y_zero, bias = types[0], types[3], types[7], types[8]
        assert x is not None and w is not None and y_zero is not None
        for i, allowed in ((0, EIGHT_BIT), (3, EIGHT_BIT), (7, EIGHT_BIT),
                           (1, frozenset({dt.FLOAT32})), (4, frozenset({dt.FLOAT32})),
                           (6, frozenset({dt.FLOAT32}))):
            _require(node, i, types[i], allowed)  # type: ignore[arg-type]
        _same_dtype(node, types, 0, 2)
        _same_dtype(node, types, 3, 5)
        _require_single(node, types, 1, 2, 6, 7)
        shape = _conv_shape(node, x, w)
        for i in (4, 5):
            _per_channel(node, types, i, w.shape[0], "output channel")
        if bias is not None:
            _require(node, 8, bias, frozenset({dt.INT32}))
            if bias.shape is not None and len(bias.shape) != 1:
                raise fail(node, f"bias must be 1-D, got shape {list(bias.shape)}")
            _per_channel(node, types, 8, w.shape[0], "output channel")
        return [TensorType(y_zero.dtype, shape, _output_quant(node, y_zero.dtype, 6, 7))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return conv_work(node, in_types[0], in_types[3], out_types[0])


@register
class MatMulInteger(OpDef):
    """Y = (A - a_zero_point) @ (B - b_zero_point) as exact int32 (two's complement wrap on
    overflow), numpy.matmul broadcasting; zero points per tensor, per row of A, per column
    of B."""

    op_type = "MatMulInteger"
    inputs = ("A", "B", "a_zero_point?", "b_zero_point?")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = (known_types(node, in_types) + [None, None])[:4]
        a, b = types[0], types[1]
        assert a is not None and b is not None
        _require(node, 0, a, EIGHT_BIT)
        _require(node, 1, b, EIGHT_BIT)
        _same_dtype(node, types, 0, 2)
        _same_dtype(node, types, 1, 3)
        _matmul_param(node, types, 2, a, rows=True)
        _matmul_param(node, types, 3, b, rows=False)
        if a.shape is None or b.shape is None:
            return [TensorType(dt.INT32, None)]
        return [TensorType(dt.INT32, matmul_shape(node, a.shape, b.shape))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return product_work(out_types[0], inner_dim(in_types[0]))


@register
class QLinearMatMul(OpDef):
    """y = saturate(round_half_even(float32(acc) * M) + y_zero_point) with
    acc = (a - a_zero_point) @ (b - b_zero_point) in int32 and M = a_scale * b_scale / y_scale
    in float32 (per row of a / per column of b where their parameters are). float8 operands
    are refused."""

    op_type = "QLinearMatMul"
    inputs = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
              "y_zero_point")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        a, b, y_zero = types[0], types[3], types[7]
        assert a is not None and b is not None and y_zero is not None
        for i in (0, 3, 7):
            if types[i].dtype in FLOAT8:  # type: ignore[union-attr]
                raise UnsupportedError(f"{node.describe()}: float8 QLinearMatMul is not "
                                       f"supported; use DequantizeLinear and MatMul")
            _require(node, i, types[i], EIGHT_BIT)  # type: ignore[arg-type]
        for i in (1, 4, 6):
            _require(node, i, types[i], SCALES)  # type: ignore[arg-type]
            _same_dtype(node, types, 1, i)
        _same_dtype(node, types, 0, 2)
        _same_dtype(node, types, 3, 5)
        _require_single(node, types, 6, 7)
        for i in (1, 2):
            _matmul_param(node, types, i, a, rows=True)
        for i in (4, 5):
            _matmul_param(node, types, i, b, rows=False)
        shape = None if a.shape is None or b.shape is None else \
            matmul_shape(node, a.shape, b.shape)
        return [TensorType(y_zero.dtype, shape, _output_quant(node, y_zero.dtype, 6, 7))]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        return product_work(out_types[0], inner_dim(in_types[0]))
