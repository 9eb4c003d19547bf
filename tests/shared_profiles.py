"""Calibration profiles shared by test files: several files profile the same model on the same
inputs (MNISTNet on digits 0-199, EfficientNet-Lite0 on every third photo), each in its own
module fixture and often in its own pytest-xdist worker. `shared_profile` computes such a
profile once and keeps it in `.cache/test-artifacts/profiles`, keyed by content: the graph's
hash, every input's names, dtypes, shapes and bytes, the options, and a digest of lowbit's
sources (Python and C), so any change to lowbit computes it again. Workers that want the same
profile at the same time take turns on a lock file: the first computes, the others read it.
Files are written by rename, so none is ever read half-written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

import lowbit
from lowbit.ir.graph import Graph
from lowbit.ir.hashing import graph_hash
from lowbit.quant.profile import Profile

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / ".cache" / "test-artifacts" / "profiles"


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


def shared_profile(graph: Graph, batches: Sequence[Mapping[str, np.ndarray]],
                   **options) -> Profile:
    """`lowbit.profile(graph, batches, progress=False, **options)`, computed once for all test
    files and workers (module docstring)."""
    batches = list(batches)
    key = profile_key(graph, batches, options)
    PROFILES.mkdir(parents=True, exist_ok=True)
    path = PROFILES / f"{key[:40]}.pkl"
    with _locked(PROFILES / f".{key[:40]}.lock"):
        if path.exists():
            with contextlib.suppress(Exception):  # unreadable: computed again below
                with open(path, "rb") as f:
                    found = pickle.load(f)
                found.check(graph)
                return found
        profile = lowbit.profile(graph, batches, progress=False, **options)
        fd, tmp = tempfile.mkstemp(prefix=".profile.", dir=PROFILES)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(profile, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return profile
