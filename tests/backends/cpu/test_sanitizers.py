"""The C kernel tests again, with the library built under AddressSanitizer and
UndefinedBehaviorSanitizer (out-of-bounds reads at tile edges, overflow in requantization and
shifts): Python runs in a subprocess with libasan preloaded, the library is compiled with
`-fsanitize=address,undefined -fno-sanitize-recover=all` ($LOWBIT_CPU_SANITIZE), and any report
fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lowbit.backends.cpu import toolchain

HERE = Path(__file__).resolve().parent


def test_kernel_tests_pass_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    compiler = toolchain.find_compiler()
    found = subprocess.run([*compiler.command, "-print-file-name=libasan.so"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isabs(found), (
        f"{compiler} has no libasan.so (it printed {found!r}); install gcc's sanitizer "
        f"runtime (Debian: libasan8 / gcc)")
    kernel_tests = sorted(str(p) for p in HERE.glob("test_kernel_*.py"))
    assert kernel_tests
    env = dict(os.environ, LOWBIT_CPU_SANITIZE="1", LD_PRELOAD=found,
               ASAN_OPTIONS=f"detect_leaks=0:log_path={tmp_path}/asan",
               UBSAN_OPTIONS=f"print_stacktrace=1:log_path={tmp_path}/ubsan")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           *kernel_tests], env=env, capture_output=True, text=True, cwd=HERE)
    reports = "".join(p.read_text() for p in sorted(tmp_path.glob("*san*")))
    assert done.returncode == 0 and not reports, (done.stdout[-4000:] + done.stderr[-4000:] +
                                                  reports[:8000])
