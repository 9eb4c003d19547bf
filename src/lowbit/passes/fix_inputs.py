"""Fixing graph inputs to constants: a model that takes a setting as an input (Silero VAD's
sample rate `sr`) becomes the model for one setting, whose If on it folds to one branch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lowbit.errors import InputError
from lowbit.ir.graph import CONSTANT, Graph, Node
from lowbit.ir.types import TensorType


def fix_inputs(graph: Graph, values: Mapping[str, object]) -> Graph:
    """Replace each named graph input by a Constant holding its value (converted to the
    input's dtype, which must hold it exactly; the shape must fit the input's declared one).
    Refuses unknown names and values that do not fit, naming the input. Run constant folding
    afterwards to fold what the fixed values decide."""
    inputs = {v.name: v for v in graph.inputs}
    for name, given in values.items():
        value = inputs.get(name)
        if value is None:
            raise InputError(f"cannot fix input '{name}': the model's inputs are "
                             f"{', '.join(inputs) or '(none)'}")
        array = _convert(name, np.asarray(given), value.type)
        graph.inputs.remove(value)
        array.setflags(write=False)
        value.type = TensorType(value.type.dtype, tuple(array.shape))  # type: ignore[union-attr]
        graph.nodes.insert(0, Node(CONSTANT, [], [value], {"value": array},
                                   graph.unique_node_name(f"{name}_fixed")))
    return graph


def _convert(name: str, a: np.ndarray, t: TensorType | None) -> np.ndarray:
    if t is None:
        raise InputError(f"cannot fix input '{name}': its type is unknown")
    want = t.dtype.np_dtype
    try:
        converted = a.astype(want)
    except (TypeError, ValueError) as exc:
        raise InputError(f"cannot fix input '{name}' ({t}) to {a.tolist()!r}: {exc}") from None
    if a.dtype.kind in "fiub" and not np.array_equal(converted.astype(np.float64),
                                                     a.astype(np.float64)):
        raise InputError(f"cannot fix input '{name}' to {a.tolist()!r}: {t.dtype} does not "
                         "hold it exactly")
    if t.shape is not None:
        shape = t.shape
        if converted.ndim != len(shape) and converted.size == 1 and \
                all(d in (1, None) or isinstance(d, str) for d in shape):
            converted = converted.reshape((1,) * len(shape))
        if converted.ndim != len(shape) or any(
                isinstance(d, int) and d != n for d, n in zip(shape, converted.shape,
                                                              strict=True)):
            raise InputError(f"cannot fix input '{name}': a value of shape "
                             f"{tuple(converted.shape)} does not fit its type {t}")
    return np.ascontiguousarray(converted)
