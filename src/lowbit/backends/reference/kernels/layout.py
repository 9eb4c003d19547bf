"""Reference kernels of the layout ops (lowbit.ops.layout): element moves, exact for every
dtype."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel


@kernel("Reshape")
def reshape(node, inputs):
    data, shape = inputs
    target = [int(d) for d in shape]
    if not node.attrs["allowzero"]:
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return [data.reshape(target)]


@kernel("Flatten")
def flatten(node, inputs):
    (x,) = inputs
    axis = node.attrs["axis"]
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    cols = int(np.prod(x.shape[axis:], dtype=np.int64))
    return [x.reshape(rows, cols)]


@kernel("Transpose")
def transpose(node, inputs):
    (x,) = inputs
    return [np.transpose(x, node.attrs.get("perm"))]


@kernel("Squeeze")
def squeeze(node, inputs):
    x, axes = inputs[0], inputs[1] if len(inputs) > 1 else None
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(int(a) for a in np.asarray(axes).reshape(-1)))]


@kernel("Unsqueeze")
def unsqueeze(node, inputs):
    x, axes = inputs
    rank = x.ndim + axes.size
    axes = sorted(int(a) % rank for a in np.asarray(axes).reshape(-1))
    return [np.expand_dims(x, tuple(axes))]


@kernel("DepthToSpace")
def depth_to_space(node, inputs):
    (x,) = inputs
    b = node.attrs["blocksize"]
    n, c, h, w = x.shape
    if node.attrs.get("mode", "DCR") == "DCR":
        tmp = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        tmp = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [tmp.reshape(n, c // (b * b), h * b, w * b)]


@kernel("SpaceToDepth")
def space_to_depth(node, inputs):
    (x,) = inputs
    b = node.attrs["blocksize"]
    n, c, h, w = x.shape
    tmp = x.reshape(n, c, h // b, b, w // b, b)
    if node.attrs.get("mode", "DCR") == "DCR":
        tmp = tmp.transpose(0, 3, 5, 1, 2, 4)
    else:
        tmp = tmp.transpose(0, 1, 3, 5, 2, 4)
    return [tmp.reshape(n, c * b * b, h // b, w // b)]
