"""Reference kernel of Resize (rules in lowbit.ops.resize): one axis at a time, each a gather
(nearest) or a float64 weight matrix (linear, cubic) applied along the axis."""

from __future__ import annotations

import math

import numpy as np

from lowbit.backends.reference.kernels import kernel
from lowbit.errors import KernelError
from lowbit.ir import dtypes
from lowbit.ops.resize import aspect_sizes, resize_axes


def _present(inputs, index: int) -> np.ndarray | None:
    x = inputs[index] if index < len(inputs) else None
    return None if x is None or x.size == 0 else x


def _plan(node, x: np.ndarray, scales, sizes) -> list[tuple[int, int, float]]:
    """[(axis, output size, scale)] for every resized axis."""
    axes = resize_axes(node, x.ndim)
    values = scales if scales is not None else sizes
    if values.size != len(axes):
        raise KernelError(f"{'scales' if scales is not None else 'sizes'} has {values.size} "
                          f"entries for {len(axes)} resized axes")
    in_sizes = [x.shape[a] for a in axes]
    if scales is not None:
        factors = [float(s) for s in scales.reshape(-1)]
        if min(factors) <= 0:
            raise KernelError(f"scales must be positive, got {factors}")
        out = [math.floor(f * d) for f, d in zip(factors, in_sizes, strict=True)]
        return list(zip(axes, out, factors, strict=True))
    wanted = [int(s) for s in sizes.reshape(-1)]
    if min(wanted) < 0:
        raise KernelError(f"sizes must not be negative, got {wanted}")
    if node.attrs["keep_aspect_ratio_policy"] == "stretch":
        factors = [s / d if d else 1.0 for s, d in zip(wanted, in_sizes, strict=True)]
        return list(zip(axes, wanted, factors, strict=True))
    out, scale = aspect_sizes(node, in_sizes, wanted)
    return [(a, n, scale) for a, n in zip(axes, out, strict=True)]


def source_coordinates(mode: str, out_len: int, in_len: int, scale: float,
                       roi: tuple[float, float] | None) -> np.ndarray:
    """x_original of every output index y along one axis (float64)."""
    y = np.arange(out_len, dtype=np.float64)
    width = scale * in_len  # the output length before rounding to an integer
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if width != 1 else np.full(out_len, -0.5)
    if mode == "align_corners":
        return y * (in_len - 1) / (width - 1) if width != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return y / scale
    assert roi is not None  # tf_crop_and_resize
    start, end = roi
    if width == 1:
        x = np.full(out_len, (end - start) * (in_len - 1) / 2)
    else:
        x = y * (end - start) * (in_len - 1) / (width - 1)
    return x + start * (in_len - 1)


def _nearest_index(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        i = np.ceil(x - 0.5)
    elif mode == "round_prefer_ceil":
        i = np.floor(x + 0.5)
    elif mode == "floor":
        i = np.floor(x)
    else:
        i = np.ceil(x)
    return i.astype(np.int64)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _triangle(t: np.ndarray) -> np.ndarray:
    return np.clip(1 - np.abs(t), 0, 1)


def interpolation_weights(node, x: np.ndarray, in_len: int, scale: float) -> np.ndarray:
    """The (len(x), in_len) float64 matrix of linear or cubic weights for source coordinates
    `x`."""
    mode = node.attrs["mode"]
    reach = 1 if mode == "linear" else 2
    stretch = min(scale, 1.0) if node.attrs["antialias"] else 1.0
    first = math.floor(-reach / stretch) + 1
    offsets = np.arange(first, 2 - first)
    base = np.ceil(x) - 1
    ratio = x - base
    t = (offsets[None, :] - ratio[:, None]) * stretch
    w = _triangle(t) if mode == "linear" else _cubic(t, node.attrs["cubic_coeff_a"])
    if node.attrs["antialias"]:
        w = w / w.sum(axis=1, keepdims=True)
    index = base.astype(np.int64)[:, None] + offsets[None, :]
    if node.attrs["exclude_outside"]:
        w = np.where((index < 0) | (index >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    matrix = np.zeros((len(x), in_len))
    rows = np.broadcast_to(np.arange(len(x))[:, None], index.shape)
    np.add.at(matrix, (rows, np.clip(index, 0, in_len - 1)), w)
    return matrix


def _round_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 results in `dtype`: integers round half to even and saturate."""
    kind = dtypes.from_numpy(dtype)
    if kind.is_integer:
        return np.clip(np.rint(values), kind.qmin, kind.qmax).astype(dtype)
    return values.astype(dtype)


@kernel("Resize")
def resize(node, inputs):
    x = inputs[0]
    roi, scales, sizes = (_present(inputs, i) for i in (1, 2, 3))
    if (scales is None) == (sizes is None):
        raise KernelError("give exactly one of scales and sizes")
    plan = _plan(node, x, scales, sizes)
    coordinate_mode = node.attrs["coordinate_transformation_mode"]
    if coordinate_mode == "tf_crop_and_resize" and (roi is None or roi.size != 2 * len(plan)):
        raise KernelError(f"roi must hold {2 * len(plan)} values (starts, then ends)")
    nearest = node.attrs["mode"] == "nearest"
    result = x if nearest else x.astype(np.float64)
    for i, (axis, out_len, scale) in enumerate(plan):
        in_len = result.shape[axis]
        axis_roi = None if roi is None else (float(roi[i]), float(roi[len(plan) + i]))
        if out_len == in_len and math.isclose(scale, 1.0) and (
                axis_roi is None or coordinate_mode != "tf_crop_and_resize"
                or (math.isclose(axis_roi[0], 0.0) and math.isclose(axis_roi[1], 1.0))):
            continue
        if in_len == 0 and out_len:
            raise KernelError(f"cannot resize an empty axis {axis} to {out_len}")
        source = source_coordinates(coordinate_mode, out_len, in_len, scale, axis_roi)
        if nearest:
            index = np.clip(_nearest_index(source, node.attrs["nearest_mode"]), 0, in_len - 1)
            result = np.take(result, index, axis=axis)
        else:
            weights = interpolation_weights(node, source, in_len, scale)
            moved = np.tensordot(weights, np.moveaxis(result, axis, 0), axes=(1, 0))
            result = np.moveaxis(moved, 0, axis)
        if coordinate_mode == "tf_crop_and_resize":
            outside = (source < 0) | (source > in_len - 1)
            if outside.any():
                shape = [1] * result.ndim
                shape[axis] = out_len
                fill = np.asarray(node.attrs["extrapolation_value"]).astype(result.dtype)
                result = np.where(outside.reshape(shape), fill, result)
    return [result if nearest else _round_to(result, x.dtype)]
