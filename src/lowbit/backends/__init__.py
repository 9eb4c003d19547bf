"""Backends: each compiles a Graph into an executable `(inputs) -> outputs`.

`reference` is the numpy interpreter that defines what every op computes, exactly; `cpu`
compiles the graph to C (lowbit.backends.cpu) and computes the same integers.
"""

from __future__ import annotations

from collections.abc import Callable

from lowbit.errors import LowbitError
from lowbit.ir.graph import Graph

Executable = Callable[[dict], dict]

BACKENDS = ("reference", "cpu")


def compile(graph: Graph, backend: str = "reference") -> Executable:
    """Compile `graph` for `backend`; the result maps {input name: array} to {output: array}."""
    if backend == "reference":
        from lowbit.backends.reference import Interpreter
        from lowbit.passes.quant_cleanup import fold_quantized_constants

        if any(n.op_type == "Quantize" and n.inputs[0].is_constant for n in graph.nodes):
            graph = fold_quantized_constants(graph.copy())
        return Interpreter(graph)
    if backend == "cpu":
        from lowbit.backends import cpu

        return cpu.compile(graph)
    raise LowbitError(f"unknown backend '{backend}'; available: {', '.join(BACKENDS)}")
