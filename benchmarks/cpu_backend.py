"""lowbit's compiled cpu backend against the peers, same run, same threads (issue 18).

Per model, batch 1, 2 threads (--threads): lowbit's int8 model (quantize defaults) on the cpu
backend; ONNX Runtime running lowbit's own QDQ export of that model (today's fastest way to run
it); OpenVINO running NNCF's int8 model of the same float network (nncf.quantize defaults, same
calibration data; CPU plugin, INFERENCE_NUM_THREADS, PERFORMANCE_HINT LATENCY). Runs are
interleaved (blocks of 10 runs of each in turn, a pause between blocks so that no runner's
spinning threads are still busy when the next starts) and the medians compared as ratios;
absolute times on a shared machine drift, the ratios less so.

Then the int8 GEMM micro-benchmark: lb_qgemm (uint8 x int8 -> int32, and requantized to uint8)
against ONNX Runtime's MatMulInteger at 128x768x768 and 128x768x3072, on 1 and 2 threads; the
last column sets each row against ONNX Runtime on one thread (issue 18: 95 % of it on one thread,
1.8x it on two).

    python benchmarks/cpu_backend.py [--threads 2] [--runs 200] [--models mnist,effnet,...]
"""

from __future__ import annotations

import argparse
import ctypes as C
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lowbit
from lowbit.backends import cpu
from lowbit.cli.demo import bundled
from realmodels import (
    efficientnet,
    load_photos,
    ocr_model,
    ocr_photos,
    ocr_text_lines,
)

MODELS = ("mnist", "effnet", "ocr_cls", "ocr_rec", "ocr_det")


def model_data(name: str):
    """(float ONNX path, input name, calibration batches, one timing input)."""
    if name == "mnist":
        with np.load(bundled("digits.npz")) as data:
            images = data["images"]
        return bundled("mnistnet.onnx"), "input", \
            [{"input": images[i:i + 50]} for i in range(0, 200, 50)], images[200:201]
    if name == "effnet":
        photos = load_photos()
        return efficientnet(True), "input", \
            [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)], photos[1:2]
    kind = name.split("_")[1]
    if kind == "det":
        data = ocr_photos()[:12]
    else:
        data = ocr_text_lines(24, width=192 if kind == "cls" else 320)
    return ocr_model(kind), "x", [{"x": data[i:i + 1]} for i in range(0, len(data), 3)], \
        data[1:2]


