"""Calibration-data options shared by `lowbit profile` and `lowbit quantize`."""

from __future__ import annotations

from lowbit.cli.data_files import batch_refs, calibration_batches
from lowbit.errors import InputError
from lowbit.ir.graph import Graph

DEFAULT_BATCH_SIZE = 8
"""Samples per batch for a model whose batch dimension is not fixed."""


def model_batch_size(graph: Graph) -> int | None:
    """The leading dimension every input fixes to the same integer, or None when any input's
    is symbolic, unknown, or differs from the others' (then any batch size may do)."""
    dims = set()
    for v in graph.inputs:
        shape = v.type.shape if v.type is not None else None
        if not shape or not isinstance(shape[0], int) or shape[0] < 1:
            return None
        dims.add(shape[0])
    return dims.pop() if len(dims) == 1 else None


def add_calibration_args(p, required: bool, flag: str = "--calib") -> None:
    p.add_argument(flag, dest="calib", required=required, metavar="DATA",
                   help=".npy/.npz file, folder of images, or folder of ONNX test_data_set_*")
    p.add_argument("--batch-size", type=int, metavar="N",
                   help="samples per batch (default: the model's batch dimension when it is "
                   "fixed, else 8)")
    p.add_argument("--limit", type=int, help="use at most this many batches")
    p.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"),
                   help="resize images to H x W (default: the model's input size)")
    p.add_argument("--mean", type=float, nargs="+", default=[0.0],
                   help="per-channel mean subtracted from images in [0, 255]")
    p.add_argument("--std", type=float, nargs="+", default=[1.0],
                   help="per-channel divisor applied after the mean")
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    p.add_argument("--grayscale", action="store_true",
                   help="read images as one luminance channel (default: as many channels as "
                   "the model's input has, RGB when it does not say)")


def batches_from_args(args, graph: Graph) -> list:
    return _batches(args, graph, args.calib, _limit(args))


def eval_batches_from_args(args, graph: Graph) -> list:
    """The `--eval` data, read with the calibration options (batch size, image size, mean, std,
    layout); `--limit` is for calibration only."""
    return _batches(args, graph, args.eval, None)


def batch_refs_from_args(args, graph: Graph) -> list:
    """The `--calib` batches as references (`BatchRef`), each read where it is used."""
    return batch_refs(args.calib, graph, **_options(args, graph), limit=_limit(args))


def _options(args, graph: Graph) -> dict:
    if args.batch_size is not None and args.batch_size < 1:
        raise InputError(f"--batch-size must be 1 or more, got {args.batch_size}")
    return {"batch_size": args.batch_size or model_batch_size(graph) or DEFAULT_BATCH_SIZE,
            "image_size": tuple(args.image_size) if args.image_size else None,
            "mean": args.mean, "std": args.std, "layout": args.layout,
            "grayscale": args.grayscale}


def _limit(args) -> int | None:
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be 1 or more, got {args.limit}")
    return args.limit


def _batches(args, graph: Graph, source: str, limit: int | None) -> list:
    return calibration_batches(source, graph, **_options(args, graph), limit=limit)
