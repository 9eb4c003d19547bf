"""Profiling: per-value statistics of a float graph over calibration data.

`profile(graph, batches)` runs the graph on every batch (compiled once by the cpu backend, with
every observed value an output and float products as float32 fused multiply-add chains
(`fma_floats`), when it compiles the graph; else the reference interpreter)
with a `StatsObserver` on each float value quantization may touch: the graph inputs, every
float node output and every float Constant (observed once, with per-channel ranges along each
of its axes). Memory does not grow with the number of batches: observers have fixed size.

A `Profile` is saved as one YAML file (`Profile.save`, written to a temporary name and renamed):

    format: lowbit-profile
    version: 2
    graph_hash: sha256:...      # lowbit.ir.hashing.graph_hash of the profiled graph
    batches: 100
    samples: 100                # sum over batches of the first input's leading dimension
    values:
      conv1_out:
        count: 401408           # finite elements; then zeros, nan, posinf, neginf counts
        zeros: 0
        nan: 0
        posinf: 0
        neginf: 0
        min: -3.1
        max: 5.2
        histogram: {bins: 8192, exponent: -11, offset: -6349, counts: <b64>}
        channels: [{axis: 1, min: <b64>, max: <b64>, sum: <b64>, count: <b64>}]

    products:                   # per Conv/Gemm/MatMul with a constant weight, by node name
      conv1: {groups: 1, size: 27, count: 401408, second: <b64>}

`products` holds the input moments of each product node with a constant weight
(`lowbit.quant.input_moments`; rows up to 4096 long): `second` is the upper triangle (row-major,
diagonal included) of each group's K x K matrix S, stored as float32 (S only steers rounding
decisions; its relative error of 6e-8 changes none).
Error-compensating weight rounding (`lowbit.quant.weight_rounding`) reads them; a version 1
profile, or one taken with `moments=False` (`lowbit profile --no-moments`: a smaller file and
about half the profiling time), has none, and its weights round to nearest.
Constant weights (observed once, not per batch) also carry `constant: true`. The data input of
every Conv, Gemm and MatMul with a constant weight is observed per channel along the axis the
weight reduces (Conv: 1; Gemm: 1, or 0 with transA; MatMul: the last), so that its channel means
(`sum / count`) are there for bias correction (lowbit.quant.static).
Arrays (`<b64>`) are base64 of zlib-compressed little-endian bytes: int64 for histogram counts
(bin `offset + i` covers [(offset + i) * 2**exponent, (offset + i + 1) * 2**exponent)), float64
for channel ranges. Everything else is plain YAML. A profile is keyed by the graph hash: loading
it for, or checking it against, another graph is refused.
"""

from __future__ import annotations

import base64
import functools
import logging
import math
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lowbit.backends.reference.interpreter import Interpreter, check_inputs
from lowbit.errors import InputError, LowbitError, UnsupportedError
from lowbit.fileio import write_atomically
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.hashing import graph_hash
from lowbit.ops.product import integer_product
from lowbit.quant.blas_threads import one_blas_thread
from lowbit.quant.input_moments import (
    InputMoments,
    InputPlan,
    moments_shape,
    observe_input,
    vector_layout,
)
from lowbit.quant.observers import DEFAULT_BINS, ChannelRange, Histogram, StatsObserver

log = logging.getLogger(__name__)

