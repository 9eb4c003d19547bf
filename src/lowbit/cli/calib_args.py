"""Calibration-data options shared by `lowbit profile` and `lowbit quantize`."""

from __future__ import annotations

from lowbit.cli.data_files import calibration_batches
from lowbit.ir.graph import Graph


def add_calibration_args(p, required: bool, flag: str = "--calib") -> None:
    p.add_argument(flag, dest="calib", required=required, metavar="DATA",
                   help=".npy/.npz file, folder of images, or folder of ONNX test_data_set_*")
    p.add_argument("--batch-size", type=int, default=8, help="samples per calibration batch")
    p.add_argument("--limit", type=int, help="use at most this many batches")
    p.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"),
                   help="resize images to H x W (default: the model's input size)")
    p.add_argument("--mean", type=float, nargs="+", default=[0.0],
                   help="per-channel mean subtracted from images in [0, 255]")
    p.add_argument("--std", type=float, nargs="+", default=[1.0],
                   help="per-channel divisor applied after the mean")
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")


def batches_from_args(args, graph: Graph) -> list:
    return calibration_batches(args.calib, graph, batch_size=args.batch_size,
                               image_size=tuple(args.image_size) if args.image_size else None,
                               mean=args.mean, std=args.std, layout=args.layout,
                               limit=args.limit)
