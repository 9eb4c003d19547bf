"""Sums of floating-point arrays that do not depend on the order of the additions, so that
statistics accumulated in parts (shards on several machines, merged in any order) equal the
statistics accumulated in one pass, bit for bit.

Float addition is not associative: (a + b) + c and a + (b + c) can differ in the last bit.
`ExactSum` instead adds every value into integer "limbs" on a fixed grid of bit positions:

    value = sum over windows k of c_k * 2**(W * k),   0 <= c_k < 2**W, W = 32

is the binary expansion of |value| cut into 32-bit windows at absolute positions (window k holds
the bits of weight 2**(32k) .. 2**(32k + 31)), signed like the value. Each limb is an int64 sum
of one window's coefficients; integer addition is associative, and limbs are never carried into
one another while accumulating, so every limb, hence the result, is the same whatever the order
and grouping of the additions.

Per element, only the `LIMBS` (3) windows up to the one holding the most significant bit of
the largest value added to it so far are kept (`top`, one per element); a value's bits below
them are dropped. When a larger value arrives, the element's `top` rises and its limbs below
the new windows are dropped whole. Both depend only on the largest value ever added to the
element, so they too are the same in every order. 96 bits are kept from the top window down,
at least 64 below the largest value's leading bit: more than float64's 53, and a sum of values
of one magnitude keeps every bit float64 addition would. An int64 limb takes 2**31 additions of
32-bit coefficients before it could overflow (`MAX_ADDS`, checked).

`value()` carries the limbs (floor division, exact) and rounds their sum to float64 once.
"""

from __future__ import annotations

import math

import numpy as np

from lowbit.numerics import packed_ints

WINDOW = 32
LIMBS = 3
MAX_ADDS = 1 << 31
GRID_BLOCK = 1 << 14
"""Elements `GridSum.add` converts at a time (its float64 temporaries: 128 KiB each)."""


NONE = np.iinfo(np.int64).min // 2
"""`top` of an element no nonzero value was added to."""