def ort_session(path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def openvino_nncf(src, calib, dst: Path, threads: int):
    """NNCF's int8 model of the float ONNX file, compiled by OpenVINO for the CPU."""
    import nncf
    import onnx
    import openvino as ov

    nncf.set_log_level(logging.ERROR)
    onnx.save(nncf.quantize(onnx.load(str(src)), nncf.Dataset(calib)), str(dst))
    core = ov.Core()
    return core.compile_model(core.read_model(str(dst)), "CPU", {
        "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})


def _thread_cpu_ns() -> dict[str, int]:
    """CPU time so far of each thread of this process but the calling one (Linux; else {})."""
    me, times = str(threading.get_native_id()), {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            if task.name != me:
                times[task.name] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return times


def settle(pause: float = 0.05, limit: float = 0.5, step: float = 0.01) -> None:
    """Sleep `pause` seconds, then on until no other thread of this process used more than
    2 % of a core during the last `step` (at most `limit` seconds in all).

    ONNX Runtime's intra-op workers keep spinning after `run` returns: about 20 ms on a quiet
    machine, 50-90 ms when other processes share the cores (measured: 4-8 ms of CPU per 5 ms
    step for 50-90 ms after ten 128x768x768 MatMulInteger runs), and a runner timed during that
    spin shares a core with it, so a 2-thread runner loses its second thread.
    """
    time.sleep(pause)
    end = time.perf_counter() + limit - pause
    before = _thread_cpu_ns()
    while time.perf_counter() < end:
        time.sleep(step)
        now = _thread_cpu_ns()
        if sum(now[k] - before.get(k, 0) for k in now) < 0.02 * step * 1e9:
            return
        before = now


def interleaved(runs: dict, repeats: int, block: int = 10, pause: float = 0.05
                ) -> dict[str, float]:
    """Median seconds of each runner, the runners taking turns in blocks of `block` runs.

    Between blocks the process settles (`settle`: at least `pause` seconds, and until no
    runner's threads still spin), so that a runner never shares its cores with the previous
    runner's spinning workers. Within a block each runner runs back to back, as a server
    would, with its own threads warm.
    """
    for run in runs.values():
        for _ in range(5):
            run()
    times: dict[str, list[float]] = {k: [] for k in runs}
    while len(next(iter(times.values()))) < repeats:
        for name, run in runs.items():
            settle(pause)
            for _ in range(block):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return {k: float(np.median(v)) for k, v in times.items()}


def model_row(name: str, threads: int, repeats: int, tmp: Path) -> str:
    src, input_name, calib, x = model_data(name)
    graph = lowbit.load(src)
    q = lowbit.quantize(graph, lowbit.profile(graph, calib, progress=False))
    start = time.perf_counter()
    try:
        exe = cpu.compile(q, threads=threads)
        exe({input_name: x})
    except lowbit.LowbitError as exc:
        return f"{name:8s}  lowbit cpu backend cannot compile it: {exc}"
    compile_s = time.perf_counter() - start
    qdq = tmp / f"{name}.qdq.onnx"
    lowbit.save(q, qdq)
    session = ort_session(qdq, threads)
    runs = {"lowbit": lambda: exe({input_name: x}),
            "ort": lambda: session.run(None, {input_name: x})}
    try:
        compiled = openvino_nncf(src, calib, tmp / f"{name}.nncf.onnx", threads)
        request = compiled.create_infer_request()
        runs["openvino"] = lambda: request.infer({0: x})
    except Exception as exc:  # a peer failing is reported, not fatal
        print(f"  ({name}: OpenVINO/NNCF failed: {type(exc).__name__}: {exc})")
    t = interleaved(runs, repeats)
    line = (f"{name:8s}  lowbit {t['lowbit'] * 1e3:7.3f} ms   ORT(QDQ) {t['ort'] * 1e3:7.3f} ms "
            f"  lowbit/ORT {t['lowbit'] / t['ort']:.2f}")
    if "openvino" in t:
        line += (f"   OpenVINO(NNCF) {t['openvino'] * 1e3:7.3f} ms   lowbit/OV "
                 f"{t['lowbit'] / t['openvino']:.2f}")
    return line + f"   (first compile {compile_s:.1f} s)"


def aligned64(a: np.ndarray) -> np.ndarray:
    """A copy of `a` at a 64-byte aligned address, where compiled programs place their packed
    weights (program.py lays constants out at multiples of 64; AMX tile loads of B rows that
    straddle cache lines made the 128x768x768 product about 1.2x slower)."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    start = -buf.ctypes.data % 64
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def gemm_rows(repeats: int) -> list[str]:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from lowbit.backends.cpu import library as L
    from lowbit.backends.cpu import packing
    from lowbit.numerics import fixed_point

    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in ((128, 768, 768), (128, 768, 3072)):
        a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        packed = aligned64(packing.pack_weights(w))
        offset, _ = packing.fold_offsets(w, 0, 3, None)
        offset = packing.padded(offset, np.int32)
        rq_arrays = packing.requant_arrays(fixed_point.encode(np.full(n, 2e-4), "prescale"), 0,
                                           0, 255, n)
        rq = packing.requant_struct(rq_arrays)
        pb = L.PackedB(packed.ctypes.data, n, k, k // 4)
        out32, out8 = np.empty((m, n), np.int32), np.empty((m, n), np.uint8)
        ep32 = L.Epilogue(offset.ctypes.data_as(L.i32p), L.i32p(), rq, L.I32, None, 0, None)
        ep8 = L.Epilogue(offset.ctypes.data_as(L.i32p), L.i32p(), rq, L.U8, None, 0, None)
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B", "az"], ["Y"])], "g",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])],
            [onnx.numpy_helper.from_array(np.ascontiguousarray(w.T), "B"),
             onnx.numpy_helper.from_array(np.array(3, np.uint8), "az")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        ort_one = float("nan")  # ORT's 1-thread median: lowbit on 2 threads against it too
        for threads in (1, 2):
            ctx = L.Context(threads)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            session = ort.InferenceSession(model.SerializeToString(), opts,
                                           providers=["CPUExecutionProvider"])
            fn = L.lib().lb_qgemm

            def ours(ep, out, ctx=ctx, fn=fn, a=a, pb=pb, m=m, n=n, k=k):
                fn(ctx.handle, m, n, k, a.ctypes.data, k, C.byref(pb), C.byref(ep),
                   out.ctypes.data, n, None)

            assert np.array_equal(session.run(None, {"A": a})[0],
                                  (ours(ep32, out32), out32)[1])
            t = interleaved({"ort": lambda s=session, a=a: s.run(None, {"A": a}),
                             "i32": lambda e=ep32, o=out32: ours(e, o),
                             "u8": lambda e=ep8, o=out8: ours(e, o)}, repeats)
            gop = 2 * m * k * n / 1e9
            ort_one = ort_one if threads > 1 else t["ort"]
            rows.append(f"{m}x{k}x{n} {threads} thread{'s' if threads > 1 else ' '}  "
                        f"ORT MatMulInteger {t['ort'] * 1e6:6.0f} us ({gop / t['ort']:4.0f} "
                        f"GOP/s)   lowbit int32 {t['i32'] * 1e6:6.0f} us ({gop / t['i32']:4.0f})"
                        f"   requantized uint8 {t['u8'] * 1e6:6.0f} us   ORT/lowbit "
                        f"{t['ort'] / t['i32']:.2f}   ORT 1 thread/lowbit "
                        f"{ort_one / t['i32']:.2f}")
            ctx.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-gemm", action="store_true")
    args = parser.parse_args()
    print(f"batch 1, {args.threads} threads, medians of {args.runs} interleaved runs")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            print(model_row(name, args.threads, args.runs, Path(tmp)), flush=True)
    if not args.no_gemm:
        print("int8 GEMM (A uint8, B int8, int32 results; medians)")
        for row in gemm_rows(args.runs):
            print(row, flush=True)


if __name__ == "__main__":
    main()
