"""Graph -> Graph passes and the pipelines that order them.

Each pass is a function with a docstring saying what it guarantees. Pipelines are flat lists,
read top to bottom.
"""

from __future__ import annotations

from lowbit.ir.dead_code import eliminate_dead_code
from lowbit.ir.graph import Graph
from lowbit.passes.fold_batchnorm import fold_batch_norm, fold_channel_affine
from lowbit.passes.fold_constants import fold_constants
from lowbit.passes.fuse_activation import fuse_activations
from lowbit.passes.fuse_hard_swish import fuse_hard_swish
from lowbit.passes.fuse_layer_norm import fuse_layer_norms
from lowbit.passes.pipeline import Pass, run_passes
from lowbit.passes.static_reshape import constant_reshape_targets
from lowbit.passes.upsampling_conv import upsampling_conv_transpose
from lowbit.passes.verifier import verify

IMPORT_PIPELINE: list[Pass] = [
    fold_constants,  # shape sub-graphs over static shapes and weight transforms become constants
    constant_reshape_targets,  # Reshape targets over symbolic dims become 0 / -1 constants
    eliminate_dead_code,  # drop what folding and unused outputs left behind
]

OPTIMIZE_PIPELINE: list[Pass] = [
    fold_constants,  # shape sub-graphs and weight transforms become constants
    constant_reshape_targets,  # Reshape targets over symbolic dims become 0 / -1 constants
    fold_batch_norm,  # BN after Conv/Gemm disappears into the weights (exact up to rounding)
    fold_channel_affine,  # so do per-channel Mul/Add/Sub/Div by constants after Conv/Gemm
    fold_batch_norm,  # a BN that read such a Mul/Add (a bias spelled out) now reads the product
    fuse_layer_norms,  # layer norms spelled out in elementwise ops (opset < 17) become one op
    fuse_activations,  # Relu/Clip become output clamps, which quantization turns into ranges
    fuse_hard_swish,  # x * relu6(x + 3) / 6 spelled out becomes one HardSwish
    upsampling_conv_transpose,  # a b x b / b ConvTranspose: 1x1 Conv + DepthToSpace
    eliminate_dead_code,  # drop what the rewrites left behind
]


def canonicalize(graph: Graph) -> Graph:
    """The passes run on every imported graph."""
    return run_passes(graph, IMPORT_PIPELINE)


def optimize(graph: Graph) -> Graph:
    """The passes run before quantization: folding and fusion."""
    return run_passes(graph, OPTIMIZE_PIPELINE)


__all__ = [
    "IMPORT_PIPELINE",
    "OPTIMIZE_PIPELINE",
    "Pass",
    "canonicalize",
    "constant_reshape_targets",
    "eliminate_dead_code",
    "fold_batch_norm",
    "fold_channel_affine",
    "fold_constants",
    "fuse_activations",
    "fuse_hard_swish",
    "fuse_layer_norms",
    "optimize",
    "run_passes",
    "upsampling_conv_transpose",
    "verify",
]
