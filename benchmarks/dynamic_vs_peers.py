"""Dynamic int8 quantization of all-MiniLM-L6-v2: lowbit vs ONNX Runtime quantize_dynamic (per
tensor, per channel) vs PyTorch torch.ao.quantization.quantize_dynamic, same run, same texts.

Metrics (../shared/EVAL.md): cosine of each sentence embedding (mean pooling over the attention
mask, L2 normalised) to the float one, mean and minimum per group of texts (single words, short
sentences, long texts, each text run alone), and the Pearson correlation of the embeddings'
cosine similarities with the human similarity judgements of the Lee corpus (50 news documents).
All texts are real: gensim's test data (`pip download --no-deps gensim`, cached in
.cache/gensim). Timing: batch 1 at sequence length 128, 2 threads, as ratios to ONNX Runtime's
per-channel dynamic model in the same run (lowbit's model runs as its ONNX export in ONNX
Runtime; lowbit's own compiled backend does not exist yet). "lowbit per row" is the
`granularity: row` setting (no groups), whose export runs faster in ONNX Runtime.

    python benchmarks/dynamic_vs_peers.py [--per-group 70] [--no-timing]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests")]

import lowbit  # noqa: E402
from lowbit.quant.config import QuantConfig  # noqa: E402
from realmodels import (  # noqa: E402
    gensim_data,
    lee_documents,
    lee_pearson,
    minilm,
    minilm_path,
    minilm_tokens,
)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def text_groups(per_group: int) -> dict[str, list[str]]:
    """Words (1-2 words cut from the sentences, a few fixed interjections first), short sentences
    (3-12 words) and long texts (Lee documents), each `per_group` long, deterministic."""
    data = gensim_data()
    sentences = (data / "pang_lee_polarity.cor").read_text(encoding="latin-1").splitlines()
    sentences = [re.sub(r"^\S+\s+", "", s).strip() for s in sentences if s.strip()]
    docs = [d.strip() for d in (data / "lee.cor").read_text(encoding="latin-1").splitlines()
            if d.strip()]
    rng = np.random.default_rng(0)
    words = ["Ok", "Thanks a lot!", "Hi", "Yes", "No way", "Great"]
    tokens = [w for s in sentences for w in s.split() if w.isalpha()]
    while len(words) < per_group:
        i = int(rng.integers(len(tokens) - 1))
        words.append(" ".join(tokens[i:i + 1 + int(rng.integers(2))]).capitalize())
    short = [s for s in sentences if 3 <= len(s.split()) <= 12]
    while len(short) < per_group:  # cut longer sentences at a clause
        s = sentences[int(rng.integers(len(sentences)))].split()
        short.append(" ".join(s[:int(rng.integers(4, 12))]))
    long = docs + [s for s in sentences if len(s.split()) > 25]
    return {"words": words[:per_group], "short": short[:per_group], "long": long[:per_group]}


def embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    e = (np.asarray(hidden, np.float64) * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


Runner = Callable[[dict[str, np.ndarray]], np.ndarray]


def embed(run: Runner, texts: list[str]) -> np.ndarray:
    out = []
    for t in texts:
        enc = minilm_tokens([t])
        out.append(embedding(run(enc), enc["attention_mask"])[0])
    return np.array(out)


def ort_session(path: Path, spinning: bool = True):
    """A runner of the ONNX Runtime model at `path` on 2 threads. `spinning=False` stops its
    threads from spinning after each run waiting for the next: sessions timed in turns
    (`interleaved`) would otherwise take CPU from one another (the same EfficientNet-Lite0 file
    measured 0.47x and 0.70x its float model in one such run, 0.52x both without spinning)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda enc: session.run(None, {k: enc[k] for k in names})[0]


def torch_runner(quantized: bool) -> Runner:
    import torch
    from transformers import AutoModel

    torch.set_num_threads(2)
    model = AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()
    if quantized:
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear},
                                                       dtype=torch.qint8)

    def run(enc):
        with torch.no_grad():
            out = model(**{k: torch.from_numpy(enc[k]) for k in INPUTS})
        return out.last_hidden_state.numpy()

    return run


def timed(run: Callable[[dict], object], feed: dict, repeats: int) -> float:
    """Mean seconds of `run(feed)` over `repeats` runs, after one warm-up run."""
    run(feed)
    start = time.perf_counter()
    for _ in range(repeats):
        run(feed)
    return (time.perf_counter() - start) / repeats


