"""The kernel library loaded with ctypes: its structs, its contexts (ISA and thread pool).

The ISA is chosen once per context: the best one the CPU supports (cpuid and xgetbv on x86-64,
the hardware capabilities on 64-bit ARM), or the one `$LOWBIT_CPU_ISA` names (`amx`, `vnni`,
`avx2`, `neon`, `dotprod`, `scalar`), so tests exercise every path on one machine. `amx` is `vnni`
with the int8 products on AMX tiles (Linux on CPUs with AMX-INT8). Asking for an ISA the
CPU lacks is an error, never a silent downgrade.
"""

from __future__ import annotations

import ctypes as C
import functools
import logging
import os
import weakref
from collections.abc import Callable

from lowbit.backends.cpu import toolchain
from lowbit.errors import LowbitError

log = logging.getLogger(__name__)

ISAS = ("scalar", "avx2", "vnni", "neon", "dotprod", "amx")
"""enum lb_isa of lowbit_rt.h, in order."""
ISA_ENV = "LOWBIT_CPU_ISA"

# enum lb_rq_method and enum lb_type of lowbit_rt.h
RQ_Q31, RQ_PRESCALE, RQ_FLOAT32, RQ_DEQUANT = 0, 1, 2, 3
U8, I16, U16, F32, I32, I8, I64, F64, BOOL = range(9)

i32p = C.POINTER(C.c_int32)


class Requant(C.Structure):
    _fields_ = [("method", C.c_int32), ("qmin", C.c_int32), ("qmax", C.c_int32),
                ("p0", i32p), ("p1", i32p), ("p2", i32p), ("p3", i32p),
                ("zero_point", i32p), ("fmul", C.POINTER(C.c_float)),
                ("dscale", C.POINTER(C.c_double)), ("fmin", C.c_float), ("fmax", C.c_float)]


class PackedB(C.Structure):
    _fields_ = [("data", C.c_void_p), ("n", C.c_int64), ("k", C.c_int64), ("k4", C.c_int64)]


class AddParams(C.Structure):
    _fields_ = [("shift", C.c_int32), ("z1", C.c_int32), ("m1", C.c_int32), ("l1", C.c_int32),
                ("r1", C.c_int32), ("z2", C.c_int32), ("m2", C.c_int32), ("l2", C.c_int32),
                ("r2", C.c_int32), ("sub", C.c_int32), ("out", Requant)]


class Post(C.Structure):
    _fields_ = [("table", C.c_void_p), ("table_type", C.c_int32), ("table_min", C.c_int32),
                ("mul", i32p), ("z", C.c_int32), ("rq", Requant)]


class Epilogue(C.Structure):
    _fields_ = [("col_offset", i32p), ("col_zb", i32p), ("rq", Requant),
                ("out_type", C.c_int32), ("residual", C.c_void_p), ("ld_residual", C.c_int64),
                ("add", C.POINTER(AddParams)), ("bounded", i32p), ("post", C.POINTER(Post)),
                ("residual_split", i32p)]


class WideParams(C.Structure):
    _fields_ = [("a_type", C.c_int32), ("out_type", C.c_int32), ("za", C.c_int32),
                ("narrow_shift", C.c_int32), ("w", i32p), ("bias", C.POINTER(C.c_int64)),
                ("rq", Requant)]


class Ctx(C.Structure):
    _fields_ = [("isa", C.c_int), ("threads", C.c_int), ("pool", C.c_void_p), ("amx", C.c_int)]


_SIGNATURES = {
    "lb_detect_isa": (C.c_int, []),
    "lb_isa_supported": (C.c_int, [C.c_int]),
    "lb_isa_name": (C.c_char_p, [C.c_int]),
    "lb_ctx_create": (C.POINTER(Ctx), [C.c_int, C.c_int]),
    "lb_ctx_destroy": (None, [C.POINTER(Ctx)]),
    "lb_pool_stats_attach": (C.c_int, [C.POINTER(Ctx), C.c_void_p, C.c_int64]),
    "lb_requant_one": (C.c_int32, [C.POINTER(Requant), C.c_int64, C.c_int32]),
    "lb_requant_i32": (None, [C.POINTER(Ctx), C.c_int64, C.c_void_p, C.POINTER(Requant),
                              C.c_int32, C.c_void_p]),
    "lb_qgemm": (None, [C.POINTER(Ctx), C.c_int64, C.c_int64, C.c_int64, C.c_void_p, C.c_int64,
                        C.POINTER(PackedB), C.POINTER(Epilogue), C.c_void_p, C.c_int64,
                        C.c_void_p]),
    "lb_pack_b": (None, [C.c_int64, C.c_int64, C.c_void_p, C.c_int64, C.c_int64, C.c_int,
                         C.c_void_p]),
    "lb_qgemm_wide": (None, [C.POINTER(Ctx), C.c_int64, C.c_int64, C.c_int64, C.c_void_p,
                             C.c_int64, C.POINTER(WideParams), C.c_void_p, C.c_int64]),
}


