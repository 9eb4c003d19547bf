"""Where a model's time goes on the cpu backend: the Python call around the generated program,
and its steps by kind (benchmarks/cpu_profile.py has per-step medians).

For each model (lowbit's defaults, as benchmarks/cpu_backend.py quantizes it), batch 1:
- the median time of a whole call (`exe(inputs)`) and of the bare C entry point with the same
  arguments (the difference is the Python wrapper: input checks, output arrays, ctypes);
- each step's CPU time (`CpuExecutable.profile`: the generated code times every step with the
  process CPU clock when asked), summed by kind of step ("Conv 1x1", "quantized Mul", ...),
  then the slowest steps.

Per-step CPU times count every thread of the process: profile with --threads 1 (the default),
and compare kinds within one run; a loaded machine inflates all of them alike.

    python benchmarks/cpu_call_profile.py [--models mnist,ocr_rec] [--threads 1] [--runs 20]
        [--top 15]
"""

from __future__ import annotations

import argparse
import collections
import ctypes as C
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_backend import MODELS, model_data

import lowbit
from lowbit.backends import cpu


def median_us(fn, runs: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def bare_call(exe: cpu.CpuExecutable, x: np.ndarray):
    """The C entry point with the arguments of the last call (arrays made once)."""
    compiled = exe.compiled()[0]
    x = np.ascontiguousarray(x)
    prep = exe._prepare(compiled, [x])
    outs = [np.empty(s, d) for s, (_, _, d) in zip(prep.output_shapes, compiled.outputs,
                                                     strict=True)]
    ins = (C.c_void_p * 1)(x.ctypes.data)
    outp = (C.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
    err = np.zeros(2, np.int64)
    args = (exe.context.handle, compiled.blob.ctypes.data, exe._arena.ctypes.data,
            prep.dims.ctypes.data, prep.offsets.ctypes.data, ins, outp, None, err.ctypes.data)
    return lambda: compiled.function(*args)


def kind_of(step: str) -> str:
    """A step's comment without its node name and numbers: "Conv #x# /# group #, # -> #"."""
    return re.sub(r"\d+", "#", step.split(": ", 1)[1] if ": " in step else step)


def report(name: str, threads: int, runs: int, top: int) -> None:
    src, input_name, calib, x = model_data(name)
    graph = lowbit.load(src)
    q = lowbit.quantize(graph, lowbit.profile(graph, calib, progress=False))
    exe = cpu.compile(q, threads=threads)
    feed = {input_name: x}
    exe(feed)
    whole, bare = median_us(lambda: exe(feed), 10 * runs), median_us(bare_call(exe, x), 10 * runs)
    steps = exe.profile(feed, runs)
    total = sum(t for _, t in steps)
    print(f"{name}: call {whole:.1f} us, C entry point {bare:.1f} us (wrapper "
          f"{whole - bare:.1f} us); {len(steps)} steps, {total * 1e6:.1f} us CPU in steps")
    kinds: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
    for step, t in steps:
        kinds[kind_of(step)][0] += t
        kinds[kind_of(step)][1] += 1
    for kind, (t, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {t * 1e6:9.1f} us {100 * t / total:5.1f}%  x{n:<3d} {kind[:90]}")
    print("  slowest steps:")
    for step, t in sorted(steps, key=lambda st: -st[1])[:top]:
        print(f"  {t * 1e6:9.1f} us {100 * t / total:5.1f}%  {step[:96]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    for name in args.models.split(","):
        report(name, args.threads, args.runs, args.top)


if __name__ == "__main__":
    main()
