"""Applying one function to many items that share a context, in this process or elsewhere.

A mapper is called as `mapper(fn, context, items, advance)` and returns `[fn(context, item) for
item in items]`, calling `advance(item)` as each one is done. `local_map` does it here, in
order; `lowbit.cluster.mapping.ClusterMapper` on the workers of a Dask cluster, sending the
context to each worker once. Sensitivity and the budget search give their candidate
evaluations to a mapper, so they run on a cluster unchanged. A context must be picklable for a
cluster, and may keep what it derives (caches) in attributes it leaves out of its pickled
state: each worker then derives them once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Mapper = Callable[[Callable[[Any, Any], Any], Any, Sequence[Any], Callable[[Any], None]], list]


def local_map(fn: Callable[[Any, Any], Any], context: Any, items: Sequence[Any],
              advance: Callable[[Any], None] = lambda item: None) -> list:
    """`[fn(context, item) for item in items]`, in order, here."""
    out = []
    for item in items:
        out.append(fn(context, item))
        advance(item)
    return out
