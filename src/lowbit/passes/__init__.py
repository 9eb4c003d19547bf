"""Graph -> Graph passes and the pipelines that order them.

Each pass is a function with a docstring saying what it guarantees. Pipelines are flat lists,
read top to bottom.
"""

from __future__ import annotations

from lowbit.ir.graph import Graph
from lowbit.passes.dead_code import eliminate_dead_code
from lowbit.passes.fold_constants import fold_constants
from lowbit.passes.pipeline import Pass, run_passes

IMPORT_PIPELINE: list[Pass] = [
    fold_constants,  # shape sub-graphs over static shapes and weight transforms become constants
    eliminate_dead_code,  # drop what folding and unused outputs left behind
]


def canonicalize(graph: Graph) -> Graph:
    """The passes run on every imported graph."""
    return run_passes(graph, IMPORT_PIPELINE)


__all__ = [
    "IMPORT_PIPELINE",
    "Pass",
    "canonicalize",
    "eliminate_dead_code",
    "fold_constants",
    "run_passes",
]
