"""Quantizing to an accuracy budget on real models: what lowbit raises, what it reaches and how
long it takes, beside NNCF's `quantize_with_accuracy_control` (OpenVINO) in the same run.

EfficientNet-Lite0 (static): calibrated on every third real photo, budget `agreement>=0.97`
(top-1 agreement with the float model) on the other photos. NNCF gets the same photos, its
metric the same agreement and `max_drop` 0.03 (the float model agrees with itself: 1.0), and
its model is measured here on the same photos.
MiniLM (dynamic): the texts of benchmarks/dynamic_vs_peers.py (words, short sentences, long
texts; each text alone), budgets `cosine>=0.9995` on the last hidden state (the smallest
per-text cosine) and the same bound on the sentence embedding (mean pooling, L2 norm; a
per-sample user metric, `lowbit.Budget(metric, 0.9995, reduce="min")`).

Times are wall and CPU seconds of this process, with the load average before and after: the
machine is shared. OpenBLAS threads matter on a loaded machine (OPENBLAS_NUM_THREADS=1 made
the reference interpreter 3x faster at load 12 on 2 cores); the setting is printed.

    python benchmarks/budget_real_models.py [--only efficientnet|minilm] [--per-group 8]
        [--no-nncf]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests"), str(Path(__file__).parent)]

from dynamic_vs_peers import embedding, text_groups  # noqa: E402

import lowbit  # noqa: E402
from realmodels import efficientnet, load_photos, minilm, minilm_tokens  # noqa: E402


class Clock:
    """Wall and CPU seconds since creation, and the load average."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.load = time.perf_counter(), time.process_time(), \
            os.getloadavg()[0]

    def __str__(self) -> str:
        return (f"{time.perf_counter() - self.wall:.0f} s wall, "
                f"{time.process_time() - self.cpu:.0f} s CPU, load {self.load:.1f} -> "
                f"{os.getloadavg()[0]:.1f}")


def efficientnet_figures(nncf: bool) -> None:
    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib = np.arange(0, len(photos), 3)
    rest = np.setdiff1d(np.arange(len(photos)), calib)
    clock = Clock()
    prof = lowbit.profile(graph, [{"input": photos[i:i + 1]} for i in calib], progress=False)
    print(f"EfficientNet-Lite0: profiled {len(calib)} photos in {clock}")
    clock = Clock()
    budget = lowbit.Budget.parse("agreement>=0.97", [{"input": photos[i:i + 1]} for i in rest])
    result = lowbit.quantize_to_budget(graph, budget, profile=prof, progress=False)
    print(result.text())
    print(f"  budget search: {clock}", flush=True)
    if nncf:
        nncf_figures(photos, calib, rest)


def nncf_figures(photos: np.ndarray, calib: np.ndarray, rest: np.ndarray) -> None:
    import nncf
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(efficientnet(True)))
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 2,
                                                 "INFERENCE_PRECISION_HINT": "f32"})
    reference = np.array([compiled(photos[i:i + 1])[0].argmax() for i in rest])

    def agreement(run, dataset) -> float:
        """NNCF calls this with a compiled model and the validation Dataset."""
        items = dataset.get_inference_data() if hasattr(dataset, "get_inference_data") \
            else dataset
        top = np.array([run(x)[0].argmax() for x in items])
        return float((top == reference[:len(top)]).mean())

    clock = Clock()
    quantized = nncf.quantize_with_accuracy_control(
        model, nncf.Dataset([photos[i:i + 1] for i in calib]),
        nncf.Dataset([photos[i:i + 1] for i in rest]), agreement, max_drop=0.03,
        subset_size=len(calib))
    value = agreement(core.compile_model(quantized, "CPU", {"INFERENCE_NUM_THREADS": 2,
                                                            "INFERENCE_PRECISION_HINT": "f32"}),
                      [photos[i:i + 1] for i in rest])
    fake = sum(1 for op in quantized.get_ops() if op.get_type_name() == "FakeQuantize")
    print(f"  NNCF quantize_with_accuracy_control, max_drop 0.03: agreement {value:.2%} "
          f"({fake} FakeQuantize left); {clock}", flush=True)


def minilm_figures(per_group: int) -> None:
    graph = lowbit.load(minilm("eager", "dynamo"))
    groups = text_groups(per_group)
    texts = groups["words"] + groups["short"] + groups["long"][:2]
    batches = [minilm_tokens([t]) for t in texts]
    print(f"MiniLM, dynamic: {len(texts)} texts ({per_group} words, {per_group} short "
          f"sentences, 2 long texts)")
    clock = Clock()
    hidden = lowbit.quantize_to_budget(graph, lowbit.Budget.parse("cosine>=0.9995", batches),
                                       dynamic=True, progress=False)
    print(hidden.text())
    print(f"  budget search: {clock}", flush=True)

    def embedding_cosine(quantized, reference):
        """Per text (each alone, so unpadded: the pooling mask is all ones)."""
        q, f = quantized["last_hidden_state"], reference["last_hidden_state"]
        ones = np.ones(q.shape[:2])
        return (embedding(q, ones) * embedding(f, ones)).sum(1)

    clock = Clock()
    emb = lowbit.quantize_to_budget(
        graph, lowbit.Budget(embedding_cosine, 0.9995, batches, reduce="min",
                             name="embedding cosine"), dynamic=True, progress=False)
    print(emb.text())
    print(f"  budget search: {clock}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("efficientnet", "minilm"))
    parser.add_argument("--per-group", type=int, default=8)
    parser.add_argument("--no-nncf", action="store_true")
    args = parser.parse_args()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
          f"{os.cpu_count()} CPUs")
    if args.only != "minilm":
        efficientnet_figures(not args.no_nncf)
    if args.only != "efficientnet":
        minilm_figures(args.per_group)


if __name__ == "__main__":
    main()
