"""Does keeping the most sensitive layers in higher precision help? EfficientNet-Lite0 (static)
and all-MiniLM-L6-v2 (dynamic), with the config `lowbit.sensitivity` writes.

EfficientNet-Lite0: calibrated on every third real photo, layers ranked on 8 other photos;
top-1 agreement with float on all photos and the logits' SQNR, with lowbit's defaults and with
the top 1/3/5 layers in int16 (W16A16), in lowbit and in ONNX Runtime running lowbit's QDQ
export; ONNX Runtime's own quantize_static (per channel, same photos) in the same run.
MiniLM: layers ranked on 12 texts (6 words, 4 short sentences, 2 long texts, each alone);
embedding cosine to float (mean/min per group of texts of benchmarks/dynamic_vs_peers.py) and
the Lee Pearson score, defaults vs the top 1/3/5 in float, and ONNX Runtime's quantize_dynamic
(per channel) in the same run.

    python benchmarks/sensitivity_real_models.py [--per-group 70] [--only efficientnet|minilm]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests"), str(Path(__file__).parent)]

from dynamic_vs_peers import embed, ort_session, text_groups  # noqa: E402

import lowbit  # noqa: E402
from realmodels import (  # noqa: E402
    efficientnet,
    lee_documents,
    lee_pearson,
    load_photos,
    minilm,
    minilm_tokens,
    onnxruntime_outputs,
    ort_quantize,
)

TOPS = (0, 1, 3, 5)


def efficientnet_figures() -> None:
    photos = load_photos()
    source = efficientnet(True)
    graph = lowbit.load(source)
    calib = np.arange(0, len(photos), 3)
    ranking = np.setdiff1d(np.arange(len(photos)), calib)[::7][:8]
    calib_batches = [{"input": photos[i:i + 1]} for i in calib]
    prof = lowbit.profile(graph, calib_batches, progress=False)
    start = time.perf_counter()
    ranked = lowbit.sensitivity(graph, [{"input": photos[i:i + 1]} for i in ranking],
                                profile=prof, progress=False)
    print(f"EfficientNet-Lite0: {len(ranked.layers)} layers ranked on {len(ranking)} photos in "
          f"{time.perf_counter() - start:.0f} s; most sensitive:")
    for s in ranked.layers[:5]:
        print(f"  {s.name:<20} {s.op_type:<10} output SQNR {s.sqnr:6.2f} dB")
    run_float = lowbit.compile(graph)
    ref = np.concatenate([run_float({"input": p[None]})["logits"] for p in photos])

    def metrics(got: np.ndarray) -> str:
        agree = (got.argmax(1) == ref.argmax(1)).mean()
        noise = ((got.astype(np.float64) - ref) ** 2).sum()
        return f"{agree:>10.2%}{10 * np.log10((ref.astype(np.float64) ** 2).sum() / noise):>8.2f}"

    print(f"{'':<26}{'lowbit':>18}{'its QDQ in ONNX Runtime':>26}")
    print(f"{'top layers in int16':<26}" + f"{'agreement':>10}{'SQNR dB':>8}" * 2)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.onnx"
        for top in TOPS:
            q = lowbit.quantize(graph, prof, ranked.config(top))
            run = lowbit.compile(q)
            got = np.concatenate([run({"input": p[None]})["logits"] for p in photos])
            lowbit.save(q, path, format="qdq")
            print(f"{top:<26}{metrics(got)}{metrics(onnxruntime_outputs(path, photos, 'input'))}",
                  flush=True)
        ort_quantize(source, path, calib_batches, per_channel=True)
        print(f"{'ORT quantize_static, per channel (same calibration)':<44}"
              f"{metrics(onnxruntime_outputs(path, photos, 'input'))}", flush=True)


def minilm_figures(per_group: int) -> None:
    graph = lowbit.load(minilm("eager", "dynamo"))
    groups = text_groups(per_group)
    sample = groups["words"][:6] + groups["short"][:4] + groups["long"][:2]
    start = time.perf_counter()
    ranked = lowbit.sensitivity(graph, [minilm_tokens([t]) for t in sample], dynamic=True,
                                progress=False)
    print(f"MiniLM: {len(ranked.layers)} products ranked on {len(sample)} texts in "
          f"{time.perf_counter() - start:.0f} s; most sensitive:")
    for s in ranked.layers[:5]:
        print(f"  {s.name:<28} {s.op_type:<8} output SQNR {s.sqnr:6.2f} dB")
    docs, sims = lee_documents()
    float_run = lowbit.compile(graph)

    def runner(g):
        run = lowbit.compile(g)
        return lambda enc: run(enc)["last_hidden_state"]

    ref = {k: embed(runner(graph), v) for k, v in groups.items()}
    float_lee = lee_pearson(embed(lambda enc: float_run(enc)["last_hidden_state"], docs), sims)
    print(f"{'top layers in float':<22}" + "".join(f"{g + ' mean/min':>20}" for g in groups)
          + f"{'dLee':>9}")
    def row(label: str, run) -> str:
        text = f"{label:<22}"
        for g, texts in groups.items():
            cos = (embed(run, texts) * ref[g]).sum(1)
            text += f"{cos.mean():>12.4f}/{cos.min():.4f}"
        return text + f"{lee_pearson(embed(run, docs), sims) - float_lee:>+9.4f}"

    for top in TOPS:
        print(row(str(top), runner(lowbit.quantize_dynamic(graph, ranked.config(top)))),
              flush=True)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ort.onnx"
        quantize_dynamic(str(minilm("eager", "dynamo")), str(path), per_channel=True,
                         weight_type=QuantType.QInt8)
        print(row("ORT dynamic, per ch.", ort_session(path)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-group", type=int, default=70)
    parser.add_argument("--only", choices=("efficientnet", "minilm"))
    args = parser.parse_args()
    if args.only != "minilm":
        efficientnet_figures()
    if args.only != "efficientnet":
        minilm_figures(args.per_group)


if __name__ == "__main__":
    main()
