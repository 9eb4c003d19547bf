"""The numpy reference interpreter: the exact definition of what every op computes."""

from __future__ import annotations

from lowbit.backends.lowering import fold_quantized_constants, has_quantized_constants
from lowbit.backends.reference.interpreter import Interpreter, NodeObserver
from lowbit.ir.graph import Graph

__all__ = ["Interpreter", "NodeObserver", "compile"]


def compile(graph: Graph) -> Interpreter:
    """An Interpreter of `graph`, its Quantize(constant) nodes folded first (on a copy)."""
    if has_quantized_constants(graph):
        graph = fold_quantized_constants(graph.copy())
    return Interpreter(graph)
