"""`lowbit compare FLOAT QUANT --data DATA`: per-layer error of a quantized model against its
float original (lowbit.compare), worst layers first; with `--sensitivity`, the layers ranked by
the error each alone puts on the outputs (lowbit.tools.sensitivity) and a QuantConfig keeping
the most sensitive ones in higher precision."""

from __future__ import annotations

import argparse
import sys

from lowbit.cli.calib_args import add_calibration_args, batches_from_args
from lowbit.errors import InputError

REPORT_SAMPLES = 20000
"""Float values kept per layer for the report's histograms."""

PIPED_WIDTH = 240
"""Console width when stdout is not a terminal."""

EXAMPLE = """example:
  lowbit quantize model.onnx -o model.int8.onnx --calib calib.npz
  lowbit compare model.onnx model.int8.onnx --data test.npz --top 10 --report report.html
  lowbit compare model.onnx model.int8.onnx --data test.npz --sensitivity --keep 3 \\
      --config-out keep3.yaml --profile profile.yaml
  lowbit quantize model.onnx -o model.mixed.onnx --calib calib.npz --config keep3.yaml"""


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="per-layer SQNR, cosine, clipping of a quantized model "
                       "against its float original; --sensitivity ranks layers", epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("float_model", metavar="FLOAT", help="the float ONNX model")
    p.add_argument("quant_model", metavar="QUANT", help="its quantized version (ONNX)")
    add_calibration_args(p, required=True, flag="--data")
    p.add_argument("--top", type=int, help="show only the N worst layers")
    p.add_argument("--sort", choices=("sqnr", "own"), default="sqnr",
                   help="order layers by SQNR (all error up to each layer, default) or by own "
                   "SQNR (what each layer loses itself, its inputs the float model's values)")
    p.add_argument("--report", metavar="REPORT.html",
                   help="also write a self-contained HTML report: summary, SQNR chart, "
                   "histograms with clipping ranges, the graph coloured by SQNR (drawn by Graphviz "
                   "dot when installed, else listed), the QuantConfig")
    p.add_argument("--sensitivity", action="store_true",
                   help="also quantize one layer at a time, the rest float, with QUANT's config, "
                   "and rank layers by the error each puts on the outputs (in the report too, "
                   "with --report)")
    p.add_argument("--keep", type=int, default=3, metavar="N",
                   help="--sensitivity: how many of the most sensitive layers the suggested "
                   "config keeps in higher precision (default 3)")
    p.add_argument("--config-out", metavar="FILE.yaml",
                   help="--sensitivity: write QUANT's config with those layers raised")
    p.add_argument("--profile", metavar="FILE",
                   help="--sensitivity of a static model: the calibration profile QUANT was "
                   "made with (default: profile FLOAT on --data)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from rich.console import Console

    import lowbit

    if not args.sensitivity and (args.config_out or args.profile):
        raise InputError("--config-out and --profile go with --sensitivity")
    if args.keep < 0:
        raise InputError(f"--keep must be 0 or more, got {args.keep}")
    float_graph = lowbit.load(args.float_model)
    quant_graph = lowbit.load(args.quant_model)
    batches = batches_from_args(args, float_graph)
    # Piped or redirected output has no width to fit: give the tables the room they need
    # rather than rich's 80 columns, which fold every cell over several lines.
    console = Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)
    result = lowbit.compare(float_graph, quant_graph, batches,
                            samples=REPORT_SAMPLES if args.report else 0)
    console.print(result.table(args.top, args.sort))
    ranked = _sensitivity(args, float_graph, quant_graph, batches, console) \
        if args.sensitivity else None
    if args.report:
        from lowbit.tools.report import write_report

        notes = write_report(result, float_graph, quant_graph, args.report,
                             title=f"lowbit: {args.quant_model} against {args.float_model}",
                             sensitivity=ranked, keep=args.keep)
        console.print(f"wrote {args.report}")
        for note in notes:
            print(f"lowbit compare: {note}", file=sys.stderr)
    return 0


def _sensitivity(args, float_graph, quant_graph, batches, console):
    import lowbit
    from lowbit.quant.config import QuantConfig
    from lowbit.tools.sensitivity import sensitivity

    dynamic = quant_graph.metadata.get("lowbit.quantization") == "dynamic"
    recorded = quant_graph.metadata.get("lowbit.quant_config")
    if recorded is None:
        console.print(f"{args.quant_model} records no lowbit QuantConfig: ranking with "
                      f"lowbit's defaults")
        config = QuantConfig()
    else:
        config = QuantConfig.from_yaml_text(recorded, f"{args.quant_model} (recorded config)")
    profile = None
    if not dynamic:
        if args.profile:
            profile = lowbit.Profile.load(args.profile, float_graph)
        else:
            console.print("no --profile: calibrating on --data")
            profile = lowbit.profile(float_graph, batches)
    ranked = sensitivity(float_graph, batches, profile=profile, config=config, dynamic=dynamic)
    console.print(ranked.table(args.top))
    snippet = ranked.yaml_rules(args.keep)
    if snippet:
        console.print(f"rules keeping the {min(args.keep, len(ranked.layers))} most sensitive "
                      f"layers in higher precision (paste under `rules:`):", highlight=False)
        console.print(snippet, highlight=False, markup=False)
    if args.config_out:
        ranked.config(args.keep).to_yaml(args.config_out)
        console.print(f"wrote {args.config_out}")
    return ranked
