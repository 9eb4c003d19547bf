"""The targets a bundle can be built for: which kernel paths it holds and how they are chosen.

A bundle runs one instruction set, its target's; the portable C path is always compiled too
(it is what every kernel without a vector version runs). The kernel library's sources carry
their instruction set in their names (`rt_qgemm_avx512.c`, `rt_qgemm_neon.c`, ...), and the
preprocessor definitions leave out the other paths of files shared by all (lowbit_rt.h).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from lowbit.errors import LowbitError


@dataclass(frozen=True)
class Target:
    name: str
    arch: str
    """`uname -m` of the machines that run it: x86_64 or aarch64."""
    isa: str
    """The ISA the bundle's context runs with (library.ISAS)."""
    defines: tuple[str, ...]
    """Preprocessor definitions leaving the other paths out of the kernel library."""
    kernel_sets: tuple[str, ...]
    """Name suffixes of the ISA-specific library sources it includes (besides the portable)."""
    cpu: str
    """What the CPU must have, for messages and the header."""

    @property
    def isa_enum(self) -> str:
        return {"scalar": "LB_ISA_SCALAR", "avx2": "LB_ISA_AVX2", "vnni": "LB_ISA_AVX512VNNI",
                "neon": "LB_ISA_NEON", "dotprod": "LB_ISA_DOTPROD"}[self.isa]


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("x86-64", "x86_64", "scalar", ("LB_NO_X86_KERNELS",), (), "any x86-64 CPU"),
    Target("x86-64-avx2", "x86_64", "avx2", ("LB_NO_AVX512",), ("avx2",),
           "an x86-64 CPU with AVX2, FMA and BMI2 (Intel Haswell, AMD Zen and later)"),
    # no AMX: its kernels copy A to heap buffers, and a bundle allocates nothing while running
    Target("x86-64-avx512vnni", "x86_64", "vnni", ("LB_NO_AMX",), ("avx2", "avx512", "vec512"),
           "an x86-64 CPU with AVX-512 F/BW/VL/DQ and VNNI (Intel Cascade Lake, AMD Zen 4 "
           "and later)"),
    Target("aarch64", "aarch64", "neon", ("LB_NO_DOTPROD",), ("neon",),
           "any 64-bit ARM CPU (ARMv8-A, NEON)"),
    Target("aarch64-dotprod", "aarch64", "dotprod", (), ("neon", "dotprod"),
           "a 64-bit ARM CPU with the dot-product instructions (ARMv8.2-A dotprod: Cortex-A55, "
           "A76, Neoverse N1, Apple M1 and later)"),
)}

ISA_SUFFIXES = ("avx2", "avx512", "vec512", "amx", "neon", "dotprod")


def target(name: str) -> Target:
    """The target called `name`; LowbitError listing the choices otherwise."""
    found = TARGETS.get(name)
    if found is None:
        raise LowbitError(f"unknown bundle target {name!r}; choose one of "
                          f"{', '.join(TARGETS)}")
    return found


def host_target() -> Target:
    """The best target this machine runs (the default of `lowbit compile`), from the CPU's
    flags in /proc/cpuinfo (the most basic target of its architecture elsewhere)."""
    machine = platform.machine().lower()
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags = set(value.split())
                break
    except OSError:
        pass
    if machine in ("x86_64", "amd64"):
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= flags:
            return TARGETS["x86-64-avx512vnni"]
        return TARGETS["x86-64-avx2" if {"avx2", "fma", "bmi2"} <= flags else "x86-64"]
    if machine in ("aarch64", "arm64"):
        return TARGETS["aarch64-dotprod" if "asimddp" in flags else "aarch64"]
    raise LowbitError(f"no bundle target for this machine ({platform.machine()}); choose one of "
                      f"{', '.join(TARGETS)} with --target")


def library_files(t: Target, runtime: Path) -> list[Path]:
    """The kernel library's sources and headers a bundle for `t` holds."""
    files = []
    for path in sorted(runtime.iterdir()):
        if path.suffix not in (".c", ".h"):
            continue
        suffix = path.stem.rsplit("_", 1)[-1]
        if suffix in ISA_SUFFIXES and suffix not in t.kernel_sets:
            continue
        files.append(path)
    return files
