"""`lowbit profile MODEL --calib DATA -o profile.yaml`: collect value ranges and histograms."""

from __future__ import annotations

import argparse

from lowbit.cli.calib_args import add_calibration_args, batches_from_args
from lowbit.cli.data_files import add_fix_input_arg, fixed_inputs

EXAMPLE = """example:
  lowbit profile model.onnx --calib calib.npz -o profile.yaml
  lowbit quantize model.onnx --profile profile.yaml -o model.int8.onnx"""


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="profile value ranges on calibration data",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.yaml")
    add_calibration_args(p, required=True)
    p.add_argument("--no-moments", action="store_true",
                   help="skip the products' input moments: a smaller file and faster "
                        "profiling, but weights then round to nearest instead of by GPTQ")
    add_fix_input_arg(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    import lowbit

    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    profile = lowbit.profile(graph, batches_from_args(args, graph), moments=not args.no_moments)
    profile.save(args.output)
    print(f"profiled {len(profile)} values on {profile.batches} batches ({profile.samples} "
          f"samples); wrote {args.output}")
    return 0
