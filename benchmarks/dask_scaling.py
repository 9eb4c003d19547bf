"""Profiling on a Dask cluster: how the time scales from one process to 1 and 2 worker
processes here, and what it would be on N machines.

The same calibration batches (EfficientNet-Lite0 on the real photos, or the bundled MNISTNet on
its digits) are profiled, in turn, by one process without Dask (the peer: `lowbit.profile`) and
on local Dask clusters of 1 and 2 worker processes (one thread each), the three interleaved
run by run; figures are medians. Every cluster profile is checked equal to the single-process
one bit for bit. The time of one run is cut into its parts, measured apart:

- `work`: the CPU seconds of profiling every batch in one process (what the workers share);
- `overhead`: the CPU seconds a 2-worker run spends in all its processes (this one and the
  workers) beyond the work: sending the graph to each worker, task scheduling, moving partial
  profiles (one per worker, packed), and merging them (on each worker, then across workers).

CPU seconds do not depend on the machine's load the way wall seconds do, so the projection is
made from them; it counts the overhead as if it were serial (an upper bound on its cost).

Projection to N machines of W workers each (the profile's work divides, the rest does not):
time(N) ~= overhead + work / (N * W), so the speed-up over one process is at most
work / overhead. It assumes the batches are read where they run (`BatchRef`s, files on shared
storage, or a `dask.array`), so that input data do not go through this process.

The machine is shared: the load average before and after each configuration is printed; a
figure measured under load says so.

    python benchmarks/dask_scaling.py [--model efficientnet|mnist] [--batches 32]
        [--batch-size 1] [--repeats 3] [--machines 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests"), str(Path(__file__).parent)]

import lowbit  # noqa: E402
from lowbit.cli.demo import bundled  # noqa: E402
from lowbit.cluster.connect import Cluster  # noqa: E402


def data(model: str, batches: int, batch_size: int) -> tuple[lowbit.Graph, list[dict]]:
    if model == "mnist":
        x = np.load(bundled("digits.npz"))["images"]
        graph = lowbit.load(bundled("mnistnet.onnx"))
    else:
        from realmodels import efficientnet, load_photos

        x = load_photos()
        graph = lowbit.load(efficientnet(True))
    need = batches * batch_size
    x = np.concatenate([x] * -(-need // len(x)))[:need]
    name = graph.inputs[0].name
    return graph, [{name: x[i:i + batch_size]} for i in range(0, need, batch_size)]


def same(a: lowbit.Profile, b: lowbit.Profile, folder: Path) -> bool:
    a.save(folder / "a.yaml")
    b.save(folder / "b.yaml")
    return (folder / "a.yaml").read_bytes() == (folder / "b.yaml").read_bytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("efficientnet", "mnist"), default="efficientnet")
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="default: 1 for EfficientNet-Lite0 (a fixed batch of 1), 50 for MNISTNet")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--machines", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = ap.parse_args()
    args.batch_size = args.batch_size or (50 if args.model == "mnist" else 1)
    graph, batches = data(args.model, args.batches, args.batch_size)
    print(f"{args.model}: {len(batches)} batches of {args.batch_size}; cores here: "
          f"{os.cpu_count()}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"dask_scaling_{os.getpid()}"
    folder.mkdir(exist_ok=True)
    load_before = os.getloadavg()[0]
    clusters = {w: Cluster(f"local:{w}") for w in (1, 2)}
    for w, c in clusters.items():
        c.client.wait_for_workers(w, timeout=120)
    times: dict[str, list[float]] = {"one process": [], "1 worker": [], "2 workers": []}
    cpu: dict[str, list[float]] = {k: [] for k in times}
    try:
        reference = lowbit.profile(graph, batches, progress=False)
        shard = lowbit.profile(graph, batches[:len(batches) // 8 or 1], progress=False)
        limbs = sum(m._exact.limbs.nbytes for m in shard.moments.values()
                    if m._exact is not None)
        print(f"a partial profile (one shard, {len(batches) // 8 or 1} batches) pickles to "
              f"{len(pickle.dumps(shard)) / 1e6:.1f} MB (its exact sums' limbs unpacked: "
              f"{limbs / 1e6:.1f} MB)", flush=True)
        for _ in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            lowbit.profile(graph, batches, progress=False)
            times["one process"].append(time.perf_counter() - start)
            cpu["one process"].append(time.process_time() - start_cpu)
            for w, c in clusters.items():
                label = f"{w} worker{'s' if w > 1 else ''}"
                workers_cpu = sum(c.client.run(time.process_time).values())
                start, start_cpu = time.perf_counter(), time.process_time()
                got = lowbit.profile(graph, batches, client=c.client, progress=False)
                times[label].append(time.perf_counter() - start)
                cpu[label].append(time.process_time() - start_cpu - workers_cpu +
                                  sum(c.client.run(time.process_time).values()))
                assert same(got, reference, folder), f"{w} workers: profile differs"
    finally:
        for c in clusters.values():
            c.close()
    load_after = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"load average {load_before:.1f} -> {load_after:.1f} on {os.cpu_count()} cores "
          f"(shared machine: wall figures under that load)")
    print(f"{'':12} {'wall s':>8} {'runs':>20} {'vs one':>7} {'CPU s (all processes)':>22}")
    for k, v in times.items():
        runs = " ".join(f"{t:.1f}" for t in v)
        print(f"{k:12} {med[k]:8.2f} {runs:>20} {med['one process'] / med[k]:6.2f}x "
              f"{med_cpu[k]:22.2f}")
    print("every cluster profile equal to the single-process one, bit for bit: yes")
    # CPU seconds do not depend on the load: the work is what one process spends, the
    # overhead what a cluster spends beyond it (scatter, scheduling, serialization, merges)
    work = med_cpu["one process"]
    overhead = max(0.0, med_cpu["2 workers"] - work)
    print(f"\nwork {work:.2f} CPU s (one process); cluster overhead at 2 workers "
          f"{overhead:.2f} CPU s (all its processes minus the work)")
    print("projection, N machines of W workers each: time ~= overhead + work / (N * W)")
    for cores in (2, 8):
        line = []
        for n in args.machines:
            t = overhead + work / (n * cores)
            line.append(f"N={n}: {t:.2f} s ({work / t:.1f}x)")
        print(f"  W={cores}: " + ", ".join(line))
    if overhead > 0:
        print(f"  speed-up bound (overhead only): {work / overhead:.1f}x; it grows with the "
              f"data: work scales with the batches, overhead mostly with the workers")


if __name__ == "__main__":
    main()
