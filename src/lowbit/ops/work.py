"""Cost estimates shared by products and sliding-window ops (`OpDef.work`).

A product computes each output element from K multiply-adds; a window op from C / group
input channels times the kernel's positions. Their reference kernels accumulate in float64,
and a window op pads its input (in float64) and, for grouped convolutions, copies one image's
windows (im2col). Unknown sizes count as zero: the estimates are for shapes known once the
inputs are.
"""

from __future__ import annotations

import math

from lowbit.ir.types import Dim, TensorType
from lowbit.ops.registry import Work, numel


def _static(d: Dim) -> int:
    return d if isinstance(d, int) else 0


def product_work(out: TensorType | None, k: Dim) -> Work:
    """A matrix product: K multiply-adds per output element, a float64 result."""
    n = numel(out)
    return Work(n * _static(k), 8 * n)


def window_work(x: TensorType | None, out: TensorType | None, kernel: list[int] | tuple[int, ...],
                pads: list[int] | tuple[int, ...], per_output: int, im2col: bool) -> Work:
    """A sliding-window op: `per_output` input channels times the kernel's positions per
    output element; temporaries of the float64 padded input, the float64 output and (with
    `im2col`) one image's windows."""
    kprod = math.prod(kernel)
    n_out = numel(out)
    scratch = 8 * n_out
    if x is not None and x.shape is not None and x.is_static and len(x.shape) >= 2:
        n_sp = len(x.shape) - 2
        full = list(pads) + [0] * (2 * n_sp - len(pads))
        padded = math.prod(x.shape[:2]) * math.prod(  # type: ignore[arg-type]
            s + full[a] + full[a + n_sp] for a, s in enumerate(x.shape[2:]))  # type: ignore
        scratch += 8 * padded
        if im2col and out is not None and out.shape is not None and out.is_static:
            positions = math.prod(out.shape[2:])  # type: ignore[arg-type]
            scratch += 8 * _static(x.shape[1]) * kprod * positions
    return Work(n_out * per_output * kprod, scratch)
