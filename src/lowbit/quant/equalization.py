"""Channel equalization of convolution inputs whose channels differ widely in range.

Networks built from reparameterized blocks (PP-LCNetV3, MobileOne) and HardSwish feed their
convolutions tensors where a few channels reach 10-45 while the median channel stays below 0.5
(PaddleOCR's PP-OCRv4 recognizer). One 8-bit scale per tensor leaves those channels a handful
of codes. As SmoothQuant does for transformers, part of each channel's range moves into the
weights, exactly in float:

    conv(x, W) = conv(x / t, W * t)      (t one factor per input channel, W scaled along its
                                          input-channel axis)
    t_c = a_c ** alpha / w_c ** (1 - alpha),  normalised to geometric mean 1, then raised to
                                           at least max(t) / 4096

with a_c the calibrated extreme of channel c (max(|min_c|, |max_c|)), raised to at least the
median channel's, and w_c the largest weight reading it. The floor keeps channels that are
quiet or dead on the calibration data from being amplified: on other inputs such a channel may
wake, and x_c / t_c would then saturate the range (PP-OCRv4's squeeze-excitation convolutions
read 1 x 1 tensors with a few channels dead on 30 calibration lines).

`equalize` inserts x / t as a Mul by the constant 1 / t and scales the weights; the static
quantizer then makes that Mul the one 8-bit rounding of the convolution's input: the chain of
elementwise nodes between the previous product and the Mul keeps int16 results, and the Mul's
constant is int16 (symmetric). The weights are scaled by the reciprocal of that int16 constant,
so the model computes what the float model does up to rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Node, Value
from lowbit.ir.types import TensorType
from lowbit.numerics.arith import dequantize, quantize
from lowbit.quant.calibration import weight_params
from lowbit.quant.observers import divided_stats
from lowbit.quant.profile import Profile
from lowbit.quant.smoothing import calibrated_ranges, migration

DISPARITY = 4.0
"""A Conv's input is equalized when its largest channel extreme is more than this many times
its median channel's."""
SPREAD = 4096.0
"""Largest ratio between two channels' factors: every code of the int16 constant 1 / t is then
at least 8. The weights take the reciprocal of the constant as quantized, so a coarse code
only makes that channel's factor up to 1/16 off its ideal value, never an error."""


@dataclass
class Equalized:
    conv: Node
    mul: Node
    t: np.ndarray
    """The factors actually applied (1 / the int16 constant)."""
    constant: TensorType
    """The int16 type the Mul's constant 1 / t is quantized with (it is on that grid)."""


def _grouped(w: np.ndarray, groups: int) -> np.ndarray:
    """A Conv weight [C_out, C_in / G, taps...] as float64 [G, C_out / G, C_in / G, taps]."""
    return np.asarray(w, np.float64).reshape(groups, w.shape[0] // groups, w.shape[1], -1)


def _weight_per_input_channel(w: np.ndarray, groups: int) -> np.ndarray:
    """max |W| over the outputs and taps that read each input channel, [C_in]."""
    return np.abs(_grouped(w, groups)).max(axis=(1, 3)).reshape(-1)


def _scaled_weight(w: np.ndarray, groups: int, t: np.ndarray) -> np.ndarray:
    scaled = _grouped(w, groups) * t.reshape(groups, 1, w.shape[1], 1)
    return scaled.reshape(w.shape).astype(w.dtype)


def factors(ranges: np.ndarray, weights: np.ndarray, alpha: float) -> np.ndarray | None:
    """t of the module docstring, or None when the channels do not differ enough."""
    a = np.asarray(ranges, np.float64)
    if a.size < 2 or not np.all(np.isfinite(a)):
        return None
    median = float(np.median(a))
    if a.max() <= DISPARITY * median:
        return None
    t = migration(np.maximum(a, median), weights, alpha)
    t = t / np.exp(np.mean(np.log(t)))
    # 1 / t becomes an int16 constant: a spread of at most SPREAD keeps every code >= 8
    return np.clip(t, t.max() / SPREAD, None)


def int16_constant(c: np.ndarray) -> tuple[np.ndarray, TensorType]:
    """`c` snapped to the int16 symmetric grid it is quantized with, and that type."""
    params = weight_params(c, dtype=dtypes.INT16, scheme="symmetric")
    t = TensorType(dtypes.INT16, c.shape, params)
    return dequantize(quantize(c.astype(np.float32), t), t).astype(np.float32), t


def equalize(graph: Graph, profile: Profile, conv: Node, alpha: float) -> Equalized | None:
    """Equalize `conv`'s input channels (module docstring) when they differ widely: insert the
    Mul, scale the weight, and add the Mul's result to `profile` (channel ranges divided by t,
    the conv's input moments scaled by 1 / t). None when nothing changed."""
    x, w_in = conv.inputs[0], conv.input_or_none(1)
    if alpha <= 0 or x is None or x.is_constant or w_in is None or w_in.const_value is None:
        return None
    stats = profile.stats.get(x.name)
    channel = stats.channels.get(1) if stats is not None else None
    w = np.asarray(w_in.const_value)
    groups = int(conv.attrs.get("group", 1))
    if channel is None or w.ndim < 3 or channel.min.size != w.shape[1] * groups:
        return None
    ranges = calibrated_ranges(channel.min, channel.max)
    t = None if ranges is None else factors(ranges, _weight_per_input_channel(w, groups), alpha)
    if t is None:
        return None
    shape = (1, t.size) + (1,) * (w.ndim - 2)
    inverse, constant = int16_constant((1.0 / t).reshape(shape))
    t = 1.0 / inverse.reshape(-1).astype(np.float64)
    c = graph.add_constant(inverse, graph.unique_name(f"{conv.name}_equalization"), before=conv)
    mul = graph.make_node("Mul", [x, c], name=graph.unique_node_name(f"{conv.name}_equalize"),
                          output_names=[graph.unique_name(f"{x.name}_equalized")],
                          output_types=[x.type], before=conv)
    conv.inputs[0] = mul.output
    conv.inputs[1] = graph.add_constant(_scaled_weight(w, groups, t),
                                        graph.unique_name(f"{w_in.name}_equalized"), before=conv)
    profile.stats[mul.output.name] = divided_stats(stats, 1, t, mul.output.name)
    moments = profile.moments.get(conv.name)
    if moments is not None:
        taps = moments.size // (w.shape[1])
        per_group = (1.0 / t).reshape(groups, -1)
        profile.moments[conv.name] = moments.scaled(np.repeat(per_group, taps, axis=1))
    return Equalized(conv, mul, t, constant)


def wide_chain(readers: dict[Value, list[Node]], muls: Collection[Node],
               elementwise: Callable[[Node], bool]) -> set[Value]:
    """Values to keep in int16 ahead of the equalizing Muls: each Mul's input, and walking back
    through elementwise nodes (`elementwise(node)`: a Mul or Add with a constant, a lookup
    table), every value whose readers are all equalizing Muls or nodes whose result is already
    in the set, down to and including the result of the first node that is not elementwise
    (on PP-OCRv4 the Conv before HardSwish: its input range is set by the same few channels)."""
    wide: set[Value] = set()
    frontier = [m.inputs[0] for m in muls]
    while frontier:
        v = frontier.pop()
        if v in wide or v.producer is None or v.is_constant:
            continue
        users = readers.get(v, [])
        if not users or not all(u in muls or any(o in wide for o in u.outputs) for u in users):
            continue
        wide.add(v)
        if elementwise(v.producer):
            frontier.extend(i for i in v.producer.inputs if i is not None and not i.is_constant)
    return wide
