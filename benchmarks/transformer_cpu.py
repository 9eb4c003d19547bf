"""all-MiniLM-L6-v2 on lowbit's compiled cpu backend against the peers, same run, same threads
(issue 19).

lowbit: `quantize_dynamic` defaults (per token and group of 32, grouped attention products) on
the cpu backend, one compiled program for every batch and sequence length. Peers, each given
the same token ids: ONNX Runtime running its own `quantize_dynamic` model (per channel, int8
weights) and the float model; OpenVINO running NNCF's int8 model of the float network
(`nncf.quantize`, `ModelType.TRANSFORMER`, calibrated on other Lee documents; CPU plugin,
INFERENCE_NUM_THREADS, PERFORMANCE_HINT LATENCY); PyTorch `quantize_dynamic` on nn.Linear
(per-tensor int8 weights, fbgemm).
"lowbit cpu, ORT file" is ONNX Runtime's quantize_dynamic file imported and compiled by lowbit
(bit-exact with lowbit's reference of that file), beside ONNX Runtime running the same file;
"lowbit cpu, PyTorch model" is PyTorch's quantized module imported by `lowbit.from_torch` and
compiled (fbgemm's 7-bit activation codes, bit-exact with lowbit's reference of the import),
beside PyTorch running the same module (torch.set_num_threads(threads)).
Inputs are real text (gensim's Lee corpus) cut or padded to the sequence length.

Timing: the runners take turns (interleaved rounds), medians compared as ratios to ONNX
Runtime's quantize_dynamic model; absolute times on a shared machine drift, ratios less so.
Accuracy: cosine of each sentence embedding (mean pooling, L2 norm) to the float model's, over
the batch-32 inputs at sequence 128.

    python benchmarks/transformer_cpu.py [--threads 2] [--runs 20] [--shapes 128x1,128x32,...]
        [--no-openvino] [--breakdown K] [--group-sizes 64,128]

--group-sizes adds lowbit runners quantized with other `group_size`s (a different product
definition, not the default: their cosines are printed beside the default's), to weigh the
cost of the per-group rescale against accuracy in the same run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lowbit
from lowbit.backends import cpu
from realmodels import lee_documents, minilm, minilm_path

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SHAPES = "128x1,128x32,16x1,16x32,512x1"

Runner = Callable[[dict[str, np.ndarray]], np.ndarray]


def tokens(texts: list[str], seq: int) -> dict[str, np.ndarray]:
    """Token ids of `texts`, cut or padded to exactly `seq` tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm_path())
    enc = tok(texts, padding="max_length", truncation=True, max_length=seq, return_tensors="np")
    return {k: np.asarray(enc[k], np.int64) for k in INPUTS}


def ort_runner(path: Path, threads: int) -> Runner:
    """ONNX Runtime on `threads` threads, not spinning between runs (runners taking turns
    would otherwise take CPU from one another)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda enc: session.run(None, {k: enc[k] for k in names})[0]


def openvino_runner(src: Path, calib: list[dict], threads: int) -> Runner:
    """NNCF's int8 model of the float network, compiled by OpenVINO for the CPU."""
    import nncf
    import openvino as ov

    nncf.set_log_level(logging.ERROR)
    core = ov.Core()
    model = nncf.quantize(core.read_model(str(src)), nncf.Dataset(calib),
                          model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib))
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                 "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    names = [p.get_any_name() for p in compiled.inputs]

    def run(enc):
        return request.infer({k: enc[k] for k in names})[0]

    return run


def torch_model(threads: int):
    """PyTorch's `quantize_dynamic` of nn.Linear (default qconfig: int8 weights per tensor,
    fbgemm), on `threads` threads: (input_ids, attention_mask, token_type_ids) ->
    last_hidden_state."""
    import torch

    from realmodels import minilm_module

    torch.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(minilm_module("eager"), {torch.nn.Linear},
                                                      dtype=torch.qint8)


def torch_runner(model) -> Runner:
    import torch

    def run(enc):
        with torch.no_grad():
            return model(*(torch.from_numpy(enc[k]) for k in INPUTS)).numpy()

    return run


def torch_imported(model, threads: int) -> tuple[Runner, cpu.CpuExecutable]:
    """PyTorch's quantized model imported by `lowbit.from_torch` and compiled by the cpu backend
    (fbgemm's activation parameters as TorchDynamicQuantize, bit-exact with lowbit's reference
    of the imported graph), and its executable."""
    import torch

    example = tokens(["Ok", "A longer sentence."], 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = lowbit.from_torch(model, tuple(torch.from_numpy(example[k]) for k in INPUTS),
                                  input_names=list(INPUTS),
                                  dynamic_axes={k: {0: "B", 1: "S"} for k in INPUTS})
    exe = cpu.compile(graph, threads=threads)
    out = graph.outputs[0].name
    return (lambda enc: exe(enc)[out]), exe


def breakdown(name: str, exe: cpu.CpuExecutable, feed: dict, top: int) -> None:
    """The `top` kinds of step taking most of `exe`'s time on `feed` (CpuExecutable.profile:
    the generated code's own per-step clock, mean of 5 runs), summed over the layers."""
    import re
    from collections import Counter

    kinds: Counter = Counter()
    steps = exe.profile(feed, runs=5)
    for step, seconds in steps:
        kinds[re.sub(r"\d+", "#", step.split(": ", 1)[-1])[:60]] += seconds
    total = sum(t for _, t in steps)
    print(f"{'':<12}{name}: {total * 1e3:.1f} ms in steps; " + ", ".join(
        f"{k} {100 * t / total:.0f}%" for k, t in kinds.most_common(top)))


def interleaved(runs: dict[str, Runner], feed: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each runner on `feed`: cpu_backend.interleaved, the runners taking
    turns in blocks of back-to-back runs (threads warm, as a server runs them), the process
    settling between blocks until no earlier runner's workers still spin (PyTorch's OpenMP
    workers and ONNX Runtime's spin after returning). Settling before every single run instead
    made ONNX Runtime's batch-1 time 1.5x longer (its workers cold each run), so it is not used."""
    from cpu_backend import interleaved as in_blocks

    return in_blocks({k: (lambda run=run: run(feed)) for k, run in runs.items()}, repeats,
                     block=min(5, repeats))


def group_runners(src: Path, sizes: str, threads: int) -> dict[str, Runner]:
    """lowbit's dynamic quantization with each `group_size` of `sizes` ("64,128"), compiled."""
    from lowbit.quant.config import QuantConfig

    runners: dict[str, Runner] = {}
    for size in (int(g) for g in sizes.split(",") if g):
        config = QuantConfig.from_dict({"default": {"group_size": size}})
        exe = cpu.compile(lowbit.quantize_dynamic(lowbit.load(src), config), threads=threads)
        runners[f"lowbit cpu, groups of {size}"] = (
            lambda enc, exe=exe: exe(enc)["last_hidden_state"])
    return runners


def megabytes(path: Path) -> float:
    """Size of an ONNX file with its external data files (same folder, name + ".data")."""
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + ".data"))
               if p.exists()) / 1e6


def embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    e = (np.asarray(hidden, np.float64) * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--shapes", default=SHAPES, help="SEQxBATCH,...")
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument("--breakdown", type=int, default=0, metavar="K",
                        help="also print the K costliest kinds of step of lowbit's program and "
                        "of the imported files")
    parser.add_argument("--group-sizes", default="", metavar="G,...",
                        help="also run lowbit quantized with these group_size values")
    args = parser.parse_args()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    docs, _ = lee_documents()
    src = minilm("eager", "dynamo")
    tmp = Path(tempfile.mkdtemp(prefix="lowbit-tcpu-"))
    start = time.perf_counter()
    q = lowbit.quantize_dynamic(lowbit.load(src))
    quant_s = time.perf_counter() - start
    lowbit.save(q, tmp / "lowbit.onnx")
    start = time.perf_counter()
    exe = cpu.compile(q.graph if hasattr(q, "graph") else q, threads=args.threads)
    compile_s = time.perf_counter() - start
    ort_q = tmp / "ort-dynamic.onnx"
    quantize_dynamic(str(src), str(ort_q), per_channel=True, weight_type=QuantType.QInt8)
    imported = cpu.compile(lowbit.load(ort_q), threads=args.threads)
    runs: dict[str, Runner] = {
        "lowbit cpu": lambda enc: exe(enc)["last_hidden_state"],
        **group_runners(src, args.group_sizes, args.threads),
        "ORT dynamic": ort_runner(ort_q, args.threads),
        "lowbit cpu, ORT file": lambda enc: imported(enc)["last_hidden_state"],
        "ORT fp32": ort_runner(src, args.threads),
    }
    if not args.no_openvino:
        calib = [tokens([d], 128) for d in docs[32:48]]
        try:
            runs["OpenVINO NNCF int8"] = openvino_runner(src, calib, args.threads)
        except Exception as exc:  # a peer failing is reported, not fatal
            print(f"(OpenVINO/NNCF failed: {type(exc).__name__}: {exc})")
    model = torch_model(args.threads)
    runs["PyTorch dynamic"] = torch_runner(model)
    runs["lowbit cpu, PyTorch model"], torch_exe = torch_imported(model, args.threads)

    print(f"all-MiniLM-L6-v2, {args.threads} threads, medians of {args.runs} interleaved runs; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"lowbit: quantize_dynamic {quant_s:.1f} s, first compile {compile_s:.1f} s, file "
          f"{megabytes(tmp / 'lowbit.onnx'):.1f} MB (ORT's {megabytes(ort_q):.1f} MB, float "
          f"{megabytes(src):.1f} MB)")
    acc = tokens(docs[:32], 128)
    ref = embedding(runs["ORT fp32"](acc), acc["attention_mask"])
    print("embedding cosine to float (32 Lee documents, seq 128): " + ", ".join(
        f"{name} {c.mean():.4f}/{c.min():.4f}" for name, run in runs.items() if name != "ORT fp32"
        for c in [(embedding(run(acc), acc["attention_mask"]) * ref).sum(1)]))
    names = list(runs)
    print(f"{'seq x batch':<12}" + "".join(f"{n:>22}" for n in names) + "   (ms; x ORT dynamic;"
          " sequences/s)")
    for shape in args.shapes.split(","):
        seq, batch = (int(x) for x in shape.split("x"))
        feed = tokens((docs * 2)[:batch], seq)
        t = interleaved(runs, feed, args.runs)
        base = t["ORT dynamic"]
        print(f"{shape:<12}" + "".join(f"{t[n] * 1e3:>11.2f} x{t[n] / base:4.2f} "
                                       f"{batch / t[n]:4.0f}" for n in names), flush=True)
        print(f"{'':<12}imported files: lowbit / ONNX Runtime on ORT's file "
              f"{t['lowbit cpu, ORT file'] / base:.2f}, lowbit / PyTorch on PyTorch's model "
              f"{t['lowbit cpu, PyTorch model'] / t['PyTorch dynamic']:.2f}", flush=True)
        if args.breakdown:
            breakdown("lowbit", exe, feed, args.breakdown)
            breakdown("ORT file", imported, feed, args.breakdown)
            breakdown("PyTorch model", torch_exe, feed, args.breakdown)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
