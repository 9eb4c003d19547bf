"""`lowbit quantize MODEL -o OUT.onnx --calib DATA`: static post-training quantization;
`lowbit quantize MODEL --dynamic -o OUT.onnx`: dynamic quantization (no calibration data);
with `--eval DATA --budget "agreement>=0.97"`, the fewest layers raised to higher precision
that meet the budget (lowbit.budget)."""

from __future__ import annotations

import argparse

from lowbit.cli.calib_args import add_calibration_args, batch_refs_from_args, batches_from_args
from lowbit.cli.data_files import add_fix_input_arg, fixed_inputs
from lowbit.errors import InputError
from lowbit.quant.config import CALIBRATION_METHODS, INTEGER_PRECISIONS, SCHEMES, QuantConfig
from lowbit.quant.static import QuantizationError, QuantSummary

EXAMPLE = """example:
  lowbit quantize model.onnx -o model.int8.onnx --calib calib.npz
  lowbit quantize bert.onnx --dynamic -o bert.dynamic.onnx --config q.yaml
  lowbit quantize model.onnx -o model.int8.onnx --calib images/ --mean 123.7 116.3 103.5 \\
      --std 58.4 57.1 57.4 --config q.yaml --format qoperator
  lowbit quantize model.onnx -o model.mixed.onnx --calib calib/ --eval test/ \\
      --budget "agreement>=0.97" --config-out chosen.yaml
  lowbit quantize bert.onnx --dynamic -o bert.mixed.onnx --eval texts/ \\
      --budget "cosine>=0.9995"

budgets: agreement>=X (top-1 agreement with the float model, X in [0, 1] or a percentage),
sqnr>=DB (outputs' SQNR), cosine>=X (the smallest per-sample cosine to the float outputs).
Exit status 3 when no choice meets the budget (nothing is written unless --write-anyway)."""

BUDGET_NOT_MET = 3


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
    budget = p.add_argument_group("accuracy budget (automatic mixed precision)")
    budget.add_argument("--budget", metavar="METRIC>=VALUE",
                        help="raise the fewest layers to higher precision (static: int16, then "
                             "float; dynamic: float) that meet this on --eval: "
                             "agreement>=0.97, sqnr>=30, cosine>=0.9995")
    budget.add_argument("--eval", metavar="DATA",
                        help="evaluation data for --budget (as --calib takes: .npy, .npz, image "
                             "folder, test_data_set folders; same preprocessing options)")
    budget.add_argument("--config-out", metavar="FILE.yaml",
                        help="write the chosen config (the one given plus a rule per raised "
                             "layer), to edit and pass to --config")
    budget.add_argument("--write-anyway", action="store_true",
                        help="when no choice meets the budget, still write the model and config "
                             "of the best configuration measured (exit status stays 3)")
    budget.add_argument("--no-latency", action="store_true",
                        help="do not time the chosen model on the cpu backend")
    p.add_argument("--dask", metavar="ADDRESS",
                   help="profile --calib, and run the --budget search, on a Dask cluster: a "
                        "scheduler address (tcp://host:8786) or local:N (docs/distributed.md)")
    p.set_defaults(handler=run)


def config_from_args(args) -> QuantConfig:
    config = QuantConfig.from_yaml(args.config) if args.config else QuantConfig()
    changes = {k: getattr(args, k) for k in ("calibration", "scheme", "precision", "per_channel")
               if getattr(args, k) is not None}
    return config.with_default(**changes) if changes else config


def run(args) -> int:
    _check_budget_args(args)
    if args.dask is None:
        return _run(args, None)
    from lowbit.cluster.connect import Cluster

    with Cluster(args.dask) as client:
        return _run(args, client)


def _run(args, client) -> int:
    import lowbit
    from lowbit.quant.profile import Profile
    from lowbit.quant.static import quantize

    if args.dynamic:
        return _run_dynamic(args, client)
    if (args.calib is None) == (args.profile is None):
        raise InputError("give calibration data with --calib DATA or a saved profile with "
                         "--profile PROFILE.yaml (one of them)")
    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    config = config_from_args(args)
    if args.profile:
        profile = Profile.load(args.profile, graph)
    elif client is not None:
        profile = lowbit.profile(graph, batch_refs_from_args(args, graph), client=client,
                                 moments=config.uses_input_moments())
    else:
        profile = lowbit.profile(graph, batches_from_args(args, graph),
                                 moments=config.uses_input_moments())
    if args.budget:
        return _run_budget(args, graph, config, profile, client)
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


def _run_dynamic(args, client) -> int:
    import lowbit
    from lowbit.quant.dynamic import quantize_dynamic

    if args.calib is not None or args.profile is not None:
        raise InputError("--dynamic needs no calibration data; drop --calib/--profile")
    if args.calibration is not None or args.format != "qdq":
        raise InputError("--dynamic takes neither --calibration nor --format (it writes "
                         "DynamicQuantizeLinear/MatMulInteger ONNX)")
    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    if args.budget:
        return _run_budget(args, graph, config_from_args(args), None, client)
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


def _check_budget_args(args) -> None:
    if args.dask is not None and args.calib is None and args.budget is None:
        raise InputError("--dask runs the profiling of --calib and the --budget search on a "
                         "cluster: give one of them")
    if args.budget is None:
        extra = [flag for flag, given in (("--eval", args.eval), ("--config-out", args.config_out),
                                          ("--write-anyway", args.write_anyway),
                                          ("--no-latency", args.no_latency)) if given]
        if extra:
            raise InputError(f"{', '.join(extra)} go with --budget")
        return
    if args.eval is None:
        raise InputError("--budget needs evaluation data: --eval DATA (held-out inputs, not the "
                         "calibration data)")
    if args.assert_all_quantized:
        raise InputError("--budget may keep layers in float: it does not go with "
                         "--assert-all-quantized")


def _run_budget(args, graph, config, profile, client) -> int:
    import sys

    import lowbit
    from lowbit.budget.metrics import Budget
    from lowbit.cli.calib_args import eval_batches_from_args

    budget = Budget.parse(args.budget)
    batches = eval_batches_from_args(args, graph)
    result = lowbit.quantize_to_budget(graph, budget, profile=profile, config=config,
                                       dynamic=args.dynamic, data=batches,
                                       latency=not args.no_latency, client=client)
    chosen = result.result if result.met else result.best_tried
    if chosen is not None and not args.quiet and (result.met or args.write_anyway):
        print(chosen.summary.text())
    print(result.text())
    if not result.met and not args.write_anyway:
        print("nothing written (--write-anyway writes the best configuration measured)",
              file=sys.stderr)
        return BUDGET_NOT_MET
    if chosen is None:
        print("nothing written: no configuration was measured on every batch", file=sys.stderr)
        return BUDGET_NOT_MET
    config_out = result.config if result.met else result.best_config
    if args.config_out:
        config_out.to_yaml(args.config_out)
        print(f"wrote {args.config_out}")
    form = "dynamic" if args.dynamic else args.format
    lowbit.save(chosen.graph, args.output, format=None if args.dynamic else args.format)
    print(f"wrote {args.output} ({form})")
    return 0 if result.met else BUDGET_NOT_MET
