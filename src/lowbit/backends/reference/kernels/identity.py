"""Reference kernels of the identity-like ops."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel


@kernel("Identity")
def identity(node, inputs):
    return [inputs[0]]


@kernel("Dropout")
def dropout(node, inputs):
    x = inputs[0]
    return [x, np.ones(x.shape, dtype=np.bool_)]
