"""`lowbit profile MODEL --calib DATA -o profile.yaml`: collect value ranges and histograms."""

from __future__ import annotations

import argparse

from lowbit.cli.calib_args import add_calibration_args, batch_refs_from_args, batches_from_args
from lowbit.cli.data_files import add_fix_input_arg, fixed_inputs
from lowbit.errors import InputError

EXAMPLE = """example:
  lowbit profile model.onnx --calib calib.npz -o profile.yaml
  lowbit quantize model.onnx --profile profile.yaml -o model.int8.onnx
  lowbit profile model.onnx --calib images/ -o profile.yaml --dask local:2
  lowbit profile model.onnx --calib /shared/calib/ -o profile.yaml --dask tcp://sched:8786

With --dask, workers read their shard of the data themselves (the path must be the same on
every machine): the profile equals a single process's, bit for bit (docs/distributed.md)."""


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="profile value ranges on calibration data",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.yaml")
    add_calibration_args(p, required=True)
    p.add_argument("--no-moments", action="store_true",
                   help="skip the products' input moments: a smaller file and faster "
                        "profiling, but weights then round to nearest instead of by GPTQ")
    p.add_argument("--dask", metavar="ADDRESS",
                   help="profile on a Dask cluster: a scheduler address (tcp://host:8786) or "
                        "local:N for N worker processes on this machine")
    p.add_argument("--shards", type=int, metavar="N",
                   help="--dask: cut the batches into N shards (default: 4 per worker)")
    p.add_argument("--backend", choices=("auto", "cpu", "reference"), default="auto",
                   help="what runs the batches: auto (default: the compiled cpu backend when "
                        "it compiles the model, else the reference interpreter), cpu or "
                        "reference")
    add_fix_input_arg(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    import lowbit

    if args.shards is not None and args.dask is None:
        raise InputError("--shards goes with --dask")
    graph = lowbit.load(args.model, fixed_inputs=fixed_inputs(args.fix_input))
    if args.dask is None:
        profile = lowbit.profile(graph, batches_from_args(args, graph),
                                 moments=not args.no_moments, backend=args.backend)
    else:
        from lowbit.cluster.connect import Cluster

        refs = batch_refs_from_args(args, graph)
        with Cluster(args.dask) as client:
            profile = lowbit.profile(graph, refs, client=client, shards=args.shards,
                                     moments=not args.no_moments, backend=args.backend)
    profile.save(args.output)
    print(f"profiled {len(profile)} values on {profile.batches} batches ({profile.samples} "
          f"samples); wrote {args.output}")
    return 0
