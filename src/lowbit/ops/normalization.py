"""Normalizations: BatchNormalization (inference mode), LayerNormalization and
InstanceNormalization.

The reference kernels compute in float64 and round Y once to X's dtype; that is at least as
accurate as every `stash_type` precision.
"""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.elementwise_rules import FLOATS, broadcast_to, check_dtype, known_types
from lowbit.ops.registry import Attr, OpDef, fail, flag, register

EPSILON = float(np.float32(1e-5))
"""The default epsilon as ONNX stores it (a float32 attribute)."""


def _channel_params(node: Node, x: TensorType, params: list[TensorType | None],
                    names: list[str]) -> None:
    """Each per-channel parameter (inputs 1, 2, ...) must be 1-D with one value per channel
    of X (axis 1)."""
    channels = x.shape[1] if x.shape is not None and len(x.shape) > 1 else None
    for index, (name, t) in enumerate(zip(names, params, strict=True), start=1):
        assert t is not None
        check_dtype(node, index, t, FLOATS)
        if t.shape is None:
            continue
        if len(t.shape) != 1:
            raise fail(node, f"{name} must be 1-D (one value per channel), got shape {t.shape}")
        c = t.shape[0]
        if isinstance(c, int) and isinstance(channels, int) and c != channels:
            raise fail(node, f"{name} has {c} values for {channels} channels")


def _channel_input(node: Node, x: TensorType) -> None:
    check_dtype(node, 0, x, FLOATS)
    if x.shape is not None and len(x.shape) < 2:
        raise fail(node, f"the input has shape {x.shape}; it needs (N, C, ...) with a channel "
                         f"axis")


@register
class BatchNormalization(OpDef):
    """Inference mode: Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B, with the
    per-channel parameters along axis 1. Training mode (batch statistics, running-mean
    outputs) is refused."""

    op_type = "BatchNormalization"
    inputs = ("X", "scale", "B", "input_mean", "input_var")
    outputs = ("Y", "running_mean?", "running_var?")
    attrs = {"epsilon": Attr("float", EPSILON), "momentum": Attr("float", float(np.float32(0.9))),
             "training_mode": flag(0)}
    min_version = 14

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        if node.attrs.get("training_mode", 0):
            raise fail(node, "training_mode=1 (normalizing with batch statistics) is not "
                             "supported; export the model in eval mode")
        if len(node.outputs) > 1:
            raise fail(node, "running_mean and running_var outputs exist only in training "
                             "mode; export the model in eval mode")
        self.infer(node, in_types)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        _channel_input(node, x)
        _channel_params(node, x, types[1:5], ["scale", "B", "input_mean", "input_var"])
        return [TensorType(x.dtype, x.shape)]


STASH_TYPES = {dt.FLOAT32.onnx_code: dt.FLOAT32, dt.FLOAT64.onnx_code: dt.FLOAT64,
               dt.BFLOAT16.onnx_code: dt.BFLOAT16}
"""stash_type codes lowbit accepts: ONNX allows float32 and bfloat16; float64 is kept as well."""


@register
class LayerNormalization(OpDef):
    """Over the axes [axis, rank): Mean = mean(X), InvStdDev = 1 / sqrt(mean((X - Mean)^2) +
    epsilon), Y = (X - Mean) * InvStdDev * Scale + B, with Scale and B broadcast
    unidirectionally to X. Mean and InvStdDev have X's shape with the normalized axes set to 1
    and the dtype named by `stash_type` (float32, bfloat16 or float64)."""

    op_type = "LayerNormalization"
    inputs = ("X", "Scale", "B?")
    outputs = ("Y", "Mean?", "InvStdDev?")
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", EPSILON),
             "stash_type": Attr("int", 1)}
    min_version = 17

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        check_dtype(node, 0, x, FLOATS)
        stash = STASH_TYPES.get(int(node.attrs.get("stash_type", 1)))
        if stash is None:
            raise fail(node, f"stash_type {node.attrs['stash_type']} is not float32 (1), "
                             f"float64 (11) or bfloat16 (16)")
        for i, t in enumerate(types[1:], start=1):
            if t is not None:
                check_dtype(node, i, t, FLOATS)
                broadcast_to(node, x.shape, t, "Scale" if i == 1 else "B")
        stats: tuple[Dim, ...] | None = None
        if x.shape is not None:
            rank = len(x.shape)
            if rank == 0:
                raise fail(node, "the input must have rank 1 or more")
            axis = normalize_axis(node, int(node.attrs.get("axis", -1)), rank)
            stats = tuple(x.shape[:axis]) + (1,) * (rank - axis)
        return [TensorType(x.dtype, x.shape), TensorType(stash, stats),
                TensorType(stash, stats)]


@register
class InstanceNormalization(OpDef):
    """Per sample and channel, over the spatial axes: Y = scale * (X - mean) /
    sqrt(variance + epsilon) + B (population variance); scale and B have one value per
    channel."""

    op_type = "InstanceNormalization"
    inputs = ("input", "scale", "B")
    outputs = ("output",)
    attrs = {"epsilon": Attr("float", EPSILON)}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = known_types(node, in_types)
        x = types[0]
        assert x is not None
        _channel_input(node, x)
        _channel_params(node, x, types[1:3], ["scale", "B"])
        return [TensorType(x.dtype, x.shape)]
