"""A mapper (`lowbit.mapping`) on a Dask cluster: the context goes to every worker once
(`client.scatter(..., broadcast=True)`), each item becomes a task holding only the item, and
results come back in the items' order. A task whose worker dies is run again elsewhere by the
scheduler; one that raises is retried `RETRIES` times, then its error is raised here."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lowbit.cluster.connect import distributed, workers
from lowbit.cluster.malloc import restore_malloc

RETRIES = 2


class ClusterMapper:
    """`mapper(fn, context, items, advance)` on the workers of `client`."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._scattered: dict[int, tuple[Any, Any]] = {}
        """id(context) -> (context, its future): each context is sent once."""

    @property
    def workers(self) -> int:
        return workers(self.client)

    def __call__(self, fn: Callable[[Any, Any], Any], context: Any, items: Sequence[Any],
                 advance: Callable[[Any], None] = lambda item: None) -> list:
        held = self._scattered.get(id(context))
        if held is None or held[0] is not context:
            held = (context, self.client.scatter(context, broadcast=True, hash=False))
            self._scattered[id(context)] = held
        token = uuid.uuid4().hex[:12]
        futures = [self.client.submit(_call, fn, held[1], item, pure=False, retries=RETRIES,
                                      key=f"lowbit-{getattr(fn, '__name__', 'task')}-{token}-{i}")
                   for i, item in enumerate(items)]
        index = {f.key: i for i, f in enumerate(futures)}
        for future in distributed().as_completed(futures):
            advance(items[index[future.key]])
        return [f.result() for f in futures]


def _call(fn: Callable[[Any, Any], Any], context: Any, item: Any) -> Any:
    """fn(context, item) on a worker, with glibc's malloc as numpy work needs it
    (`lowbit.cluster.malloc`)."""
    restore_malloc()
    return fn(context, item)
