"""Compiled kernel-library objects kept between bundle builds.

A bundle's kernel library (`rt_*.c`, most of a build's time: about 17 CPU s at -O3 for the
x86-64 target) compiles to the same objects for every bundle of one target built the same way,
so `Bundle.build` keeps them in lowbit's cache directory (`toolchain.cache_root()` /
`bundle-objects/<key>`, beside the cpu backend's built libraries) and copies them into the next
bundle before `make`, which then compiles the model, its weights and example_main.c alone.

The key hashes everything that decides the objects: the library's sources and headers (every
`rt_*` and `lowbit_rt*` file of the bundle), the bundle's Makefile without its comments and the
lines naming the model (so a user's edit of a flag changes the key), the compiler's command
and `--version` output, the thread setting, the `make` variables given, and the environment
variables the Makefile reads (`CFLAGS`, `OPT`, `WARNINGS`; `MAKEFLAGS` and `MFLAGS`, which can
carry variables from a calling make). An entry holds the objects and an `ok` file of their
SHA-256 digests: an entry that does not match is ignored and written again. Entries count
towards the cache's size bound (`cache_limit`), least recently used removed first.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from lowbit.backends.cpu import cache_limit, toolchain

ENVIRONMENT = ("CFLAGS", "OPT", "WARNINGS", "MAKEFLAGS", "MFLAGS")
"""Environment variables that can change how the Makefile compiles the library."""
MODEL_LINES = ("NAME =", "MODEL_SRCS =")


def root() -> Path:
    """Where the objects are kept (module docstring)."""
    return toolchain.cache_root() / "bundle-objects"


@functools.cache
def _compiler_version(cc: str) -> str:
    try:
        done = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True,
                              check=False)
    except OSError:
        return ""
    return done.stdout.strip()


def library_key(directory: Path, files: Sequence[str], cc: str, threads: bool,
                env: Mapping[str, str], extra: Mapping[str, str]) -> str:
    """The key of the library objects a `make` in `directory` would compile (module
    docstring)."""
    h = hashlib.sha256()
    for f in sorted(files):
        if f.startswith(("rt_", "lowbit_rt")):
            h.update(f.encode() + b"\0" + (directory / f).read_bytes() + b"\0")
    rules = [line for line in (directory / "Makefile").read_text().splitlines()
             if not line.startswith("#") and not line.startswith(MODEL_LINES)]
    h.update("\n".join(rules).encode() + b"\0")
    h.update(f"{cc}\0{_compiler_version(cc)}\0{threads}\0".encode())
    for name in ENVIRONMENT:
        h.update(f"{name}={env.get(name, '')}\0".encode())
    for name, value in sorted(extra.items()):
        h.update(f"{name}={value}\0".encode())
    return h.hexdigest()[:32]


def _digests(folder: Path, objects: Sequence[str]) -> str:
    return "".join(f"{o} {hashlib.sha256((folder / o).read_bytes()).hexdigest()}\n"
                   for o in sorted(objects))


def _valid(entry: Path, objects: Sequence[str]) -> bool:
    try:
        return (entry / "ok").read_text() == _digests(entry, objects)
    except OSError:
        return False


def restore(key: str, objects: Sequence[str], directory: Path) -> bool:
    """Copy the entry's objects into `directory`, newer than the sources so that `make` keeps
    them; False (nothing copied) when there is no valid entry."""
    entry = root() / key
    if not _valid(entry, objects):
        return False
    try:
        for o in objects:
            shutil.copy(entry / o, directory / o)
            os.utime(directory / o)
    except OSError:
        for o in objects:
            (directory / o).unlink(missing_ok=True)
        return False
    cache_limit.touch(entry)
    return True


def store(key: str, objects: Sequence[str], directory: Path) -> None:
    """Keep the objects `make` compiled in `directory` under `key` (written to a temporary
    folder, then renamed into place; a concurrent writer's entry wins)."""
    base = root()
    entry = base / key
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=base))
    except OSError:
        return
    try:
        for o in objects:
            shutil.copy(directory / o, tmp / o)
        (tmp / "ok").write_text(_digests(tmp, objects))
        if entry.exists():  # another process stored it meanwhile, or a broken entry
            if _valid(entry, objects):
                return
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache_limit.shrink(base, keep=entry)
