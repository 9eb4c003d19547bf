"""A generated program under construction: tensors, the C statements of each step, the blob of
constants, and (once every step is known) the arena plan that turns tensors into pointers.

Dimensions that are not known when the code is generated (the batch size, a sequence length)
are C variables of the generated function, read from its `dims` argument: a lowered dimension
is an int or a C product of such variables with a coefficient ("N", "12*d1", "N*d1"), and a
`Size` is such a monomial. The arena is planned when the sizes are known, in Python, once per
set of dimension values (`Liveness.plan`): the tensors' offsets reach the generated code in its
`offsets` argument, so one compiled program runs every size, and the arena grows as needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from lowbit.errors import UnsupportedError

BATCH = "N"
"""The C name of the batch size, and the marker of the batch dimension in shapes."""

ALIGN = 64


@dataclass(frozen=True)
class Size:
    """`coef * v1 * v2 * ...` bytes or elements, the v's dimension variables (sorted)."""

    coef: int
    syms: tuple[str, ...] = ()

    @property
    def power(self) -> int:
        """How many dimension variables multiply the coefficient (0: a static size)."""
        return len(self.syms)

    def __mul__(self, other: Size | int) -> Size:
        if isinstance(other, int):
            return Size(self.coef * other, self.syms)
        return Size(self.coef * other.coef, tuple(sorted(self.syms + other.syms)))

    __rmul__ = __mul__

    def __add__(self, other: Size) -> Size:
        if self.coef == 0:
            return other
        if other.coef == 0:
            return self
        if self.syms != other.syms:
            raise UnsupportedError(f"a size that is not one multiple of the dimensions "
                                   f"{' * '.join(self.syms) or '1'}: "
                                   f"{self.c()} + {other.c()}")
        return Size(self.coef + other.coef, self.syms)

    def c(self) -> str:
        """The C expression (int64)."""
        if not self.syms or self.coef == 0:
            return f"{self.coef}"
        names = " * ".join(self.syms)
        return names if self.coef == 1 else f"{self.coef} * {names}"

    def at(self, values: Mapping[str, int]) -> int:
        """The size for these values of the dimension variables."""
        n = self.coef
        for s in self.syms:
            n *= int(values[s])
        return n


def is_batch(d) -> bool:
    """Whether dimension d is known only at run time: the batch size, a multiple of it
    ("N", "320*N"), or a product of other dimension variables ("12*d1")."""
    return isinstance(d, str)


def dim_size(d) -> Size:
    """A lowered dimension (an int, or a C product like "12*d1") as a Size."""
    if isinstance(d, (int, np.integer)):
        return Size(int(d))
    coef, syms = 1, []
    for part in str(d).split("*"):
        part = part.strip()
        if part.isdigit():
            coef *= int(part)
        else:
            syms.append(part)
    return Size(coef, tuple(sorted(syms)))


def numel(shape) -> Size:
    s = Size(1)
    for d in shape:
        s = s * dim_size(d)
    return s


def dim_c(d) -> str:
    """A lowered dimension as a C expression."""
    return str(int(d)) if isinstance(d, (int, np.integer)) else dim_size(d).c()


@dataclass(eq=False)
class Tensor:
    """Storage for one tensor of the generated code.

    `shape` is logical (ONNX order); `layout` says how it is stored ("plain": row-major in
    that order; "nhwc": a 4-D tensor with channels last). `biased`: int8 codes stored as uint8
    (code + 128). kind: "arena", "input", "output", "const" (in the blob), "alias" (the bytes
    of `base`)."""

    id: int
    name: str
    dtype: np.dtype
    shape: tuple
    layout: str = "plain"
    biased: bool = False
    kind: str = "arena"
    index: int = -1
    offset: int = 0  # const: blob offset
    base: Tensor | None = None
    size_fn: Callable[[Mapping[str, int]], int] | None = None
    """Bytes for given dimension values, when not numel(shape) * itemsize (scratch whose size
    is not a monomial, such as packed blocks of ceil(n / 16) columns)."""

    @property
    def nbytes(self) -> Size:
        return numel(self.shape) * int(self.dtype.itemsize)

    @property
    def physical_shape(self) -> tuple:
        if self.layout == "nhwc":
            n, c, h, w = self.shape
            return (n, h, w, c)
        return tuple(self.shape)

    @property
    def ptr(self) -> str:
        """A placeholder for this tensor's address (uint8_t *), resolved by `Program.render`."""
        return f"@T{self.id}@"

    def root(self) -> Tensor:
        t = self
        while t.kind == "alias":
            assert t.base is not None
            t = t.base
        return t


@dataclass
class Step:
    """C statements for one node (or one conversion), and the tensors they touch. A step whose
    code can fail sets `status` (nonzero) and returns it, with a detail in err[0]; `error`
    turns (detail, the input arrays) into the message the caller raises."""

    comment: str
    code: list[str]
    reads: list[Tensor]
    writes: list[Tensor]
    scratch: list[Tensor] = field(default_factory=list)
    error: Callable[[int, list], str] | None = None
    number: int = 0
    """The status the generated code returns when this step fails."""


