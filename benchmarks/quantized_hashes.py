"""Content hashes of MNISTNet's and EfficientNet-Lite0's profiles and quantized models, to check
that a speed-up changed no result: run it before and after a change and compare.

For each model it profiles the calibration data of benchmarks/quantize_time.py (MNISTNet: digits
0-499 in 10 batches; EfficientNet-Lite0: the first 30 photos, one a batch) and prints one hash
per part of the profile (ranges and histograms; channel ranges and means; input moments) and
one per quantized model (`lowbit.ir.hashing.graph_hash`: every type's scale and zero point,
every constant's bytes, so a rounded weight that moves one code changes it), for the defaults
and for each calibration method and rounding.

    python benchmarks/quantized_hashes.py --save before.json     # on the old code
    python benchmarks/quantized_hashes.py --check before.json    # on the new code
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "tests")]

from quantize_time import efficientnet_case, mnistnet_case  # noqa: E402

import lowbit  # noqa: E402
from lowbit.ir.hashing import graph_hash  # noqa: E402
from lowbit.quant.config import QuantConfig  # noqa: E402
from lowbit.quant.profile import Profile  # noqa: E402

CONFIGS = {
    "defaults": {},
    "nearest rounding": {"default": {"weight_rounding": "nearest"}},
    "minmax": {"default": {"calibration": "minmax"}},
    "percentile": {"default": {"calibration": "percentile"}},
    "entropy": {"default": {"calibration": "entropy"}},
    "per-tensor symmetric": {"default": {"per_channel": False, "scheme": "symmetric"}},
}


def _digest(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(p.dtype.str.encode() + repr(p.shape).encode())
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(repr(p).encode())
    return h.hexdigest()[:16]


def profile_hashes(profile: Profile) -> dict[str, str]:
    ranges, channels, moments = [], [], []
    for name in sorted(profile.stats):
        s = profile.stats[name]
        hist = s.histogram
        ranges += [name, s.count, s.zeros, s.nan, s.posinf, s.neginf, s.min, s.max]
        if hist is not None:
            ranges += [hist.offset, hist.exponent, hist.counts]
        for axis in sorted(s.channels):
            ch = s.channels[axis]
            channels += [name, axis, ch.min, ch.max, ch.sum, ch.count]
    for name in sorted(profile.moments):
        m = profile.moments[name]
        moments += [name, m.count, m.second]
    return {"profile ranges and histograms": _digest(ranges),
            "profile channel ranges and means": _digest(channels),
            "profile input moments": _digest(moments)}


def hashes() -> dict[str, dict[str, str]]:
    out = {}
    for label, (model, calib) in (("MNISTNet", mnistnet_case()),
                                  ("EfficientNet-Lite0", efficientnet_case())):
        graph = lowbit.load(model)
        prof = lowbit.profile(graph, calib, progress=False)
        row = profile_hashes(prof)
        for name, config in CONFIGS.items():
            q = lowbit.quantize(graph, prof, QuantConfig.from_dict(config))
            row[f"quantized, {name}"] = graph_hash(q)[7:23]
        out[label] = row
        for key, value in row.items():
            print(f"{label:<20} {key:<36} {value}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", help="write the hashes to this JSON file")
    parser.add_argument("--check", help="compare with the hashes in this JSON file")
    args = parser.parse_args()
    now = hashes()
    if args.save:
        Path(args.save).write_text(json.dumps(now, indent=1))
    if args.check:
        before = json.loads(Path(args.check).read_text())
        changed = [(m, k) for m in before for k in before[m] if now.get(m, {}).get(k) !=
                   before[m][k]]
        for m, k in changed:
            print(f"CHANGED: {m}: {k}")
        print("all equal" if not changed else f"{len(changed)} hash(es) changed")
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
