"""The public Python API. Every CLI verb calls these functions."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lowbit import backends
from lowbit.budget import search as _budget
from lowbit.budget.metrics import Budget
from lowbit.budget.search import BudgetNotMet, BudgetResult
from lowbit.errors import InputError
from lowbit.exporters import onnx_export
from lowbit.frontends import onnx_import
from lowbit.ir.graph import Graph
from lowbit.passes import canonicalize
from lowbit.passes import optimize as _optimize
from lowbit.passes.fix_inputs import fix_inputs
from lowbit.quant import dynamic as _dynamic
from lowbit.quant import profile as _profile
from lowbit.quant import static as _static
from lowbit.quant.config import QuantConfig
from lowbit.quant.profile import Profile
from lowbit.tools.compare import Comparison
from lowbit.tools.compare import compare as _compare
from lowbit.tools.sensitivity import Sensitivity
from lowbit.tools.sensitivity import sensitivity as _sensitivity


def load(path: str | os.PathLike, *, optimize: bool = True,
         fixed_inputs: Mapping[str, object] | None = None) -> Graph:
    """Import an ONNX model as a typed Graph.

    With `optimize` (the default), the optimization pipeline runs: constant folding of shape
    sub-graphs, batch-norm folding, decomposed layer norms fused into LayerNormalization,
    Relu/Clip fused as output clamps, dead code; without it only
    the import pipeline (folding, dead code). Profile and quantize the graph `load` returns.
    `fixed_inputs` ({input name: value}) makes those inputs constants before the passes run,
    so what they decide folds away (an If on a sample rate becomes its branch).
    Unsupported or malformed models raise `lowbit.LowbitError` naming the node and the reason.
    """
    graph = onnx_import.load(path)
    if fixed_inputs:
        graph = fix_inputs(graph, fixed_inputs)
    return _optimize(graph) if optimize else canonicalize(graph)


def save(graph: Graph, path: str | os.PathLike, format: str | None = None) -> None:
    """Export `graph` to an ONNX file, written atomically (temporary name, then rename).
    `format`: "onnx", "qdq" or "qoperator"; by default "qdq" for a graph that computes on
    quantized types (`lowbit.quantize`'s result) and "onnx" otherwise."""
    onnx_export.save(graph, path, format=format)


def compile(graph: Graph, backend: str = "reference", **options) -> backends.Executable:
    """Compile `graph` for `backend`; call the result with {input name: array}. The "cpu"
    backend takes `threads` (default: the physical cores) and `isa` ("amx", "vnni", "avx2",
    "scalar"; default: the best this CPU has, or $LOWBIT_CPU_ISA)."""
    return backends.compile(graph, backend, **options)


def export_bundle(graph: Graph, directory: str | os.PathLike, *, target: str | None = None,
                  weights: str = "file", name: str | None = None,
                  dims: Mapping[str, int] | None = None):
    """Write `graph` as a standalone C bundle into `directory`: the cpu backend's generated code
    with the kernel library sources, NAME.h, the weights (`weights="file"`: NAME.weights;
    `"embed"`: a C array), a Makefile, a CMakeLists.txt and example_main.c, a program that runs
    the model on .npy files (`make && ./NAME in.npy out.npy`). `target`: "x86-64",
    "x86-64-avx2", "x86-64-avx512vnni", "aarch64" or "aarch64-dotprod" (default: this
    machine's); `dims`: sizes of symbolic input dimensions other than the batch. Returns a
    `Bundle` whose `summary()` gives the sizes; refuses (BundleError, nothing written) an
    unknown target or an op without a kernel, naming it."""
    from lowbit.backends.cpu.bundle import export_bundle as _export

    return _export(graph, directory, target=target, weights=weights, name=name, dims=dims)


def run(
    graph: Graph, inputs: Mapping[str, np.ndarray], backend: str = "reference"
) -> dict[str, np.ndarray]:
    """Run `graph` on `inputs` ({input name: array}); returns {output name: array}."""
    return backends.compile(graph, backend)(inputs)


def profile(
    graph: Graph,
    batches: Iterable[Mapping[str, np.ndarray]] | Any,
    *,
    progress: bool = True,
    channel_axis: int | None = None,
    moments: bool = True,
    client: Any = None,
    shards: int | None = None,
    batch_size: int | None = None,
    backend: str = "auto",
) -> Profile:
    """Run `graph` on calibration batches ({input name: array} each) and return the per-value
    statistics (ranges, histograms, and the input moments of each Conv/Gemm/MatMul that the
    default `weight_rounding: gptq` reads; `moments=False` skips them, for a smaller profile
    whose weights round to nearest) that quantization calibrates from. `Profile.save(path)` and
    `Profile.load(path, graph)` keep it in a file keyed by the graph's hash. Bad batches (NaN/Inf,
    wrong shape or dtype, an empty set) raise `lowbit.errors.InputError` naming batch and input.

    With a Dask `client` (`dask.distributed.Client`), the batches are profiled in `shards` on
    its workers and the partial profiles merged: the same profile, bit for bit
    (`lowbit.cluster.profiling`). Then `batches` may also be a `dask.array` (or {input name:
    dask.array}) cut into batches of `batch_size` rows. Items with a `load(graph)` method
    (`lowbit.cli.data_files.BatchRef`) are read where they are profiled.

    `backend`: "auto" (the default) runs the batches on the compiled cpu backend when it
    compiles the graph and a C compiler is there, else on the reference interpreter; "cpu"
    insists on the cpu backend, "reference" on the interpreter. The observers read the values
    it produces (on the workers too). The cpu backend's float results are within float rounding
    of the interpreter's, not equal to them bit for bit, so the two give slightly different
    profiles; each is the same on every run and in shards.
    """
    if client is not None:
        from lowbit.cluster import profiling

        return profiling.profile(client, graph, batches, shards=shards, batch_size=batch_size,
                                 progress=progress, channel_axis=channel_axis, moments=moments,
                                 backend=backend)
    if shards is not None or batch_size is not None:
        raise InputError("shards and batch_size go with a Dask client (client=...)")
    return _profile.profile(graph, _loaded(graph, batches), progress=progress,
                            channel_axis=channel_axis, moments=moments, backend=backend)


def _loaded(graph: Graph, batches: Iterable[Any]) -> Iterable[Any]:
    """Batches, with references (`load(graph)`) read one at a time as profiling reaches them."""
    items = batches if isinstance(batches, Sequence) else list(batches)
    if not any(hasattr(b, "load") for b in items):
        return items
    return _Loading(graph, items)


class _Loading(Sequence):
    """A sequence reading each reference when indexed (memory: one batch at a time)."""

    def __init__(self, graph: Graph, items: Sequence[Any]) -> None:
        self.graph, self.items = graph, items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):  # type: ignore[override]
        item = self.items[i]
        return item.load(self.graph) if hasattr(item, "load") else item