class Blob:
    """Constants laid out one after another, each aligned to 64 bytes. `kinds` counts the bytes
    of each kind of constant ("weights": weight matrices in the kernels' layouts; "bounded":
    the VNNI kernels' bounded form of requantizations, packing.bounded_arrays; "constants":
    per-channel parameters, tables and the rest), alignment padding included."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self._dedup: dict[bytes, int] = {}
        self.kinds: dict[str, int] = {}

    def add(self, array: np.ndarray, kind: str = "constants") -> int:
        data = np.ascontiguousarray(array).tobytes()
        if data in self._dedup:
            return self._dedup[data]
        pad = (-self.size) % ALIGN
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        offset = self.size
        self.parts.append(data)
        self.size += len(data)
        self.kinds[kind] = self.kinds.get(kind, 0) + pad + len(data)
        if len(data) <= 1 << 16:
            self._dedup[data] = offset
        return offset

    def bytes(self) -> bytes:
        return b"".join(self.parts) + b"\0" * ((-self.size) % ALIGN)


@dataclass
class Liveness:
    """The arena tensors (roots) in slot order, the first and last step touching each."""

    roots: list[Tensor]
    first: list[int]
    last: list[int]

    def plan(self, values: Mapping[str, int]) -> tuple[np.ndarray, int]:
        """Best-fit offsets (int64, one per slot) of the roots for these dimension values, and
        the arena size in bytes. Tensors whose lifetimes overlap never share bytes."""
        return self.place([self.bytes(i, values) for i in range(len(self.roots))])

    def bytes(self, i: int, values: Mapping[str, int]) -> int:
        """Bytes of root i for these dimension values, rounded up to ALIGN (at least ALIGN)."""
        r = self.roots[i]
        return max(ALIGN, -(-(r.size_fn(values) if r.size_fn else r.nbytes.at(values)) // ALIGN)
                   * ALIGN)

    def place(self, sizes: list[int], which: list[int] | None = None) -> tuple[np.ndarray, int]:
        """Best-fit offsets of the roots `which` (default: all) of these sizes (entries of
        roots not in `which` stay 0), and the bytes they span."""
        which = range(len(self.roots)) if which is None else which
        order = sorted(which, key=lambda i: (self.first[i], -sizes[i]))
        offsets = np.zeros(max(1, len(self.roots)), np.int64)
        live: list[tuple[int, int, int, int]] = []  # (first, last, offset, size)
        top = 0
        for i in order:
            size, a, b = sizes[i], self.first[i], self.last[i]
            busy = sorted((o, o + sz) for (f, l_, o, sz) in live if not (l_ < a or f > b))
            offset, best, cursor = None, None, 0
            for lo, hi in busy:
                gap = lo - cursor
                if gap >= size and (best is None or gap < best):
                    offset, best = cursor, gap
                cursor = max(cursor, hi)
            if offset is None:
                offset = cursor
            offsets[i] = offset
            live.append((a, b, offset, size))
            top = max(top, offset + size)
        return offsets, top


class Program:
    def __init__(self, name: str) -> None:
        self.name = name
        self.steps: list[Step] = []
        self.tensors: list[Tensor] = []
        self.blob = Blob()
        self.liveness: Liveness | None = None
        self._count = 0
        self.dim_vars: list[str] = [BATCH]
        """The dimension variables in the order of the generated function's `dims` argument."""

    def tensor(self, name: str, dtype, shape, *, layout: str = "plain", biased: bool = False,
               kind: str = "arena", index: int = -1) -> Tensor:
        t = Tensor(len(self.tensors), name, np.dtype(dtype), tuple(shape), layout, biased, kind,
                   index)
        self.tensors.append(t)
        return t

    def alias(self, base: Tensor, name: str, dtype=None, shape=None, layout: str | None = None
              ) -> Tensor:
        t = self.tensor(name, dtype if dtype is not None else base.dtype,
                        shape if shape is not None else base.shape,
                        layout=layout or base.layout, biased=base.biased, kind="alias")
        t.base = base
        return t

    def const(self, array: np.ndarray, name: str = "const", *, layout: str = "plain",
              biased: bool = False, shape=None) -> Tensor:
        t = self.tensor(name, array.dtype, shape if shape is not None else array.shape,
                        layout=layout, biased=biased, kind="const")
        t.offset = self.blob.add(array)
        return t

    def data(self, array: np.ndarray, kind: str = "constants") -> str:
        """A C pointer expression to `array`'s bytes in the blob (typed by its dtype); `kind`
        as Blob.add."""
        offset = self.blob.add(array, kind)
        ctype = C_TYPES[np.dtype(array.dtype)]
        return f"(const {ctype} *)(blob + {offset})"

    def scratch(self, nbytes: Size | Callable[[Mapping[str, int]], int],
                name: str = "scratch") -> Tensor:
        """Arena bytes for one step: a Size, or a function of the dimension values."""
        if isinstance(nbytes, Size):
            return self.tensor(name, np.uint8, (nbytes.coef, *nbytes.syms))
        t = self.tensor(name, np.uint8, (1,))
        t.size_fn = nbytes
        return t

    def step(self, comment: str, code: list[str], reads, writes, scratch=(),
             error: Callable[[int, list], str] | None = None) -> None:
        self._count += 1
        self.steps.append(Step(comment, list(code), [t for t in reads if t is not None],
                               list(writes), list(scratch), error, self._count))

    def failing(self, call: str) -> str:
        """C lines running `call` (an int64 expression, 0 on success) and returning from the
        generated function with this step's number on failure (detail: the value - 1)."""
        return (f"{{ const int64_t st_ = {call}; if (st_) {{ if (err) err[0] = st_ - 1; "
                f"return {self._count + 1}; }} }}")

    def prune(self) -> None:
        """Drop steps whose results nothing reads (shape arithmetic of a Reshape that the
        lowering turned into an alias, say): a step stays if it writes a caller's output or a
        tensor that a later kept step reads."""
        needed: set[int] = set()
        kept: list[Step] = []
        for s in reversed(self.steps):
            roots = [t.root() for t in s.writes]
            if any(r.kind == "output" or r.id in needed for r in roots):
                kept.append(s)
                needed.update(t.root().id for t in s.reads)
        self.steps = kept[::-1]

    # -- planning -------------------------------------------------------------------------
    def make_liveness(self) -> Liveness:
        """The arena tensors and their lifetimes over the steps (sizes come later)."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        roots: dict[int, Tensor] = {}
        for i, s in enumerate(self.steps):
            for t in (*s.writes, *s.reads, *s.scratch):
                r = t.root()
                if r.kind != "arena":
                    continue
                roots[r.id] = r
                first.setdefault(r.id, i)
                last[r.id] = i
        ids = sorted(roots)
        self.liveness = Liveness([roots[i] for i in ids], [first[i] for i in ids],
                                 [last[i] for i in ids])
        self._slots = {tid: k for k, tid in enumerate(ids)}
        return self.liveness

    # -- rendering ------------------------------------------------------------------------
    def address(self, t: Tensor) -> str:
        r = t.root()
        if r.kind == "arena":
            return f"(arena + offsets[{self._slots[r.id]}])"
        if r.kind == "input":
            return f"((uint8_t *)inputs[{r.index}])"
        if r.kind == "output":
            return f"((uint8_t *)outputs[{r.index}])"
        if r.kind == "const":
            return f"((uint8_t *)(blob + {r.offset}))"
        raise AssertionError(r.kind)

    def render(self) -> str:
        """The C file the cpu backend compiles: `lb_model_run`, exported, with step timing."""
        live = self.liveness or self.make_liveness()
        return HEADER.format(name=self.name, tensors=len(live.roots)) + self.render_function()

    def render_function(self, entry: str = "lb_model_run", storage: str = "LB_API",
                        timing: bool = True) -> str:
        """The entry function (a bundle names it after the model, makes it static and drops
        the step timing: no clock, no profile argument)."""
        if self.liveness is None:
            self.make_liveness()  # the arena slots the addresses name
        by_id = {t.id: t for t in self.tensors}

        def resolve(m: re.Match) -> str:
            return self.address(by_id[int(m.group(1))])

        body = []
        for i, s in enumerate(self.steps):
            body.append(f"    /* {s.comment} */")
            body.append("    {")
            if timing:
                body.append(f"        if (step_seconds) lb_pool_step(ctx, {i});")
                body.append("        double t0 = step_seconds ? lb_seconds() : 0;")
            body += ["        " + re.sub(r"@T(\d+)@", resolve, line) for line in s.code]
            if timing:
                body.append(f"        if (step_seconds) step_seconds[{i}] += lb_seconds() - t0;")
                body.append("        if (step_seconds) lb_pool_step(ctx, -1);")
            body.append("    }")
        dims = "".join(f"    const int64_t {v} = dims[{i}];\n"
                       for i, v in enumerate(self.dim_vars))
        return FUNCTION.format(storage=storage, entry=entry, dims=dims, body="\n".join(body),
                               timing=" double *step_seconds," if timing else "")


C_TYPES = {np.dtype(np.uint8): "uint8_t", np.dtype(np.int8): "int8_t",
           np.dtype(np.int16): "int16_t", np.dtype(np.uint16): "uint16_t",
           np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t",
           np.dtype(np.float32): "float", np.dtype(np.float64): "double",
           np.dtype(np.bool_): "uint8_t"}

HEADER = """/* Generated by lowbit's cpu backend for graph '{name}'. One call runs one inference.
 * dims: the values of the dimension variables below; offsets: where each of the {tensors}
 * arena tensors starts (planned by the caller for these dimensions). */
#include <math.h>

#include "lowbit_rt.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"

"""

FUNCTION = """{storage} int {entry}(const lb_ctx *ctx, const uint8_t *blob, uint8_t *arena,
                        const int64_t *dims, const int64_t *offsets, void *const *inputs,
                        void *const *outputs,{timing} int64_t *err) {{
{dims}{body}
    return 0;
}}
"""
