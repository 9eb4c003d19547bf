"""Running passes: a flat list of Graph -> Graph functions, verified after each in debug mode.

Each pass runs on the graph, then on the subgraphs of its control-flow nodes. When
verification fails after a pass, the error names that pass and the ones that ran before it,
so a broken invariant points at its cause.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from lowbit.errors import VerifyError
from lowbit.ir.graph import Graph
from lowbit.passes.verifier import verify

Pass = Callable[[Graph], Graph]


def verify_enabled() -> bool:
    """Verification after each pass is on in tests and with `--debug` (LOWBIT_VERIFY=1)."""
    return os.environ.get("LOWBIT_VERIFY", "") not in ("", "0")


def _everywhere(p: Pass, graph: Graph) -> Graph:
    """`p` applied to `graph`, then to the subgraphs of its nodes (recursively)."""
    graph = p(graph)
    for node in graph.nodes:
        for attr, sub in node.subgraphs():
            node.attrs[attr] = _everywhere(p, sub)
    return graph


def run_passes(graph: Graph, passes: Sequence[Pass], verify_each: bool | None = None) -> Graph:
    """Apply `passes` in order; with verification on, check the IR after each one."""
    check = verify_enabled() if verify_each is None else verify_each
    done: list[str] = []
    for p in passes:
        graph = _everywhere(p, graph)
        name = getattr(p, "__name__", repr(p))
        done.append(name)
        if check:
            try:
                verify(graph)
            except VerifyError as exc:
                raise VerifyError(f"after pass {name} (ran: {', '.join(done)}): {exc}") from exc
    return graph
