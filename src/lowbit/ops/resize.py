"""Resize: sample a tensor on a new grid (nearest, N-linear or N-cubic interpolation).

Each resized axis is sampled separately. Output index y maps to a source coordinate x by
`coordinate_transformation_mode` (half_pixel: x = (y + 0.5) / scale - 0.5, and so on, see
the ONNX spec), computed in float64. Then:
- nearest: the source index is x rounded by `nearest_mode` (round_prefer_floor: ceil(x - 0.5),
  round_prefer_ceil: floor(x + 0.5), floor, ceil), clamped into the axis. Elements are copied,
  so nearest is exact for every dtype and keeps quantization parameters.
- linear / cubic: a weighted sum of neighbours b + k around b = ceil(x) - 1 with weights
  f(k - (x - b)) (f the triangle or the cubic kernel with coefficient `cubic_coeff_a`);
  neighbours outside the axis repeat its edge, or get weight 0 with exclude_outside=1 (the
  others then renormalised). antialias=1 stretches f by 1 / scale when downsampling and
  normalises the weights. Sums are float64, rounded once to the output dtype (integers round
  half to even and saturate).
With tf_crop_and_resize, samples whose x falls outside the axis take extrapolation_value.
The scale of an axis is the `scales` entry, or output size / input size for `sizes` (with
keep_aspect_ratio_policy not_larger/not_smaller: the smallest/largest of those over the axes,
output sizes then rounded half up).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import NUMERIC, check_dtype, known_types
from lowbit.ops.registry import Attr, OpDef, fail, flag, register
from lowbit.ops.shape_values import symbolic_value
from lowbit.ops.symbolic import dim_mul
from lowbit.ops.tensor_rules import check_index_dtype, refuse_axis

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


@register
class Resize(OpDef):
    """Y = X resampled to a new size along some axes (see the module docstring)."""

    op_type = "Resize"
    inputs = ("X", "roi?", "scales?", "sizes?")
    outputs = ("Y",)
    attrs: ClassVar[dict[str, Attr]] = {
        "antialias": flag(0),
        "axes": Attr("ints"),
        "coordinate_transformation_mode": Attr("string", "half_pixel"),
        "cubic_coeff_a": Attr("float", -0.75),
        "exclude_outside": flag(0),
        "extrapolation_value": Attr("float", 0.0),
        "keep_aspect_ratio_policy": Attr("string", "stretch"),
        "mode": Attr("string", "nearest"),
        "nearest_mode": Attr("string", "round_prefer_floor"),
    }
    min_version = 19

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        a = node.attrs
        for name, allowed in (("mode", MODES), ("nearest_mode", NEAREST_MODES),
                              ("coordinate_transformation_mode", COORDINATE_MODES),
                              ("keep_aspect_ratio_policy", ASPECT_POLICIES)):
            if a[name] not in allowed:
                raise fail(node, f"{name} must be one of {', '.join(allowed)}, got {a[name]!r}")
        if a["antialias"] and a["mode"] == "nearest":
            raise fail(node, "antialias applies to linear and cubic modes, not nearest")
        if a["exclude_outside"] not in (0, 1) or a["antialias"] not in (0, 1):
            raise fail(node, "exclude_outside and antialias must be 0 or 1")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        self.check(node, in_types)
        types = known_types(node, in_types) + [None] * (4 - len(in_types))
        x = types[0]
        assert x is not None
        check_dtype(node, 0, x, NUMERIC)
        if types[2] is not None:
            check_dtype(node, 2, types[2], frozenset({dt.FLOAT32}))
        if types[3] is not None:
            check_index_dtype(node, 3, types[3], frozenset({dt.INT64}))
        if node.attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and \
                _absent(node, 1):
            raise fail(node, "tf_crop_and_resize needs the roi input")
        has_scales, has_sizes = not _absent(node, 2), not _absent(node, 3)
        if has_scales == has_sizes:
            raise fail(node, "give exactly one of scales and sizes")
        q = x.quant
        if q is not None and node.attrs["mode"] != "nearest":
            q = None  # interpolated values need requantizing
        if x.shape is None:
            return [TensorType(x.dtype, None, q)]
        rank = len(x.shape)
        axes = resize_axes(node, rank)
        shape = list(x.shape)
        if has_scales:
            scales = node.inputs[2].const_value
            if scales is not None:
                _check_count(node, "scales", scales.size, len(axes))
                for axis, s in zip(axes, scales.reshape(-1).tolist(), strict=True):
                    if not s > 0:
                        raise fail(node, f"scales must be positive, got {scales.tolist()}")
                    shape[axis] = scaled_dim(x.shape[axis], s)
            else:
                for axis in axes:
                    shape[axis] = None
        else:
            sizes = symbolic_value(node.inputs[3])
            if sizes is None:
                sizes = (None,) * len(axes)
            _check_count(node, "sizes", len(sizes), len(axes))
            if node.attrs["keep_aspect_ratio_policy"] == "stretch":
                for axis, s in zip(axes, sizes, strict=True):
                    shape[axis] = s
            else:
                static = [x.shape[a] for a in axes]
                if all(isinstance(d, int) for d in (*static, *sizes)):
                    sizes_out, _ = aspect_sizes(node, static, sizes)  # type: ignore[arg-type]
                    for axis, s in zip(axes, sizes_out, strict=True):
                        shape[axis] = s
                else:
                    for axis in axes:
                        shape[axis] = None
        if q is not None and q.axis is not None and q.axis % rank in axes and \
                shape[q.axis % rank] != x.shape[q.axis % rank]:
            raise refuse_axis(node, q, "is resized")
        return [TensorType(x.dtype, tuple(shape), q)]


def _absent(node: Node, index: int) -> bool:
    """Whether optional input `index` is omitted (or an empty tensor, as exports write it)."""
    v = node.input_or_none(index)
    if v is None:
        return True
    return v.type is not None and v.type.shape is not None and 0 in v.type.shape


def _check_count(node: Node, what: str, n: int, n_axes: int) -> None:
    if n != n_axes:
        raise fail(node, f"{what} has {n} entries for {n_axes} resized axes")


def resize_axes(node: Node, rank: int) -> list[int]:
    axes = node.attrs.get("axes")
    if axes is None:
        return list(range(rank))
    out = [normalize_axis(node, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise fail(node, f"axes {axes} repeat an axis")
    return out


def scaled_dim(d: Dim, scale: float) -> Dim:
    """floor(d * scale), as ONNX computes it (float32 scale, float64 product)."""
    if isinstance(d, int):
        return math.floor(float(np.float32(scale)) * d)
    if float(scale).is_integer():
        return dim_mul(d, int(scale))
    return None


def aspect_sizes(node: Node, in_sizes: Sequence[int], sizes: Sequence[int]
                 ) -> tuple[list[int], float]:
    """Output sizes and the common scale under keep_aspect_ratio_policy not_larger/not_smaller."""
    ratios = [s / d for s, d in zip(sizes, in_sizes, strict=True)]
    pick = min if node.attrs["keep_aspect_ratio_policy"] == "not_larger" else max
    scale = pick(ratios)
    return [int(scale * d + 0.5) for d in in_sizes], scale

