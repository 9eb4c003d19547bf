"""Where the time of lowbit's dynamic all-MiniLM-L6-v2 goes on the cpu backend: each step of
the generated code (`CpuExecutable.profile`: CPU seconds of the process, so both threads'
work counts and time spent waiting for a core does not), summed over the layers by kind
(digits in the step names masked), largest first, for each shape.

    python benchmarks/transformer_profile.py [--threads 2] [--shapes 128x1,128x32] [--steps]

Finer detail (which kernel inside a step): `perf record -g -p PID` on a process running the
model in a loop, then `perf report --no-children --sort symbol`.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from transformer_cpu import tokens

import lowbit
from lowbit.backends import cpu
from realmodels import lee_documents, minilm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default="128x1,128x32", help="SEQxBATCH,...")
    parser.add_argument("--runs", type=int, default=0, help="default: 20 at batch 1, else 5")
    parser.add_argument("--steps", action="store_true", help="also every step of layer 0")
    args = parser.parse_args()
    docs, _ = lee_documents()
    q = lowbit.quantize_dynamic(lowbit.load(minilm("eager", "dynamo")))
    exe = cpu.compile(q.graph if hasattr(q, "graph") else q, threads=args.threads)
    for shape in args.shapes.split(","):
        seq, batch = (int(x) for x in shape.split("x"))
        feed = tokens((docs * 2)[:batch], seq)
        exe(feed)
        runs = args.runs or (20 if batch == 1 else 5)
        start = time.perf_counter()
        steps = exe.profile(feed, runs)
        wall = (time.perf_counter() - start) / runs
        total = sum(t for _, t in steps)
        print(f"== {shape}, {args.threads} threads: {wall * 1e3:.2f} ms wall per run, "
              f"{total * 1e3:.2f} ms CPU in {len(steps)} steps")
        kinds: dict[str, float] = defaultdict(float)
        count: Counter[str] = Counter()
        for name, t in steps:
            kind = re.sub(r"\d+", "#", name)
            kinds[kind] += t
            count[kind] += 1
        for kind, t in sorted(kinds.items(), key=lambda kv: -kv[1]):
            if t >= 0.002 * total:
                print(f"{t * 1e3:9.3f} ms {100 * t / total:5.1f} %  x{count[kind]:<3} {kind}")
        if args.steps:
            for name, t in steps[:40]:
                print(f"{t * 1e3:9.3f} ms  {name}")


if __name__ == "__main__":
    main()