FORMAT = "lowbit-profile"
VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1 has no `products` (input moments): its weights round to nearest."""


class Profile:
    """Statistics per value name, the hash of the graph they were taken on, batch and sample
    counts."""

    def __init__(self, graph_hash: str, stats: dict[str, StatsObserver] | None = None,
                 batches: int = 0, samples: int = 0, constants: set[str] | None = None,
                 moments: dict[str, InputMoments] | None = None) -> None:
        self.graph_hash = graph_hash
        self.stats: dict[str, StatsObserver] = dict(stats or {})
        self.moments: dict[str, InputMoments] = dict(moments or {})
        """Input moments per product node name (`lowbit.quant.input_moments`)."""
        self.batches = batches
        self.samples = samples
        self.constants: set[str] = set(constants or ())
        """Names of values that are Constant weights (observed once, not per batch)."""

    def __getitem__(self, name: str) -> StatsObserver:
        try:
            return self.stats[name]
        except KeyError:
            raise InputError(f"the profile has no statistics for value '{name}' "
                             f"({len(self.stats)} values profiled)") from None

    def __contains__(self, name: object) -> bool:
        return name in self.stats

    def __iter__(self) -> Iterator[str]:
        return iter(self.stats)

    def __len__(self) -> int:
        return len(self.stats)

    def __repr__(self) -> str:
        return (f"<Profile {len(self.stats)} values, {self.batches} batches, {self.samples} "
                f"samples, graph {self.graph_hash[:19]}>")

    def check(self, graph: Graph, source: str = "the profile") -> None:
        """Refuse (InputError) a profile taken on a graph other than `graph`."""
        actual = graph_hash(graph)
        if actual != self.graph_hash:
            raise InputError(
                f"{source} was taken on a different graph (profile {self.graph_hash[:19]}..., "
                f"this graph {actual[:19]}...); profile this model again "
                f"(lowbit.profile or `lowbit profile`) with the same import options")

    def merge(self, other: Profile) -> None:
        """Add the statistics of another profile of the same graph (more calibration data)."""
        if other.graph_hash != self.graph_hash:
            raise InputError("cannot merge profiles taken on different graphs "
                             f"({self.graph_hash[:19]}... and {other.graph_hash[:19]}...)")
        for name, stats in other.stats.items():
            if name in self.constants:
                continue
            if name in self.stats:
                self.stats[name].merge(stats)
            else:
                self.stats[name] = stats
        for name, moments in other.moments.items():
            if name in self.moments:
                self.moments[name].merge(moments)
            else:
                self.moments[name] = moments
        self.batches += other.batches
        self.samples += other.samples

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the profile as YAML (see the module docstring), atomically."""
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "graph_hash": self.graph_hash,
            "batches": self.batches,
            "samples": self.samples,
            "values": {name: _stats_to_yaml(s, name in self.constants)
                       for name, s in self.stats.items()},
            "products": {name: _moments_to_yaml(m) for name, m in self.moments.items()},
        }
        text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=1 << 30)
        write_atomically(path, text.encode("utf-8"))

    @classmethod
    def load(cls, path: str | os.PathLike, graph: Graph | None = None) -> Profile:
        """Read a profile written by `save`; with `graph`, refuse one taken on another graph."""
        path = Path(path)
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read profile {path}: {exc.strerror or exc}") from None
        try:
            doc = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError as exc:
            raise InputError(f"{path} is not a lowbit profile (invalid YAML: "
                             f"{str(exc).splitlines()[0]})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InputError(f"{path} is not a lowbit profile (no 'format: {FORMAT}' header); "
                             f"create one with lowbit.profile(...).save(path)")
        if doc.get("version") not in READABLE_VERSIONS:
            raise InputError(f"{path} is a version {doc.get('version')} profile; this lowbit "
                             f"reads versions {', '.join(map(str, READABLE_VERSIONS))}: "
                             f"profile the model again")
        try:
            values = doc["values"] or {}
            stats = {str(name): _stats_from_yaml(str(name), entry)
                     for name, entry in values.items()}
            constants = {str(name) for name, entry in values.items() if entry.get("constant")}
            moments = {str(name): _moments_from_yaml(str(name), entry)
                       for name, entry in (doc.get("products") or {}).items()}
            profile = cls(str(doc["graph_hash"]), stats, int(doc["batches"]),
                          int(doc["samples"]), constants, moments)
        except (KeyError, TypeError, ValueError, AttributeError, zlib.error) as exc:
            raise InputError(f"{path} is a damaged lowbit profile ({type(exc).__name__}: "
                             f"{exc})") from None
        if graph is not None:
            profile.check(graph, source=f"profile {path}")
        return profile


