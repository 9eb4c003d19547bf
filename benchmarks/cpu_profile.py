"""Per-step time breakdown of a model on lowbit's cpu backend (where the time goes).

Runs the generated code with its per-step timer (process CPU time around each step, so on one
thread the work of each step even when other processes share the cores) and prints the steps
grouped by kind, with each step's median over `--runs` inferences.

    python benchmarks/cpu_profile.py [--model effnet] [--threads 1] [--runs 200] [--top 40]
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lowbit
from lowbit.backends import cpu


def quantized(name: str, cache: Path | None):
    """The int8 model (quantize defaults) and one timing input, pickled in `cache` if given."""
    from cpu_backend import model_data

    if cache is not None and cache.exists():
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
        return pickle.loads(cache.read_bytes())
    src, input_name, calib, x = model_data(name)
    graph = lowbit.load(src)
    q = lowbit.quantize(graph, lowbit.profile(graph, calib, progress=False))
    found = (q, {input_name: x})
    if cache is not None:  # a graph's value/node links nest deeply
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
        cache.write_bytes(pickle.dumps(found))
    return found


def kind_of(step: str) -> str:
    """A step's kind: its description without node names and channel counts."""
    what = step.split(": ", 1)[-1]
    what = re.sub(r"\+ \S+", "+ add", what)
    return re.sub(r"\d+ -> \d+|\d+ channels", "", what).strip()


def step_medians(exe, inputs, runs: int) -> tuple[list[str], np.ndarray]:
    """Step names and the median seconds of each over `runs` inferences."""
    exe(inputs)
    per_run = []
    for _ in range(runs):
        per_run.append(exe._run(inputs, None, keep=True).copy())
    compiled = next(iter(exe._compiled.values()))
    return list(compiled.steps), np.median(np.array(per_run), axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="effnet")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--cache", type=Path, default=None,
                        help="pickle of the quantized model (made on the first run)")
    args = parser.parse_args()
    q, inputs = quantized(args.model, args.cache)
    exe = cpu.compile(q, threads=args.threads)
    names, med = step_medians(exe, inputs, args.runs)
    total = med.sum()
    print(f"{args.model}: {len(names)} steps, sum of step medians {total * 1e3:.3f} ms "
          f"({args.threads} thread{'s' if args.threads > 1 else ''})")
    kinds: dict[str, list[float]] = defaultdict(list)
    for name, t in zip(names, med, strict=True):
        kinds[kind_of(name)].append(t)
    for kind, ts in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind:28s} {len(ts):4d} steps {sum(ts) * 1e3:8.3f} ms "
              f"{100 * sum(ts) / total:5.1f} %")
    print(f"top {args.top} steps:")
    for i in np.argsort(-med)[:args.top]:
        print(f"  {med[i] * 1e6:8.1f} us  {names[i]}")


if __name__ == "__main__":
    main()
