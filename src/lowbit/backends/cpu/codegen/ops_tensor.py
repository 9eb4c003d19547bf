"""Emitters of the float and index ops around a transformer: elementwise ops with broadcasting
(float, integer and bool), Where, Cast, Shape, Range, Expand, Slice, Gather and GatherND.

All take run-time dimensions (the batch and sequence length stay C variables). Float results
are single IEEE operations per element, so they equal the reference's bits.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter
from lowbit.backends.cpu.codegen.ops_shape import _slice, row_major_strides
from lowbit.backends.cpu.codegen.program import Size, Tensor, dim_c, dim_size, numel
from lowbit.errors import UnsupportedError
from lowbit.ir.attrs import FUSED_CLIP

EW_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "And": 6, "Or": 7,
          "Xor": 8, "Equal": 9, "Less": 10, "LessOrEqual": 11, "Greater": 12,
          "GreaterOrEqual": 13, "Where": 14}
"""enum lb_ew_op of lowbit_rt_tf.h"""

SUPPORTED_TYPES = (np.float32, np.float64, np.int64, np.int32, np.uint8, np.int8, np.bool_)


def cprod(*dims) -> str:
    """The C product of lowered dimensions and ints."""
    return numel(dims).c()


def broadcast_strides(src_shape, out_shape) -> list[str]:
    """Element strides of a row-major `src` read at every index of `out_shape` (numpy
    broadcasting, aligned right): 0 along axes src repeats. A symbolic src dimension that may
    be 1 while the output's is not (an unknown dimension) gets a run-time test."""
    pad = len(out_shape) - len(src_shape)
    full = (1,) * pad + tuple(src_shape)
    strides = [s.c() for s in row_major_strides(full)]
    out = []
    for d, o, s in zip(full, out_shape, strides, strict=True):
        if d == o:
            out.append(s)
        elif d == 1:
            out.append("0")
        elif isinstance(d, int) and isinstance(o, int):
            raise UnsupportedError(f"shapes {tuple(src_shape)} and {tuple(out_shape)} do not "
                                   f"broadcast")
        else:
            out.append(f"({dim_c(d)} == 1 ? 0 : {s})")
    return out


def iterator(out_shape, *operands) -> str:
    """An lb_iter initializer over `out_shape` with the operands' shapes' broadcast strides."""
    nd = max(1, len(out_shape))
    shape = list(out_shape) or [1]
    rows = []
    for i in range(3):
        if i < len(operands) and operands[i] is not None:
            s = broadcast_strides(operands[i], shape) if out_shape else ["0"]
        else:
            s = ["0"] * nd
        rows.append("{" + ", ".join(s) + "}")
    return (f"{{{nd}, {{{', '.join(dim_c(d) for d in shape)}}}, "
            f"{{{', '.join(rows)}}}}}")


def type_name(lw: Lowering, t: Tensor) -> str:
    if t.dtype.type not in SUPPORTED_TYPES:
        raise UnsupportedError(f"elementwise ops on {t.dtype}")
    return cexpr.TYPE_NAMES[lw.type_code(t)]


@emitter("Add", dynamic=True)
@emitter("Sub", dynamic=True)
@emitter("Mul", dynamic=True)
@emitter("Div", dynamic=True)
@emitter("Max", dynamic=True)
@emitter("Min", dynamic=True)
@emitter("And", dynamic=True)
@emitter("Or", dynamic=True)
@emitter("Xor", dynamic=True)
@emitter("Equal", dynamic=True)
@emitter("Less", dynamic=True)
@emitter("LessOrEqual", dynamic=True)
@emitter("Greater", dynamic=True)
@emitter("GreaterOrEqual", dynamic=True)
@emitter("Pow", dynamic=True)
def elementwise(lw: Lowering, node) -> None:
    from lowbit.backends.cpu.codegen import ops_float, ops_quant, ops_transformer

    ins = [v for v in node.inputs if v is not None]
    floats = all(v.type is not None and v.type.dtype.np_dtype == np.float32
                 for v in (*ins, node.outputs[0]))
    if floats and node.op_type in ops_float.BINARY and (
            node.op_type == "Pow" or node.attrs.get(FUSED_CLIP) is not None or
            ops_quant.binary_layout(lw, node) == "nhwc"):
        ops_float._binary(lw, node)  # images in NHWC, fused clamps, Pow
        return
    if floats and ops_transformer.bias_softmax(lw, node):
        return
    if len(ins) == 1 and node.op_type in ("Max", "Min"):
        lw.alias_result(node.outputs[0], lw.operand(ins[0]))
        return
    if len(ins) != 2:
        raise UnsupportedError(f"{node.op_type} of {len(ins)} inputs (2 are compiled)")
    a, b = (lw.operand(v) for v in ins)
    out = lw.result(node.outputs[0])
    kind = type_name(lw, a)
    if a.dtype != b.dtype:
        raise UnsupportedError(f"{node.op_type} of {a.dtype} and {b.dtype}")
    code = [f"const lb_iter it = {iterator(out.shape, a.shape, b.shape)};"]
    call = (f"lb_elementwise(ctx, {EW_OPS[node.op_type]}, {kind}, &it, {a.ptr}, {b.ptr}, NULL, "
            f"{out.ptr})")
    if node.op_type == "Div" and a.dtype.kind in "iu":
        code.append(lw.prog.failing(call))
        lw.prog.step(f"{node.name}: {node.op_type}", code, [a, b], [out],
                     error=lambda d, _, n=node: f"{n.describe()}: integer division by zero")
        return
    code.append(f"{call};")
    lw.prog.step(f"{node.name}: {node.op_type}", code, [a, b], [out])


