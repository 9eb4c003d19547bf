"""EfficientNet-Lite0 with 16-bit layers on lowbit's cpu backend, against a peer checkout.

Quantizes EfficientNet-Lite0 (calibrated on every third photo) in the mixed-precision configs
the budget search tries (W8A16, W16A8, W16A16, the first block W16A16, and W8A8 for scale),
then times one photo per inference on the cpu backend: this checkout's code and a peer's
(`--peer SRC`, e.g. /work/main/src) in separate processes, alternating round by round, each
printing the median wall and process-CPU milliseconds of `--runs` inferences. The table gives
medians over rounds and the ratio to the peer (same machine, same run).

    python benchmarks/int16_conv.py --peer /work/main/src [--threads 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIRST_BLOCK = r"node_Conv_(877|878|799)"  # stem, first depthwise, projection
CONFIGS = {
    "W8A8": {},
    "W8A16": {"default": {"precision": "int16"}},
    "W16A8": {"default": {"weight_precision": "int16"}},
    "W16A16": {"default": {"precision": "int16", "weight_precision": "int16"}},
    "first block W16A16": {"rules": [{"regex": FIRST_BLOCK, "precision": "int16",
                                      "weight_precision": "int16"}]},
    "first block A16": {"rules": [{"regex": FIRST_BLOCK, "precision": "int16"}]},
}


def models(cache: Path):
    """{config: quantized graph} and the timing input, pickled in `cache` after the first run."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    sys.path[:0] = [str(HERE.parent / "tests")]
    import lowbit
    from lowbit.quant.config import QuantConfig
    from realmodels import efficientnet, load_photos

    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    prof = lowbit.profile(graph, [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)],
                          progress=False)
    found = ({name: lowbit.quantize(graph, prof, QuantConfig.from_dict(cfg))
              for name, cfg in CONFIGS.items()}, {"input": photos[1:2]})
    cache.write_bytes(pickle.dumps(found))
    return found


def child(args) -> None:
    """Time every config with the lowbit on sys.path; one JSON line {config: [wall, cpu]}."""
    from lowbit.backends import cpu

    graphs, inputs = models(args.cache)
    out = {}
    for name, g in graphs.items():
        exe = cpu.compile(g, threads=args.threads)
        exe(inputs)
        wall, proc = [], []
        for _ in range(args.runs):
            w0, p0 = time.perf_counter(), time.process_time()
            exe(inputs)
            wall.append(time.perf_counter() - w0)
            proc.append(time.process_time() - p0)
        out[name] = [float(np.median(wall)) * 1e3, float(np.median(proc)) * 1e3]
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", type=Path, required=True, help="the peer's src directory")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/lowbit_int16_models.pkl"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    models(args.cache)  # made once, by this checkout
    sides = {"this": str(HERE.parent / "src"), "peer": str(args.peer)}
    got: dict[str, list[dict]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, src in sides.items():
            env = dict(os.environ, PYTHONPATH=src)
            run = subprocess.run([sys.executable, __file__, "--child", "--peer", str(args.peer),
                                  "--threads", str(args.threads), "--runs", str(args.runs),
                                  "--cache", str(args.cache)], env=env, check=True,
                                 capture_output=True, text=True)
            got[side].append(json.loads(run.stdout.strip().splitlines()[-1]))
    print(f"EfficientNet-Lite0, 1 photo, {args.threads} thread(s), medians of {args.runs} runs, "
          f"median over {args.rounds} alternating rounds (ms wall / ms process CPU)")
    print(f"{'config':20s} {'this':>17s} {'peer':>17s}  this/peer (wall, cpu)")
    for name in CONFIGS:
        med = {side: np.median([r[name] for r in got[side]], axis=0) for side in sides}
        t, p = med["this"], med["peer"]
        print(f"{name:20s} {t[0]:7.2f} / {t[1]:7.2f} {p[0]:7.2f} / {p[1]:7.2f}  "
              f"{t[0] / p[0]:.3f}, {t[1] / p[1]:.3f}")


if __name__ == "__main__":
    main()
