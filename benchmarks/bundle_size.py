"""What a standalone C bundle weighs, per target, beside what the ONNX route ships.

MNISTNet (calibrated as `lowbit demo` does) and EfficientNet-Lite0 (calibrated on every third
real photo of ../shared/EVAL.md), int8 with lowbit's defaults, as bundles for each target
(`lowbit.export_bundle`), each built with make (x86-64 natively, 64-bit ARM with
aarch64-linux-gnu-gcc): the weights file, its weight matrices against the model's int8
parameter bytes, and the machine code of the model function and of the kernel library (ELF
executable sections of the objects). The peer: lowbit's own QDQ export of the same model (the
file ONNX Runtime runs) and the ONNX Runtime shared library such a deployment also needs.
Sizes only: nothing is timed (qemu emulates).

    python benchmarks/bundle_size.py [--targets x86-64-avx512vnni aarch64 ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests"),
                str(Path(__file__).parent.parent / "tests" / "backends" / "cpu")]

import lowbit  # noqa: E402
from lowbit.backends.cpu.bundle import TARGETS, export_bundle  # noqa: E402
from lowbit.cli.demo import bundled  # noqa: E402
from lowbit.quant.static import quantize  # noqa: E402
from realmodels import efficientnet, load_photos  # noqa: E402


def models() -> dict:
    graph = lowbit.load(bundled("mnistnet.onnx"))
    with np.load(bundled("digits.npz")) as data:
        images = data["images"]
    prof = lowbit.profile(graph, [{"input": images[i:i + 50]} for i in range(0, 200, 50)],
                          progress=False)
    out = {"MNISTNet": quantize(graph, prof).graph}
    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib = [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)]
    out["EfficientNet-Lite0"] = quantize(graph, lowbit.profile(graph, calib,
                                                               progress=False)).graph
    return out


def onnxruntime_library() -> int:
    import onnxruntime

    root = Path(onnxruntime.__file__).parent
    return sum(p.stat().st_size for p in root.rglob("*.so*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    args = parser.parse_args()
    from bundle_tools import compiler

    runtime = onnxruntime_library()
    print(f"{'model':20} {'target':18} {'weights':>10} {'matrices/int8':>14} "
          f"{'model code':>11} {'library code':>13}")
    with tempfile.TemporaryDirectory(prefix="lowbit-bundle-size-") as tmp:
        for name, q in models().items():
            for target in args.targets:
                bundle = export_bundle(q, Path(tmp) / f"{name}-{target}", target=target,
                                       name="model")
                bundle.build(cc=compiler(bundle))
                print(f"{name:20} {target:18} {bundle.weights_bytes:>10} "
                      f"{bundle.weight_data_bytes / bundle.int8_parameter_bytes:>13.3f}x "
                      f"{bundle.code_bytes['model function']:>11} "
                      f"{bundle.code_bytes['kernel library']:>13}")
                shutil.rmtree(bundle.directory)
            qdq = Path(tmp) / f"{name}.onnx"
            lowbit.save(q, qdq)
            print(f"{name:20} {'peer: QDQ ONNX':18} {qdq.stat().st_size:>10} {'':>14} "
                  f"{'':>11} {runtime:>13}  (ONNX Runtime's shared libraries)")


if __name__ == "__main__":
    main()
