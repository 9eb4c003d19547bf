"""Calibration profiles shared by test files: several files profile the same model on the same
inputs (MNISTNet on digits 0-199, EfficientNet-Lite0 on every third photo), each in its own
module fixture and often in its own pytest-xdist worker. `shared_profile` computes such a
profile once and keeps it in `.cache/test-artifacts/profiles`, keyed by content: the graph's
hash, every input's names, dtypes, shapes and bytes, the options, and a digest of lowbit's
sources (Python and C), so any change to lowbit computes it again. Workers that want the same
profile at the same time take turns on a lock file: the first computes, the others read it.
Files are written by rename, so none is ever read half-written.

`shared_result` does the same for what a peer computes (ONNX Runtime's quantized models'
outputs): keyed by the files and arrays it reads and the peer's version, not lowbit's sources.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

import lowbit
from lowbit.ir.graph import Graph
from lowbit.ir.hashing import graph_hash
from lowbit.quant.profile import Profile

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / ".cache" / "test-artifacts" / "profiles"
RESULTS = ROOT / ".cache" / "test-artifacts" / "results"


@functools.cache
def source_digest() -> str:
    """sha256 of lowbit's installed sources (every .py, .c and .h under the package)."""
    package = Path(lowbit.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for ext in ("py", "c", "h") for p in package.rglob(f"*.{ext}")):
        h.update(str(path.relative_to(package)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def profile_key(graph: Graph, batches: Sequence[Mapping[str, np.ndarray]],
                options: Mapping[str, object]) -> str:
    h = hashlib.sha256()
    for part in (graph_hash(graph), repr(sorted(options.items())), source_digest()):
        h.update(part.encode() + b"\0")
    for batch in batches:
        for name in sorted(batch):
            a = np.ascontiguousarray(batch[name])
            h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
            h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cached(folder: Path, key: str, compute: Callable[[], T],
            check: Callable[[T], None] = lambda _: None) -> T:
    """compute() once for every test process: pickled in `folder` under `key` (module
    docstring); a file that does not read back (or fails `check`) is computed again."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key[:40]}.pkl"
    with _locked(folder / f".{key[:40]}.lock"):
        if path.exists():
            with contextlib.suppress(Exception):  # unreadable: computed again below
                with open(path, "rb") as f:
                    found = pickle.load(f)
                check(found)
                return found
        value = compute()
        fd, tmp = tempfile.mkstemp(prefix=".result.", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return value


def shared_profile(graph: Graph, batches: Sequence[Mapping[str, np.ndarray]],
                   **options) -> Profile:
    """`lowbit.profile(graph, batches, progress=False, **options)`, computed once for all test
    files and workers (module docstring)."""
    batches = list(batches)
    return _cached(PROFILES, profile_key(graph, batches, options),
                   lambda: lowbit.profile(graph, batches, progress=False, **options),
                   check=lambda found: found.check(graph))


def result_key(*parts: object) -> str:
    """sha256 of `parts`: a Path by its file's bytes, an array by its dtype, shape and bytes,
    a list or tuple by its items, anything else by its repr."""
    h = hashlib.sha256()

    def add(part: object) -> None:
        if isinstance(part, Path):
            h.update(b"file\0" + part.read_bytes())
        elif isinstance(part, np.ndarray):
            a = np.ascontiguousarray(part)
            h.update(f"array\0{a.dtype.str}\0{a.shape}\0".encode())
            h.update(a.reshape(-1).view(np.uint8).data)
        elif isinstance(part, list | tuple):
            h.update(f"seq\0{len(part)}\0".encode())
            for item in part:
                add(item)
        else:
            h.update(f"{type(part).__name__}\0{part!r}\0".encode())

    for part in parts:
        add(part)
    return h.hexdigest()


def shared_result(compute: Callable[[], T], *parts: object) -> T:
    """compute(), computed once for all test files and workers, keyed by `parts`
    (`result_key`): they must name everything the result depends on (module docstring)."""
    return _cached(RESULTS, result_key(*parts), compute)


def shared_cpu_outputs(graph: Graph, data: np.ndarray, input: str = "input",
                       output: str = "logits") -> np.ndarray:
    """`output` of `graph` compiled for the cpu backend on each item of `data` (one a call),
    concatenated as float64: computed once for all test files and workers, keyed by the
    graph, the data and lowbit's sources. For a float model's outputs that several files compare
    against (EfficientNet-Lite0's logits on the photos)."""

    def compute() -> np.ndarray:
        run = lowbit.compile(graph, "cpu")
        return np.concatenate([run({input: d[None]})[output] for d in data]).astype(np.float64)

    return shared_result(compute, "cpu outputs", source_digest(), graph_hash(graph), input,
                         output, data)
