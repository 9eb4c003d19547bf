"""`lowbit inspect MODEL`: inputs and outputs with their types, op histogram, parameters."""

from __future__ import annotations

import argparse

from lowbit.cli.data_files import add_fix_input_arg, fixed_inputs
from lowbit.ir.graph import Graph, format_body
from lowbit.ir.types import format_type

EXAMPLE = """example:
  lowbit inspect model.onnx           # summary
  lowbit inspect model.onnx --nodes   # every node with its printed types"""


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="show a model's inputs, outputs, ops and parameters",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--nodes", action="store_true", help="list every node with its types")
    p.add_argument("--no-optimize", action="store_true",
                   help="show the graph as imported, before folding and fusion")
    add_fix_input_arg(p)
    p.set_defaults(handler=run)


def summary(graph: Graph, nodes: bool = False) -> str:
    """The text `lowbit inspect` prints for `graph`."""
    lines = [f"model {graph.name} (opset {graph.opset})", "inputs:"]
    lines += [f"  {v.name}: {format_type(v.type)}" for v in graph.inputs]
    lines.append("outputs:")
    lines += [f"  {v.name}: {format_type(v.type)}" for v in graph.outputs]
    hist = {k: n for k, n in graph.op_histogram().items() if k != "Constant"}
    lines.append(f"ops ({sum(hist.values())} nodes):")
    lines += [f"  {op:<24} {n}" for op, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))]
    bodies = [(f"{scope}/{n.name}/{attr}" if scope else f"{n.name}/{attr}", sub)
              for n, scope in graph.walk() for attr, sub in n.subgraphs()]
    if bodies:
        lines.append(f"subgraphs ({len(bodies)}):")
        for where, sub in bodies:
            ops = ", ".join(f"{op} {k}" for op, k in sub.op_histogram().items()
                            if op != "Constant")
            lines.append(f"  {where}: {ops or 'no ops'}")
    count, nbytes = graph.parameter_count()
    lines.append(f"parameters: {count:,} ({_size(nbytes)})")
    if nodes:
        lines.append("nodes:")
        body = format_body(graph, indent="  ")  # inputs, nodes with their subgraphs, outputs
        lines += body[len(graph.inputs):len(body) - len(graph.outputs)]
    return "\n".join(lines)


def _size(nbytes: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if nbytes >= div:
            return f"{nbytes / div:.2f} {unit}"
    return f"{nbytes} B"


def run(args) -> int:
    import lowbit

    graph = lowbit.load(args.model, optimize=not args.no_optimize,
                        fixed_inputs=fixed_inputs(args.fix_input))
    print(summary(graph, args.nodes))
    return 0