# -- profiling ------------------------------------------------------------------------------------
def _is_float(value: Value) -> bool:
    return value.type is not None and value.type.dtype.is_float


def _float_array(array: np.ndarray) -> bool:
    kind = array.dtype.kind
    return kind == "f" or (kind == "V" and "float" in array.dtype.name)


STATS_COST = 1.6
"""Rough nanoseconds a StatsObserver update takes per element (range, channel sums and
histogram, EfficientNet-Lite0 on one core of the 2026 machine): with the constants below, the
relative costs by which the observer pool starts the costliest updates first."""
PRODUCT_COST = 0.04
"""Rough nanoseconds of one product of input moments (float32 vectors, about 25 G/s)."""
TRIANGLE_COST = 0.7
"""Rough nanoseconds per element of the triangles an input-moments update writes and adds."""
TASK_COST = 50_000.0
"""Rough nanoseconds of a task's fixed cost (Python calls)."""


class _Recorder:
    """The interpreter observer: feeds each profiled node output to its StatsObserver."""

    def __init__(self, graph: Graph, bins: int, channel_axis: int | None,
                 moments: bool = True) -> None:
        self.bins = bins
        self.axes = () if channel_axis is None else (channel_axis,)
        self.stats: dict[str, StatsObserver] = {}
        self.untyped: set[Value] = set()
        self.watched: dict[Value, StatsObserver] = {}
        for v in graph.inputs:
            if _is_float(v) or v.type is None:
                self._watch(v)
        for node in graph.nodes:
            if node.op_type == CONSTANT:
                continue
            for v in node.outputs:
                if _is_float(v) or v.type is None:
                    self._watch(v)
        self.products: dict[Value, dict[tuple, list[Node]]] = {}
        """Per value, the products reading it, grouped by `vector_layout`: a group's moments are
        accumulated once, for its first node (`moments`), and copied to the others at the end."""
        self.moments: dict[str, InputMoments] = {}
        self._input_axis: dict[str, int] = {}
        """Per product with moments, the axis of its data input's channels."""
        self._plans: dict[str, InputPlan] = {}
        """Per product with moments, its `InputPlan` for the last batch's input."""
        for node in graph.nodes:
            axis = product_input_axis(node)
            obs = self.watched.get(node.inputs[0]) if axis is not None else None
            if obs is not None and axis not in obs.channel_axes:
                obs.channel_axes = (*obs.channel_axes, axis)
            shape = moments_shape(node) if axis is not None and moments else None
            if shape is not None:
                group = self.products.setdefault(node.inputs[0], {}).setdefault(
                    vector_layout(node), [])
                if not group:
                    self.moments[node.name] = InputMoments.empty(node.name, *shape)
                    self._input_axis[node.name] = axis
                group.append(node)
        self.constants: list[StatsObserver] = []
        """The float constants' statistics (ranges along every axis), in node order."""
        self._constant_tasks: list[tuple[float, Callable[[], None]]] = []
        for node in graph.nodes:
            array = node.attrs["value"] if node.op_type == CONSTANT else None
            if array is not None and node.output.name not in self.stats and \
                    _float_array(array):
                obs = StatsObserver(node.output.name, bins, tuple(range(array.ndim)))
                self.constants.append(obs)
                self._constant_tasks.append((float(array.size) * max(array.ndim, 1),
                                             functools.partial(obs.observe, array)))

    def constant_tasks(self) -> list[tuple[float, Callable[[], None]]]:
        """The constants' updates not handed out yet, as `tasks` gives them (each is handed out
        once: the cpu runner runs them on its pool beside the first batch's model, and
        `profile` runs those left after the batches)."""
        tasks, self._constant_tasks = self._constant_tasks, []
        return tasks

    def _watch(self, v: Value) -> None:
        if v.type is None:
            self.untyped.add(v)
        else:
            self.watched[v] = self.stats[v.name] = StatsObserver(v.name, self.bins, self.axes)

    def observe(self, value: Value, array: np.ndarray) -> None:
        for _, task in self.tasks(value, array):
            task()

    def tasks(self, value: Value, array: np.ndarray) -> list[tuple[float, Callable[[], None]]]:
        """The updates `array` (of `value`) makes, as (rough cost, function) pairs: each
        touches its own statistics (the value's StatsObserver, or one product group's input
        moments), so that the updates of different pairs may run at the same time."""
        obs = self.watched.get(value)
        if obs is None and value in self.untyped and _float_array(array):
            self.untyped.discard(value)
            obs = self.watched[value] = self.stats[value.name] = StatsObserver(
                value.name, self.bins, self.axes)
        out: list[tuple[float, Callable[[], None]]] = []
        if obs is not None:
            out.append((STATS_COST * array.size + TASK_COST,
                        functools.partial(obs.observe, array)))
        if value in self.products and _float_array(array):
            for first, *_ in self.products[value].values():
                moments = self.moments[first.name]
                plan = self._plans.get(first.name)
                if plan is None or not plan.fits(array):
                    plan = self._plans[first.name] = InputPlan(first, array)
                out.append((self._moments_cost(first.name, moments, array), functools.partial(
                    observe_input, moments, first, array, plan)))
        return out

    def _moments_cost(self, name: str, moments: InputMoments, array: np.ndarray) -> float:
        """Rough nanoseconds of one input-moments update (`tasks`): its products (input
        positions times the triangles' elements: stride 1) and the triangles written."""
        axis = self._input_axis[name]
        channels = int(array.shape[axis]) if -array.ndim <= axis < array.ndim else 1
        triangles = moments.groups * moments.size * (moments.size + 1) / 2
        return (array.size / max(channels, 1)) * triangles * PRODUCT_COST + \
            triangles * TRIANGLE_COST + TASK_COST

    def all_moments(self) -> dict[str, InputMoments]:
        """The input moments of every product that saw data, by node name (one copy each)."""
        out: dict[str, InputMoments] = {}
        for groups in self.products.values():
            for first, *rest in groups.values():
                m = self.moments[first.name]
                m.flush(release=True)
                if m.count:
                    out[first.name] = m
                    out.update({n.name: m.copy(n.name) for n in rest})
        return out

    def __call__(self, node: Node, outputs: list[np.ndarray]) -> None:
        for value, array in zip(node.outputs, outputs, strict=False):
            self.observe(value, array)