@emitter("Where", dynamic=True)
def where(lw: Lowering, node) -> None:
    c, a, b = (lw.operand(v) for v in node.inputs)
    out = lw.result(node.outputs[0])
    if a.dtype != b.dtype:
        raise UnsupportedError(f"Where of {a.dtype} and {b.dtype}")
    lw.prog.step(f"{node.name}: Where", [
        f"const lb_iter it = {iterator(out.shape, c.shape, a.shape, b.shape)};",
        f"lb_elementwise(ctx, {EW_OPS['Where']}, {type_name(lw, a)}, &it, {c.ptr}, {a.ptr}, "
        f"{b.ptr}, {out.ptr});"], [c, a, b], [out])


@emitter("Cast", dynamic=True)
def cast(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    out = lw.result(node.outputs[0])
    if x.dtype == out.dtype:
        lw.prog.step(f"{node.name}: Cast (same type)", [
            f"lb_copy(ctx, {x.nbytes.c()}, {x.ptr}, {out.ptr});"], [x], [out])
        return
    lw.prog.step(f"{node.name}: Cast {x.dtype} -> {out.dtype}", [
        f"lb_cast(ctx, {numel(x.shape).c()}, {x.ptr}, {type_name(lw, x)}, "
        f"{type_name(lw, out)}, {out.ptr});"], [x], [out])


@emitter("Shape", dynamic=True)
def shape(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0], None)
    out = lw.result(node.outputs[0])
    dims = list(x.shape)
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    picked = dims[slice(start, end)]
    code = [f"((int64_t *){out.ptr})[{i}] = {dim_c(d)};" for i, d in enumerate(picked)]
    lw.prog.step(f"{node.name}: Shape", code, [], [out])


def _scalar(lw: Lowering, v, ctype: str) -> tuple[str, Tensor | None]:
    """A C expression for the one value of tensor `v` (a constant folds to its literal)."""
    if v.is_constant:
        a = lw.const_array(v).reshape(-1)
        if a.size != 1:
            raise UnsupportedError(f"'{v.name}' must hold one value")
        value = a[0]
        return (cexpr.flt(value) if a.dtype.kind == "f" and ctype == "float"
                else repr(float(value)) if a.dtype.kind == "f" else str(int(value))), None
    t = lw.operand(v)
    return f"((const {ctype} *){t.ptr})[0]", t


@emitter("Range", dynamic=True)
def range_(lw: Lowering, node) -> None:
    out = lw.result(node.outputs[0])
    if out.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
        raise UnsupportedError(f"Range of {out.dtype} (integer ranges are compiled)")
    ctype = "int64_t" if out.dtype == np.int64 else "int32_t"
    start, t1 = _scalar(lw, node.inputs[0], ctype)
    delta, t3 = _scalar(lw, node.inputs[2], ctype)
    n = dim_c(out.shape[0])
    lw.prog.step(f"{node.name}: Range", [
        f"for (int64_t i = 0; i < {n}; i++) (({ctype} *){out.ptr})[i] = ({ctype})({start} + "
        f"i * {delta});"], [t for t in (t1, t3) if t is not None], [out])


