"""Reference kernels of the broadcasting elementwise ops (lowbit.ops.elementwise).

Integer results wrap around in the operands' width. Floats follow `floatmath`: float16 and
bfloat16 compute in float32 and are rounded back once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from lowbit.backends.reference.floatmath import is_float, narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError

BinaryFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _same_dtype_kernel(fn: BinaryFn) -> Callable:
    """A kernel applying `fn` to two inputs of one dtype, giving that dtype."""

    def run(node, inputs):
        a, b = inputs
        with np.errstate(all="ignore"):
            return [narrow(fn(widen(a), widen(b)), a.dtype)]

    return run


for _op, _fn in {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}.items():  # fmt: skip
    kernel(_op)(_same_dtype_kernel(_fn))


def _comparison_kernel(fn: BinaryFn) -> Callable:
    def run(node, inputs):
        a, b = inputs
        with np.errstate(invalid="ignore"):
            return [np.asarray(fn(widen(a), widen(b)))]

    return run


for _op, _fn in {
    "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
    "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
}.items():  # fmt: skip
    kernel(_op)(_comparison_kernel(_fn))


def _refuse_zero_divisor(b: np.ndarray, what: str) -> None:
    if np.any(b == 0):
        raise KernelError(f"integer {what} by zero (ONNX leaves it undefined)")


_float_div = _same_dtype_kernel(np.divide)
_remainder = {0: _same_dtype_kernel(np.remainder), 1: _same_dtype_kernel(np.fmod)}


@kernel("Div")
def div(node, inputs):
    a, b = inputs
    if is_float(a.dtype):
        return _float_div(node, inputs)
    _refuse_zero_divisor(b, "division")
    with np.errstate(all="ignore"):
        q = np.floor_divide(a, b)
        if a.dtype.kind == "i":
            # Floor and truncation differ by one when the division is inexact and the
            # operands' signs differ.
            q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(a.dtype)
    return [narrow(q, a.dtype)]


@kernel("Mod")
def mod(node, inputs):
    a, b = inputs
    if not is_float(a.dtype):
        _refuse_zero_divisor(b, "modulo")
    return _remainder[node.attrs["fmod"]](node, inputs)


@kernel("Pow")
def pow_(node, inputs):
    x, y = inputs
    with np.errstate(all="ignore"):
        if is_float(x.dtype):
            xc = widen(x)
            return [narrow(np.power(xc, widen(y).astype(xc.dtype)), x.dtype)]
        if is_float(y.dtype):
            z = np.trunc(np.power(x.astype(np.float64), y.astype(np.float64)))
            return [narrow(z, x.dtype)]
        return [narrow(_int_power(x, y), x.dtype)]


def _int_power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x ** y in int64 (wrapping; the low bits are those of x's narrower dtype too); negative
    exponents give trunc(1 / x ** -y)."""
    if y.dtype == np.uint64 and np.any(y > np.iinfo(np.int64).max):
        raise KernelError("integer exponent beyond the int64 range")
    x64, y64 = x.astype(np.int64), y.astype(np.int64)
    negative = y64 < 0
    if np.any(negative & (np.broadcast_to(x64, np.broadcast_shapes(x64.shape, y64.shape)) == 0)):
        raise KernelError("0 raised to a negative integer power")
    # 1 / x**n truncates to 0 unless |x| = 1, where it is x**n, which only needs n's parity.
    z = np.power(x64, np.where(negative, y64 & 1, y64))
    return np.where(negative & (np.abs(x64) != 1), 0, z)


def _variadic_kernel(fn: BinaryFn, finish: Callable | None = None) -> Callable:
    def run(node, inputs):
        dtype = inputs[0].dtype
        with np.errstate(all="ignore"):
            result = functools.reduce(fn, [widen(x) for x in inputs])
            if finish is not None:
                result = finish(result, len(inputs))
            return [narrow(result, dtype)]

    return run


kernel("Max")(_variadic_kernel(np.maximum))
kernel("Min")(_variadic_kernel(np.minimum))
kernel("Sum")(_variadic_kernel(np.add))
kernel("Mean")(_variadic_kernel(np.add, lambda total, n: total / total.dtype.type(n)))


@kernel("BitShift")
def bit_shift(node, inputs):
    x, y = inputs
    bits = x.dtype.itemsize * 8
    valid = (y >= 0) & (y < bits)
    amount = np.where(valid, y, 0).astype(x.dtype)
    if node.attrs["direction"] == "LEFT":
        shifted, fill = np.left_shift(x, amount), np.zeros_like(x)
    else:
        shifted = np.right_shift(x, amount)
        # An arithmetic shift by the full width leaves only copies of the sign bit.
        fill = np.right_shift(x, bits - 1) if x.dtype.kind == "i" else np.zeros_like(x)
    return [narrow(np.where(valid, shifted, fill), x.dtype)]


@kernel("BitwiseNot")
def bitwise_not(node, inputs):
    return [np.asarray(np.invert(inputs[0]))]


@kernel("Not")
def logical_not(node, inputs):
    return [np.asarray(np.logical_not(inputs[0]))]


@kernel("Where")
def where(node, inputs):
    condition, x, y = inputs
    return [np.where(condition, x, y)]