@functools.cache
def lib() -> C.CDLL:
    """The kernel library, built on first use (cached on disk), with its signatures set."""
    path = toolchain.runtime_library()
    try:
        handle = C.CDLL(str(path))
    except OSError:
        toolchain.invalidate(path)  # a cache entry that does not load: build it again
        handle = C.CDLL(str(toolchain.runtime_library()))
    return with_signatures(handle, _SIGNATURES)


def with_signatures(handle: C.CDLL, signatures: dict[str, tuple]) -> C.CDLL:
    """`handle` with each named function's (restype, argtypes) set from `signatures`."""
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(handle, name)
        fn.restype, fn.argtypes = restype, argtypes
    return handle


def loads(load: Callable[[], object], what: str) -> bool:
    """Whether `load` (a kernel module's loader of this library) succeeds; when it fails, `what`
    runs as its Python definition (the same results, slower), said in the debug log."""
    try:
        load()
    except (LowbitError, OSError) as exc:
        log.debug("%s in Python: %s", what, exc)
        return False
    return True


def best_isa() -> str:
    """The best instruction set of this CPU that the library has kernels for."""
    return ISAS[lib().lb_detect_isa()]


def supported_isas() -> list[str]:
    """Every instruction set this CPU can run the library's kernels with (scalar first)."""
    return [isa for i, isa in enumerate(ISAS) if lib().lb_isa_supported(i)]


def chosen_isa(isa: str | None = None) -> str:
    """`isa`, else `$LOWBIT_CPU_ISA`, else the best one; LowbitError if unknown or unsupported
    by this CPU."""
    name = isa or os.environ.get(ISA_ENV, "").strip().lower() or best_isa()
    if name not in ISAS:
        raise LowbitError(f"unknown cpu ISA {name!r} (from {'the argument' if isa else ISA_ENV});"
                          f" choose one of {', '.join(ISAS)}")
    if name not in supported_isas():
        raise LowbitError(f"this CPU cannot run the {name} kernels (its best is {best_isa()}); "
                          f"set {ISA_ENV} to one of {', '.join(supported_isas())}")
    return name


@functools.cache
def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads of one core counted once)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(base + "core_id") as f:
                core = f.read().strip()
            with open(base + "physical_package_id") as f:
                package = f.read().strip()
            cores.add((package, core))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


def default_threads() -> int:
    """The thread count of an executable that names none: `$LOWBIT_THREADS`, else the
    physical cores this process may run on (`physical_cores`). Processes that share the cores
    (test workers, one model per process) set it so that their pools do not oversubscribe."""
    text = os.environ.get("LOWBIT_THREADS", "").strip()
    if not text:
        return physical_cores()
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise LowbitError(f"LOWBIT_THREADS={text!r}: write a thread count of at least 1")
    return count


class Context:
    """An lb_ctx: the kernels' ISA and a thread pool of `threads` threads (the caller counts)."""

    def __init__(self, threads: int | None = None, isa: str | None = None) -> None:
        self.isa = chosen_isa(isa)
        self.threads = int(threads) if threads else default_threads()
        if self.threads < 1:
            raise LowbitError(f"threads must be at least 1, got {threads}")
        handle = lib().lb_ctx_create(self.threads, ISAS.index(self.isa))
        if not handle:
            raise LowbitError("could not create the cpu backend's thread pool")
        self.handle = handle
        self._finalizer = weakref.finalize(self, lib().lb_ctx_destroy, handle)

    def close(self) -> None:
        self._finalizer()


_contexts: dict[tuple[int, str], Context] = {}


def context(threads: int | None = None, isa: str | None = None) -> Context:
    """A shared Context per (threads, ISA): executables with the same settings share one pool."""
    isa = chosen_isa(isa)
    threads = int(threads) if threads else default_threads()
    key = (threads, isa)
    if key not in _contexts:
        _contexts[key] = Context(threads, isa)
    return _contexts[key]
