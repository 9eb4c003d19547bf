"""`lowbit compile MODEL.onnx -o DIR [--target T]`: a standalone C bundle of the model, built
with a C compiler alone (`make`) into a program that runs it on .npy files."""

from __future__ import annotations

import argparse
from pathlib import Path

from lowbit.cli.calib_args import add_calibration_args, batches_from_args
from lowbit.errors import InputError

EXAMPLE = """examples:
  lowbit compile mnist.onnx -o mnist --calib digits.npz            # int8, this machine
  cd mnist && make && ./mnist digit.npy logits.npy
  lowbit compile mnist.onnx -o arm --calib digits.npz --target aarch64 --name mnist
  cd arm && CC=aarch64-linux-gnu-gcc make
  lowbit compile bert.onnx -o bert --dynamic --dim S=128 --weights embed

Without --calib or --dynamic the model is compiled as it is (float, or the quantized
graph of an ONNX file lowbit can run). The bundle holds NAME.h, NAME.c, the kernel
library, NAME.weights (or NAME_weights.c with --weights embed), a Makefile, a
CMakeLists.txt and example_main.c."""


def add_parser(sub) -> None:
    from lowbit.backends.cpu.bundle import TARGETS, WEIGHT_MODES

    p = sub.add_parser("compile", help="write a standalone C bundle of a model (no Python "
                       "needed to build or run it)", epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", dest="folder", required=True, metavar="DIR",
                   help="the bundle's folder (made if missing; other files in it are kept)")
    p.add_argument("--target", metavar="TARGET",
                   help=f"{', '.join(TARGETS)} (default: this machine's)")
    p.add_argument("--weights", choices=WEIGHT_MODES, default="file",
                   help="file: NAME.weights beside the program (default); embed: a C array")
    p.add_argument("--name", help="C prefix and file names (default: from the model file)")
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=SIZE",
                   help="size of a symbolic input dimension other than the batch, e.g. S=128")
    add_calibration_args(p, required=False)
    p.add_argument("--dynamic", action="store_true",
                   help="quantize dynamically first (no calibration data)")
    p.add_argument("--config", metavar="Q.yaml", help="QuantConfig YAML for --calib/--dynamic")
    p.add_argument("--build", action="store_true",
                   help="also run make ($CC) in the bundle and report its code size")
    p.set_defaults(handler=run)


def parse_dims(specs: list[str]) -> dict[str, int]:
    dims = {}
    for spec in specs:
        symbol, sep, size = spec.partition("=")
        if not sep or not symbol or not size.strip().isdigit():
            raise InputError(f"--dim {spec!r}: write SYMBOL=SIZE, e.g. --dim S=128")
        dims[symbol] = int(size)
    return dims


def run(args) -> int:
    import lowbit
    from lowbit.backends.cpu.bundle import check_name, default_name, export_bundle, target_of
    from lowbit.quant.config import QuantConfig

    # everything about the request is checked before the model is read or a file is written
    target = target_of(args.target)
    name = check_name(args.name) if args.name else default_name(Path(args.model).stem)
    dims = parse_dims(args.dim)
    if args.dynamic and args.calib is not None:
        raise InputError("give --calib DATA (static quantization) or --dynamic, not both")
    config = QuantConfig.from_yaml(args.config) if args.config else None
    if config is not None and not (args.dynamic or args.calib is not None):
        raise InputError("--config needs --calib DATA or --dynamic (it says how to quantize)")

    graph = lowbit.load(args.model)
    if args.calib is not None:
        from lowbit.quant.static import quantize

        profile = lowbit.profile(graph, batches_from_args(args, graph), progress=False)
        graph = quantize(graph, profile, config).graph
    elif args.dynamic:
        graph = lowbit.quantize_dynamic(graph, config)
    bundle = export_bundle(graph, args.folder, target=target.name, weights=args.weights,
                           name=name, dims=dims)
    if args.build:
        bundle.build()
    print(bundle.summary())
    print(f"build: cd {args.folder} && make    (cross-compile: CC=... make; or cmake)")
    return 0
