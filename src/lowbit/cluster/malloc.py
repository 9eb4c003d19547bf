"""Undoing Dask's malloc setting in a worker process, where numpy work needs glibc's default.

Dask's nanny starts each worker with `MALLOC_TRIM_THRESHOLD_=65536` (its
`distributed.nanny.pre-spawn-environ`), so that workers give freed memory back to the system.
Setting any malloc threshold also turns off glibc's dynamic mmap threshold: every block over
128 KiB is then a fresh mmap, zero-filled page by page, and freed back at once. Profiling
allocates and frees such arrays by the thousand (each value's statistics, each product's
moments), and took 2.5 times the CPU time in that setting (EfficientNet-Lite0, 16 photos: 5.4 s
-> 14.0 s, measured in one process with the variable set).

`restore_malloc()` sets glibc's thresholds back to the values its dynamic mode settles at for
large blocks: blocks up to 32 MiB (its dynamic maximum on 64-bit) come from the heap and are
reused, and freed memory stays with the process up to 256 MiB before it is trimmed. It does
nothing outside glibc (macOS, musl, Windows) and when the variable is not set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20

_done = False


def restore_malloc() -> bool:
    """Undo `MALLOC_TRIM_THRESHOLD_` in this process (module docstring), once; whether it did."""
    global _done
    if _done or "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return False
    _done = True
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
