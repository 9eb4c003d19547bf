"""`lowbit run MODEL --input NAME=FILE.npy ... [--backend cpu]`: run a model with the reference
interpreter (the default) or the compiled cpu backend."""

from __future__ import annotations

import argparse
import os

import numpy as np

from lowbit.cli.data_files import add_fix_input_arg, add_input_arg, fixed_inputs, parse_inputs
from lowbit.fileio import atomic_path

EXAMPLE = """example:
  lowbit run model.onnx --input input=x.npy --output out.npz
  lowbit run model.int8.onnx --input x.npy --backend cpu --threads 2"""


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a model on inputs from .npy files", epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file")
    add_input_arg(p)
    p.add_argument("--output", metavar="OUT.npz", help="write the outputs to an .npz file")
    add_backend_args(p)
    add_fix_input_arg(p)
    p.set_defaults(handler=run)


def add_backend_args(p) -> None:
    """`--backend` and `--threads` (shared with `lowbit bench`)."""
    p.add_argument("--backend", choices=("reference", "cpu"), default="reference",
                   help="reference: the numpy interpreter that defines lowbit's arithmetic; "
                   "cpu: the graph compiled to C (same integers, bit for bit)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="cpu backend threads (default: the physical cores)")


def compile_for(graph, args):
    """The executable of `graph` for the backend the options name."""
    import lowbit

    if args.threads is not None and args.threads < 1:
        from lowbit.errors import InputError

        raise InputError(f"--threads must be at least 1, got {args.threads}")
    if args.backend == "cpu":
        return lowbit.compile(graph, backend="cpu", threads=args.threads)
    return lowbit.compile(graph)


def save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """Write arrays to an .npz atomically (lowbit.fileio.atomic_path)."""
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)


def run(args) -> int:
    import lowbit

    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    outputs = compile_for(graph, args)(parse_inputs(args.input, graph))
    for name, a in outputs.items():
        stats = ""
        if a.size and a.dtype.kind in "fiu":
            stats = f" min {a.min():.6g} max {a.max():.6g} mean {a.astype(np.float64).mean():.6g}"
        print(f"{name}: {a.dtype} {list(a.shape)}{stats}")
    if args.output:
        save_npz(args.output, outputs)
        print(f"wrote {args.output}")
    return 0