def quantize(graph: Graph, profile: Profile, config: QuantConfig | None = None, *,
             assert_all_quantized: bool = False, budget: Budget | None = None,
             progress: bool = True) -> Graph:
    """Statically quantize `graph` with the ranges of `profile` (taken on this graph) and the
    settings of `config` (lowbit's defaults when None): returns a new graph whose value types
    carry quantization parameters. `lowbit.quant.static.quantize` also returns the per-node
    summary. With `assert_all_quantized`, a node left in float raises QuantizationError.

    With a `budget` (`lowbit.Budget`), the fewest layers are raised above `config` (to int16,
    then float) that make the model meet it on the budget's data (`quantize_to_budget` returns
    what was chosen and measured); `BudgetNotMet` when no choice meets it."""
    if budget is not None:
        return _budget_graph(graph, budget, profile, config, False, assert_all_quantized,
                             progress)
    return _static.quantize(graph, profile, config,
                            assert_all_quantized=assert_all_quantized).graph


def quantize_dynamic(graph: Graph, config: QuantConfig | None = None, *,
                     assert_all_quantized: bool = False, budget: Budget | None = None,
                     progress: bool = True) -> Graph:
    """Dynamically quantize `graph`: no calibration data; MatMul/Gemm with constant weights (and,
    by default, attention's activation products) compute in 8-bit integers with activation
    parameters computed at run time, per token by default (`lowbit.quant.dynamic`).
    `lowbit.quant.dynamic.quantize_dynamic` also returns the per-node summary. With a
    `budget`, the fewest products stay in float that make the model meet it (as `quantize`)."""
    if budget is not None:
        return _budget_graph(graph, budget, None, config, True, assert_all_quantized, progress)
    return _dynamic.quantize_dynamic(graph, config,
                                     assert_all_quantized=assert_all_quantized).graph