def product_input_axis(node: Node) -> int | None:
    """The axis of a Conv/Gemm/MatMul's data input that its constant weight reduces over (the
    input channels: `ProductGeometry.input_channel_axis`), or None for other nodes and products
    without a constant weight."""
    geometry = integer_product(node)
    if geometry is None:
        return None
    w = node.input_or_none(geometry.weight_input)
    if w is None or not w.is_constant:
        return None
    return geometry.input_channel_axis


def _check_batch(graph: Graph, batch: Any, index: int) -> list[np.ndarray]:
    """The batch's arrays in graph-input order, or InputError naming the batch and input."""
    where = f"calibration batch {index}"
    if not isinstance(batch, Mapping):
        raise InputError(f"{where} is a {type(batch).__name__}; each batch must be a dict "
                         f"{{input name: array}} (inputs: "
                         f"{', '.join(v.name for v in graph.inputs)})")
    try:
        arrays = check_inputs(graph, batch)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    for value, array in zip(graph.inputs, arrays, strict=True):
        if array.size == 0:
            raise InputError(f"{where}: input '{value.name}' is empty (shape "
                             f"{tuple(array.shape)}); remove empty batches")
        if _float_array(array):
            finite = np.isfinite(array if array.dtype.kind == "f" else array.astype(np.float32))
            if not finite.all():
                bad = array[~finite].astype(np.float32)
                nan = int(np.isnan(bad).sum())
                inf = bad.size - nan
                first = tuple(int(i) for i in np.argwhere(~finite)[0])
                raise InputError(
                    f"{where}: input '{value.name}' contains {nan} NaN and {inf} infinite "
                    f"value(s) (first at index {first}); calibration data must be finite")
    return arrays