@emitter("Expand", dynamic=True)
def expand(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    out = lw.result(node.outputs[0])
    strides = broadcast_strides(x.shape, out.shape)
    lw.permute(out, x, out.shape, strides, f"{node.name}: Expand")


def _const_ints(lw: Lowering, v, n: int, default: int) -> list[int]:
    if v is None:
        return [default] * n
    if not v.is_constant:
        raise UnsupportedError(f"Slice with a run-time '{v.name}' (constant starts, axes and "
                               f"steps are compiled)")
    return [int(x) for x in lw.const_array(v).reshape(-1)]


@emitter("Slice", dynamic=True)
def slice_(lw: Lowering, node) -> None:
    """Slice along static axes: ops_shape's (any steps, clamped ends, stored layouts); along
    a run-time dimension (a sequence cut to its length): positive steps, the end from the
    output's shape."""
    shape = lw.shape(node.inputs[0])
    rank = len(shape)
    starts = _const_ints(lw, node.inputs[1], 0, 0)
    axes = _const_ints(lw, node.input_or_none(3), len(starts), 0) \
        if node.input_or_none(3) is not None else list(range(len(starts)))
    steps = _const_ints(lw, node.input_or_none(4), len(starts), 1)
    if node.inputs[2].is_constant and all(isinstance(shape[a % rank], int) for a in axes):
        _slice(lw, node)
        return
    x = lw.operand(node.inputs[0])
    out = lw.result(node.outputs[0])
    strides = [s.c() for s in row_major_strides(x.shape)]
    offset = []
    out_strides = [str(s) for s in strides]
    for a, s0, st in zip(axes, starts, steps, strict=True):
        a %= rank
        d = x.shape[a]
        if st <= 0:
            raise UnsupportedError("Slice with a negative step")
        dc = dim_c(d)
        start = f"({dc} > {-s0} ? {dc} - {-s0} : 0)" if s0 < 0 else \
            f"({dc} < {s0} ? {dc} : {s0})"
        offset.append(f"{start} * {strides[a]}")
        out_strides[a] = f"{strides[a]} * {st}"
    base = " + ".join(offset) or "0"
    nd = max(1, rank)
    lw.prog.step(f"{node.name}: Slice", [
        f"const int64_t shape[{nd}] = {{{', '.join(dim_c(d) for d in out.shape) or '1'}}};",
        f"const int64_t strides[{nd}] = {{{', '.join(out_strides) or '0'}}};",
        f"lb_permute(ctx, {rank or 1}, shape, strides, {x.dtype.itemsize}, {x.ptr} + "
        f"({base}) * {x.dtype.itemsize}, {out.ptr});"], [x], [out])


def _index_error(node, data_dim: str, position_of):
    """An error message function for an index outside the data, naming the graph input that
    holds the indices when there is one."""
    iv = node.inputs[1]

    def describe(detail: int, arrays: list) -> str:
        where_ = position_of(detail)
        graph_inputs = getattr(describe, "inputs", [])
        for v, a in zip(graph_inputs, arrays, strict=False):
            if v is iv:
                flat = np.asarray(a).reshape(-1)
                value = int(flat[detail]) if detail < flat.size else None
                pos = tuple(int(i) for i in np.unravel_index(detail, np.shape(a))) \
                    if detail < flat.size else where_
                return (f"input '{iv.name}' holds {value} at position {pos}, outside "
                        f"[-{data_dim}, {data_dim}) for {node.describe()} (a gather from "
                        f"'{node.inputs[0].name}'): ids must be smaller than {data_dim}")
        return (f"{node.describe()}: index {where_} of '{iv.name}' is outside [-{data_dim}, "
                f"{data_dim}) of '{node.inputs[0].name}'")

    return describe


@emitter("Gather", dynamic=True)
@emitter("Gather", quantized=True, dynamic=True)
def gather(lw: Lowering, node) -> None:
    data = lw.operand(node.inputs[0])
    idx = lw.operand(node.inputs[1])
    out = lw.result(node.outputs[0], biased=data.biased)
    rank = len(data.shape)
    axis = int(node.attrs.get("axis", 0)) % rank
    if idx.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
        raise UnsupportedError(f"Gather with {idx.dtype} indices")
    outer = cprod(*data.shape[:axis])
    inner = cprod(*data.shape[axis + 1:])
    dim = dim_c(data.shape[axis])
    itype = "LB_I64" if idx.dtype == np.int64 else "LB_I32"
    call = (f"lb_gather(ctx, {outer}, {dim}, {inner}, {data.dtype.itemsize}, {data.ptr}, "
            f"{numel(idx.shape).c()}, {idx.ptr}, {itype}, {out.ptr})")
    size = data.shape[axis]
    error = _index_error(node, str(size), lambda d: d)
    error.inputs = list(lw.graph.inputs)  # type: ignore[attr-defined]
    code = [lw.prog.failing(call)]
    lw.prog.step(f"{node.name}: Gather axis {axis}", code, [data, idx], [out], error=error)


@emitter("GatherND", dynamic=True)
def gather_nd(lw: Lowering, node) -> None:
    if int(node.attrs.get("batch_dims", 0)):
        raise UnsupportedError("GatherND with batch_dims")
    data = lw.operand(node.inputs[0])
    idx = lw.operand(node.inputs[1])
    out = lw.result(node.outputs[0])
    kq = idx.shape[-1]
    if not isinstance(kq, int):
        raise UnsupportedError("GatherND with a symbolic index length")
    count = cprod(*idx.shape[:-1])
    r = len(data.shape)
    error = _index_error(node, "its dimensions", lambda d: d)
    error.inputs = list(lw.graph.inputs)  # type: ignore[attr-defined]
    lw.prog.step(f"{node.name}: GatherND", [
        f"const int64_t dims[{r}] = {{{', '.join(dim_c(d) for d in data.shape)}}};",
        lw.prog.failing(f"lb_gather_nd(ctx, {r}, dims, {data.dtype.itemsize}, {data.ptr}, "
                        f"{count}, {kq}, (const int64_t *){idx.ptr}, {out.ptr})")],
        [data, idx], [out], error=error)


__all__ = ["Size", "broadcast_strides", "cprod", "dim_size", "iterator"]