def quantize_to_budget(graph: Graph, budget: Budget, *, profile: Profile | None = None,
                       config: QuantConfig | None = None, dynamic: bool = False,
                       data: Iterable[Mapping[str, np.ndarray]] | None = None,
                       progress: bool = True, latency: bool = True,
                       client: Any = None, backend: str = "auto") -> BudgetResult:
    """Quantize `graph` (statically with `profile`, or `dynamic`) with `config` plus the fewest
    layers raised to higher precision that meet `budget` on its data (or `data`)
    (`lowbit.budget.search`). The result holds the chosen config and graph, the metric before
    and after, the sizes (and cpu-backend latencies when available), and every configuration
    tried; `result.met` is False, and `result.graph` None, when no choice meets the budget.
    With a Dask `client`, the sensitivity ranking and the evaluations run on its workers.
    `backend` runs the configurations tried: "auto" (the cpu backend where it runs the model,
    else the reference interpreter), "cpu" or "reference"."""
    mapper, workers = _mapper(client)
    return _budget.search(graph, budget, profile=profile, config=config, dynamic=dynamic,
                          data=None if data is None else list(data), progress=progress,
                          latency=latency, mapper=mapper, workers=workers, backend=backend)


def _mapper(client: Any) -> tuple[Any, int]:
    """A mapper running on the client's workers, and their number (None, 1 without one)."""
    if client is None:
        return None, 1
    from lowbit.cluster.mapping import ClusterMapper

    mapper = ClusterMapper(client)
    return mapper, mapper.workers


def _budget_graph(graph: Graph, budget: Budget, profile: Profile | None,
                  config: QuantConfig | None, dynamic: bool, assert_all_quantized: bool,
                  progress: bool) -> Graph:
    if assert_all_quantized:
        raise InputError("a budget may keep layers in float: it does not go with "
                         "assert_all_quantized")
    result = _budget.search(graph, budget, profile=profile, config=config, dynamic=dynamic,
                            progress=progress, latency=False)
    if not result.met or result.graph is None:
        raise BudgetNotMet(result)
    return result.graph


def compare(float_graph: Graph, quant_graph: Graph,
            batches: Iterable[Mapping[str, np.ndarray]], *, samples: int = 0,
            own: bool = True) -> Comparison:
    """Run a float graph and its quantized version on `batches` and return per-layer SQNR,
    cosine, max error, error in quantization steps, clipping and range use for every value they
    share by name (`lowbit.tools.compare`); `.table(top)` renders the worst layers. `samples`
    keeps up to that many float values per layer for histograms
    (`lowbit.tools.report.write_report`); `own` also measures each layer's own error, its
    inputs the float model's values (one more run of the quantized graph)."""
    return _compare(float_graph, quant_graph, batches, samples=samples, own=own)


def sensitivity(float_graph: Graph, batches: Iterable[Mapping[str, np.ndarray]], *,
                profile: Profile | None = None, config: QuantConfig | None = None,
                dynamic: bool = False, progress: bool = True,
                client: Any = None) -> Sensitivity:
    """Quantize one layer of `float_graph` at a time, the rest float, and rank the layers by the
    SQNR of the outputs on `batches`, most sensitive first (`lowbit.tools.sensitivity`). Static
    quantization needs `profile`; `.config(top)` is `config` with the `top` most sensitive
    layers raised to higher precision, `.yaml_rules(top)` the same rules as YAML. With a Dask
    `client`, the layers are evaluated on its workers."""
    return _sensitivity(float_graph, list(batches), profile=profile, config=config,
                        dynamic=dynamic, progress=progress, mapper=_mapper(client)[0])


def from_torch(module, example_inputs, *, input_names=None, output_names=None,
               dynamic_axes=None, optimize: bool = True) -> Graph:
    """A PyTorch module as a Graph: exported (in eval mode) with `example_inputs` by
    `torch.onnx.export` (TorchScript exporter, opset 17), then `load`ed. `input_names` default
    to input_0, input_1, ...; `dynamic_axes` names symbolic dims as in torch.onnx.export
    ({"input_0": {0: "batch"}}). Modules quantized by `torch.ao.quantization.quantize_dynamic`
    keep their integers. torch stays optional: without it, UnsupportedError says how to install
    it."""
    from lowbit.frontends.torch_import import export_onnx

    with tempfile.TemporaryDirectory(prefix="lowbit-torch-") as tmp:
        path = Path(tmp) / "model.onnx"
        export_onnx(module, example_inputs, path, input_names=input_names,
                    output_names=output_names, dynamic_axes=dynamic_axes)
        return load(path, optimize=optimize)
