"""Reference kernels of the activation functions (lowbit.ops.activation).

Each function below receives X in its compute dtype (float32 for float16/bfloat16) and the
node's attributes, and its result is rounded back to X's dtype once. Float attributes are
float32 values; numpy keeps float32 arithmetic in float32 when they multiply float32 arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from lowbit.backends.reference.floatmath import narrow, widen
from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.special import erfc
from lowbit.errors import KernelError
from lowbit.ir.attrs import AFFINE
from lowbit.numerics import elementary

Activation = Callable[[np.ndarray, dict[str, Any]], np.ndarray]


def activation(op_type: str) -> Callable[[Activation], Activation]:
    """Register `fn(x, attrs)` as the kernel of `op_type`."""

    def deco(fn: Activation) -> Activation:
        def run(node, inputs):
            x = inputs[0]
            with np.errstate(all="ignore"):
                return [narrow(fn(widen(x), node.attrs), x.dtype)]

        kernel(op_type)(run)
        return fn

    return deco


@activation("Relu")
def relu(x, attrs):
    return np.maximum(x, 0)


@activation("LeakyRelu")
def leaky_relu(x, attrs):
    return np.where(x >= 0, x, x * attrs["alpha"])


@activation("Sigmoid")
def sigmoid(x, attrs=None):
    # exp of a non-positive number never overflows; both branches are exact rearrangements.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


@activation("HardSigmoid")
def hard_sigmoid(x, attrs):
    return np.clip(x * attrs["alpha"] + attrs["beta"], 0, 1)


@activation("HardSwish")
def hard_swish(x, attrs):
    y = x * np.clip(x * np.float32(1 / 6) + 0.5, 0, 1)
    affine = attrs.get(AFFINE)
    if affine is None:
        return y
    a, b = (np.asarray(v, x.dtype) for v in affine)  # the Mul, then the Add, that were folded
    return y * a + b


@activation("Tanh")
def tanh(x, attrs):
    return np.tanh(x)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@activation("Gelu")
def gelu(x, attrs):
    if x.dtype == np.float32:  # a defined float32 evaluation, reproduced by the cpu backend
        return elementary.gelu(x, attrs["approximate"])
    if attrs["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    # 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), without cancellation for negative x.
    return 0.5 * x.astype(np.float64) * erfc(-x.astype(np.float64) / math.sqrt(2))


@activation("Elu")
def elu(x, attrs):
    return np.where(x >= 0, x, attrs["alpha"] * np.expm1(x))


@activation("Selu")
def selu(x, attrs):
    return attrs["gamma"] * np.where(x > 0, x, attrs["alpha"] * np.expm1(x))


@activation("Celu")
def celu(x, attrs):
    alpha = attrs["alpha"]
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


@activation("Softplus")
def softplus(x, attrs=None):
    return np.logaddexp(0, x)


@activation("Softsign")
def softsign(x, attrs):
    return x / (1 + np.abs(x))


@activation("Mish")
def mish(x, attrs):
    return x * np.tanh(softplus(x))


@activation("Swish")
def swish(x, attrs):
    return x * sigmoid(x * attrs["alpha"])


@activation("ThresholdedRelu")
def thresholded_relu(x, attrs):
    return np.where(x > attrs["alpha"], x, 0)


@activation("Shrink")
def shrink(x, attrs):
    if x.dtype.kind in "iu":
        # Integers: compute in float64; the cast back truncates toward zero.
        x = x.astype(np.float64)
    lambd, bias = attrs["lambd"], attrs["bias"]
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


@kernel("PRelu")
def prelu(node, inputs):
    x, slope = inputs
    xc, sc = widen(x), widen(slope)
    with np.errstate(all="ignore"):
        return [narrow(np.where(xc < 0, sc * xc, xc), x.dtype)]


@kernel("Clip")
def clip(node, inputs):
    x = inputs[0]
    y = widen(x)
    for i, bound in enumerate(inputs[1:3], start=1):
        if bound is None:
            continue
        if bound.size != 1:
            raise KernelError(f"{'min' if i == 1 else 'max'} must be a scalar, got shape "
                              f"{bound.shape}")
        limit = widen(bound).reshape(())
        y = np.maximum(y, limit) if i == 1 else np.minimum(y, limit)
    return [narrow(y, x.dtype)]
