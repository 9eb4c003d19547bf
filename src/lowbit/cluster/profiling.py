"""Profiling on a Dask cluster: each worker profiles a shard of the calibration batches, and the
partial profiles merge into the profile one process would take of all the batches.

The graph goes to every worker once (`client.scatter(..., broadcast=True)`); a task carries
its shard only: in-memory batches, references to batches in files (`BatchRef`s, each read on
the worker), or rows of a `dask.array` (computed on the cluster). Shards are whole batches,
consecutive in the order given. The partial profiles merge on the workers: first every
worker merges the shards it profiled into one partial (no data moves), then the workers'
partials merge pairwise in a tree (one partial per worker crosses the network, and one result
comes back here). The merge is exact and order-free (`Profile.merge`): the result is the same
whatever the number of shards, the worker that profiles each one, and the order they finish
in. A partial profile is compact on the wire: its exact sums' limbs and histogram counts are
packed to the bytes they need (`lowbit.numerics.packed_ints`; MNISTNet's: 240 MB -> 8 MB). A worker
that dies mid-run loses its tasks; the scheduler runs them again on another worker (Dask
retries a task whose worker died up to `distributed.scheduler.allowed-failures` times), and
since a shard's partial profile depends only on the shard, the result is still exact.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from lowbit.cluster.connect import distributed, workers
from lowbit.cluster.malloc import restore_malloc
from lowbit.errors import InputError
from lowbit.ir.graph import Graph
from lowbit.quant import profile as _profile
from lowbit.quant.profile import Profile

SHARDS_PER_WORKER = 4
"""Default shards: this many per worker, so that a slow or lost worker delays a quarter of its
share, not all of it."""
RETRIES = 2
"""Retries of a task that raised (a worker's death is retried by the scheduler anyway)."""


def profile(client: Any, graph: Graph, batches: Any, *, shards: int | None = None,
            batch_size: int | None = None, progress: bool = True, **options: Any) -> Profile:
    """`lowbit.quant.profile.profile(graph, batches, **options)` computed on the workers of
    `client` (module docstring). `batches`: a sequence of {input name: array} batches or of
    objects with `load(graph)` (`lowbit.cli.data_files.BatchRef`), or a `dask.array` (a
    one-input model) or {input name: dask.array} cut into batches of `batch_size` rows (default:
    the model's batch dimension when fixed, else 8). `shards` defaults to 4 per worker."""
    units, arrays = _units(graph, batches, batch_size)
    if not units:
        raise InputError("the calibration set is empty: no batches were given")
    if shards is not None and shards < 1:
        raise InputError(f"shards must be 1 or more, got {shards}")
    cuts = shard_bounds(len(units), shards or SHARDS_PER_WORKER * workers(client))
    token = uuid.uuid4().hex[:12]
    graph_future = client.scatter(graph, broadcast=True, hash=False)
    futures = []
    for i, (start, stop) in enumerate(cuts):
        part = units[start:stop]
        if arrays is not None:
            rows = (part[0][0], part[-1][1])
            data = {k: client.compute(a[rows[0]:rows[1]]) for k, a in arrays.items()}
            shard: Any = ("rows", data, [(a - rows[0], b - rows[0]) for a, b in part])
        else:
            shard = ("batches", list(part))
        futures.append(client.submit(_profile_shard, graph_future, shard, options, pure=False,
                                     retries=RETRIES, key=f"lowbit-profile-{token}-{i}"))
    with _progress_bar(progress, len(cuts)) as advance:
        for _ in distributed().as_completed(futures):
            advance()
    merged = _merge_tree(client, _merge_per_worker(client, futures, token), token)
    return merged.result()


def _units(graph: Graph, batches: Any, batch_size: int | None
           ) -> tuple[list, dict[str, Any] | None]:
    """The batches as a list (of batches or references), or for dask arrays the row ranges of
    each batch and the arrays by input name."""
    arrays = _dask_arrays(graph, batches)
    if arrays is None:
        return list(batches), None
    rows = min(int(a.shape[0]) for a in arrays.values())
    size = batch_size or _model_batch(graph) or 8
    return [(i, min(i + size, rows)) for i in range(0, rows, size)], arrays


def _dask_arrays(graph: Graph, batches: Any) -> dict[str, Any] | None:
    def is_dask(a: Any) -> bool:
        return hasattr(a, "dask") and hasattr(a, "chunks")

    if is_dask(batches):
        if len(graph.inputs) != 1:
            raise InputError(f"a dask.array feeds a one-input model; this one has "
                             f"{len(graph.inputs)} inputs: pass {{input name: dask.array}}")
        return {graph.inputs[0].name: batches}
    if isinstance(batches, Mapping) and batches and all(is_dask(a) for a in batches.values()):
        return dict(batches)
    return None


def _model_batch(graph: Graph) -> int | None:
    dims = {v.type.shape[0] for v in graph.inputs if v.type is not None and v.type.shape}
    return dims.pop() if len(dims) == 1 and isinstance(next(iter(dims)), int) else None


def _profile_shard(graph: Graph, shard: tuple, options: dict[str, Any]) -> Profile:
    """One shard's partial profile (runs on a worker)."""
    restore_malloc()
    if shard[0] == "rows":
        _, data, ranges = shard
        batches: Any = ({k: np.asarray(a[r0:r1]) for k, a in data.items()} for r0, r1 in ranges)
    else:
        batches = (b.load(graph) if hasattr(b, "load") else b for b in shard[1])
    return _profile.profile(graph, batches, progress=False, **options)


def _merge(first: Profile, *others: Profile) -> Profile:
    """The profiles merged, none changed (a task's result may be read again)."""
    restore_malloc()
    out = copy.deepcopy(first)
    for other in others:
        out.merge(other)
    return out


def _merge_per_worker(client: Any, futures: list, token: str) -> list:
    """One future per worker holding shards: its shards merged there (module docstring). A
    shard whose worker is gone is recomputed by the scheduler wherever it places it."""
    holders = client.who_has(futures)
    groups: dict[str, list] = {}
    for future in futures:
        where = holders.get(future.key) or ("",)
        groups.setdefault(sorted(where)[0], []).append(future)
    merged = []
    for i, (worker, group) in enumerate(sorted(groups.items())):
        if len(group) == 1:
            merged.append(group[0])
            continue
        merged.append(client.submit(_merge, *group, pure=False, retries=RETRIES,
                                    workers=[worker] if worker else None,
                                    allow_other_workers=True,
                                    key=f"lowbit-merge-{token}-worker-{i}"))
    return merged


def _merge_tree(client: Any, futures: list, token: str) -> Any:
    level = 0
    while len(futures) > 1:
        nxt = [client.submit(_merge, futures[i], futures[i + 1], pure=False, retries=RETRIES,
                             key=f"lowbit-merge-{token}-{level}-{i}")
               for i in range(0, len(futures) - 1, 2)]
        if len(futures) % 2:
            nxt.append(futures[-1])
        futures, level = nxt, level + 1
    return futures[0]


class _progress_bar:
    """A bar of shards done on stderr when enabled; yields a function advancing it by one."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled, total
        self.bar: Any = None

    def __enter__(self):
        if not self.enabled:
            return lambda: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn("profiling shards on the cluster"), BarColumn(),
                            MofNCompleteColumn(), console=Console(stderr=True))
        self.bar.__enter__()
        task = self.bar.add_task("shards", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """How `n` batches are cut into `shards` consecutive shards (as `profile` cuts them)."""
    bounds = np.linspace(0, n, min(n, shards) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
