"""Per-step time breakdown of a model on lowbit's cpu backend (where the time goes).

Runs the generated code with its per-step timer (process CPU time around each step, so on one
thread the work of each step even when other processes share the cores) and prints the steps
grouped by kind, with each step's median over `--runs` inferences.

    python benchmarks/cpu_profile.py [--model effnet] [--threads 1] [--runs 200] [--top 40]
    python benchmarks/cpu_profile.py --model minilm [--seq 128] [--batch 1] [--pool-stats]

`--model minilm`: all-MiniLM-L6-v2 with lowbit's default dynamic quantization, on Lee documents
cut or padded to --seq tokens, --batch of them (transformer_cpu.py's inputs).

With --pool-stats (2+ threads) it prints instead the thread pool's wall-clock counters per step
(lb_pool_stats_attach): where the second thread's time is lost (the caller waiting at a step's
end, steps run on one thread, jobs no worker joined).
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


def minilm_data(seq: int, batch: int):
    """all-MiniLM-L6-v2 quantized by `lowbit.quantize_dynamic` (defaults) and `batch` Lee
    documents cut or padded to `seq` tokens."""
    from transformer_cpu import tokens

    from realmodels import lee_documents, minilm

    q = lowbit.quantize_dynamic(lowbit.load(minilm("eager", "dynamo")))
    docs, _ = lee_documents()
    return (q.graph if hasattr(q, "graph") else q), tokens((docs * 2)[:batch], seq)


def quantized(name: str, cache: Path | None, seq: int = 128, batch: int = 1):
    """The int8 model (quantize defaults; quantize_dynamic for minilm) and one timing input,
    pickled in `cache` if given."""
    from cpu_backend import model_data

    if cache is not None and cache.exists():
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
        return pickle.loads(cache.read_bytes())
    if name == "minilm":
        found = minilm_data(seq, batch)
    else:
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


POOL_FIELDS = ("jobs", "tasks", "caller_tasks", "alone_jobs", "job_ns", "wait_ns", "inline",
               "step_ns", "worker_ns", "join_ns", "asleep_jobs", "worker_tail_ns")


def pool_stats(exe, inputs, runs: int) -> tuple[list[str], np.ndarray]:
    """Step names and the pool counters of each step summed over `runs` inferences."""
    from lowbit.backends.cpu.library import lib

    exe(inputs)
    compiled = next(iter(exe._compiled.values()))
    counters = np.zeros((len(compiled.steps), len(POOL_FIELDS)), np.int64)
    if not lib().lb_pool_stats_attach(exe.context.handle, counters.ctypes.data, len(counters)):
        raise SystemExit("--pool-stats needs --threads 2 or more")
    try:
        for _ in range(runs):
            exe._run(inputs, None, keep=True)
    finally:
        lib().lb_pool_stats_attach(exe.context.handle, None, 0)
    return list(compiled.steps), counters


def print_pool_stats(names: list[str], counters: np.ndarray, runs: int, top: int) -> None:
    """The counters as microseconds a run: totals, by kind of step, then the top steps."""
    c = {f: counters[:, i] / runs for i, f in enumerate(POOL_FIELDS)}
    wall, wait = c["step_ns"].sum() / 1e3, c["wait_ns"].sum() / 1e3
    alone = c["jobs"] == 0
    busy = (c["job_ns"].sum() - c["wait_ns"].sum() + c["worker_ns"].sum()) / \
        max(1.0, 2 * c["job_ns"].sum())
    print(f"pool counters a run (wall clock): step wall {wall:.1f} us, in pool jobs "
          f"{c['job_ns'].sum() / 1e3:.1f} us, caller waiting at job ends {wait:.1f} us; "
          f"{int(c['jobs'].sum())} jobs ({c['alone_jobs'].sum():.1f} no worker joined), "
          f"{int(c['inline'].sum())} calls inline; steps without a job: {int(alone.sum())} "
          f"({c['step_ns'][alone].sum() / 1e3:.1f} us); workers busy "
          f"{c['worker_ns'].sum() / 1e3:.1f} us, {c['asleep_jobs'].sum():.1f} jobs started "
          f"while a worker slept, workers idle at job ends {c['worker_tail_ns'].sum() / 1e3:.1f} "
          f"us; threads busy {100 * busy:.1f} % of 2 x job wall")
    header = f"  {'wall us':>8s} {'job us':>7s} {'wait us':>7s} {'jobs':>5s} {'tasks':>6s} " \
             f"{'caller%':>7s} {'alone':>5s} {'inl':>4s} {'join us':>7s} {'wbusy':>6s} " \
             f"{'slept':>5s} {'wtail':>6s}"

    def row(idx) -> str:
        tasks = c["tasks"][idx].sum()
        own = 100 * c["caller_tasks"][idx].sum() / tasks if tasks else 0.0
        return (f"  {c['step_ns'][idx].sum() / 1e3:8.1f} {c['job_ns'][idx].sum() / 1e3:7.1f} "
                f"{c['wait_ns'][idx].sum() / 1e3:7.1f} {c['jobs'][idx].sum():5.1f} "
                f"{tasks:6.0f} {own:7.1f} {c['alone_jobs'][idx].sum():5.1f} "
                f"{c['inline'][idx].sum():4.0f} {c['join_ns'][idx].sum() / 1e3:7.1f} "
                f"{c['worker_ns'][idx].sum() / 1e3:6.1f} {c['asleep_jobs'][idx].sum():5.2f} "
                f"{c['worker_tail_ns'][idx].sum() / 1e3:6.1f}")

    kinds: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        kinds[kind_of(name)].append(i)
    print("by kind:" + header[1:] + "  steps kind")
    for kind, idx in sorted(kinds.items(), key=lambda kv: -c["step_ns"][kv[1]].sum()):
        print(row(np.array(idx)) + f"  {len(idx):5d} {kind}")
    print(f"top {top} steps by wall:" + header[1:] + "  step")
    for i in np.argsort(-c["step_ns"])[:top]:
        print(row(np.array([i])) + f"  {names[i]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from cpu_backend import MODELS

    parser.add_argument("--model", default="effnet", choices=(*MODELS, "minilm"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--seq", type=int, default=128, help="minilm: tokens per input")
    parser.add_argument("--batch", type=int, default=1, help="minilm: inputs")
    parser.add_argument("--cache", type=Path, default=None,
                        help="pickle of the quantized model (made on the first run)")
    parser.add_argument("--pool-stats", action="store_true",
                        help="the thread pool's wall-clock counters per step instead")
    args = parser.parse_args()
    q, inputs = quantized(args.model, args.cache, args.seq, args.batch)
    exe = cpu.compile(q, threads=args.threads)
    if args.pool_stats:
        print_pool_stats(*pool_stats(exe, inputs, args.runs), args.runs, args.top)
        return
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
