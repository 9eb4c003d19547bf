"""Time `lowbit inspect` on all-MiniLM-L6-v2 (issue: under 5 s), as a user runs it.

    python benchmarks/inspect_time.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from realmodels import minilm


def main() -> None:
    for attention, exporter in (("eager", "dynamo"), ("sdpa", "legacy14")):
        path = minilm(attention, exporter)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "lowbit", "inspect", str(path)], check=True,
                       capture_output=True)
        print(f"lowbit inspect MiniLM ({attention}, {exporter}): "
              f"{time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
