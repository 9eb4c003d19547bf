"""`lowbit bench MODEL [--backend cpu|reference] [--batch N] [--threads N]`: time a model.

Inputs are random (normal floats, uniform integer codes) of the model's input shapes, the
batch dimension set by --batch; other unknown dimensions are given by --shape. Prints the
compile time, latency percentiles over --runs timed runs (after --warmup untimed ones), and
throughput (batch items per second at the median latency).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lowbit.cli.run_cmd import add_backend_args, compile_for
from lowbit.errors import InputError

EXAMPLE = """example:
  lowbit bench model.int8.onnx --backend cpu --threads 2
  lowbit bench model.onnx --backend cpu --batch 8 --runs 200
  lowbit bench det.onnx --backend cpu --shape x=1x3x320x320"""


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="time a model on random inputs (latency, throughput)",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file")
    add_backend_args(p)
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="size of the batch dimension (default 1)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=AxBxC",
                   help="an input's full shape, where it has unknown dimensions")
    p.add_argument("--runs", type=int, default=100, help="timed runs (default 100)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.set_defaults(handler=run)


def random_inputs(graph, batch: int, shapes: dict[str, tuple[int, ...]], seed: int
                  ) -> dict[str, np.ndarray]:
    """Random arrays for the graph's inputs: the first symbolic dimension is the batch."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        t = v.type
        if v.name in shapes:
            shape = shapes[v.name]
        else:
            shape = []
            for axis, d in enumerate(t.shape or ()):
                if isinstance(d, int):
                    shape.append(d)
                elif axis == 0:
                    shape.append(batch)
                else:
                    raise InputError(f"input '{v.name}' has unknown dimension {axis} "
                                     f"({t.shape}); give its shape with --shape "
                                     f"{v.name}=" + "x".join(str(x if isinstance(x, int) else
                                                                 "N") for x in t.shape))
        dt = t.dtype.np_dtype
        if t.dtype.is_float:
            feeds[v.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[v.name] = rng.random(shape) < 0.5
        else:
            info = np.iinfo(dt)
            feeds[v.name] = rng.integers(max(info.min, -128), min(info.max, 127) + 1,
                                         shape).astype(dt)
    return feeds


def _shapes(specs) -> dict[str, tuple[int, ...]]:
    out = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            out[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise InputError(f"--shape {spec!r}: write NAME=AxBxC, e.g. x=1x3x224x224") from None
        if not sep or not name or any(d < 0 for d in out[name]):
            raise InputError(f"--shape {spec!r}: write NAME=AxBxC, e.g. x=1x3x224x224")
    return out


def run(args) -> int:
    from rich.progress import Progress

    import lowbit

    if args.batch < 1 or args.runs < 1 or args.warmup < 0:
        raise InputError("--batch and --runs must be at least 1, --warmup at least 0")
    graph = lowbit.load(args.model)
    feeds = random_inputs(graph, args.batch, _shapes(args.shape), args.seed)
    start = time.perf_counter()
    exe = compile_for(graph, args)
    exe(feeds)  # the cpu backend compiles a specialization on its first call
    compile_s = time.perf_counter() - start
    for _ in range(args.warmup):
        exe(feeds)
    times = []
    with Progress(transient=True) as progress:
        task = progress.add_task("timing", total=args.runs)
        for _ in range(args.runs):
            t0 = time.perf_counter()
            exe(feeds)
            times.append(time.perf_counter() - t0)
            progress.advance(task)
    ms = np.array(times) * 1e3
    where = args.backend + (f", {exe.threads} threads, {exe.isa}" if args.backend == "cpu"
                            else "")
    print(f"{args.model}: batch {args.batch}, {where}")
    print(f"  compile + first run {compile_s:.2f} s")
    print(f"  latency ms   p50 {np.percentile(ms, 50):.3f}   p90 {np.percentile(ms, 90):.3f}   "
          f"p99 {np.percentile(ms, 99):.3f}   min {ms.min():.3f}   ({args.runs} runs)")
    print(f"  throughput   {args.batch / np.percentile(ms, 50) * 1e3:.1f} items/s at the median")
    return 0
