"""Compiling C for the cpu backend: the compiler, its flags, and a cache of built libraries.

The compiler is `$CC` (which may hold arguments, e.g. `CC="python -m ziglang cc"`), else the
first of `cc`, `gcc`, `clang` on PATH, else the `ziglang` package (`pip install lowbit[zig]`).
Without any, `find_compiler` raises `ToolchainError` saying how to get one: the cpu backend
never falls back to the reference interpreter silently.

Built shared libraries live under the user's cache directory (`$LOWBIT_CACHE_DIR`, else
`$XDG_CACHE_HOME/lowbit`, else `~/.cache/lowbit`), in `cpu/<key>/`, where the key hashes the
sources, the flags, the compiler's identity and the CPU's features. An entry is built in a
temporary folder and renamed into place; its `ok` file records the library's SHA-256, so a
corrupted entry (truncated, edited, half-deleted) is detected and rebuilt. Processes that want
the same entry at the same time (pytest-xdist workers, a Dask cluster's) take turns on a lock
file (one of 256, chosen by the key), so it is built once. The cache's size is bounded
(cache_limit: least recently used entries go first). A failed build raises `CompileError`
naming the log file that holds the compiler's output.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowbit.backends.cpu import cache_limit
from lowbit.errors import LowbitError

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
LIBRARY_VERSION = "1"
"""Bumped when the library's interface changes in a way the source hash would not show."""


class ToolchainError(LowbitError):
    """No usable C compiler."""


class CompileError(LowbitError):
    """The C compiler failed; the message names the log file with its output."""


# Each flag with the reason it is there.
BASE_FLAGS: tuple[tuple[str, str], ...] = (
    ("-std=c11", "C11 atomics for the thread pool"),
    ("-O3", "vectorise the portable loops"),
    ("-march=native", "the build is cached per CPU (its features are in the cache key)"),
    ("-ffp-contract=off", "no a*b+c fused into FMA: float results as the reference rounds them"),
    ("-fno-strict-aliasing", "kernels view byte buffers as other element types"),
    ("-fPIC", "position-independent code for a shared library"),
    ("-fvisibility=hidden", "export only the LB_API functions and the model entry points"),
    ("-pthread", "the thread pool"),
    ("-Wall", "warnings are errors: the library builds clean"),
    ("-Wextra", ""),
    ("-Werror", ""),
)
SANITIZE_FLAGS: tuple[tuple[str, str], ...] = (
    ("-fsanitize=address,undefined", "out-of-bounds reads at tile edges, overflow in shifts"),
    ("-fno-sanitize-recover=all", "stop at the first report"),
    ("-fno-omit-frame-pointer", "readable stacks in reports"),
)
"""Added when $LOWBIT_CPU_SANITIZE=1 (the sanitizer test runs Python with libasan preloaded)."""


def flags() -> list[str]:
    """The compile flags in effect (sanitizers when $LOWBIT_CPU_SANITIZE is set)."""
    chosen = [f for f, _ in BASE_FLAGS]
    if sanitizing():
        chosen = [f for f in chosen if f != "-O3"] + ["-O1"] + [f for f, _ in SANITIZE_FLAGS]
    return chosen


def sanitizing() -> bool:
    return os.environ.get("LOWBIT_CPU_SANITIZE", "") not in ("", "0")


@dataclass(frozen=True)
class Compiler:
    """A C compiler command (possibly several words) and the text that identifies it."""

    command: tuple[str, ...]
    identity: str

    def __str__(self) -> str:
        return " ".join(self.command)


NO_COMPILER = (
    "the cpu backend needs a C compiler and none was found (tried $CC, cc, gcc, clang and the "
    "ziglang package). Install one: `apt-get install gcc` (Debian/Ubuntu), `dnf install gcc`, "
    "`xcode-select --install` (macOS), or `pip install lowbit[zig]` for a compiler from PyPI; "
    "or set CC to a compiler command. Meanwhile backend='reference' runs the model in numpy."
)


