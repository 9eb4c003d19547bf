"""`lowbit demo`: quantize the bundled MNISTNet to int8 and compare it with the float model.

Offline and quick: 200 labelled digits calibrate, 300 others measure accuracy; the int8 model
runs on the compiled cpu backend (checked bit for bit against the reference interpreter) and is
timed there and in ONNX Runtime next to the float model.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np

EXAMPLE = """example:
  lowbit demo                      # quantize the bundled MNISTNet and compare
  lowbit demo --output mnist.int8.onnx"""

CALIBRATION = 200


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="quantize a small bundled model (MNISTNet) end to end",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", metavar="OUT.onnx", help="also write the int8 model (QDQ)")
    p.set_defaults(handler=run)


def bundled(name: str) -> Path:
    return Path(str(resources.files("lowbit") / "data" / name))


def _timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def run(args) -> int:
    import lowbit
    from lowbit.cli.inspect_cmd import summary
    from lowbit.quant.static import quantize

    model = bundled("mnistnet.onnx")
    with np.load(bundled("digits.npz")) as data:
        images, labels = data["images"], data["labels"]
    graph = lowbit.load(model)
    print(summary(graph))
    calib = [{"input": images[i:i + 50]} for i in range(0, CALIBRATION, 50)]
    test_x, test_y = images[CALIBRATION:], labels[CALIBRATION:]
    profile = lowbit.profile(graph, calib, progress=False)
    result = quantize(graph, profile)
    print()
    print(result.summary.text())
    float_run = lowbit.compile(graph)
    int_run = lowbit.compile(result.graph)
    ref, t_float = _timed(lambda: float_run({"input": test_x})["logits"])
    got, t_int = _timed(lambda: int_run({"input": test_x})["logits"])
    acc_f = float((ref.argmax(1) == test_y).mean())
    acc_q = float((got.argmax(1) == test_y).mean())
    cpu_lines = _cpu_backend(graph, result.graph, test_x, got)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.output) if args.output else Path(tmp) / "mnistnet.int8.onnx"
        lowbit.save(result.graph, out, format="qdq")
        size_q = out.stat().st_size
        ort_lines = _onnxruntime_check(model, out, test_x, got)
    size_f = model.stat().st_size
    print()
    print(f"MNISTNet on {len(test_y)} held-out digits (calibrated on {CALIBRATION} others)")
    print(f"  accuracy   float {acc_f:.2%}   int8 {acc_q:.2%}   "
          f"(top-1 agreement {float((ref.argmax(1) == got.argmax(1)).mean()):.2%})")
    print(f"  file size  float {size_f / 1e6:.2f} MB   int8 {size_q / 1e6:.2f} MB "
          f"({size_f / size_q:.1f}x smaller)")
    print(f"  time (reference interpreter, numpy, {len(test_y)} digits)  float "
          f"{t_float * 1e3:.0f} ms   int8 {t_int * 1e3:.0f} ms")
    for line in cpu_lines + ort_lines:
        print(f"  {line}")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _cpu_backend(float_graph, int_graph, x: np.ndarray, reference: np.ndarray) -> list[str]:
    """The compiled cpu backend: its int8 logits against the reference interpreter's, and
    batch-1 latencies of the int8 and float models (median of 200 runs)."""
    import lowbit
    from lowbit.errors import LowbitError

    try:
        int_exe = lowbit.compile(int_graph, backend="cpu")
        float_exe = lowbit.compile(float_graph, backend="cpu")
    except LowbitError as exc:  # no C compiler: say so, the rest of the demo still runs
        return [f"cpu backend unavailable: {exc}"]
    same = np.array_equal(int_exe({"input": x})["logits"], reference)
    t_int, t_float = (_median_latency(lambda f, e=e: e({"input": f}), x[:1])
                      for e in (int_exe, float_exe))
    return [f"cpu backend ({int_exe.threads} threads, {int_exe.isa}): int8 logits "
            f"{'bit-exact with' if same else 'DIFFERENT FROM'} the reference interpreter",
            f"cpu backend latency, batch 1   float {t_float * 1e3:.3f} ms   int8 "
            f"{t_int * 1e3:.3f} ms ({t_int / t_float:.2f}x the float time)"]


def _onnxruntime_check(float_model: Path, path: Path, x: np.ndarray, ours: np.ndarray
                       ) -> list[str]:
    """ONNX Runtime's top-1 agreement with lowbit on the exported int8 model, and its latency
    (batch 1, median of 200 runs) against the float model's."""
    import onnxruntime as ort

    float_session, int_session = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
                                  for p in (float_model, path))
    theirs = int_session.run(None, {"input": x})[0]
    agree = float((theirs.argmax(1) == ours.argmax(1)).mean())
    t_float, t_int = (_median_latency(lambda f, s=s: s.run(None, {"input": f}), x[:1])
                      for s in (float_session, int_session))
    return [f"ONNX Runtime on the exported int8 model: top-1 agreement with lowbit {agree:.2%}",
            f"ONNX Runtime latency, batch 1   float {t_float * 1e3:.3f} ms   int8 "
            f"{t_int * 1e3:.3f} ms ({t_int / t_float:.2f}x the float time)"]


def _median_latency(run, x: np.ndarray, runs: int = 200) -> float:
    run(x)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run(x)
        times.append(time.perf_counter() - start)
    return float(np.median(times))