@one_blas_thread
def profile(graph: Graph, batches: Iterable[Mapping[str, np.ndarray]], *, progress: bool = True,
            channel_axis: int | None = None, bins: int = DEFAULT_BINS,
            moments: bool = True, backend: str = "auto") -> Profile:
    """Run `graph` on every batch ({input name: array}) and collect per-value statistics.

    Observed: float graph inputs, float node outputs (per batch) and float constants (once, with
    per-channel ranges along every axis). `channel_axis` also records per-channel ranges of
    activations along that axis. Batches are consumed one at a time (a generator keeps memory
    flat). Refused with InputError naming the batch (its position, from 0) and input: a batch
    that is not a dict, inputs that do not match the model's names, dtypes or shapes, empty
    arrays, NaN or Inf in a float input, and an empty calibration set.
    `samples` counts the first input's leading dimension over all batches. `moments=False`
    skips the input moments of the products (weights then round to nearest).
    `backend`: "auto" (the default: the cpu backend when it compiles the graph, else the
    interpreter), "reference" (the interpreter) or "cpu" (the compiled cpu backend: every
    observed value becomes an output of one compiled program, its float results within float
    rounding of the interpreter's, products as float32 fused multiply-add chains, the same on
    every ISA path and thread count; a graph it cannot compile raises its error).
    """
    # the graph's hash (sha256 of its constants: hashlib lets other threads run) is taken
    # beside the compiling and the first batches instead of before them
    hashing = ThreadPoolExecutor(1, thread_name_prefix="lowbit-profile-hash")
    try:
        digest = hashing.submit(graph_hash, graph)
        recorder = _Recorder(graph, bins, channel_axis, moments)
        interpreter = _runner(graph, recorder, backend)
        result = Profile("")
        try:
            _profile_batches(graph, batches, recorder, interpreter, result, progress)
        finally:
            getattr(interpreter, "close", lambda: None)()
        result.graph_hash = digest.result()
    finally:
        hashing.shutdown(cancel_futures=True)
    if result.batches == 0:
        raise InputError("the calibration set is empty: no batches were given; pass an iterable "
                         "of {input name: array} with at least one batch")
    result.stats.update(recorder.stats)
    result.moments.update(recorder.all_moments())
    for _, task in recorder.constant_tasks():
        task()
    for obs in recorder.constants:
        result.stats[obs.name] = obs
        result.constants.add(obs.name)
    return result


def _profile_batches(graph: Graph, batches: Iterable[Mapping[str, np.ndarray]],
                     recorder: _Recorder, interpreter, result: Profile, progress: bool) -> None:
    total = len(batches) if hasattr(batches, "__len__") else None  # type: ignore[arg-type]
    with _progress_bar(progress, total) as advance:
        for index, batch in enumerate(batches):
            arrays = _check_batch(graph, batch, index)
            for value, array in zip(graph.inputs, arrays, strict=True):
                recorder.observe(value, array)
            try:
                interpreter(batch)
            except LowbitError as exc:
                if getattr(exc, "batch_named", False):  # an earlier batch's observer update
                    raise
                raise _batch_error(exc, index) from exc
            result.batches += 1
            first = arrays[0] if arrays else None
            result.samples += int(first.shape[0]) if first is not None and first.ndim else 1
            advance()


def _batch_error(exc: LowbitError, index: int) -> LowbitError:
    """`exc` with its message prefixed by the calibration batch it happened on."""
    named = type(exc)(f"calibration batch {index}: {exc}")
    named.batch_named = True  # type: ignore[attr-defined]
    return named