@functools.cache
def find_compiler() -> Compiler:
    """The C compiler to use (see the module docstring), or ToolchainError."""
    candidates: list[tuple[str, ...]] = []
    env = os.environ.get("CC", "").strip()
    if env:
        candidates.append(tuple(shlex.split(env)))
    else:
        for name in ("cc", "gcc", "clang"):
            found = shutil.which(name)
            if found:
                candidates.append((found,))
        try:
            import ziglang  # noqa: F401

            candidates.append((sys.executable, "-m", "ziglang", "cc"))
        except ImportError:
            pass
    for command in candidates:
        identity = _identity(command)
        if identity is not None:
            return Compiler(command, identity)
    if env:
        raise ToolchainError(f"CC={env!r} does not run as a C compiler (`{env} --version` "
                             f"failed); unset CC or point it at a working compiler")
    raise ToolchainError(NO_COMPILER)


def _identity(command: Sequence[str]) -> str | None:
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return " ".join(command) + "\n" + done.stdout.strip()


@functools.cache
def cpu_features() -> str:
    """A description of this CPU precise enough to key builds made with -march=native."""
    info = Path("/proc/cpuinfo")
    parts = [platform.machine()]
    if info.exists():
        wanted = {"vendor_id", "cpu family", "model", "model name", "flags", "Features",
                  "CPU implementer", "CPU part"}
        seen: set[str] = set()
        for line in info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in wanted and key not in seen:
                seen.add(key)
                parts.append(f"{key}={value.strip()}")
    else:
        parts.append(platform.processor())
    return "\n".join(parts)


