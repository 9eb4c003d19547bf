"""Per-layer times of OpenVINO running NNCF's int8 model (the peer of benchmarks/cpu_backend.py),
to set beside lowbit's per-step medians (benchmarks/cpu_profile.py) on the same model.

The float ONNX model is quantized by NNCF (defaults, the calibration data of cpu_backend.py) and
compiled by OpenVINO's CPU plugin with PERF_COUNT on; after `--runs` inferences each executed
layer's real time (microseconds, OpenVINO's own counter, last inference) is listed with its
layer type, the kernel OpenVINO chose (e.g. `brgconv_avx512_1x1_I8`, `jit_avx512_I8`) and its
execution precision, which shows which layers OpenVINO runs in int8, which in float, and what it
fused (fused layers do not appear). Then the time summed by layer type and by precision.

    python benchmarks/openvino_profile.py [--model ocr_rec] [--threads 1] [--runs 100] [--top 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import openvino as ov
    from cpu_backend import model_data, openvino_nncf

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ocr_rec")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    src, _, calib, x = model_data(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        nncf_model = openvino_nncf(src, calib, Path(tmp) / "nncf.onnx", args.threads)
        core = ov.Core()
        model = core.read_model(str(Path(tmp) / "nncf.onnx"))
    compiled = core.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": args.threads, "PERFORMANCE_HINT": "LATENCY",
        "PERF_COUNT": "YES"})
    del nncf_model
    request = compiled.create_infer_request()
    per_layer: dict[str, list[float]] = defaultdict(list)
    info: dict[str, tuple[str, str, str]] = {}
    for _ in range(args.runs):
        request.infer({0: x})
        for p in request.get_profiling_info():
            if p.status != p.Status.EXECUTED:
                continue
            per_layer[p.node_name].append(p.real_time.total_seconds())
            info[p.node_name] = (p.node_type, p.exec_type, p.exec_type.rsplit("_", 1)[-1])
    med = {name: float(np.median(ts)) for name, ts in per_layer.items()}
    total = sum(med.values())
    print(f"{args.model}: OpenVINO {len(med)} executed layers, sum of layer medians "
          f"{total * 1e3:.3f} ms ({args.threads} thread{'s' if args.threads > 1 else ''})")
    for title, key in (("by layer type", 0), ("by execution precision", 2)):
        print(title + ":")
        sums: dict[str, list[float]] = defaultdict(list)
        for name, t in med.items():
            sums[info[name][key]].append(t)
        for k, ts in sorted(sums.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {k:28s} {len(ts):4d} layers {sum(ts) * 1e3:8.3f} ms "
                  f"{100 * sum(ts) / total:5.1f} %")
    print(f"top {args.top} layers:")
    for name in sorted(med, key=lambda n: -med[n])[:args.top]:
        node_type, exec_type, _ = info[name]
        print(f"  {med[name] * 1e6:8.1f} us  {name} ({node_type}, {exec_type})")


if __name__ == "__main__":
    main()
