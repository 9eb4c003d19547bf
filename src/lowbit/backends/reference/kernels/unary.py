"""Reference kernels of the one-input math ops (lowbit.ops.unary)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lowbit.backends.reference.floatmath import float_unary, is_float, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.special import erf

FLOAT_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log, "Reciprocal": np.reciprocal,
    "Erf": erf, "Floor": np.floor, "Ceil": np.ceil, "Round": np.rint,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan,
    "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan,
    "Sinh": np.sinh, "Cosh": np.cosh,
    "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
}  # fmt: skip
"""Float-only ops. np.rint rounds halves to even, as ONNX Round does."""

NUMERIC_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Abs": np.abs, "Neg": np.negative, "Sign": np.sign,
}
"""Ops on integers too, where numpy's results wrap around like two's complement."""


def _float_kernel(fn: Callable[[np.ndarray], np.ndarray]) -> Callable:
    apply = float_unary(fn)

    def run(node, inputs):
        return [apply(inputs[0])]

    return run


def _numeric_kernel(fn: Callable[[np.ndarray], np.ndarray]) -> Callable:
    apply = float_unary(fn)

    def run(node, inputs):
        x = inputs[0]
        if is_float(x.dtype):
            return [apply(x)]
        with np.errstate(over="ignore"):
            return [np.asarray(fn(x))]

    return run


for _op, _fn in FLOAT_FUNCTIONS.items():
    kernel(_op)(_float_kernel(_fn))
for _op, _fn in NUMERIC_FUNCTIONS.items():
    kernel(_op)(_numeric_kernel(_fn))


@kernel("IsNaN")
def is_nan(node, inputs):
    return [np.asarray(np.isnan(widen(inputs[0])))]


@kernel("IsInf")
def is_inf(node, inputs):
    x = widen(inputs[0])
    positive = np.isposinf(x) & bool(node.attrs["detect_positive"])
    negative = np.isneginf(x) & bool(node.attrs["detect_negative"])
    return [np.asarray(positive | negative)]
