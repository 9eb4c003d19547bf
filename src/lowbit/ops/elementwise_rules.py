"""Type rules shared by the elementwise op families (elementwise, unary, activation, cast).

The dtype sets mirror the ONNX type constraints of the newest op versions. Checks name the node
and say what to do. A quantized integer tensor stands for real numbers, so it is accepted
wherever an op accepts floats: the op's quantization rule decides how it is computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lowbit.ir import dtypes as dt
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import broadcast_shapes
from lowbit.ops.registry import fail

FLOATS = frozenset({dt.FLOAT16, dt.BFLOAT16, dt.FLOAT32, dt.FLOAT64})
SIGNED_INTS = frozenset({dt.INT8, dt.INT16, dt.INT32, dt.INT64})
UNSIGNED_INTS = frozenset({dt.UINT8, dt.UINT16, dt.UINT32, dt.UINT64})
INTS = SIGNED_INTS | UNSIGNED_INTS
NUMERIC = INTS | FLOATS
BOOL = frozenset({dt.BOOL})
FLOAT8 = frozenset({dt.FLOAT8E4M3FN, dt.FLOAT8E4M3FNUZ, dt.FLOAT8E5M2, dt.FLOAT8E5M2FNUZ})


def dtype_names(allowed: Iterable[DType]) -> str:
    return ", ".join(sorted(d.name for d in allowed))


def known_types(node: Node, in_types: Sequence[TensorType | None]) -> list[TensorType | None]:
    """`in_types`, after refusing any present input whose type is unknown."""
    for i, (value, t) in enumerate(zip(node.inputs, in_types, strict=False)):
        if value is not None and t is None:
            raise fail(node, f"type of input {i} ('{value.name}') is unknown")
    return list(in_types)


def check_dtype(node: Node, index: int, t: TensorType, allowed: frozenset[DType]) -> None:
    """Refuse input `index` unless its dtype is in `allowed` (or it is quantized and the op
    accepts floats)."""
    if t.dtype in allowed or (t.quant is not None and allowed & FLOATS):
        return
    raise fail(node, f"input {index} has dtype {t.dtype}; {node.op_type} accepts "
                     f"{dtype_names(allowed)}")


def same_dtype(node: Node, in_types: Sequence[TensorType | None], indices: Iterable[int]
               ) -> DType:
    """The common dtype of the given (present) inputs; refuse the node if they differ."""
    first: tuple[int, DType] | None = None
    for i in indices:
        t = in_types[i] if i < len(in_types) else None
        if t is None:
            continue
        if first is None:
            first = (i, t.dtype)
        elif t.dtype != first[1]:
            raise fail(node, f"inputs {first[0]} and {i} have dtypes {first[1]} and {t.dtype}; "
                             f"{node.op_type} needs equal dtypes (insert a Cast)")
    assert first is not None, "same_dtype needs at least one present input"
    return first[1]


def broadcast(node: Node, types: Sequence[TensorType]) -> tuple[Dim, ...] | None:
    """Multidirectional (numpy) broadcast of the inputs' shapes; refuse shapes that cannot
    broadcast, naming them."""
    try:
        return broadcast_shapes(*(t.shape for t in types))
    except ValueError as exc:
        shapes = " and ".join(_shape_text(t.shape) for t in types)
        raise fail(node, f"input shapes {shapes} do not broadcast ({exc})") from None


def broadcast_to(node: Node, shape: tuple[Dim, ...] | None, other: TensorType, what: str
                 ) -> tuple[Dim, ...] | None:
    """Unidirectional broadcasting: `other` must broadcast to `shape`, which it keeps (with
    unknown dims filled from `other` where it is static)."""
    if shape is None or other.shape is None:
        return shape
    if len(other.shape) > len(shape):
        raise fail(node, f"{what} of shape {_shape_text(other.shape)} has a higher rank than "
                         f"the input's {_shape_text(shape)}")
    try:
        out = broadcast_shapes(shape, other.shape)
    except ValueError as exc:
        raise fail(node, f"{what} of shape {_shape_text(other.shape)} does not broadcast to "
                         f"{_shape_text(shape)}: {exc}") from None
    assert out is not None
    for d, o in zip(shape, out, strict=True):
        if isinstance(d, int) and d != o:
            raise fail(node, f"{what} of shape {_shape_text(other.shape)} does not broadcast to "
                             f"{_shape_text(shape)}")
    return tuple(o if d is None else d for d, o in zip(shape, out, strict=True))


def _shape_text(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "(unknown rank)"
    dims = ", ".join("?" if d is None else str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"
