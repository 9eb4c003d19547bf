"""A size bound for the cpu backend's cache of built libraries and generated programs.

Every compiled model adds an entry (a folder under `<cache>/cpu/`) of a few hundred KB; a user
who compiles many models, or many versions of one, would fill the disk. After a process adds an
entry, the cache is measured (at most once per `CHECK_INTERVAL` seconds per cache, so a burst of
builds pays for one scan) and, when it holds more than the limit, the least recently used
entries are removed until it holds at most `TARGET_FRACTION` of it. An entry's folder time is
its last use: set when it is built and again each time a process loads it.

The limit is `$LOWBIT_CACHE_MAX_MB` megabytes (10**6 bytes; `0`: no limit), else
`DEFAULT_LIMIT_MB`. Sizes are disk usage (allocated blocks). The entry just added is never
removed. Removing an entry another process still has loaded is safe (a mapped file outlives
its name); one that another process is about to load fails to load there and is rebuilt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from lowbit.errors import LowbitError

LIMIT_ENV = "LOWBIT_CACHE_MAX_MB"
DEFAULT_LIMIT_MB = 2000
TARGET_FRACTION = 0.75
CHECK_INTERVAL = 60.0
"""Seconds between two scans of one cache by one process (a scan stats every file)."""

_last_check: dict[Path, float] = {}


def limit_bytes() -> int:
    """The cache's size bound in bytes; 0 for none. A malformed `$LOWBIT_CACHE_MAX_MB` raises
    LowbitError naming it."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT_MB * 10**6
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise LowbitError(f"${LIMIT_ENV}={text!r} is not a size in megabytes: set it to a "
                          f"number >= 0 (0: no limit) or unset it (default {DEFAULT_LIMIT_MB})")
    return int(mb * 10**6)


def touch(entry: Path) -> None:
    """Record a use of `entry` (its folder time), so that it is removed after unused ones."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def shrink(root: Path, keep: Path) -> None:
    """Remove least recently used entries of `root` while it holds more than the limit (module
    docstring). Folders starting with '.' (builds in progress) and `logs` are left alone."""
    limit = limit_bytes()
    now = time.monotonic()
    if limit == 0 or now - _last_check.get(root, -CHECK_INTERVAL) < CHECK_INTERVAL:
        return
    _last_check[root] = now
    entries = []
    total = 0
    try:
        with os.scandir(root) as it:
            for d in it:
                if d.name.endswith(".lock") and len(d.name) == 38:  # one per entry, before
                    Path(d.path).unlink(missing_ok=True)           # the lock buckets
                if d.name.startswith(".") or d.name == "logs" or not d.is_dir():
                    continue
                size = _disk_usage(Path(d.path))
                total += size
                entries.append((d.stat().st_mtime, size, Path(d.path)))
    except OSError:
        return
    if total <= limit:
        return
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= limit * TARGET_FRACTION:
            break
        if path == keep:
            continue
        shutil.rmtree(path, ignore_errors=True)
        total -= size


def _disk_usage(folder: Path) -> int:
    total = 0
    try:
        with os.scandir(folder) as it:
            for f in it:
                st = f.stat(follow_symlinks=False)
                total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    except OSError:
        pass
    return total