def _runner(graph: Graph, recorder: _Recorder, backend: str):
    """A callable running one batch and feeding the recorder every observed node output."""
    if backend not in ("reference", "cpu", "auto"):
        raise ValueError(f"profile backend {backend!r}: use 'reference', 'cpu' or 'auto'")
    if backend != "reference":
        try:
            return _cpu_runner(graph, recorder)
        except LowbitError:
            if backend == "cpu":
                raise
            log.debug("profile: the cpu backend cannot run %s; using the interpreter", graph.name)
    return Interpreter(graph, observers=[recorder])


def _cpu_runner(graph: Graph, recorder: _Recorder):
    """One compiled program whose outputs are the graph's and every observed node output."""
    from lowbit.backends import cpu

    if recorder.untyped:
        raise UnsupportedError(f"profiling on the cpu backend needs every value's type; "
                               f"{len(recorder.untyped)} are unknown (run shape inference)")
    observed = graph.copy()
    by_name = {v.name: v for v in recorder.watched}
    inputs = {v.name for v in graph.inputs}
    produced = [v for node in observed.nodes for v in node.outputs
                if v.name in by_name and v.name not in inputs]
    names = {v.name for v in observed.outputs}
    observed.outputs = observed.outputs + [v for v in produced if v.name not in names]
    from lowbit.backends.cpu import library

    # the observers (several times the float model's CPU) run on every thread, pipelined with
    # the next batch's model, which gets half of them: on 2 cores the model's second thread
    # only added fork-join waits (profile CPU -12 %, wall unchanged under load)
    threads = library.default_threads()
    exe = cpu.compile(observed, threads=max(1, threads // 2),
                      nhwc_outputs=True,  # observers read any element order
                      fma_floats=True)  # float32 chains: as ISA-independent, twice as fast
    workers = _observer_threads(threads)

    pending: list = []
    ran = [0]  # batches run so far: the pending updates are batch ran[0] - 1's
    early: list = []  # the constants' statistics, on the pool while the first model runs

    def finish() -> None:
        """Wait for the previous batch's updates; the first error names that batch."""
        try:
            for future in pending:
                future.result()
        except LowbitError as exc:
            raise _batch_error(exc, ran[0] - 1) from exc
        finally:
            pending.clear()

    def run(batch: Mapping[str, np.ndarray]) -> None:
        if workers is not None and not ran[0]:  # otherwise idle, and after the batches
            early.extend(workers.submit(task) for _, task in
                         sorted(recorder.constant_tasks(), key=lambda t: -t[0]))
        outs = exe(batch)  # while the previous batch's statistics are updated
        tasks = [t for v in produced for t in recorder.tasks(by_name[v.name], outs[v.name])]
        if workers is None:
            for _, task in tasks:
                task()
            return
        # every update of the previous batch ends before this batch's begin, and each
        # statistic is updated by one task a batch, so the results do not depend on the
        # threads; costliest first
        finish()
        pending.extend(workers.submit(task) for _, task in sorted(tasks, key=lambda t: -t[0]))
        ran[0] += 1

    def close() -> None:
        if workers is not None:
            try:
                finish()
                for future in early:
                    future.result()
            finally:
                workers.shutdown()

    run.close = close  # type: ignore[attr-defined]
    return run


def _observer_threads(threads: int) -> ThreadPoolExecutor | None:
    """A pool of `threads` threads updating the statistics of one batch at once (their C
    kernels release the GIL and run on one thread each: `stats.single_threaded`), or None for
    one thread."""
    if threads <= 1:
        return None
    from lowbit.backends.cpu import stats

    return ThreadPoolExecutor(threads, thread_name_prefix="lowbit-profile",
                              initializer=stats.single_threaded)


class _progress_bar:
    """A rich progress bar on stderr when enabled; yields a function advancing it by one."""

    def __init__(self, enabled: bool, total: int | None) -> None:
        self.enabled, self.total = enabled, total
        self.bar: Any = None

    def __enter__(self):
        if not self.enabled:
            return lambda: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("profiling"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=False)
        self.bar.__enter__()
        task = self.bar.add_task("profiling", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


# -- YAML encoding --------------------------------------------------------------------------------
class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def _pack(array: np.ndarray, dtype: str) -> str:
    data = np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def _unpack(text: str, dtype: str) -> np.ndarray:
    data = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)


def _number(x: float | None) -> float | None:
    return None if x is None else float(x)


def _stats_to_yaml(s: StatsObserver, constant: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"constant": True} if constant else {}
    entry |= {
        "count": s.count, "zeros": s.zeros, "nan": s.nan, "posinf": s.posinf,
        "neginf": s.neginf, "min": _number(s.min), "max": _number(s.max),
    }
    hist = s.histogram
    if hist is not None:
        entry["histogram"] = {"bins": s.bins, "exponent": hist.exponent, "offset": hist.offset,
                              "counts": _pack(hist.counts, "int64")}
    if s.channels:
        entry["channels"] = [_channel_to_yaml(ch) for ch in s.channels.values()]
    return entry


def _stats_from_yaml(name: str, entry: dict[str, Any]) -> StatsObserver:
    hist_doc = entry.get("histogram")
    channels = entry.get("channels") or []
    s = StatsObserver(name, int(hist_doc["bins"]) if hist_doc else DEFAULT_BINS,
                      tuple(int(c["axis"]) for c in channels))
    s.count, s.zeros = int(entry["count"]), int(entry["zeros"])
    s.nan, s.posinf, s.neginf = int(entry["nan"]), int(entry["posinf"]), int(entry["neginf"])
    s.min = None if entry["min"] is None else float(entry["min"])
    s.max = None if entry["max"] is None else float(entry["max"])
    for x in (s.min, s.max):
        if x is not None and not math.isfinite(x):
            raise ValueError(f"'{name}': range is not finite")
    if hist_doc:
        hist = Histogram(_unpack(hist_doc["counts"], "int64"), int(hist_doc["offset"]),
                         int(hist_doc["exponent"]))
        if hist.total != s.count:
            raise ValueError(f"'{name}': histogram holds {hist.total} values, count says "
                             f"{s.count}")
        s.restore_histogram(hist)
    for c in channels:
        axis = int(c["axis"])
        sums = [_unpack(c[k], "float64") if k in c else None for k in ("sum", "count")]
        s.channels[axis] = ChannelRange(axis, _unpack(c["min"], "float64"),
                                        _unpack(c["max"], "float64"), *sums)
    return s


def _channel_to_yaml(ch: ChannelRange) -> dict[str, Any]:
    entry: dict[str, Any] = {"axis": ch.axis, "min": _pack(ch.min, "float64"),
                             "max": _pack(ch.max, "float64")}
    if ch.sum is not None and ch.count is not None:
        entry |= {"sum": _pack(ch.sum, "float64"), "count": _pack(ch.count, "float64")}
    return entry


def _moments_to_yaml(m: InputMoments) -> dict[str, Any]:
    upper = np.triu_indices(m.size)
    return {"groups": m.groups, "size": m.size, "count": m.count,
            "second": _pack(m.second[:, upper[0], upper[1]].reshape(-1), "float32")}


def _moments_from_yaml(name: str, entry: dict[str, Any]) -> InputMoments:
    groups, size = int(entry["groups"]), int(entry["size"])
    upper = np.triu_indices(size)
    packed = _unpack(entry["second"], "float32").astype(np.float64).reshape(groups,
                                                                             len(upper[0]))
    second = np.zeros((groups, size, size))
    second[:, upper[0], upper[1]] = packed
    second[:, upper[1], upper[0]] = packed
    return InputMoments(name, second, int(entry["count"]))