class ExactSum:
    """An order-independent sum of float arrays of one shape (module docstring)."""

    def __init__(self, shape: tuple[int, ...] | int = ()) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.limbs = np.zeros((LIMBS, *shape), np.int64)
        """Limb j of an element holds its window `top - LIMBS + 1 + j`."""
        self.top = np.full(shape, NONE, np.int64)
        """Per element, the highest window kept (NONE before any nonzero value)."""
        self.adds = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.limbs.shape[1:])

    def add(self, values: np.ndarray) -> None:
        """Add `values` (float32 or float64, this sum's shape; finite) element by element."""
        x = np.asarray(values)
        if x.shape != self.shape:
            raise ValueError(f"adding shape {x.shape} to a sum of shape {self.shape}")
        x = x.astype(np.float64, copy=False)
        if not np.all(np.isfinite(x)):
            raise ValueError("an exact sum takes finite values only")
        self._count(1)
        _, exponent = np.frexp(x)
        # |x| < 2**e: its leading bit has weight 2**(e - 1)
        self._raise_top(np.where(x != 0, (exponent.astype(np.int64) - 1) // WINDOW, NONE))
        # q: x in units of the lowest kept window, truncated (exact: a power-of-two scaling
        # and a truncation); |q| < 2**(W * LIMBS). Each limb is cut from q by exact float
        # operations (every difference below has at most 53 significant bits).
        base = (np.where(self.top == NONE, LIMBS - 1, self.top) - (LIMBS - 1)) * WINDOW  # 0: none
        rest = np.trunc(np.ldexp(x, -base))
        for j in range(LIMBS - 1, 0, -1):
            part = np.trunc(np.ldexp(rest, -j * WINDOW))
            self.limbs[j] += part.astype(np.int64)
            rest = rest - np.ldexp(part, j * WINDOW)
        self.limbs[0] += rest.astype(np.int64)

    def merge(self, other: ExactSum) -> None:
        """Add another sum of the same shape (exact: as if its values were added here)."""
        if other.shape != self.shape:
            raise ValueError(f"merging a sum of shape {other.shape} into one of {self.shape}")
        self._count(other.adds)
        self._raise_top(other.top)
        self.limbs += _shifted(other.limbs, self.top - other.top)

    def value(self) -> np.ndarray:
        """The sum, rounded to float64 (the same for equal limbs and tops)."""
        limbs = self.limbs.copy()
        for j in range(LIMBS - 1):  # carry: limb j to [0, 2**W), the rest to limb j + 1
            carry = limbs[j] >> WINDOW
            limbs[j] -= carry << WINDOW
            limbs[j + 1] += carry
        base = np.where(self.top == NONE, 0, self.top - (LIMBS - 1)) * WINDOW
        total = np.zeros(self.shape)
        for j in range(LIMBS):  # low limbs are exact in float64; one rounding per step
            total = total + np.ldexp(limbs[j].astype(np.float64), base + j * WINDOW)
        return total

    def copy(self) -> ExactSum:
        out = ExactSum(self.shape)
        out.limbs, out.top, out.adds = self.limbs.copy(), self.top.copy(), self.adds
        return out

    def equals(self, other: ExactSum) -> bool:
        """Whether both hold the same limbs and tops (then every value() is the same)."""
        return np.array_equal(self.top, other.top) and np.array_equal(self.limbs, other.limbs)

    def _count(self, n: int) -> None:
        self.adds += n
        if self.adds > MAX_ADDS:
            raise OverflowError(f"an exact sum takes at most {MAX_ADDS} additions")

    def _raise_top(self, top: np.ndarray) -> None:
        rising = top > self.top
        if not rising.any():
            return
        new = np.maximum(self.top, top)
        self.limbs = _shifted(self.limbs, new - self.top)
        self.top = new


def _shifted(limbs: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Limbs moved down by `shift` >= 0 windows per element (the lowest dropped, zeros on
    top); an element with no value (all limbs 0) stays 0 whatever its shift."""
    if not shift.any():
        return limbs
    out = np.zeros_like(limbs)
    for j in range(LIMBS):
        source = j + shift
        ok = source < LIMBS
        picked = np.take_along_axis(limbs, np.minimum(source, LIMBS - 1)[None], 0)[0]
        out[j] = np.where(ok, picked, 0)
    return out


class GridSum:
    """An order-independent sum of float arrays on one grid for the whole array: like
    `ExactSum`, but with a single `top` window, set by the largest magnitude ever added to any
    element. Every element keeps the bits from that window down to `LIMBS` windows below it (at
    least 64 bits below the largest value's leading bit; smaller elements keep fewer of their
    own), and the limbs and top depend only on the values added, not on their order or
    grouping. It costs 3 int64 per element and a few passes per addition, where `ExactSum`
    costs 4 and a per-element exponent: for large arrays (input moments, K x K)."""

    def __init__(self, shape: tuple[int, ...] | int = ()) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.limbs = np.zeros((LIMBS, *shape), np.int64)
        """Limb j holds window `top - LIMBS + 1 + j` of every element."""
        self.top = NONE
        self.adds = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.limbs.shape[1:])

    def add(self, values: np.ndarray) -> None:
        """Add `values` (float32 or float64, this sum's shape; finite)."""
        x = np.asarray(values)
        if x.shape != self.shape:
            raise ValueError(f"adding shape {x.shape} to a sum of shape {self.shape}")
        largest = max(float(x.max()), -float(x.min())) if x.size else 0.0
        if not math.isfinite(largest):
            raise ValueError("an exact sum takes finite values only")
        factors = self.begin_add(largest)
        if factors is None:
            return
        first, second = factors
        # y: x in units of the top window (|y| < 2**W; a power-of-two scaling, exact). Each
        # limb is y's integer part (truncated toward zero), and the fraction left, scaled by
        # 2**W (exact), gives the next: the windows of |x|, signed like x, the bits below the
        # lowest window dropped. Scalings by 2**k stay exact: float64 keeps subnormals and no
        # window below 2**-1074 is ever kept for a value that has one. Done `GRID_BLOCK`
        # elements at a time, so that the temporaries stay in the cache.
        flat = x.reshape(-1)
        self.limbs = np.ascontiguousarray(self.limbs)
        limbs = self.limbs.reshape(LIMBS, -1)  # a view
        size = min(GRID_BLOCK, flat.size)
        y_all, whole_all, part_all = np.empty(size), np.empty(size), np.empty(size, np.int64)
        for start in range(0, flat.size, GRID_BLOCK):
            stop = min(start + GRID_BLOCK, flat.size)
            y, whole, part = (a[:stop - start] for a in (y_all, whole_all, part_all))
            np.multiply(flat[start:stop], first, out=y, dtype=np.float64)
            y *= second
            for j in range(LIMBS - 1, -1, -1):
                np.trunc(y, out=whole)
                part[...] = whole
                limbs[j, start:stop] += part
                if j:
                    y -= whole
                    y *= float(1 << WINDOW)

    def begin_add(self, largest: float) -> tuple[float, float] | None:
        """Count one addition of values whose largest magnitude is `largest` (finite) and
        raise `top` to fit it; returns the two powers of two whose product scales a value to
        units of the top window (`add`; a C kernel that adds the values itself calls this
        first), or None when every value is 0 (nothing more to add)."""
        self._count(1)
        if largest == 0.0:
            return None
        self._raise_top((math.frexp(largest)[1] - 1) // WINDOW)
        return self.factors()

    def factors(self) -> tuple[float, float] | None:
        """The two powers of two whose product scales a value to units of the top window, or
        None before any nonzero value. Limbs do not depend on how additions are grouped, so
        a C kernel may count several additions (`begin_add` each) and then add all their
        values with the factors of the final top."""
        if self.top == NONE:
            return None
        scale = -self.top * WINDOW  # in two steps: 2**scale alone may overflow
        return math.ldexp(1.0, scale // 2), math.ldexp(1.0, scale - scale // 2)

    def merge(self, other: GridSum) -> None:
        """Add another sum of the same shape (exact: as if its values were added here)."""
        if other.shape != self.shape:
            raise ValueError(f"merging a sum of shape {other.shape} into one of {self.shape}")
        self._count(other.adds)
        if other.top == NONE:
            return
        self._raise_top(other.top)
        shift = self.top - other.top
        for j in range(LIMBS - shift):
            self.limbs[j] += other.limbs[j + shift]

    def value(self) -> np.ndarray:
        """The sum, rounded to float64 (the same for equal limbs and tops)."""
        if self.top == NONE:
            return np.zeros(self.shape)
        limbs = self.limbs.copy()
        for j in range(LIMBS - 1):
            carry = limbs[j] >> WINDOW
            limbs[j] -= carry << WINDOW
            limbs[j + 1] += carry
        base = (self.top - (LIMBS - 1)) * WINDOW
        total = np.zeros(self.shape)
        for j in range(LIMBS):
            total = total + np.ldexp(limbs[j].astype(np.float64), base + j * WINDOW)
        return total

    def copy(self) -> GridSum:
        out = GridSum(self.shape)
        out.limbs, out.top, out.adds = self.limbs.copy(), self.top, self.adds
        return out

    def __getstate__(self) -> dict:
        """Pickled (to another process) with each limb packed to the bytes its values need
        (`lowbit.numerics.packed_ints`: lossless; float32 data leaves most bits unused)."""
        return {"shape": self.shape, "top": self.top, "adds": self.adds,
                "limbs": [packed_ints.pack(limb) for limb in self.limbs]}

    def __setstate__(self, state: dict) -> None:
        shape = tuple(state["shape"])
        self.limbs = np.stack([packed_ints.unpack(p).reshape(shape) for p in state["limbs"]]
                              ) if state["limbs"] else np.zeros((LIMBS, *shape), np.int64)
        self.top, self.adds = state["top"], state["adds"]

    def equals(self, other: GridSum) -> bool:
        return self.top == other.top and np.array_equal(self.limbs, other.limbs)

    def _count(self, n: int) -> None:
        self.adds += n
        if self.adds > MAX_ADDS:
            raise OverflowError(f"an exact sum takes at most {MAX_ADDS} additions")

    def _raise_top(self, top: int) -> None:
        """Move the limbs down to a higher top window, in place (no value yet: every limb is
        0, nothing moves; a fresh array's pages stay untouched until values arrive)."""
        if top <= self.top:
            return
        if self.top != NONE:
            keep = max(0, LIMBS - (top - self.top))
            for j in range(keep):  # ascending: limb j + shift is read before it is written
                self.limbs[j] = self.limbs[j + top - self.top]
            self.limbs[keep:] = 0
        self.top = top
