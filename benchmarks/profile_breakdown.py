"""Where `lowbit.profile`'s time goes on EfficientNet-Lite0 (the 30 photos of
benchmarks/quantize_time.py, one a batch, the cpu backend, the defaults).

Per run: the wall-clock and CPU (process time, every thread) of the whole call; the main thread's
time in the compiled float model (`exe(batch)`, whose outputs include every observed value;
the observers run on a pool, pipelined with the next batch's model, so the rest of the wall
time is mostly the main thread waiting for them); and the thread CPU time of the observer
updates, by kind: input moments of depthwise Convs (`depthwise_moments`), of other Convs and of
Gemms, and the StatsObserver updates (ranges, channel sums, histogram), plus the graph inputs'
updates and every StatsObserver update made on the main thread (the inputs', and the
constants', once after the batches). Figures are medians over `--repeats` runs after one
warm-up (the compiled program cached); on a loaded machine compare the kinds within one run.

    python benchmarks/profile_breakdown.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

from quantize_time import efficientnet_case  # noqa: E402

import lowbit  # noqa: E402
from lowbit.backends.cpu import executable  # noqa: E402
from lowbit.quant import observers  # noqa: E402
from lowbit.quant import profile as profile_module  # noqa: E402


class Meter:
    """Thread CPU seconds by kind (observer tasks) and wall seconds of the main thread's parts,
    collected by wrapping the functions `lowbit.profile` calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.lock = threading.Lock()

    def add(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.seconds[kind] += seconds

    def install(self, stack) -> None:
        meter = self
        tasks = profile_module._Recorder.tasks

        def timed_tasks(self, value, array):
            out = []
            for cost, task in tasks(self, value, array):
                kind = task.func.__qualname__
                if kind == "observe_input":
                    node = task.args[1]
                    kind = f"input moments: {node.op_type}" + (
                        " depthwise" if int(node.attrs.get("group", 1)) > 1 else "")
                elif kind == "StatsObserver.observe":
                    kind = "ranges, channel sums, histograms"

                def run(task=task, kind=kind):
                    start = time.thread_time()
                    try:
                        task()
                    finally:
                        meter.add(kind, time.thread_time() - start)
                out.append((cost, run))
            return out

        stack.append((profile_module._Recorder, "tasks", tasks))
        profile_module._Recorder.tasks = timed_tasks

        observe = profile_module._Recorder.observe

        def timed_observe(self, value, array):  # graph inputs, on the main thread
            start = time.thread_time()
            observe(self, value, array)
            meter.add("graph inputs (main thread)", time.thread_time() - start)

        stack.append((profile_module._Recorder, "observe", observe))
        profile_module._Recorder.observe = timed_observe

        call = executable.CpuExecutable.__call__

        def timed_call(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return call(self, *args, **kwargs)
            finally:
                meter.add("main: float model (wall)", time.perf_counter() - start)

        stack.append((executable.CpuExecutable, "__call__", call))
        executable.CpuExecutable.__call__ = timed_call

        stats_observe = observers.StatsObserver.observe

        @functools.wraps(stats_observe)  # the tasks name their kind by __qualname__
        def timed_stats(self, array):
            start = time.thread_time()
            stats_observe(self, array)
            if threading.current_thread() is threading.main_thread():
                meter.add("main: StatsObserver updates (inputs, constants)",
                          time.thread_time() - start)

        stack.append((observers.StatsObserver, "observe", stats_observe))
        observers.StatsObserver.observe = timed_stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, calib = efficientnet_case()
    graph = lowbit.load(model)
    lowbit.profile(graph, calib[:2], progress=False)  # compiles (or loads) the program
    rows: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(args.repeats):
        meter, stack = Meter(), []
        meter.install(stack)
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            lowbit.profile(graph, calib, progress=False)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            for owner, name, original in reversed(stack):
                setattr(owner, name, original)
        rows["profile (wall)"].append(wall)
        rows["profile (CPU, every thread)"].append(cpu)
        for kind, seconds in meter.seconds.items():
            rows[kind].append(seconds)
    print(f"EfficientNet-Lite0: lowbit.profile on {len(calib)} photos, medians of "
          f"{args.repeats} runs (seconds)")
    for kind, values in sorted(rows.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {kind:50s} {statistics.median(values):7.3f}")


if __name__ == "__main__":
    main()
