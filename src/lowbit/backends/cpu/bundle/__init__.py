"""Standalone C bundles: the cpu backend's generated code for one graph, written to a folder with
the kernel library sources it needs, a header, the weights, a Makefile, a CMakeLists.txt and an
example program, so that a machine without Python builds and runs the model with a C compiler.

    bundle = lowbit.export_bundle(graph, "out", target="aarch64", name="mnist")
    print(bundle.summary())          # files, weights against the parameters, arena
    # then: cd out && CC=aarch64-linux-gnu-gcc make && ./mnist in.npy out.npy

The model function is the one the cpu backend compiles (same code generator, same kernels);
the generator's bundle modes only name it, drop its step timing, and keep the constants of the
target's instruction set alone. Nothing is written before the whole bundle is generated: an
unknown target, a bad name, an op without a kernel or a symbolic dimension without a size is
refused first, naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lowbit.backends.cpu import toolchain
from lowbit.backends.cpu.bundle import object_cache, sources
from lowbit.backends.cpu.bundle.targets import TARGETS, Target, host_target, library_files, target
from lowbit.backends.cpu.codegen.lower import Lowering, batch_symbol, find_emitter
from lowbit.backends.cpu.codegen.program import BATCH, Program
from lowbit.backends.cpu.executable import (
    _forget_shapes,
    _name_batch,
    prepare_for_lowering,
    rewrite_imported_products,
)
from lowbit.backends.reference.kernels import is_quantized
from lowbit.errors import LowbitError, UnsupportedError
from lowbit.ir.graph import CONSTANT, Graph
from lowbit.ir.types import TensorType
from lowbit.ops import infer_graph

WEIGHT_MODES = ("file", "embed")
EXAMPLE_MAIN = Path(__file__).resolve().parent / "example_main.c"
C_KEYWORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double",
              "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long",
              "register", "restrict", "return", "short", "signed", "sizeof", "static", "struct",
              "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "main"}


class BundleError(LowbitError):
    """A bundle cannot be made (the message says why and what to do)."""


@dataclass
class Bundle:
    """A bundle written to `directory`, with the figures `summary` reports."""

    directory: Path
    name: str
    target: Target
    files: dict[str, int]
    """File name -> bytes."""
    weights_bytes: int
    weight_data_bytes: int
    """Bytes of the weight matrices in the kernels' layouts (packed, padded)."""
    parameter_bytes: dict[str, int]
    """The graph's constants by dtype (int8 weights, int32 biases, ...), in bytes."""
    arena_fixed: int
    arena_per_batch: int
    has_batch: bool
    embedded: bool
    code_bytes: dict[str, int] = field(default_factory=dict)
    """After `build`: machine code bytes of the model function and of the kernel library."""
    bounded_bytes: int = 0
    """Bytes of the VNNI kernels' bounded requantization arrays (packing.bounded_arrays), a
    speed-for-size choice: 16 bytes per output channel of the 8-bit prescale products."""

    @property
    def int8_parameter_bytes(self) -> int:
        """Bytes of the model's 8-bit integer parameters (its int8/uint8 weights)."""
        return self.parameter_bytes.get("int8", 0) + self.parameter_bytes.get("uint8", 0)

    def arena_bytes(self, batch: int = 1) -> int:
        return self.arena_fixed + batch * self.arena_per_batch

    def summary(self) -> str:
        """A few lines: weights against the parameters, arena, sources, code once built."""
        params = ", ".join(f"{n} {k}" for k, n in sorted(self.parameter_bytes.items()))
        lines = [f"bundle {self.name} for {self.target.name} in {self.directory}"]
        ratio = ""
        if self.int8_parameter_bytes:
            ratio = (f" ({self.weight_data_bytes / self.int8_parameter_bytes:.3f}x the "
                     f"{self.int8_parameter_bytes} bytes of int8 parameters)")
        lines.append(f"  weights   {self.weights_bytes} bytes"
                     f"{' embedded in ' + self.name + '_weights.c' if self.embedded else ''}: "
                     f"weight matrices {self.weight_data_bytes}{ratio}, other constants "
                     f"{self.weights_bytes - self.weight_data_bytes} (per-channel parameters, "
                     f"float tensors; {self.bounded_bytes} of them bounded requantizations)")
        lines.append(f"  model     parameters {params or 'none'}")
        arena = f"{self.arena_fixed} bytes"
        if self.has_batch:
            arena += f" + {self.arena_per_batch} per batch element"
        lines.append(f"  arena     {arena}")
        c_files = {k: v for k, v in self.files.items() if k.endswith((".c", ".h"))}
        lines.append(f"  sources   {len(c_files)} files, {sum(c_files.values())} bytes")
        if self.code_bytes:
            lines.append("  code      " + ", ".join(f"{k} {v} bytes"
                                                  for k, v in self.code_bytes.items()))
        else:
            lines.append("  code      not built yet (lowbit compile --build measures it)")
        return "\n".join(lines)

    def build(self, cc: str | None = None, jobs: int = 2, threads: bool = True,
              extra: Mapping[str, str] | None = None, cache: bool = True) -> Path:
        """Run `make` in the bundle (CC: `cc`, else $CC, else cc), fill `code_bytes` from the
        objects, and return the program's path. BundleError with the compiler's output when
        the build fails. With `cache`, the kernel library's objects come from an earlier
        build of the same library, sources, compiler and flags when there was one, and are
        kept for the next otherwise (`object_cache`); `cache=False` compiles everything."""
        env = dict(os.environ)
        if cc:
            env["CC"] = cc
        extra = dict(extra or {})
        args = ["make", "-s", f"-j{jobs}", f"THREADS={int(threads)}"]
        args += [f"{k}={v}" for k, v in extra.items()]
        objects = [Path(f).stem + ".o" for f in self.files
                   if f.startswith("rt_") and f.endswith(".c")]
        key = None
        if cache:
            try:
                key = object_cache.library_key(self.directory, list(self.files),
                                               env.get("CC") or "cc", threads, env, extra)
            except OSError:  # a bundle file removed since export: make says which
                key = None
        restored = key is not None and object_cache.restore(key, objects, self.directory)
        done = subprocess.run(args, cwd=self.directory, env=env, capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise BundleError(f"building the bundle in {self.directory} failed:\n"
                              f"{done.stdout}{done.stderr}")
        if key is not None and not restored:
            object_cache.store(key, objects, self.directory)
        model = [self.directory / f"{self.name}.o"]
        library = [self.directory / o for o in objects]
        self.code_bytes = {"model function": sum(map(code_size, model)),
                           "kernel library": sum(map(code_size, library))}
        return self.directory / self.name


def code_size(obj: Path) -> int:
    """Bytes of executable sections in an ELF object (x86-64 or 64-bit ARM)."""
    data = obj.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise BundleError(f"{obj} is not a 64-bit ELF object")
    end = "<" if data[5] == 1 else ">"
    shoff, = struct.unpack_from(end + "Q", data, 0x28)
    shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
    total = 0
    for i in range(shnum):
        base = shoff + i * shentsize
        sh_type, = struct.unpack_from(end + "I", data, base + 4)
        flags, = struct.unpack_from(end + "Q", data, base + 8)
        size, = struct.unpack_from(end + "Q", data, base + 32)
        if flags & 0x4 and sh_type != 8:  # SHF_EXECINSTR, not SHT_NOBITS
            total += size
    return total


def check_name(name: str) -> str:
    """`name` if it can prefix the bundle's C identifiers and files, else BundleError."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") or name in C_KEYWORDS or \
            name.lower().startswith(("lb_", "rt_", "lowbit_rt", "example_main")):
        raise BundleError(f"bundle name {name!r} cannot name C identifiers and files: use "
                          f"letters, digits and '_', not starting with a digit, not a C keyword "
                          f"and not starting with lb_ or rt_ (the kernel library's)")
    return name


def default_name(text: str) -> str:
    """A bundle name made from a model's file or graph name."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "model"
    if name[0].isdigit():
        name = "model_" + name
    try:
        return check_name(name)
    except BundleError:
        return "model_" + name


def fix_dims(graph: Graph, dims: Mapping[str, int]) -> tuple[Graph, str | None]:
    """The graph with the symbolic dimensions `dims` names set to sizes, and the batch symbol
    left; BundleError when another symbolic or unknown dimension remains."""
    if any(v.type is not None and v.type.shape and v.type.shape[0] is None
           for v in graph.inputs):
        graph = _name_batch(graph)  # an unknown leading dimension is the batch, as in cpu.compile
    symbols: list[str] = []
    for v in graph.inputs:
        if v.type is None or v.type.shape is None or any(d is None for d in v.type.shape):
            raise BundleError(f"input '{v.name}' has an unknown shape "
                              f"({None if v.type is None else v.type.shape}); a bundle needs "
                              f"every dimension named or sized")
        symbols += [d for d in v.type.shape if isinstance(d, str) and d not in symbols]
    for d, n in dims.items():
        if d not in symbols:
            raise BundleError(f"no input dimension is named {d!r} (the inputs' symbolic "
                              f"dimensions: {', '.join(symbols) or 'none'})")
        if int(n) < 1:
            raise BundleError(f"dimension {d!r} must be at least 1, got {n}")
    batch = batch_symbol(graph)
    if batch in dims:
        batch = None
    left = [d for d in symbols if d not in dims and d != batch]
    if left:
        owner = next(v.name for v in graph.inputs if left[0] in v.type.shape)
        raise BundleError(f"input '{owner}' has the symbolic dimension {left[0]!r}: a bundle "
                          f"fixes every size but the batch (the leading dimension); give it, e.g. "
                          f"--dim {left[0]}=128 (dims={{'{left[0]}': 128}})")
    if dims:
        graph = graph.copy()
        for v in graph.inputs:
            v.type = TensorType(v.type.dtype, tuple(int(dims[d]) if d in dims else d
                                                    for d in v.type.shape), v.type.quant)
        _forget_shapes(graph, batch)
        infer_graph(graph)
    return graph, batch


def unsupported_ops(graph: Graph) -> list[str]:
    """'OpType (node 'name')' for every node the bundle's kernels do not implement."""
    missing: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op_type != CONSTANT and find_emitter(n) is None:
            op = ("quantized " if is_quantized(n) else "") + n.op_type
            missing.setdefault(op, []).append(n.name)
    return [f"{op} (node{'s' if len(names) > 1 else ''} "
            f"{', '.join(repr(x) for x in names[:3])}{', ...' if len(names) > 3 else ''})"
            for op, names in sorted(missing.items())]


def export_bundle(graph: Graph, directory: str | os.PathLike, *, target: str | None = None,
                  weights: str = "file", name: str | None = None,
                  dims: Mapping[str, int] | None = None) -> Bundle:
    """Write `graph` as a standalone C bundle into `directory` (see the module docstring).

    target: one of TARGETS (default: this machine's best); weights: "file" (NAME.weights, read
    by the program) or "embed" (a C array in NAME_weights.c); name: the C prefix and file names
    (default: from the graph's name); dims: sizes of symbolic input dimensions other than the
    batch, e.g. {"S": 128} (a symbolic batch stays a run-time argument unless given here).
    """
    from lowbit.backends.lowering import fold_quantized_constants, has_quantized_constants

    t = target_of(target)
    if weights not in WEIGHT_MODES:
        raise BundleError(f"weights must be one of {', '.join(WEIGHT_MODES)}, got {weights!r}")
    name = check_name(name) if name is not None else default_name(graph.name)
    graph, batch = fix_dims(graph, dict(dims or {}))
    if has_quantized_constants(graph):
        graph = fold_quantized_constants(graph.copy())
    graph = rewrite_imported_products(graph)  # ONNX Runtime's and PyTorch's dynamic files
    missing = unsupported_ops(graph)
    if missing:
        raise BundleError(f"no bundle kernel implements {'; '.join(missing)}. Keep these ops in "
                          f"float or run the model with backend='reference'")
    graph = prepare_for_lowering(graph)
    try:
        program = Lowering(graph, name, batch, isas=frozenset({t.isa})).lower()
    except UnsupportedError as exc:
        raise BundleError(f"a bundle cannot hold this model: {exc}") from exc
    plan = arena_layout(program)
    blob = program.blob.bytes()
    inputs = [sources.TensorInfo.of(v, batch) for v in graph.inputs]
    outputs = [sources.TensorInfo.of(v, batch) for v in graph.outputs]
    has_batch = batch is not None
    embedded = weights == "embed"
    library = library_files(t, toolchain.RUNTIME_DIR)
    lib_sources = [p.name for p in library if p.suffix == ".c"]
    function = program.render_function(entry=f"{name}_model", storage="static", timing=False)
    texts: dict[str, str | bytes] = {
        f"{name}.h": sources.header(name, t, graph.name, inputs, outputs, blob, embedded,
                                     plan.fixed_size, plan.per_batch_size, has_batch),
        f"{name}.c": sources.model_source(name, t, function, inputs, outputs, plan.at,
                                          plan.per_batch),
        "example_main.c": EXAMPLE_MAIN.read_text().replace("@name@", name)
        .replace("@NAME@", name.upper()),
        "Makefile": sources.makefile(name, t, lib_sources, embedded),
        "CMakeLists.txt": sources.cmakelists(name, t, lib_sources, embedded),
    }
    if embedded:
        texts[f"{name}_weights.c"] = sources.weights_source(name, blob)
    else:
        texts[f"{name}.weights"] = blob
    for p in library:
        texts[p.name] = p.read_bytes()
    out = Path(directory)
    write_folder(out, texts)
    params: dict[str, int] = {}
    seen = set()
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None and v.is_constant and id(v) not in seen and n.op_type != CONSTANT:
                seen.add(id(v))
                a = np.asarray(v.const_value)
                params[str(a.dtype)] = params.get(str(a.dtype), 0) + a.nbytes
    return Bundle(out, name, t, {k: len(v) for k, v in texts.items()}, len(blob),
                  program.blob.kinds.get("weights", 0), params, plan.fixed_size,
                  plan.per_batch_size, has_batch, embedded,
                  bounded_bytes=program.blob.kinds.get("bounded", 0))


@dataclass
class ArenaLayout:
    """The arena of a bundle: tensor (slot) i starts at at[i] + batch * per_batch[i]; the
    tensors whose size does not grow with the batch come first (fixed_size bytes), then those
    that do, each planned once for a batch of one and scaled (per_batch_size bytes per
    sample). Tensors whose lifetimes overlap never share bytes at any batch size."""

    at: list[int]
    per_batch: list[int]
    fixed_size: int
    per_batch_size: int


def arena_layout(program: Program) -> ArenaLayout:
    """The layout of `program`'s arena for every batch size (the bundle's only run-time
    dimension); BundleError when a tensor's size does not stay within the batch times its
    size at batch one."""
    if program.dim_vars != [BATCH]:
        raise BundleError(f"the generated code has run-time dimensions "
                          f"{', '.join(program.dim_vars)}; a bundle takes the batch alone")
    live = program.make_liveness()
    one = [live.bytes(i, {BATCH: 1}) for i in range(len(live.roots))]
    fixed, scaled = [], []
    for i, r in enumerate(live.roots):
        sizes = {n: live.bytes(i, {BATCH: n}) for n in (2, 3, 5, 8, 64, 1000)}
        if all(size == one[i] for size in sizes.values()):
            fixed.append(i)
        elif all(size <= n * one[i] for n, size in sizes.items()):
            scaled.append(i)
        else:
            raise BundleError(f"arena tensor {r.name!r} grows faster than the batch size; a "
                              f"bundle plans its arena as fixed bytes plus bytes per sample")
    at_fixed, fixed_size = live.place(one, fixed)
    at_scaled, per_batch_size = live.place(one, scaled)
    n = len(at_fixed)
    at = [int(at_fixed[i]) for i in range(n)]
    per_batch = [0] * n
    for i in scaled:
        at[i], per_batch[i] = fixed_size, int(at_scaled[i])
    return ArenaLayout(at, per_batch, fixed_size, per_batch_size)


def target_of(name: str | None) -> Target:
    if name is None:
        return host_target()
    try:
        return target(name)
    except LowbitError as exc:
        raise BundleError(str(exc)) from exc


def write_folder(out: Path, texts: Mapping[str, str | bytes]) -> None:
    """Write every file into a temporary folder beside `out`, then move them in: `out` never
    holds a partial bundle file (an existing folder keeps its other files)."""
    if out.exists() and not out.is_dir():
        raise BundleError(f"{out} exists and is not a folder")
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        for fname, content in texts.items():
            path = tmp / fname
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        if not out.exists():
            os.replace(tmp, out)
            return
        for fname in texts:
            os.replace(tmp / fname, out / fname)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["TARGETS", "Bundle", "BundleError", "Target", "export_bundle"]
