"""Reference kernels of Conv and ConvTranspose (lowbit.ops.conv).

Float operands are accumulated in float64, the bias added in float64, and the sum rounded once
to the output dtype.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.backends.reference.windows import conv_nd, conv_transpose_nd
from lowbit.errors import KernelError
from lowbit.ops.conv_geometry import transpose_geometry, window_from_attrs


def _float_operands(node, inputs) -> None:
    if any(a is not None and a.dtype.kind in "iub" for a in inputs):
        raise KernelError(f"{node.op_type} on integer tensors needs quantization parameters; "
                          f"the float kernel takes float tensors only")


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """y + b along the channels, in place (`y` is the kernel's own float64 sum)."""
    if b is not None:
        y += b.astype(np.float64).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


@kernel("Conv")
def conv(node, inputs):
    x, w, b = (list(inputs) + [None])[:3]
    _float_operands(node, inputs)
    window = window_from_attrs(node, w.shape[2:], x.ndim - 2)
    y = conv_nd(x, w, window, int(node.attrs["group"]))
    return [_add_bias(y, b).astype(x.dtype, order="C")]


@kernel("ConvTranspose")
def conv_transpose(node, inputs):
    x, w, b = (list(inputs) + [None])[:3]
    _float_operands(node, inputs)
    n_sp = x.ndim - 2
    window = window_from_attrs(node, w.shape[2:], n_sp)
    output_padding = node.attrs.get("output_padding") or [0] * n_sp
    output_shape = node.attrs.get("output_shape")
    if output_shape is not None:
        output_shape = list(output_shape)[-n_sp:]
    geo = transpose_geometry(node, window, x.shape[2:], output_padding, output_shape)
    y = conv_transpose_nd(x, w, window.strides, window.dilations, int(node.attrs["group"]),
                          geo.begins, geo.out)
    return [_add_bias(y, b).astype(x.dtype)]
