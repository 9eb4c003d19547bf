"""Backends: each compiles a Graph into an executable `(inputs) -> outputs`.

`reference` is the numpy interpreter that defines what every op computes, exactly; `cpu`
compiles the graph to C (lowbit.backends.cpu) and computes the same integers. Each backend
package exposes `compile(graph, **options)`; `compile` here picks one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lowbit.errors import LowbitError
from lowbit.ir.graph import Graph

Executable = Callable[[dict], dict]

BACKENDS = ("reference", "cpu")


def compile(graph: Graph, backend: str = "reference", **options: Any) -> Executable:
    """Compile `graph` for `backend`; the result maps {input name: array} to {output: array}."""
    if backend == "reference":
        from lowbit.backends import reference

        return reference.compile(graph, **options)
    if backend == "cpu":
        from lowbit.backends import cpu

        return cpu.compile(graph, **options)
    raise LowbitError(f"unknown backend '{backend}'; available: {', '.join(BACKENDS)}")
