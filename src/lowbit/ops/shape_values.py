"""Known elements of small integer tensors that hold shapes, even when not all are constant.

Exports compute shapes at run time: `Shape(x) -> Gather -> Unsqueeze -> Concat -> Reshape`.
When `x` has shape `(batch, seq, 384)`, the tensor `Shape(x)` holds `[batch, seq, 384]`: some
elements static, some symbolic. `symbolic_value` follows such a tensor back through the ops that
build shapes and returns its elements as dims (int, symbol, or None for an unknown element), so
Reshape can infer `(batch, seq, 12, 32)` and the constant folder can replace `Gather(Shape(x), 2)`
by the constant 384. It is a pure function of the graph: nothing is stored on values.
"""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.graph import CONSTANT, Value
from lowbit.ir.types import Dim
from lowbit.ops.symbolic import clamped_slice, dim_add, dim_div, dim_mul, dim_product, dims_equal

MAX_ELEMENTS = 256
"""Larger tensors are not shape values; they are not followed."""
MAX_DEPTH = 64

ShapeValue = tuple[Dim, ...]


def symbolic_value(v: Value | None) -> ShapeValue | None:
    """The elements (flattened) of integer tensor `v` of rank 0 or 1 as dims, or None when not
    even their number is known. An element is an int when known, a symbol when it is a
    symbolic dimension, None when unknown."""
    return _value(v, 0)


def static_value(v: Value | None) -> list[int] | None:
    """The elements of `v` when all are known integers (constant or computable from static
    shapes), else None."""
    out = symbolic_value(v)
    if out is None or not all(isinstance(d, int) for d in out):
        return None
    return [int(d) for d in out]  # type: ignore[arg-type]


def _is_int_tensor(v: Value) -> bool:
    """Integer or bool (held as 0/1) tensors of rank <= 1."""
    t = v.type
    return t is not None and (t.dtype.is_integer or t.dtype == dtypes.BOOL) and (
        t.shape is None or len(t.shape) <= 1)


def _length_only(v: Value) -> ShapeValue | None:
    """(None,) * n when `v` has a static length n but unknown elements."""
    t = v.type
    if t is None or t.shape is None or len(t.shape) > 1:
        return None
    if len(t.shape) == 0:
        return (None,)
    n = t.shape[0]
    return (None,) * n if isinstance(n, int) and n <= MAX_ELEMENTS else None


def _value(v: Value | None, depth: int) -> ShapeValue | None:
    if v is None or not _is_int_tensor(v):
        return None
    node = v.producer
    if node is None or depth > MAX_DEPTH:
        return _length_only(v)
    if node.op_type == CONSTANT:
        array = node.attrs["value"]
        if array.ndim > 1 or array.size > MAX_ELEMENTS or array.dtype.kind not in "iub":
            return None
        return tuple(int(x) for x in array.reshape(-1))
    rule = _RULES.get(node.op_type) if not node.domain else None
    out = rule(node, depth + 1) if rule is not None else None
    return out if out is not None else _length_only(v)


def _shape(node, depth: int) -> ShapeValue | None:
    t = node.inputs[0].type
    if t is None or t.shape is None:
        return None
    rank = len(t.shape)
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    end = rank if end is None else end
    start = min(rank, max(0, start + rank if start < 0 else start))
    end = min(rank, max(0, end + rank if end < 0 else end))
    return tuple(t.shape[start:end])


def _size(node, depth: int) -> ShapeValue | None:
    t = node.inputs[0].type
    if t is None or t.shape is None:
        return None
    return (dim_product(t.shape),)


def _same_elements(node, depth: int) -> ShapeValue | None:
    """Ops that keep the elements of a rank <= 1 tensor: Identity, Reshape, (Un)Squeeze, Cast
    between integer types."""
    return _value(node.inputs[0], depth)


def _concat(node, depth: int) -> ShapeValue | None:
    out: list[Dim] = []
    for v in node.inputs:
        part = _value(v, depth)
        if part is None:
            return None
        out.extend(part)
    return tuple(out)


def _gather(node, depth: int) -> ShapeValue | None:
    data = _value(node.inputs[0], depth)
    indices = node.inputs[1].const_value
    if data is None or indices is None or indices.ndim > 1 or node.attrs.get("axis", 0) not in (
            0, -1):
        return None
    n = len(data)
    picked = []
    for i in indices.reshape(-1).tolist():
        if not -n <= i < n:
            return None
        picked.append(data[i])
    return tuple(picked)


