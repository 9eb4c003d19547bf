"""int64 arrays packed to the bytes their values need, for moving exact sums between processes.

The limbs of an exact sum (`lowbit.numerics.exact_sum`) are int64, but few of their bits are
used: a limb holds sums of 32-bit window coefficients, and the values a profile adds are
float32 (24 significant bits), so a value's bits fill one or two of its three windows and the
lowest limb is mostly zero. `pack` keeps, losslessly:

    dense    the low `width` bytes of every value (two's complement, little-endian), where
             `width` is the fewest bytes holding the array's minimum and maximum;
    sparse   the positions of the nonzero values (uint32, or uint64 past 2**32 elements) and
             their low `width` bytes, when that is smaller.

`unpack` sign-extends the bytes back to int64: `unpack(pack(a))` equals `a` element for element.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Packed:
    """An int64 array of `size` elements as `width`-byte values (module docstring); `where`
    holds the positions of the values when sparse (None: every element, in order)."""

    size: int
    width: int
    data: np.ndarray
    """uint8 [values, width]."""
    where: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + (0 if self.where is None else self.where.nbytes))


def byte_width(lo: int, hi: int) -> int:
    """The fewest bytes whose two's complement holds every integer in [lo, hi]."""
    for width in range(1, 8):
        bound = 1 << (8 * width - 1)
        if -bound <= lo and hi < bound:
            return width
    return 8


def pack(array: np.ndarray) -> Packed:
    """`array` (int64, any shape; read flat) packed losslessly (module docstring)."""
    flat = np.ascontiguousarray(array, dtype="<i8").reshape(-1)
    if flat.size == 0:
        return Packed(0, 1, np.zeros((0, 1), np.uint8))
    width = byte_width(int(flat.min()), int(flat.max()))
    nonzero = int(np.count_nonzero(flat))
    index_bytes = 4 if flat.size <= 1 << 32 else 8
    if nonzero * (width + index_bytes) < flat.size * width:
        where = np.flatnonzero(flat).astype(np.uint32 if index_bytes == 4 else np.uint64)
        return Packed(flat.size, width, _low_bytes(flat[where], width), where)
    return Packed(flat.size, width, _low_bytes(flat, width))


def unpack(packed: Packed) -> np.ndarray:
    """The flat int64 array `packed` holds."""
    values = _widen(packed.data, packed.width)
    if packed.where is None:
        return values
    out = np.zeros(packed.size, np.int64)
    out[packed.where] = values
    return out


def _low_bytes(values: np.ndarray, width: int) -> np.ndarray:
    return np.ascontiguousarray(values.view(np.uint8).reshape(-1, 8)[:, :width])


def _widen(data: np.ndarray, width: int) -> np.ndarray:
    full = np.zeros((data.shape[0], 8), np.uint8)
    full[:, :width] = data
    if width < 8:  # sign extension: the bytes above are 0xff where the top byte's sign is set
        full[:, width:] = np.where(data[:, width - 1:width] >= 0x80, 0xFF, 0)
    return full.view("<i8").reshape(-1).astype(np.int64)
