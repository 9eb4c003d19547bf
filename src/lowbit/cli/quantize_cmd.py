"""`lowbit quantize MODEL -o OUT.onnx --calib DATA`: static post-training quantization;
`lowbit quantize MODEL --dynamic -o OUT.onnx`: dynamic quantization (no calibration data)."""

from __future__ import annotations

import argparse

from lowbit.cli.calib_args import add_calibration_args, batches_from_args
from lowbit.cli.data_files import add_fix_input_arg, fixed_inputs
from lowbit.errors import InputError
from lowbit.quant.config import CALIBRATION_METHODS, INTEGER_PRECISIONS, SCHEMES, QuantConfig
from lowbit.quant.static import QuantizationError, QuantSummary

EXAMPLE = """example:
  lowbit quantize model.onnx -o model.int8.onnx --calib calib.npz
  lowbit quantize bert.onnx --dynamic -o bert.dynamic.onnx --config q.yaml
  lowbit quantize model.onnx -o model.int8.onnx --calib images/ --mean 123.7 116.3 103.5 \\
      --std 58.4 57.1 57.4 --config q.yaml --format qoperator"""


def add_parser(sub) -> None:
    p = sub.add_parser("quantize", help="quantize a model to 8- or 16-bit integers",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="float ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    add_calibration_args(p, required=False)
    p.add_argument("--profile", metavar="PROFILE.yaml", help="a saved `lowbit profile`")
    p.add_argument("--dynamic", action="store_true",
                   help="dynamic quantization: int8 weights, activation parameters computed at "
                        "run time (no --calib); written as ONNX MatMulInteger and friends")
    p.add_argument("--config", metavar="Q.yaml", help="QuantConfig YAML (default and rules)")
    p.add_argument("--calibration", choices=CALIBRATION_METHODS)
    p.add_argument("--scheme", choices=SCHEMES)
    p.add_argument("--precision", choices=INTEGER_PRECISIONS)
    granularity = p.add_mutually_exclusive_group()
    granularity.add_argument("--per-channel", dest="per_channel", action="store_true",
                             default=None, help="one weight scale per output channel (default)")
    granularity.add_argument("--per-tensor", dest="per_channel", action="store_false",
                             help="one weight scale per tensor")
    p.add_argument("--format", choices=("qdq", "qoperator"), default="qdq")
    p.add_argument("--assert-all-quantized", action="store_true",
                   help="fail if any node stays in float")
    p.add_argument("--allow-float", action="store_true",
                   help="write the model even when no node could be quantized (a float "
                   "copy); without it that is an error")
    p.add_argument("--quiet", action="store_true", help="do not print the per-node summary")
    add_fix_input_arg(p)
    p.set_defaults(handler=run)


def config_from_args(args) -> QuantConfig:
    config = QuantConfig.from_yaml(args.config) if args.config else QuantConfig()
    changes = {k: getattr(args, k) for k in ("calibration", "scheme", "precision", "per_channel")
               if getattr(args, k) is not None}
    return config.with_default(**changes) if changes else config


def run(args) -> int:
    import lowbit
    from lowbit.quant.profile import Profile
    from lowbit.quant.static import quantize

    if args.dynamic:
        return _run_dynamic(args)
    if (args.calib is None) == (args.profile is None):
        raise InputError("give calibration data with --calib DATA or a saved profile with "
                         "--profile PROFILE.yaml (one of them)")
    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    config = config_from_args(args)
    if args.profile:
        profile = Profile.load(args.profile, graph)
    else:
        profile = lowbit.profile(graph, batches_from_args(args, graph),
                                 moments=config.uses_input_moments())
    result = quantize(graph, profile, config, assert_all_quantized=args.assert_all_quantized)
    _refuse_nothing_quantized(result.summary, args, "static quantization")
    for warning in result.summary.warnings:
        print(f"warning: {warning}")
    if not args.quiet:
        print(result.summary.text())
    lowbit.save(result.graph, args.output, format=args.format)
    print(f"wrote {args.output} ({args.format})")
    return 0


def _refuse_nothing_quantized(summary: QuantSummary, args, what: str) -> None:
    """A model in which no node computes in integers would be written as a float copy: say so
    and refuse, unless --allow-float."""
    if summary.integer_nodes or args.allow_float:
        return
    floats = summary.float_nodes
    if not floats:
        reason = "the model has no node it applies to"
    else:
        shown = "; ".join(f"{r.name} ({r.op_type}): {r.detail}" for r in floats[:5])
        more = f"; and {len(floats) - 5} more" if len(floats) > 5 else ""
        reason = f"{len(floats)} node(s) stay float: {shown}{more}"
    raise QuantizationError(f"{args.model}: nothing to quantize with {what}: {reason}. Nothing "
                            f"was written; pass --allow-float to write the float copy anyway")


def _run_dynamic(args) -> int:
    import lowbit
    from lowbit.quant.dynamic import quantize_dynamic

    if args.calib is not None or args.profile is not None:
        raise InputError("--dynamic needs no calibration data; drop --calib/--profile")
    if args.calibration is not None or args.format != "qdq":
        raise InputError("--dynamic takes neither --calibration nor --format (it writes "
                         "DynamicQuantizeLinear/MatMulInteger ONNX)")
    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    result = quantize_dynamic(graph, config_from_args(args),
                              assert_all_quantized=args.assert_all_quantized)
    _refuse_nothing_quantized(result.summary, args, "dynamic quantization (MatMul and Gemm "
                              "products)")
    for warning in result.summary.warnings:
        print(f"warning: {warning}")
    if not args.quiet:
        print(result.summary.text())
    lowbit.save(result.graph, args.output)
    print(f"wrote {args.output} (dynamic)")
    return 0
