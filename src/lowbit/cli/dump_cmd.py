"""`lowbit dump MODEL --input NAME=FILE.npy ... [--nodes REGEX] [--npz OUT.npz]`: every node's
outputs with their printed types and statistics, and the integer parameters of quantized
kernels (lowbit.tools.dump)."""

from __future__ import annotations

import argparse

from lowbit.cli.data_files import add_fix_input_arg, add_input_arg, fixed_inputs, parse_inputs
from lowbit.cli.run_cmd import save_npz

EXAMPLE = """example:
  lowbit dump model.int8.onnx --input input=x.npy --nodes 'Conv' --npz values.npz"""


def add_parser(sub) -> None:
    p = sub.add_parser("dump", help="every node's outputs, types, statistics and integer "
                       "parameters on one input", epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file (float or quantized)")
    add_input_arg(p)
    p.add_argument("--nodes", metavar="REGEX",
                   help="only nodes whose name or op type matches (re.search)")
    p.add_argument("--npz", metavar="OUT.npz",
                   help="also write the output tensors (by value name) and the kernels' "
                   "parameter arrays (NODE.q31_multiplier, ...) to an .npz")
    add_fix_input_arg(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    import lowbit
    from lowbit.tools.dump import dump, render

    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    records, tensors = dump(graph, parse_inputs(args.input, graph), args.nodes,
                            keep=bool(args.npz))
    print(render(records))
    if args.npz:
        save_npz(args.npz, tensors)
        print(f"wrote {args.npz} ({len(tensors)} arrays)")
    return 0
