"""Results memoized by the identity of the objects they were computed from, held weakly.

A budget search or a sensitivity ranking quantizes the same float graph again and again with a
few layers changed; graph copies share their constant arrays (read-only), so a result computed
from those arrays alone (an embedding table's int8 codes, its quantization parameters) can be
reused while the arrays live. An entry is found only when every object in its key is the very
object it was computed from (checked through weak references, so a reused `id` never matches),
and it is dropped when one of them is freed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any


class SameObject:
    """A key equal only to a `SameObject` of the very same live object (checked through a weak
    reference, so a reused `id` never matches)."""

    __slots__ = ("id", "ref")

    def __init__(self, obj: Any) -> None:
        self.ref, self.id = weakref.ref(obj), id(obj)

    def __hash__(self) -> int:
        return self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SameObject) and other.id == self.id and \
            self.ref() is not None and self.ref() is other.ref()


class IdentityMemo:
    """`memo(objects, extra, compute)`: compute() once per tuple of live `objects` (by identity)
    and hashable `extra` (module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[tuple, Any] = {}

    def __call__(self, objects: tuple[Any, ...], extra: Hashable,
                 compute: Callable[[], Any]) -> Any:
        key = (tuple(SameObject(o) for o in objects), extra)
        if key in self._entries:
            return self._entries[key]
        value = compute()
        for o in objects:  # dropped when any of the objects is freed
            weakref.finalize(o, self._entries.pop, key, None).atexit = False
        self._entries[key] = value
        return value

    def __len__(self) -> int:
        return len(self._entries)
