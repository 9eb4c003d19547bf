"""`lowbit compare FLOAT QUANT --data DATA`: per-layer error of a quantized model against its
float original (lowbit.compare), worst layers first."""

from __future__ import annotations

import argparse

from lowbit.cli.calib_args import add_calibration_args, batches_from_args

EXAMPLE = """example:
  lowbit quantize model.onnx -o model.int8.onnx --calib calib.npz
  lowbit compare model.onnx model.int8.onnx --data test.npz --top 10"""


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="per-layer SQNR, cosine, clipping of a quantized model "
                       "against its float original", epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("float_model", metavar="FLOAT", help="the float ONNX model")
    p.add_argument("quant_model", metavar="QUANT", help="its quantized version (ONNX)")
    add_calibration_args(p, required=True, flag="--data")
    p.add_argument("--top", type=int, help="show only the N worst layers")
    p.set_defaults(handler=run)


def run(args) -> int:
    from rich.console import Console

    import lowbit

    float_graph = lowbit.load(args.float_model)
    quant_graph = lowbit.load(args.quant_model)
    result = lowbit.compare(float_graph, quant_graph, batches_from_args(args, float_graph))
    Console().print(result.table(args.top))
    return 0