def _slice(node, depth: int) -> ShapeValue | None:
    data = _value(node.inputs[0], depth)
    args = [node.input_or_none(i) for i in range(1, 5)]
    consts = [None if a is None else a.const_value for a in args]
    if data is None or consts[0] is None or consts[1] is None:
        return None
    if any(a is not None and c is None for a, c in zip(args, consts, strict=True)):
        return None
    starts, ends = consts[0].reshape(-1), consts[1].reshape(-1)
    if len(starts) != 1 or len(ends) != 1:
        return None
    step = 1 if consts[3] is None else int(consts[3].reshape(-1)[0])
    if step == 0:
        return None
    return tuple(data[clamped_slice(int(starts[0]), int(ends[0]), step, len(data))])


def _binary(node, depth: int) -> ShapeValue | None:
    a, b = _value(node.inputs[0], depth), _value(node.inputs[1], depth)
    if a is None or b is None:
        return None
    if len(a) != len(b):
        if len(a) == 1:
            a = a * len(b)
        elif len(b) == 1:
            b = b * len(a)
        else:
            return None
    fn = _ELEMENTWISE[node.op_type]
    return tuple(fn(x, y) for x, y in zip(a, b, strict=True))


def _equal(a: Dim, b: Dim) -> Dim:
    """1 or 0 when known: a symbolic dim is never negative, so it differs from -1."""
    if isinstance(a, int) and isinstance(b, int):
        return int(a == b)
    if dims_equal(a, b):
        return 1
    if (isinstance(a, int) and a < 0 and b is not None) or (
            isinstance(b, int) and b < 0 and a is not None):
        return 0
    return None


def _where(node, depth: int) -> ShapeValue | None:
    parts = [_value(v, depth) for v in node.inputs]
    if any(p is None for p in parts):
        return None
    n = max(len(p) for p in parts)  # type: ignore[arg-type]
    if any(len(p) not in (1, n) for p in parts):  # type: ignore[arg-type]
        return None
    cond, x, y = (p * n if len(p) == 1 else p for p in parts)  # type: ignore[operator]
    return tuple(None if c is None else (a if c else b) for c, a, b in zip(cond, x, y,
                                                                         strict=True))


def _int_div(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            return None
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    return dim_div(a, b)


def _static_only(fn):
    def apply(a: Dim, b: Dim) -> Dim:
        return fn(a, b) if isinstance(a, int) and isinstance(b, int) else None

    return apply


_ELEMENTWISE = {
    "Add": dim_add,
    "Sub": lambda a, b: a if b == 0 else _static_only(lambda x, y: x - y)(a, b),
    "Mul": dim_mul,
    "Div": _int_div,
    "Max": _static_only(max),
    "Min": _static_only(min),
    "Equal": _equal,
    "Greater": _static_only(lambda a, b: int(a > b)),
    "Less": _static_only(lambda a, b: int(a < b)),
    "GreaterOrEqual": _static_only(lambda a, b: int(a >= b)),
    "LessOrEqual": _static_only(lambda a, b: int(a <= b)),
    "And": _static_only(lambda a, b: int(bool(a) and bool(b))),
    "Or": _static_only(lambda a, b: int(bool(a) or bool(b))),
}


def _not(node, depth: int) -> ShapeValue | None:
    x = _value(node.inputs[0], depth)
    return None if x is None else tuple(None if d is None or not isinstance(d, int)
                                        else int(not d) for d in x)


def _cast(node, depth: int) -> ShapeValue | None:
    return _value(node.inputs[0], depth)


_RULES = {
    "Shape": _shape,
    "Size": _size,
    "Identity": _same_elements,
    "Reshape": _same_elements,
    "Squeeze": _same_elements,
    "Unsqueeze": _same_elements,
    "Flatten": _same_elements,
    "Cast": _cast,
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Where": _where,
    "Not": _not,
    **{op: _binary for op in _ELEMENTWISE},
}


def as_array(values: list[int], like: Value) -> np.ndarray:
    """`values` as an array with `like`'s dtype and rank (0-d for a scalar)."""
    t = like.type
    assert t is not None and t.shape is not None
    array = np.array(values, dtype=t.dtype.np_dtype)
    return array.reshape(()) if len(t.shape) == 0 else array
