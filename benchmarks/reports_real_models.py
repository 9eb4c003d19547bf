"""The `lowbit compare --report` of EfficientNet-Lite0 (static, lowbit's defaults, calibrated
on every third real photo, compared on 8 others) and all-MiniLM-L6-v2 (dynamic, defaults,
compared on 12 texts), written to .cache/reports/; prints the worst layers each names.

    python benchmarks/reports_real_models.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent / "tests"), str(Path(__file__).parent)]

from dynamic_vs_peers import text_groups  # noqa: E402

import lowbit  # noqa: E402
from lowbit.tools.report import write_report  # noqa: E402
from realmodels import efficientnet, load_photos, minilm, minilm_tokens  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / ".cache" / "reports"


def report(name: str, graph, quant, batches) -> None:
    start = time.perf_counter()
    comparison = lowbit.compare(graph, quant, batches, samples=20000)
    path = OUT / f"{name}.html"
    write_report(comparison, graph, quant, path, title=f"lowbit: {name}")
    print(f"{name}: {len(comparison.layers)} layers compared, report {path} "
          f"({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.0f} s); worst:")
    for s in comparison.worst_first()[:5]:
        print(f"  {s.name:<40} {s.op_type:<16} SQNR {s.sqnr:6.2f} dB  own {s.own_sqnr:6.2f} dB  "
              f"clipped {(s.clipped_share or 0):.3%}")
    print("  worst own SQNR:")
    for s in comparison.worst_first("own")[:5]:
        print(f"  {s.name:<40} {s.op_type:<16} SQNR {s.sqnr:6.2f} dB  own {s.own_sqnr:6.2f} dB")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib = np.arange(0, len(photos), 3)
    prof = lowbit.profile(graph, [{"input": photos[i:i + 1]} for i in calib], progress=False)
    shown = np.setdiff1d(np.arange(len(photos)), calib)[::7][:8]
    report("efficientnet-lite0", graph, lowbit.quantize(graph, prof),
           [{"input": photos[i:i + 1]} for i in shown])
    graph = lowbit.load(minilm("eager", "dynamo"))
    groups = text_groups(12)
    texts = groups["words"][:6] + groups["short"][:4] + groups["long"][:2]
    report("minilm", graph, lowbit.quantize_dynamic(graph), [minilm_tokens([t]) for t in texts])


if __name__ == "__main__":
    main()
