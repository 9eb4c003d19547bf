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


class IdentityMemo:
    """`memo(objects, extra, compute)`: compute() once per tuple of live `objects` (by identity)
    and hashable `extra` (module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[tuple, tuple[tuple[weakref.ref, ...], Any]] = {}

    def __call__(self, objects: tuple[Any, ...], extra: Hashable,
                 compute: Callable[[], Any]) -> Any:
        key = (tuple(id(o) for o in objects), extra)
        found = self._entries.get(key)
        if found is not None and all(r() is o for r, o in zip(found[0], objects, strict=True)):
            return found[1]
        value = compute()
        refs = tuple(weakref.ref(o, lambda _, key=key: self._entries.pop(key, None))
                     for o in objects)
        self._entries[key] = (refs, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
