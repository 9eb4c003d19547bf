"""The `lowbit` command. Thin: every verb parses its arguments and calls the Python API.

Errors are one line, `lowbit: error: <message>`, exit code 1 (2 for bad command-line usage),
with no traceback unless `--debug`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np

from lowbit.errors import LowbitError
from lowbit.fileio import check_writable

VERBS = ("inspect", "run", "dump", "profile", "quantize", "compare", "compile", "bench", "demo")
OUTPUT_OPTIONS = ("output", "report", "config_out", "npz")
"""Options naming a file a verb writes: checked before any work (a missing folder is
reported at once, not after minutes of profiling)."""


def build_parser() -> argparse.ArgumentParser:
    from lowbit.cli import (
        bench_cmd,
        compare_cmd,
        compile_cmd,
        demo,
        dump_cmd,
        inspect_cmd,
        profile_cmd,
        quantize_cmd,
        run_cmd,
    )

    parser = argparse.ArgumentParser(
        prog="lowbit", description="lowbit: a post-training quantization compiler for neural "
        "networks. Run `lowbit demo` for a first look.")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks and verify the IR after every pass")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in (inspect_cmd, run_cmd, dump_cmd, profile_cmd, quantize_cmd, compare_cmd,
                   compile_cmd, bench_cmd, demo):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.debug:
        os.environ["LOWBIT_VERIFY"] = "1"
    try:
        # Numbers that overflow or turn NaN are reported by lowbit's own checks (non-finite
        # calibration values, weights, scales), naming the value; numpy's warnings would
        # print source lines instead.
        with np.errstate(all="ignore"):
            for option in OUTPUT_OPTIONS:
                if getattr(args, option, None):
                    check_writable(getattr(args, option))
            return int(args.handler(args) or 0)
    except (LowbitError, OSError) as exc:
        if args.debug:
            raise
        message = str(exc).replace("\n", "\n  ")
        print(f"lowbit: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lowbit: interrupted", file=sys.stderr)
        return 130
