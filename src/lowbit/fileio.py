"""Atomic file output: every file lowbit writes appears whole or not at all.

`atomic_path(path)` yields a temporary path in the target's folder; when the block ends
normally the temporary file is renamed over `path` (`os.replace`, atomic on POSIX), and on any
exception it is removed, so an error never leaves a partial or stale output. The file gets the
permissions an ordinary `open(path, "w")` would (0o666 minus the umask), not the 0o600 of
`tempfile.mkstemp`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lowbit.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike) -> None:
    """Refuse, before any work, an output path whose folder does not exist or cannot be
    written, or that names a folder."""
    target = Path(path)
    folder = target.resolve().parent
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist; create it "
                         "first")
    if target.is_dir():
        raise InputError(f"cannot write {target}: it is a folder; give a file name")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {target}: folder {folder} is not writable")


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside `path`, renamed to `path` when the block succeeds."""
    target = Path(path)
    folder = target.resolve().parent
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=folder)
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` through `atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
