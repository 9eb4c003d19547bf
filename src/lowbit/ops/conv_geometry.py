"""Window geometry shared by Conv, ConvTranspose, pooling and their integer variants.

For each spatial axis with input size `i`, kernel `k`, stride `s`, dilation `d` and pads
`(b, e)`, the output size is

    o = floor((i + b + e - d * (k - 1) - 1) / s) + 1          (ceil instead of floor with ceil_mode)

`auto_pad` SAME_UPPER / SAME_LOWER choose pads so that o = ceil(i / s), putting the odd pad at the
end (UPPER) or the beginning (LOWER); VALID means no padding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lowbit.ir.graph import Node
from lowbit.ir.types import Dim
from lowbit.ops.registry import Attr, fail, sizes

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
WINDOW_ATTRS = {
    "auto_pad": Attr("string", "NOTSET", choices=AUTO_PADS),
    "dilations": sizes(1),
    "kernel_shape": sizes(1),
    "pads": sizes(0),
    "strides": sizes(1),
}


@dataclass(frozen=True)
class Window:
    """Resolved window parameters for `n` spatial axes (pads as begins then ends, like ONNX)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    auto_pad: str
    pads: tuple[int, ...]
    ceil_mode: bool = False

    @property
    def rank(self) -> int:
        return len(self.kernel)

    def resolved_pads(self, spatial: Sequence[int]) -> tuple[int, ...]:
        """Explicit pads for input spatial sizes `spatial` (needed for SAME_* auto_pad)."""
        n = self.rank
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            begins, ends = [], []
            for i, k, s, d in zip(spatial, self.kernel, self.strides, self.dilations,
                                  strict=True):
                out = -(-i // s)
                total = max(0, (out - 1) * s + d * (k - 1) + 1 - i)
                small, big = total // 2, total - total // 2
                if self.auto_pad == "SAME_UPPER":
                    begins.append(small)
                    ends.append(big)
                else:
                    begins.append(big)
                    ends.append(small)
            return tuple(begins + ends)
        if self.auto_pad == "VALID":
            return (0,) * (2 * n)
        return self.pads

    def output_dim(self, axis: int, size: Dim) -> Dim:
        """Output size along spatial `axis` for input size `size` (None if not static)."""
        if not isinstance(size, int):
            if self.auto_pad in ("SAME_UPPER", "SAME_LOWER") and self.strides[axis] == 1:
                return size
            return None
        k, s, d = self.kernel[axis], self.strides[axis], self.dilations[axis]
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            return -(-size // s)
        pads = self.resolved_pads([size] * self.rank)
        span = size + pads[axis] + pads[axis + self.rank] - d * (k - 1) - 1
        if span < 0:
            return 0
        if self.ceil_mode:
            out = math.ceil(span / s) + 1
            # The last window must start inside the input or the begin padding (ONNX/PyTorch).
            if (out - 1) * s >= size + pads[axis]:
                out -= 1
            return out
        return span // s + 1

    def output_dims(self, spatial: Sequence[Dim]) -> tuple[Dim, ...]:
        return tuple(self.output_dim(a, d) for a, d in enumerate(spatial))

    def axis(self, a: int) -> Window:
        """The one-axis window of spatial axis `a`."""
        n = self.rank
        return Window((self.kernel[a],), (self.strides[a],), (self.dilations[a],), self.auto_pad,
                      (self.pads[a], self.pads[a + n]), self.ceil_mode)


def window_from_attrs(node: Node, kernel: Sequence[int] | None, spatial_rank: int,
                      ceil_mode: bool = False) -> Window:
    """Read and validate the window attributes of `node` (kernel from the weight shape if the
    node has no kernel_shape). Refuses non-positive kernels, strides and dilations and
    negative pads, naming the node."""
    attrs = node.attrs
    ks = attrs.get("kernel_shape") or (list(kernel) if kernel is not None else None)
    if ks is None:
        raise fail(node, "kernel_shape is unknown (no attribute and no static weight shape)")
    n = len(ks)
    if n != spatial_rank:
        raise fail(node, f"kernel_shape {list(ks)} has {n} axes but the input has "
                   f"{spatial_rank} spatial axes")
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    for label, values, count in (("kernel_shape", ks, n), ("strides", strides, n),
                                 ("dilations", dilations, n), ("pads", pads, 2 * n)):
        if len(values) != count:
            raise fail(node, f"{label} {list(values)} must have {count} values")
    if any(int(k) <= 0 for k in ks):
        raise fail(node, f"kernel_shape {list(ks)} must be positive")
    if any(int(s) <= 0 for s in strides):
        raise fail(node, f"strides {list(strides)} must be positive")
    if any(int(d) <= 0 for d in dilations):
        raise fail(node, f"dilations {list(dilations)} must be positive")
    if any(int(p) < 0 for p in pads):
        raise fail(node, f"pads {list(pads)} must not be negative")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise fail(node, f"unknown auto_pad '{auto_pad}'")
    return Window(tuple(int(k) for k in ks), tuple(int(s) for s in strides),
                  tuple(int(d) for d in dilations), auto_pad, tuple(int(p) for p in pads),
                  ceil_mode)


@dataclass(frozen=True)
class TransposeGeometry:
    """Resolved ConvTranspose geometry for static input spatial sizes.

    The full (unpadded) output of a transposed convolution along an axis has size
    `full = s * (i - 1) + d * (k - 1) + 1`; the node's output is the slice of it that starts at
    `begins[axis]` and has `out[axis]` elements, zeros where it runs past the end (that is what
    `output_padding` and a large `output_shape` add).
    """

    begins: tuple[int, ...]
    out: tuple[int, ...]


def transpose_geometry(node: Node, window: Window, spatial: Sequence[int],
                       output_padding: Sequence[int], output_shape: Sequence[int] | None
                       ) -> TransposeGeometry:
    """Pads and output sizes of a ConvTranspose, following the ONNX spec:

    - `output_shape` given: out = output_shape and total padding
      `t = s * (i - 1) + output_padding + d * (k - 1) + 1 - out`, clamped at 0 (a larger
      output grows at the end), split with the odd element at the end for SAME_UPPER and at the
      beginning otherwise (begin = t - t // 2), as the spec writes it.
    - SAME_UPPER / SAME_LOWER without output_shape: out = i * s, same split.
    - otherwise (NOTSET, VALID): out = s * (i - 1) + output_padding + d * (k - 1) + 1
      - pad_begin - pad_end with the explicit pads (zero for VALID).
    """
    n = window.rank
    begins: list[int] = []
    outs: list[int] = []
    for a in range(n):
        i, k, s, d = spatial[a], window.kernel[a], window.strides[a], window.dilations[a]
        natural = s * (i - 1) + output_padding[a] + d * (k - 1) + 1
        if output_shape is not None or window.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = int(output_shape[a]) if output_shape is not None else i * s
            total = max(0, natural - out)
            begin = total // 2 if window.auto_pad == "SAME_UPPER" else total - total // 2
        else:
            pads = window.pads if window.auto_pad == "NOTSET" else (0,) * (2 * n)
            begin = pads[a]
            out = natural - pads[a] - pads[a + n]
        if out < 0:
            raise fail(node, f"output size along spatial axis {a} would be {out}: pads are "
                             f"larger than the transposed convolution's output")
        begins.append(begin)
        outs.append(out)
    return TransposeGeometry(tuple(begins), tuple(outs))