def interleaved(runs: dict[str, Callable[[dict], object]], feed: dict, repeats: int,
                rounds: int = 10) -> dict[str, float]:
    """Median seconds of each `runs[label](feed)` over `repeats` runs, taken in `rounds` rounds
    that visit every runner in turn, after one warm-up run each: on a shared machine whose speed
    drifts from minute to minute, every runner sees the same drift, and the median drops the
    runs another process interrupted. ONNX Runtime sessions need `ort_session(path,
    spinning=False)` here."""
    seconds: dict[str, list[float]] = {label: [] for label in runs}
    for run in runs.values():
        run(feed)
    for _ in range(rounds):
        for label, run in runs.items():
            for _ in range(max(1, repeats // rounds)):
                start = time.perf_counter()
                run(feed)
                seconds[label].append(time.perf_counter() - start)
    return {label: float(np.median(t)) for label, t in seconds.items()}


def latency(run: Runner, repeats: int = 20) -> float:
    """Seconds per batch-1 run of 128 tokens."""
    return timed(run, minilm_tokens([" ".join(["word"] * 126)]), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-group", type=int, default=70)
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    groups = text_groups(args.per_group)
    docs, sims = lee_documents()
    src = minilm("eager", "dynamo")
    tmp = Path(tempfile.mkdtemp(prefix="lowbit-dyn-"))
    graph = lowbit.load(src)
    q = lowbit.quantize_dynamic(graph)
    lowbit.save(q, tmp / "lowbit.onnx")
    runners: dict[str, Runner] = {"float": ort_session(src)}
    runners["lowbit"] = lambda enc: lowbit.run(q, enc)["last_hidden_state"]
    runners["lowbit (ONNX export in ORT)"] = ort_session(tmp / "lowbit.onnx")
    rows = lowbit.quantize_dynamic(graph, QuantConfig().with_default(granularity="row"))
    lowbit.save(rows, tmp / "lowbit-row.onnx")
    runners["lowbit per row (export)"] = ort_session(tmp / "lowbit-row.onnx")
    for per_channel in (False, True):
        dst = tmp / f"ort-{per_channel}.onnx"
        quantize_dynamic(str(src), str(dst), per_channel=per_channel,
                         weight_type=QuantType.QInt8)
        runners[f"ORT dynamic per-{'channel' if per_channel else 'tensor'}"] = ort_session(dst)
    runners["PyTorch dynamic"] = torch_runner(True)

    all_texts = [t for g in groups.values() for t in g]
    print(f"{len(all_texts)} texts: " + ", ".join(f"{len(v)} {k}" for k, v in groups.items()))
    ref = embed(runners["float"], all_texts)
    ref_lee = embed(runners["float"], docs)
    print(f"float Lee Pearson {lee_pearson(ref_lee, sims):.4f}", flush=True)
    header = f"{'model':<28}" + "".join(f"{g + ' mean/min':>20}" for g in groups)
    header += f"{'all mean/min':>18}{'Lee r':>8}{'dLee':>8}"
    print(header)
    float_lee = lee_pearson(ref_lee, sims)
    worst: list[str] = []
    for name, run in runners.items():
        if name == "float":
            continue
        emb = embed(run, all_texts)
        cos = (emb * ref).sum(1)
        if name == "lowbit":
            worst = [all_texts[i][:30] for i in np.argsort(cos)[:5]]
        row, start = f"{name:<28}", 0
        for texts in groups.values():
            c = cos[start:start + len(texts)]
            start += len(texts)
            row += f"{c.mean():>12.4f}/{c.min():.4f}"
        r = lee_pearson(embed(run, docs), sims)
        row += f"{cos.mean():>10.4f}/{cos.min():.4f}{r:>8.4f}{r - float_lee:>+8.4f}"
        print(row, flush=True)
    print("lowbit's worst texts:", worst)
    if args.no_timing:
        return
    timed = {k: v for k, v in runners.items() if k != "lowbit"}
    timed["PyTorch float"] = torch_runner(False)
    times = {k: latency(v) for k, v in timed.items()}
    base = times["ORT dynamic per-channel"]
    print("latency, batch 1, seq 128, 2 threads (ratio to ORT dynamic per-channel):")
    for k, t in times.items():
        print(f"  {k:<28}{t * 1e3:8.2f} ms  x{t / base:.2f}")


if __name__ == "__main__":
    main()