def cache_root() -> Path:
    """`$LOWBIT_CACHE_DIR`, else `$XDG_CACHE_HOME/lowbit`, else `~/.cache/lowbit`."""
    if os.environ.get("LOWBIT_CACHE_DIR"):
        return Path(os.environ["LOWBIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "lowbit"


def runtime_sources() -> list[Path]:
    return sorted(RUNTIME_DIR.glob("*.c"))


def runtime_headers() -> list[Path]:
    return sorted(RUNTIME_DIR.glob("*.h"))


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        data = p.encode() if isinstance(p, str) else p
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def runtime_library() -> Path:
    """The kernel library built (or found in the cache) for this machine: liblowbit_rt.so."""
    compiler = find_compiler()
    sources = runtime_sources()
    key = _digest("runtime", LIBRARY_VERSION, compiler.identity, cpu_features(), *flags(),
                  *(p.name + "\0" + p.read_text() for p in sources + runtime_headers()))
    return _cached_build(key, "liblowbit_rt.so", lambda out: [
        *compiler.command, *flags(), "-shared", *map(str, sources), "-o", str(out), "-lm"],
        what="lowbit's C kernel library")


def build_model(source: str, name: str = "model") -> Path:
    """The shared library of one generated C file, linked against the kernel library."""
    compiler = find_compiler()
    runtime = runtime_library()
    key = _digest("model", LIBRARY_VERSION, compiler.identity, cpu_features(), *flags(),
                  str(runtime), source)

    def command(out: Path) -> list[str]:
        src = out.with_name(f"{name}.c")
        src.write_text(source)
        return [*compiler.command, *flags(), "-I", str(RUNTIME_DIR), "-shared", str(src),
                str(runtime), "-o", str(out), "-lm"]

    return _cached_build(key, f"{name}.so", command, what=f"the generated C of {name}")


@contextlib.contextmanager
def _build_lock(root: Path, key: str):
    """Held while one process builds entry `key`: processes that want the same library at the
    same time (test workers, a Dask cluster's) wait for the first build instead of repeating
    it. An advisory lock on a file beside the entry (POSIX; elsewhere, no lock: each builds
    and the rename keeps one)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(root / f".lock-{key[:2]}", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cached_build(key: str, filename: str, command, what: str) -> Path:
    root = cache_root() / "cpu"
    entry = root / key[:32]
    lib = entry / filename
    if _valid(entry, lib):
        cache_limit.touch(entry)
        return lib
    root.mkdir(parents=True, exist_ok=True)
    with _build_lock(root, key):
        if _valid(entry, lib):  # another process built it while this one waited
            return lib
        lib = _build(root, entry, lib, key, filename, command, what)
    cache_limit.shrink(root, keep=entry)
    return lib


def _build(root: Path, entry: Path, lib: Path, key: str, filename: str, command,
           what: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=root))
    try:
        out = tmp / filename
        argv = command(out)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.exists():
            log = _write_log(root, key, argv, done)
            for src in tmp.glob("*.c"):  # keep the generated source beside its log
                shutil.copy(src, log.with_suffix(".c"))
            raise CompileError(f"the C compiler failed to build {what} (exit status "
                               f"{done.returncode}); its output is in {log}")
        (tmp / "ok").write_text(_file_digest(out))
        if entry.exists():  # corrupted, or another process finished first
            if _valid(entry, lib):
                return lib
            shutil.rmtree(entry, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:
            if not _valid(entry, lib):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib


def _valid(entry: Path, lib: Path) -> bool:
    ok = entry / "ok"
    try:
        return lib.exists() and ok.read_text().strip() == _file_digest(lib)
    except OSError:
        return False


def _write_log(root: Path, key: str, argv: list[str], done) -> Path:
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{key[:32]}.log"
    log.write_text("$ " + shlex.join(argv) + "\n\n" + (done.stdout or "") + (done.stderr or ""))
    return log


# -- generated programs -------------------------------------------------------------------------
CODEGEN_DIR = Path(__file__).resolve().parent


@functools.cache
def _generator_digest() -> str:
    """The code generator's and the library's sources: any change makes new artifacts."""
    files = sorted(CODEGEN_DIR.glob("*.py")) + sorted((CODEGEN_DIR / "codegen").glob("*.py")) \
        + runtime_sources() + runtime_headers()
    return _digest(*(p.name + "\0" + p.read_text() for p in files))


def artifact_key(graph_digest: str, specialization: str) -> str:
    """The key of a generated program's cached artifact (its blob and plan)."""
    return _digest("artifact", LIBRARY_VERSION, graph_digest, specialization,
                   _generator_digest(), find_compiler().identity, cpu_features(), *flags())


def load_artifact(key: str, buffer: Callable[[int], Any] | None = None
                  ) -> tuple[dict, Any] | None:
    """(metadata, blob) of a cached generated program, or None (absent or corrupted). With
    `buffer`, the blob is read straight into `buffer(size)` (a writable byte buffer of at
    least `size` bytes, say an aligned numpy array: no copy of the bytes afterwards), which
    is returned in its place."""
    import json

    entry = cache_root() / "cpu" / ("art-" + key[:32])
    try:
        with open(entry / "blob.bin", "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if buffer is None:
                data = f.read()
                view = memoryview(data)
            else:
                data = buffer(size)
                view = memoryview(data).cast("B")[:size]
                if f.readinto(view) != size or f.read(1):
                    return None  # changed while read
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("blob_sha256") != hashlib.sha256(view).hexdigest():
            return None
        cache_limit.touch(entry)
        return meta, data
    except (OSError, ValueError):
        return None


def store_artifact(key: str, meta: dict, data: bytes) -> None:
    """Cache a generated program's metadata and blob (atomically; failures are ignored: the
    cache only saves time)."""
    import json

    root = cache_root() / "cpu"
    entry = root / ("art-" + key[:32])
    tmp = root / ".art.unused"
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".art.", dir=root))
        (tmp / "blob.bin").write_bytes(data)
        (tmp / "meta.json").write_text(json.dumps(
            {**meta, "blob_sha256": hashlib.sha256(data).hexdigest()}))
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    cache_limit.shrink(root, keep=entry)


def invalidate(lib: Path) -> None:
    """Drop a cache entry (a library that failed to load is rebuilt next time)."""
    shutil.rmtree(lib.parent, ignore_errors=True)
