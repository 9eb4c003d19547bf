"""Results of static quantization's costly steps, kept across quantizations of one float graph
with one profile, so that quantizing it again with a few nodes changed reuses everything else.

Two steps take nearly all of `lowbit.quant.static.quantize`'s time (EfficientNet-Lite0: 18.6 s
of 20.4 s in GPTQ, 1.4 s in MSE range searches) and both are pure functions of their inputs:

- error-compensating weight rounding (`weight_rounding.round_weight`): the real values of the
  codes it picks depend on the node, its weight, the weight's type (dtype, scales, zero points)
  and the input moments; the key holds all four (arrays by a digest of their bytes);
- activation calibration (`calibration.activation_params`): the storage dtype and parameters
  depend on the value's statistics and the settings (dtype, scheme, method, percentile); the key
  holds the value's name and the settings, and is used only for statistics that are the
  profile's own (not ones derived while quantizing, such as a smoothed input's).

A cache belongs to one profile: `static.quantize` refuses one made for another, so a result is
never reused across calibrations. Digests are memoized per array object, held weakly (the
float graph's constants and the profile's moments are shared, read-only, by every copy of the
graph).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from lowbit.errors import LowbitError


class QuantCache:
    """Memoized weight roundings and activation parameters for one profile (module docstring)."""

    def __init__(self, profile: Any) -> None:
        self.profile = profile
        self._rounded: dict[Hashable, np.ndarray] = {}
        self._activations: dict[Hashable, Any] = {}
        self._digests: dict[int, tuple[weakref.ref, bytes]] = {}
        self.hits = 0
        self.misses = 0

    def __getstate__(self) -> dict:
        """Pickled without the digest memo (weak references; rebuilt on use)."""
        return {**self.__dict__, "_digests": {}}

    def check(self, profile: Any) -> None:
        """Refuse a cache made for another profile (its results would not apply)."""
        if profile is not self.profile:
            raise LowbitError("this QuantCache was made for another profile; make one per "
                              "profile (QuantCache(profile))")

    def digest(self, array: np.ndarray) -> bytes:
        """A digest of the array's dtype, shape and bytes, memoized per array object."""
        memo = self._digests.get(id(array))
        if memo is not None and memo[0]() is array:
            return memo[1]
        a = np.ascontiguousarray(array)
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
        self._digests[id(array)] = (weakref.ref(array), h.digest())
        return h.digest()

    def rounded(self, key: Hashable, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The weight rounding for `key`, computed once."""
        return self._get(self._rounded, key, compute)

    def activation(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The activation parameters for `key`, computed once."""
        return self._get(self._activations, key, compute)

    def _get(self, table: dict, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key in table:
            self.hits += 1
            return table[key]
        self.misses += 1
        table[key] = value = compute()
        return value
