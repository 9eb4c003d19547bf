"""A generated program under construction: tensors, the C statements of each step, the blob of
constants, and (once every step is known) the arena plan that turns tensors into pointers.

Sizes may depend on the batch size `N`, the one dimension left symbolic at run time: a `Size`
is `coef * N**power` with power 0 or 1. The arena has a fixed part (sizes without N) followed
by a part whose offsets and sizes scale with N, each planned once in units (bytes, and bytes
per batch element), so one compiled program runs every batch size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from lowbit.errors import UnsupportedError

BATCH = "N"
"""The C name of the batch size, and the marker of the batch dimension in shapes."""

ALIGN = 64


@dataclass(frozen=True)
class Size:
    """`coef * N**power` bytes or elements."""

    coef: int
    power: int = 0

    def __mul__(self, other: Size | int) -> Size:
        if isinstance(other, int):
            return Size(self.coef * other, self.power)
        power = self.power + other.power
        if power > 1:
            raise UnsupportedError("a tensor whose size grows with the square of the batch size")
        return Size(self.coef * other.coef, power)

    __rmul__ = __mul__

    def __add__(self, other: Size) -> Size:
        if self.coef == 0:
            return other
        if other.coef == 0:
            return self
        if self.power != other.power:
            raise UnsupportedError("a size that is not a multiple of the batch size")
        return Size(self.coef + other.coef, self.power)

    def c(self) -> str:
        """The C expression (int64)."""
        if self.power == 0 or self.coef == 0:
            return f"{self.coef}"
        return f"{self.coef} * N" if self.coef != 1 else "N"

    def at(self, n: int) -> int:
        return self.coef * (n if self.power else 1)


def is_batch(d) -> bool:
    """Whether dimension d is the batch size or a multiple of it ("N", "320*N")."""
    return isinstance(d, str)


def dim_size(d) -> Size:
    if isinstance(d, str):
        return Size(1, 1) if d == BATCH else Size(int(d.split("*")[0]), 1)
    return Size(int(d))


def numel(shape) -> Size:
    s = Size(1)
    for d in shape:
        s = s * dim_size(d)
    return s


def dim_c(d) -> str:
    return dim_size(d).c()


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
    """C statements for one node (or one conversion), and the tensors they touch."""

    comment: str
    code: list[str]
    reads: list[Tensor]
    writes: list[Tensor]
    scratch: list[Tensor] = field(default_factory=list)


class Blob:
    """Constants laid out one after another, each aligned to 64 bytes."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self._dedup: dict[bytes, int] = {}

    def add(self, array: np.ndarray) -> int:
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
        if len(data) <= 1 << 16:
            self._dedup[data] = offset
        return offset

    def bytes(self) -> bytes:
        return b"".join(self.parts) + b"\0" * ((-self.size) % ALIGN)


@dataclass
class Plan:
    """Arena offsets: fixed part in bytes, batch part in bytes per batch element."""

    offsets: dict[int, int]
    fixed_size: int
    per_batch_size: int

    def size(self, n: int) -> int:
        return self.fixed_size + n * self.per_batch_size


class Program:
    def __init__(self, name: str) -> None:
        self.name = name
        self.steps: list[Step] = []
        self.tensors: list[Tensor] = []
        self.blob = Blob()
        self.plan: Plan | None = None

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

    def data(self, array: np.ndarray) -> str:
        """A C pointer expression to `array`'s bytes in the blob (typed by its dtype)."""
        offset = self.blob.add(array)
        ctype = C_TYPES[np.dtype(array.dtype)]
        return f"(const {ctype} *)(blob + {offset})"

    def scratch(self, nbytes: Size, name: str = "scratch") -> Tensor:
        return self.tensor(name, np.uint8, (nbytes.coef,) if nbytes.power == 0 else
                           (BATCH, nbytes.coef))

    def step(self, comment: str, code: list[str], reads, writes, scratch=()) -> None:
        self.steps.append(Step(comment, list(code), [t for t in reads if t is not None],
                               list(writes), list(scratch)))

    # -- planning -------------------------------------------------------------------------
    def make_plan(self) -> Plan:
        """Best-fit offsets for every arena tensor by liveness over the steps."""
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
        offsets: dict[int, int] = {}
        sizes = {}
        for power in (0, 1):
            live: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
            order = sorted((tid for tid, r in roots.items() if r.nbytes.power == power),
                           key=lambda tid: (first[tid], -roots[tid].nbytes.coef))
            top = 0
            for tid in order:
                size = -(-roots[tid].nbytes.coef // ALIGN) * ALIGN or ALIGN
                busy = sorted((o, o + sz) for (a, b, o, sz) in live
                              if not (b < first[tid] or a > last[tid]))
                offset, best = None, None
                cursor = 0
                for lo, hi in busy:
                    gap = lo - cursor
                    if gap >= size and (best is None or gap < best):
                        offset, best = cursor, gap
                    cursor = max(cursor, hi)
                if offset is None:
                    offset = cursor
                offsets[tid] = offset
                live.append((first[tid], last[tid], offset, size))
                top = max(top, offset + size)
            sizes[power] = top
        self.plan = Plan(offsets, sizes[0], sizes[1])
        return self.plan

    # -- rendering ------------------------------------------------------------------------
    def address(self, t: Tensor) -> str:
        r = t.root()
        if r.kind == "arena":
            assert self.plan is not None
            off = self.plan.offsets[r.id]
            if r.nbytes.power == 0:
                return f"(arena + {off})"
            return f"(arena + {self.plan.fixed_size} + N * {off})"
        if r.kind == "input":
            return f"((uint8_t *)inputs[{r.index}])"
        if r.kind == "output":
            return f"((uint8_t *)outputs[{r.index}])"
        if r.kind == "const":
            return f"((uint8_t *)(blob + {r.offset}))"
        raise AssertionError(r.kind)

    def render(self) -> str:
        plan = self.plan or self.make_plan()
        by_id = {t.id: t for t in self.tensors}

        def resolve(m: re.Match) -> str:
            return self.address(by_id[int(m.group(1))])

        body = []
        for i, s in enumerate(self.steps):
            body.append(f"    /* {s.comment} */")
            body.append("    {")
            body.append("        double t0 = step_seconds ? lb_seconds() : 0;")
            body += ["        " + re.sub(r"@T(\d+)@", resolve, line) for line in s.code]
            body.append(f"        if (step_seconds) step_seconds[{i}] += lb_seconds() - t0;")
            body.append("    }")
        return HEADER.format(name=self.name, fixed=plan.fixed_size, batch=plan.per_batch_size,
                             body="\n".join(body))


C_TYPES = {np.dtype(np.uint8): "uint8_t", np.dtype(np.int8): "int8_t",
           np.dtype(np.int16): "int16_t", np.dtype(np.uint16): "uint16_t",
           np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t",
           np.dtype(np.float32): "float", np.dtype(np.float64): "double",
           np.dtype(np.bool_): "uint8_t"}

HEADER = """/* Generated by lowbit's cpu backend for graph '{name}'. One call runs one inference.
 * arena: {fixed} bytes + N * {batch} bytes for batch size N. */
#include <math.h>

#include "lowbit_rt.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

LB_API int lb_model_run(const lb_ctx *ctx, const uint8_t *blob, uint8_t *arena, int64_t N,
                        void *const *inputs, void *const *outputs, double *step_seconds) {{
{body}
    return 0;
}}
"""
