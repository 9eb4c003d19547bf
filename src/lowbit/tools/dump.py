"""`lowbit dump`: every node's outputs, their printed types and statistics, and for quantized
nodes the integer parameters the reference kernel uses, enough to redo one kernel by hand.

Statistics are over the actual array: min, max, mean, std; for integer values with
QuantParams also the real range they represent (`scale * (code - zero_point)` over the codes
present), the codes used (min and max code, and `(max - min) / (qmax - qmin)` of the range) and
saturation (share of codes at qmin and at qmax).

The integer parameters are the ones the reference kernel computes with, from the same function
(`lowbit.backends.reference.kernels.integer_params`) on the same input arrays; each encoded
real factor M is also shown in the other encoding:

    Conv / Gemm / MatMul   acc = sum((x - z_x)(w - z_w)) + b;  M = s_x * s_w / s_y
                           (wide operands: acc >> r rounding half up, M * 2**r); K and the
                           weight sums sum_k(w - z_w) of the zero-point correction
                           float output: y = float32(acc) * (s_x * s_w)
    Add / Sub              a_i = q31((q_i - z_i) << L, s_i / s), s = 2 max(s_1, s_2);
                           M = s / (2**L s_y)
    Mul                    M = s_1 s_2 / s_y
    Concat, Requantize     M = s_x / s_y (per input whose parameters differ from the output's)
    Relu, Clip             the clamp bounds in codes (and M = s_x / s_y if the types differ)
    AveragePool, Global-   M = s_x / (s_y n), n the number of values averaged, encoded per n
    AveragePool, ReduceMean
    Sigmoid, Tanh, ...     a lookup table indexed by q - qmin (kept whole in the .npz)
    QDQ form: Conv / Gemm  DequantizeLinear operands, a QuantizeLinear reader: the integer
    / MatMul               kernel ONNX Runtime fuses it into (QLinearConv, QLinearMatMul):
                           y = clamp(round_half_even(float32(acc) * M), qmin - z_y, qmax - z_y)
                           + z_y, M = float32(float32(s_x * s_w) / s_y), and M in both of
                           lowbit's integer encodings; the .npz keeps s_x, z_x, s_w, z_w,
                           w_codes, bias_codes and M
    MatMulInteger,         acc = sum((a - z_a)(b - z_b)) in int32, the zero points' values
    ConvInteger            (ONNX Runtime's dynamic files; their scales are applied after)
    DynamicQuantizeLinear  ONNX's run-time uint8 parameters (the formula is printed)
    Quantize               y = saturate(round_half_even(float32(x) / s) + z)
    Dequantize             y = float32(q - z) * s

Q31: `h = (acc * 2**left_shift * multiplier + 2**30) >> 31`, then `y = h` rounded right by
`right_shift`, ties away from zero; prescale:
`(clamp(acc >> pre, -clip, clip) * scale + 2**(post - 1)) >> post` (lowbit.numerics.fixed_point;
docs/requantization.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lowbit.backends.reference.interpreter import Interpreter, check_inputs
from lowbit.backends.reference.kernels import integer_params
from lowbit.backends.reference.kernels.dynamic import DynamicMatMulParams
from lowbit.backends.reference.kernels.int_activation import (
    ClampParams,
    HardSwishParams,
    TableParams,
)
from lowbit.backends.reference.kernels.int_combine import AddParams, ConcatParams, MulParams
from lowbit.backends.reference.kernels.int_linear import LinearParams
from lowbit.backends.reference.kernels.int_pool import AverageParams
from lowbit.backends.reference.kernels.quantized import QLinearParams
from lowbit.backends.reference.kernels.requant import RequantizeParams
from lowbit.errors import InputError
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import TensorType, format_type
from lowbit.numerics import arith, fixed_point
from lowbit.numerics.arith import Requant
from lowbit.ops.product import integer_product, product_of
from lowbit.ops.registry import FUSED_CLIP, QUANT_DOMAIN, lookup

SHOWN = 16
"""Per-channel arrays longer than this print as a range; the .npz keeps them whole."""


@dataclass
class ValueStats:
    """One output of one node: printed type and statistics (module docstring)."""

    name: str
    type_text: str
    shape: tuple[int, ...]
    dtype: str
    min: float
    max: float
    mean: float
    std: float
    real_min: float | None = None
    real_max: float | None = None
    code_min: int | None = None
    code_max: int | None = None
    range_use: float | None = None
    at_qmin: float | None = None
    at_qmax: float | None = None


@dataclass
class NodeDump:
    """A node, its outputs' statistics, its kernel's integer parameters (text lines, with the
    arrays they name in `arrays`)."""

    name: str
    op_type: str
    outputs: list[ValueStats]
    integer: list[str] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    params: Any = None
    """The kernel's parameters the lines print (`lowbit.backends.reference.kernels.
    integer_params`), or None."""


def dump(graph: Graph, inputs: Mapping[str, np.ndarray], nodes: str | None = None,
         keep: bool = False) -> tuple[list[NodeDump], dict[str, np.ndarray]]:
    """Run `graph` on `inputs` and describe every node (except Constant) whose name or op type
    `nodes` (a regular expression, `re.search`) matches; with `keep`, also return the output
    tensors and the kernels' parameter arrays keyed by name. InputError for a regex that does not
    compile or matches no node."""
    chosen = _select(graph, nodes)
    users = graph.users()
    records: list[NodeDump] = []
    tensors: dict[str, np.ndarray] = {}
    # the arrays a chosen node's kernel receives, kept until its last chosen reader has run
    pending: dict[Value, int] = {}
    for n in graph.nodes:
        if n.name in chosen:
            for v in {id(v): v for v in n.inputs if v is not None}.values():
                pending[v] = pending.get(v, 0) + 1
    held: dict[Value, np.ndarray] = {
        v: a for v, a in zip(graph.inputs, check_inputs(graph, inputs), strict=True)
        if v in pending}

    def observe(node: Node, outputs) -> None:
        for v, a in zip(node.outputs, outputs, strict=False):
            if v in pending:
                held[v] = a
        if node.name not in chosen:
            return
        arrays = [np.asarray(a) for a in outputs]
        record = NodeDump(node.name, node.op_type,
                          [value_stats(v, a) for v, a in zip(node.outputs, arrays, strict=False)])
        args = [None if v is None else v.const_value if v.is_constant else held[v]
                for v in node.inputs]
        for v in {id(v): v for v in node.inputs if v is not None}.values():
            pending[v] -= 1
            if not pending[v]:
                held.pop(v, None)
        readers = [r for r, _ in users.get(node.outputs[0], [])] if node.outputs else []
        record.integer, record.arrays, record.params = integer_parameters(node, args, readers)
        records.append(record)
        if keep:
            tensors.update({v.name: a for v, a in zip(node.outputs, arrays, strict=False)})
            tensors.update({f"{node.name}.{k}": a for k, a in record.arrays.items()})

    Interpreter(graph, [observe])(inputs)
    return records, tensors


def _select(graph: Graph, pattern: str | None) -> set[str]:
    candidates = [n for n in graph.nodes if n.op_type != "Constant"]
    if pattern is None:
        return {n.name for n in candidates}
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise InputError(f"--nodes {pattern!r} is not a valid regular expression: {exc}") from None
    chosen = {n.name for n in candidates if regex.search(n.name) or regex.search(n.op_type)}
    if not chosen:
        ops = sorted({n.op_type for n in candidates})
        raise InputError(f"--nodes {pattern!r} matches no node name or op type of graph "
                         f"'{graph.name}' (op types: {', '.join(ops)})")
    return chosen


def value_stats(v: Value, a: np.ndarray) -> ValueStats:
    """Statistics of array `a` held by value `v` (module docstring)."""
    t = v.type
    shape = tuple(int(d) for d in a.shape)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return ValueStats(v.name, format_type(t), shape, str(a.dtype), *([float("nan")] * 4))
    f = a.astype(np.float64)
    stats = ValueStats(v.name, format_type(t), shape, str(a.dtype), float(f.min()),
                       float(f.max()), float(f.mean()), float(f.std()))
    if t is not None and t.quant is not None and a.dtype.kind in "iu":
        real = arith.dequantize(a, t).astype(np.float64)
        stats.real_min, stats.real_max = float(real.min()), float(real.max())
        stats.code_min, stats.code_max = int(a.min()), int(a.max())
        stats.range_use = (stats.code_max - stats.code_min) / (t.dtype.qmax - t.dtype.qmin)
        stats.at_qmin = float((a == t.dtype.qmin).mean())
        stats.at_qmax = float((a == t.dtype.qmax).mean())
    return stats


# -- integer parameters -----------------------------------------------------------------------


def _quantized(t: TensorType | None) -> bool:
    return t is not None and t.quant is not None


def integer_parameters(node: Node, inputs: Sequence[np.ndarray | None],
                       readers: list[Node] | None = None
                       ) -> tuple[list[str], dict[str, np.ndarray], Any]:
    """The integer parameters of `node`'s kernel for its input arrays `inputs` (exactly what
    the kernel receives): text lines, named arrays, and the parameters object
    (`lowbit.backends.reference.kernels.integer_params`, None for a node computing in float).
    `readers`, the nodes reading its output, lets a float product in QDQ form (DequantizeLinear
    inputs, a QuantizeLinear reader) show the integer kernel ONNX Runtime runs it as."""
    types = [v.type if v is not None else None for v in node.inputs]
    out = node.outputs[0].type if node.outputs else None
    lines: list[str] = []
    arrays: dict[str, np.ndarray] = {}
    op = node.op_type
    if node.domain == QUANT_DOMAIN and op == "Quantize" and _quantized(out):
        return [f"y = saturate(round_half_even(float32(x) / s) + z), s {_p(out.quant.scale)}, "
                f"z {_p(out.quant.zero_point)}"], arrays, None
    if node.domain == QUANT_DOMAIN and op == "Dequantize" and _quantized(types[0]):
        q = types[0].quant
        return [f"y = float32(q - z) * s, s {_p(q.scale)}, z {_p(q.zero_point)}"], arrays, None
    if node.domain == "com.microsoft" and op in ORT_QLINEAR:
        return _ort_qlinear(node), arrays, None
    if node.domain in ("", "ai.onnx") and op in ("QuantizeLinear", "DequantizeLinear"):
        scale, zero = (list(node.inputs[1:]) + [None])[:2]
        formula = ("y = saturate(round_half_even(x / y_scale) + y_zero_point)"
                   if op == "QuantizeLinear" else "y = (x - x_zero_point) * x_scale")
        lines.append(f"{formula}; scale {_p_value(scale)}, zero point {_p_value(zero)}")
        return lines, arrays, None
    if node.domain in ("", "ai.onnx") and op == "DynamicQuantizeLinear":
        lines.append("computed at run time: y_scale = (max(0, max(x)) - min(0, min(x))) / 255, "
                     "y_zero_point = saturate(round_half_even(-min(0, min(x)) / y_scale)), "
                     "y = saturate(round_half_even(x / y_scale) + y_zero_point) (uint8)")
        return lines, arrays, None
    if node.domain in ("", "ai.onnx") and op in ("MatMulInteger", "ConvInteger"):
        zero_a, zero_b = node.input_or_none(2), node.input_or_none(3)
        lines.append(f"acc = sum((a - a_zero_point)(b - b_zero_point)) in int32, the int32 "
                     f"result (the ops after it dequantize with a_scale * b_scale); "
                     f"a_zero_point {_p_value(zero_a) if zero_a is not None else 0}, "
                     f"b_zero_point {_p_value(zero_b) if zero_b is not None else 0}")
        return lines, arrays, None
    params = integer_params(node, inputs)
    if params is None:
        if not any(_quantized(t) for t in types):
            _qdq_product(node, readers or [], lines, arrays)
        else:
            lines.append("keeps its input's parameters: no arithmetic on the codes")
        return lines, arrays, None
    show = _SHOW.get(type(params))
    assert show is not None, type(params).__name__
    show(node, params, lines, arrays)
    return lines, arrays, params


def _show_linear(node: Node, p: LinearParams, lines: list[str],
                 arrays: dict[str, np.ndarray]) -> None:
    types = [v.type if v is not None else None for v in node.inputs]
    geometry = product_of(node)
    tx, tw = types[geometry.data_input], types[geometry.weight_input]
    at = geometry.bias_input
    tb = types[at] if at is not None and at < len(types) else None
    out = node.outputs[0].type
    s_x, s_w = arith.scale_of(tx), arith.scale_of(tw)
    lines.append(f"acc = sum((x - z_x)(w - z_w)) + b in int32; z_x {p.input_zero}, "
                 f"z_w {_p(p.weight_zero)}, s_x {_p(s_x)}, s_w {_p(s_w)}")
    if tb is not None and _quantized(tb):
        lines.append(f"bias: {tb.dtype.name}, zero point 0, scale s_x * s_w {_p(s_x * s_w)}")
    lines.append(f"K {p.reduction_size}; weight sums sum_k(w - z_w) {_p(p.weight_sums)} (the "
                 f"zero-point correction is -z_x times them)")
    arrays["weight_sums"] = p.weight_sums
    if p.requant is None:
        lines.append(f"float output: y = float32(acc) * (s_x * s_w) {_p(p.dequantize_scale)}")
        arrays["dequantize_scale"] = np.asarray(p.dequantize_scale)
        return
    if p.shift:
        lines.append(f"wide operands: acc = (acc + 2**{p.shift - 1}) >> {p.shift}, "
                     f"M * 2**{p.shift}")
    _output(node, p.requant, lines, arrays, f"y = saturate(requantize(acc, M = s_x * s_w / "
            f"s_y) + z_y), z_y {_p(out.quant.zero_point)}, s_y {_p(out.quant.scale)}")


def _show_add(node: Node, p: AddParams, lines: list[str], arrays: dict[str, np.ndarray]) -> None:
    lines.append(f"a_i = q31((q_i - z_i) << {p.shift}, s_i / s), s = 2 max(s_1, s_2) = "
                 f"{p.common_scale:.9g}; z_1 {p.input_zeros[0]}, z_2 {p.input_zeros[1]}")
    for i, aligner in enumerate(p.aligners, start=1):
        _encoding(lines, arrays, f"input{i}.", aligner, f"input {i}: s_{i} / s")
    _output(node, p.requant, lines, arrays,
            f"y = requantize(a_1 {'+' if node.op_type == 'Add' else '-'} a_2, M) + z_y")


def _show_mul(node: Node, p: MulParams, lines: list[str], arrays: dict[str, np.ndarray]) -> None:
    _output(node, p.requant, lines, arrays, "y = requantize((q_1 - z_1)(q_2 - z_2), M = s_1 s_2 "
            f"/ s_y) + z_y; z_1 {p.input_zeros[0]}, z_2 {p.input_zeros[1]}")


def _show_concat(node: Node, p: ConcatParams, lines: list[str],
                 arrays: dict[str, np.ndarray]) -> None:
    if all(r is None for r in p.rescales):
        lines.append("keeps its input's parameters: no arithmetic on the codes")
    for i, (zero, rescale) in enumerate(zip(p.input_zeros, p.rescales, strict=True)):
        if rescale is not None:
            _output(node, rescale, lines, arrays, f"input {i}: y = requantize(q - z_x, M = "
                    f"s_x / s_y) + z_y; z_x {zero}", key=f"input{i}")


def _show_requantize(node: Node, p: RequantizeParams, lines: list[str],
                     arrays: dict[str, np.ndarray]) -> None:
    _output(node, p.requant, lines, arrays, "input 0: y = requantize(q - z_x, M = s_x / s_y) + "
            f"z_y; z_x {_p(p.input_zero)}", key="input0")


def _show_clamp(node: Node, p: ClampParams, lines: list[str],
                arrays: dict[str, np.ndarray]) -> None:
    if p.rescale is None:
        lines.append("keeps its input's parameters: no arithmetic on the codes")
    else:
        _output(node, p.rescale, lines, arrays, "input 0: y = requantize(q - z_x, M = s_x / "
                f"s_y) + z_y; z_x {_p(p.input_zero)}", key="input0")
    lines.append(f"clamp: codes limited to [{p.qmin}, {p.qmax}]")


def _show_average(node: Node, p: AverageParams, lines: list[str],
                  arrays: dict[str, np.ndarray]) -> None:
    tx, out = node.inputs[0].type, node.outputs[0].type
    base = float(arith.scale_of(tx)) / float(arith.scale_of(out))
    lines.append(f"y = requantize(sum(q - z_x), M = s_x / (s_y n)) + z_y, s_x / s_y = "
                 f"{base:.9g}, n the number of values averaged; z_x {p.input_zero}, z_y "
                 f"{_p(out.quant.zero_point)}")
    if len(p.requants) > SHOWN:
        lines.append(f"  {len(p.requants)} values of n from {min(p.requants)} to "
                     f"{max(p.requants)} (the .npz keeps each one's encoding)")
    for n, requant in p.requants.items():
        _output(node, requant, lines, arrays, f"n = {n}", key=f"n{n}",
                quiet=len(p.requants) > SHOWN)


def _show_table(node: Node, p: TableParams, lines: list[str],
                arrays: dict[str, np.ndarray]) -> None:
    arrays["table"] = p.table
    lines.append(f"y = table[q - ({p.offset})], a {p.table.size}-entry table {_p(p.table)}")


def _show_hard_swish(node: Node, p: HardSwishParams, lines: list[str],
                     arrays: dict[str, np.ndarray]) -> None:
    arrays["table"] = p.table
    lines.append(f"v = float32(q - ({p.z_x})); t = min(max(v * {p.c1!r} + 0.5, 0), 1); "
                 f"y = clamp(round_half_even((v * t) * {p.c2!r} + {p.c3!r}) + ({p.z_y}), "
                 f"{p.qmin}, {p.qmax}), in float32 (as a {p.table.size}-entry table "
                 f"{_p(p.table)})")


def _show_dynamic(node: Node, p: DynamicMatMulParams, lines: list[str],
                  arrays: dict[str, np.ndarray]) -> None:
    if p.group_size:
        lines.append(f"per group j of {p.group_size} along K: acc_j = sum((a - A_zero_point_j)("
                     f"b - B_zero_point_j)) in int32; y = float32(sum_j acc_j * A_scale_j * "
                     f"B_scale_j) + C, A_scale and A_zero_point computed at run time")
    else:
        lines.append("acc = sum((a - A_zero_point)(b - z_b)) in int32; y = float32(acc * "
                     "A_scale * s_b) + C, A_scale and A_zero_point computed at run time")
    if p.weight_scale is not None:
        lines.append(f"s_b {_p(p.weight_scale)}")
        arrays["weight_sums"] = p.weight_sums
    elif node.inputs[4].is_constant:
        scale = np.asarray(node.inputs[4].const_value)
        lines.append(f"B_scale {list(scale.shape)} from {scale.min():.9g} to "
                     f"{scale.max():.9g}")
        arrays["B_scale"] = scale


def _show_qlinear(node: Node, p: QLinearParams, lines: list[str],
                  arrays: dict[str, np.ndarray]) -> None:
    """ONNX QLinearConv / QLinearMatMul / com.microsoft QGemm: ONNX Runtime's float32
    requantization (lowbit.backends.reference.kernels.quantized), and M in lowbit's integer
    encodings."""
    i_x, i_w, _, i_zy = ONNX_QLINEAR[(node.domain, node.op_type)]
    lines.append(f"acc = sum((x - z_x)(w - z_w)) (+ bias) in int32; s_x "
                 f"{_p_value(node.input_or_none(i_x))}, s_w {_p_value(node.input_or_none(i_w))}")
    bits = node.outputs[0].type.dtype.bits if node.outputs[0].type is not None else 8
    _float32_lines(lines, arrays, p.multiplier, p.output_zero is None,
                   _p_value(node.input_or_none(i_zy)), bits)


_SHOW = {LinearParams: _show_linear, AddParams: _show_add, MulParams: _show_mul,
         ConcatParams: _show_concat, RequantizeParams: _show_requantize,
         ClampParams: _show_clamp, AverageParams: _show_average, TableParams: _show_table,
         HardSwishParams: _show_hard_swish,
         DynamicMatMulParams: _show_dynamic, QLinearParams: _show_qlinear}
"""How each kind of kernel parameters prints."""


ONNX_QLINEAR = {("", "QLinearConv"): (1, 4, 6, 7), ("", "QLinearMatMul"): (1, 4, 6, 7),
                ("com.microsoft", "QGemm"): (1, 4, 7, 8)}
"""ONNX's quantized operators: input indices of (input scale, weight scale, output scale,
output zero point)."""


ORT_QLINEAR = frozenset({"QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
                         "QLinearLeakyRelu", "QLinearGlobalAveragePool"})
"""ONNX Runtime's QLinear ops computed from float32 formulas (`lowbit.ops.ort_qlinear`)."""


def _ort_qlinear(node: Node) -> list[str]:
    """The op's formula (its docstring) and the values of its scales and zero points."""
    op = lookup(node.op_type, node.domain)
    assert op is not None and op.__doc__
    names = [n.rstrip("?*") for n in op.inputs]
    params = [f"{names[i] if i < len(names) else f'input {i}'} {_p_value(v)}"
              for i, v in enumerate(node.inputs)
              if v is not None and i > 0 and (v.type is None or v.type.dtype.is_float
                                              or (v.is_constant and v.const_value.size == 1))]
    return [" ".join(op.__doc__.split()) + " (ONNX Runtime)", "; ".join(params)]


def _float32_lines(lines: list[str], arrays: dict[str, np.ndarray], M: np.ndarray,
                   float_output: bool, z_y: str, bits: int) -> None:
    """ONNX Runtime's float32 output of an int32 accumulator with multiplier `M`
    (`arith.float32_multiplier`): dequantized for a float output, else requantized in float32;
    and M in lowbit's integer encodings."""
    M = np.asarray(M, np.float32)
    if float_output:
        arrays["dequantize_scale"] = M.reshape(-1) if M.ndim else M
        lines.append(f"float output: y = float32(acc) * float32(s_x * s_w) {_p(M)}")
        return
    M = M.reshape(-1)
    arrays["M"] = M
    lines.append(f"y = clamp(round_half_even(float32(acc) * M), qmin - z_y, qmax - z_y) + z_y "
                 f"(ONNX Runtime, float32), M = float32(float32(s_x * s_w) / s_y) {_p(M)}, "
                 f"z_y {z_y}")
    for method in (fixed_point.PRESCALE, fixed_point.Q31):
        _encoded(lines, arrays, "integer.", M.astype(np.float64), method, bits,
                 f"{method} (lowbit's integer-only equivalent)")


def _dequantize_linear(v: Value | None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(scale, zero point, codes when constant) of an ONNX DequantizeLinear with constant
    parameters producing `v`, else None."""
    node = v.producer if v is not None else None
    if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None
    scale, zero = node.input_or_none(1), node.input_or_none(2)
    if scale is None or scale.const_value is None or (zero is not None
                                                      and zero.const_value is None):
        return None
    codes = node.inputs[0].const_value
    return (np.asarray(scale.const_value),
            np.zeros((), np.int64) if zero is None else np.asarray(zero.const_value),
            None if codes is None else np.asarray(codes))


def _qdq_product(node: Node, readers: list[Node], lines: list[str],
                 arrays: dict[str, np.ndarray]) -> None:
    """A float Conv / Gemm / MatMul in QDQ form: both operands from DequantizeLinear and the
    result read by a QuantizeLinear only (or by nothing quantized: a float output). ONNX
    Runtime fuses the pattern into QLinearConv / QLinearMatMul (or an integer product with a
    float output) and requantizes in float32; the lines give its parameters and M in lowbit's
    integer encodings."""
    geometry = integer_product(node)
    if geometry is None:
        return
    operands = [_dequantize_linear(node.input_or_none(i))
                for i in (geometry.data_input, geometry.weight_input)]
    if None in operands:
        return
    (s_x, z_x, _), (s_w, z_w, w_codes) = operands
    arrays.update({"s_x": s_x, "z_x": z_x, "s_w": s_w, "z_w": z_w})
    if w_codes is not None:
        arrays["w_codes"] = w_codes
    quantize = readers[0] if len(readers) == 1 and readers[0].op_type == "QuantizeLinear" \
        else None
    if quantize is not None and quantize.input_or_none(1) is not None \
            and quantize.input_or_none(1).const_value is None:
        return
    lines.append(f"QDQ form: DequantizeLinear -> {node.op_type}"
                 f"{' -> QuantizeLinear' if quantize else ''}, one integer kernel in ONNX "
                 f"Runtime: acc = sum((x - z_x)(w - z_w)) (+ bias) in int32; z_x {_p(z_x)}, "
                 f"z_w {_p(z_w)}, s_x {_p(s_x)}, s_w {_p(s_w)}")
    bias = _dequantize_linear(node.input_or_none(geometry.bias_input)) \
        if geometry.bias_input is not None else None
    if bias is not None:
        if bias[2] is not None:
            arrays["bias_codes"] = bias[2]
        lines.append(f"bias: int32 codes, zero point {_p(bias[1])}, scale {_p(bias[0])} "
                     f"(s_x * s_w {_p(np.asarray(s_x, np.float64) * s_w)})")
    s_in = np.asarray(s_x).reshape(())
    if quantize is None:
        _float32_lines(lines, arrays, arith.float32_multiplier(s_in, s_w), True, "", 8)
        return
    y = quantize.outputs[0]
    bits = y.type.dtype.bits if y.type is not None else 8
    M = arith.float32_multiplier(s_in, np.asarray(s_w).reshape(-1),
                                 quantize.inputs[1].const_value)
    _float32_lines(lines, arrays, M, False, _p_value(quantize.input_or_none(2)), bits)
    clip = node.attrs.get(FUSED_CLIP)
    if clip is not None:
        lines.append(f"fused clip: real values limited to [{clip[0]:.9g}, {clip[1]:.9g}] "
                     f"before QuantizeLinear")


def _p_value(v: Value | None) -> str:
    if v is None:
        return "-"
    return _p(v.const_value) if v.const_value is not None else f"%{v.name} (computed)"


def _output(node: Node, requant: Requant, lines: list[str], arrays: dict[str, np.ndarray],
            formula: str, key: str = "", quiet: bool = False) -> None:
    """The output requantization: `formula`, a fused clamp, then M in the encoding the kernel
    uses and in the other one (`quiet`: arrays only)."""
    out = node.outputs[0].type
    shown: list[str] = []
    shown.append(formula)
    if (requant.qmin, requant.qmax) != (out.dtype.qmin, out.dtype.qmax):
        shown.append(f"fused clamp: codes limited to [{requant.qmin}, {requant.qmax}]")
    used = requant.encoding.method
    prefix = f"{key}." if key else ""
    _encoding(shown, arrays, prefix, requant.encoding, f"{used} (used)")
    other = fixed_point.PRESCALE if used == fixed_point.Q31 else fixed_point.Q31
    _encoded(shown, arrays, prefix, requant.multiplier, other, out.dtype.bits,
             f"{other} (alternative)")
    if not quiet:
        lines.extend(shown)


def _encoding(lines: list[str], arrays: dict[str, np.ndarray], prefix: str,
              params: fixed_point.RequantParams, label: str) -> None:
    """An encoded M (`fixed_point.Q31Params` / `PrescaleParams`): a line, and its arrays under
    `prefix` + field name."""
    arrays[f"{prefix}M"] = np.asarray(params.real)
    if isinstance(params, fixed_point.Q31Params):
        fields = {"multiplier": params.multiplier, "left_shift": params.left_shift,
                  "right_shift": params.right_shift}
    else:
        fields = {"pre": params.pre, "scale": params.scale, "post": params.post,
                  "clip": params.clip}
    lines.append(f"  {label}: M {_p(params.real)}; " + ", ".join(
        f"{k.replace('_', ' ')} {_p(v)}" for k, v in fields.items()))
    arrays.update({f"{prefix}{params.method}_{k}": v for k, v in fields.items()})


def _encoded(lines: list[str], arrays: dict[str, np.ndarray], prefix: str, M, method: str,
             bits: int, label: str) -> None:
    """M encoded by `method` for `bits`-bit outputs (an alternative the kernel does not use)."""
    try:
        params = fixed_point.encode(M, method, output_bits=bits)
    except ValueError as exc:
        lines.append(f"  {label}: cannot encode ({exc})")
        return
    _encoding(lines, arrays, prefix, params, label)


def _p(a) -> str:
    """A scalar, a short array in full, or a long one as its range and length."""
    a = np.asarray(a)
    fmt = (lambda x: f"{int(x)}") if a.dtype.kind in "iub" else (lambda x: f"{float(x):.9g}")
    if a.size == 1:
        return fmt(a.reshape(-1)[0])
    flat = a.reshape(-1)
    if flat.size <= SHOWN:
        return "[" + " ".join(fmt(x) for x in flat) + "]"
    return f"{fmt(flat.min())}..{fmt(flat.max())} ({flat.size} values)"


# -- text -----------------------------------------------------------------------------------


def render(records: list[NodeDump]) -> str:
    """The text `lowbit dump` prints."""
    lines = []
    for r in records:
        lines.append(f"{r.name}  {r.op_type}")
        for s in r.outputs:
            lines.append(f"  %{s.name}: {s.type_text}")
            text = f"    {s.dtype} min {s.min:.6g} max {s.max:.6g} mean {s.mean:.6g} " \
                   f"std {s.std:.6g}"
            if s.real_min is not None:
                text += (f"; real [{s.real_min:.6g}, {s.real_max:.6g}], codes "
                         f"[{s.code_min}, {s.code_max}] ({s.range_use:.1%} of the range), at "
                         f"qmin {s.at_qmin:.2%}, at qmax {s.at_qmax:.2%}")
            lines.append(text)
        lines += [f"    {line}" for line in r.integer]
    return "\n".join(lines)
