"""Building and running bundles in the tests: natively, or cross-compiled for 64-bit ARM and run
under qemu-user (../shared/EVAL.md). scripts/test installs gcc-aarch64-linux-gnu and
qemu-user; a missing tool fails the test that needs it, never skips it.

The kernel library's objects are the same for every bundle of one target and compiler: `build`
takes them from lowbit's object cache (`lowbit.backends.cpu.bundle.object_cache`, which
`lowbit compile --build` uses too), so `make` compiles the model, the weights and
example_main.c only. The cache lives in lowbit's cache directory beside the cpu backend's built
libraries, so a fresh clone of unchanged kernels (CI) reuses the objects as it reuses those
libraries. The key holds the Makefile's rules and the thread setting, so the Makefile's own
tests (THREADS=0) use it too; `cache=False` compiles everything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from lowbit.backends.cpu.bundle import Bundle

CROSS_CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
SYSROOT = "/usr/aarch64-linux-gnu"


def compiler(bundle: Bundle) -> str:
    """The C compiler for the bundle's target on this x86-64 machine."""
    if bundle.target.arch == "aarch64":
        if shutil.which(CROSS_CC) is None:
            raise RuntimeError(f"{CROSS_CC} is missing: apt-get install gcc-aarch64-linux-gnu "
                               f"(scripts/test does)")
        return CROSS_CC
    return os.environ.get("CC", "cc")


def runner(bundle: Bundle, cpu: str | None = None) -> list[str]:
    """The command prefix that runs the bundle's program (qemu for 64-bit ARM; `cpu` picks
    qemu's CPU model, e.g. cortex-a53 without the dot-product instructions)."""
    if bundle.target.arch != "aarch64":
        return []
    if shutil.which(QEMU) is None:
        raise RuntimeError(f"{QEMU} is missing: apt-get install qemu-user (scripts/test does)")
    return [QEMU, "-L", SYSROOT] + (["-cpu", cpu] if cpu else [])


def build(bundle: Bundle, threads: bool = True, cache: bool = True) -> Path:
    """`make` the bundle with its target's compiler (-Wall -Wextra -Werror, the Makefile's
    default); returns the program. The kernel library's objects come from lowbit's object
    cache (module docstring) unless `cache` is False."""
    return bundle.build(cc=compiler(bundle), threads=threads, cache=cache)


def run(bundle: Bundle, program: Path, inputs: list[np.ndarray], *, args: tuple = (),
        cpu: str | None = None, check: bool = True):
    """Run the program on `inputs` (written as .npy) and return its outputs; with
    check=False, the finished process instead."""
    work = bundle.directory / "io"
    work.mkdir(exist_ok=True)
    ins = []
    for i, a in enumerate(inputs):
        path = work / f"in{i}.npy"
        np.save(path, a)
        ins.append(str(path))
    outs = [str(work / f"out{i}.npy") for i in range(len(bundle_outputs(bundle)))]
    for o in outs:
        Path(o).unlink(missing_ok=True)
    done = subprocess.run([*runner(bundle, cpu), str(program), *args, *ins, *outs],
                          capture_output=True, text=True, timeout=1800, check=False)
    if not check:
        return done
    if done.returncode != 0:
        raise AssertionError(f"{program} failed ({done.returncode}):\n{done.stderr}")
    return [np.load(o) for o in outs]


def bundle_outputs(bundle: Bundle) -> list[str]:
    header = (bundle.directory / f"{bundle.name}.h").read_text()
    n = int(header.split(f"#define {bundle.name.upper()}_NUM_OUTPUTS ")[1].split()[0])
    return [f"out{i}" for i in range(n)]
