"""Names of lowbit's own node attributes, shared by ops, kernels, passes and exporters."""

from __future__ import annotations

REQUANT = "requant"
"""lowbit's own attribute on quantized COMPUTE/RESCALE nodes: the requantization encoding,
"q31" or "prescale" (see lowbit.numerics.fixed_point)."""

FUSED_CLIP = "fused_clip"
"""lowbit's own attribute on fusable ops: `[lo, hi]`, an output clamp left by fusing a
following Relu (lo=0, hi=inf) or Clip. Float kernels clamp after computing (done once, in the
interpreter); integer kernels fold it into their output range. Export writes it back as a Clip.
"""

AFFINE = "affine"
"""lowbit's own attribute on a quantized HardSwish: `[a, b]`, the scalar Mul by a and Add of b
that followed it in the float graph, folded in by the quantizer
(`lowbit.passes.quant_cleanup.fold_hard_swish_affine`): Y = a * HardSwish(X) + b, one
rounding to the output's codes (`int_activation.hard_swish_params`). Export writes it back as
a Mul and an Add."""
