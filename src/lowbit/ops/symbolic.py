"""Arithmetic on symbolic dimensions, so shapes stay known through reshapes of symbolic inputs.

A dimension is an int (static), a str (symbolic) or None (unknown). A symbolic dim is a product
of named factors with an optional integer coefficient, written `"batch"`, `"batch*seq"` or
`"12*seq"`. Products and exact quotients of such monomials are again monomials, which is all
shape inference needs: Flatten of `(batch, seq, 384)` gives `(batch*seq, 384)` and a Reshape of
that back to `(-1, seq, 384)` gives `(batch, seq, 384)`. Sums are not represented (unknown).

A symbol without `*` is always a plain name, even when it looks like a number.
"""

from __future__ import annotations

from collections.abc import Iterable

from lowbit.ir.types import Dim

Monomial = tuple[int, tuple[str, ...]]
"""(integer coefficient, sorted symbol factors)."""


def as_monomial(d: Dim) -> Monomial | None:
    """`d` as (coefficient, factors); None for an unknown dim."""
    if d is None:
        return None
    if isinstance(d, int):
        return d, ()
    if "*" not in d:
        return 1, (d,)
    coef, names = 1, []
    for part in d.split("*"):
        if part.isdigit():
            coef *= int(part)
        else:
            names.append(part)
    return coef, tuple(sorted(names))


def from_monomial(m: Monomial) -> Dim:
    coef, names = m
    if not names or coef == 0:
        return coef
    text = "*".join(names)
    return text if coef == 1 else f"{coef}*{text}"


def dim_mul(a: Dim, b: Dim) -> Dim:
    """a * b; 0 times anything is 0, even an unknown dim."""
    if a == 0 or b == 0:
        return 0
    ma, mb = as_monomial(a), as_monomial(b)
    if ma is None or mb is None:
        return None
    return from_monomial((ma[0] * mb[0], tuple(sorted(ma[1] + mb[1]))))


def dim_product(dims: Iterable[Dim]) -> Dim:
    """The product of `dims` (1 for none)."""
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def dim_div(a: Dim, b: Dim) -> Dim:
    """a / b when it is known to divide exactly, else None (unknown)."""
    ma, mb = as_monomial(a), as_monomial(b)
    if ma is None or mb is None or mb[0] == 0:
        return None
    rest = list(ma[1])
    for name in mb[1]:
        if name not in rest:
            return None
        rest.remove(name)
    if ma[0] % mb[0]:
        return None
    return from_monomial((ma[0] // mb[0], tuple(rest)))


def dims_equal(a: Dim, b: Dim) -> bool:
    """Whether `a` and `b` are known to be equal (unknown dims equal nothing)."""
    ma, mb = as_monomial(a), as_monomial(b)
    return ma is not None and ma == mb


def dim_add(a: Dim, b: Dim) -> Dim:
    """a + b when one is zero or both are static, else None."""
    if a == 0:
        return b
    if b == 0:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return None


def merge_dim(a: Dim, b: Dim) -> Dim:
    """Two dims that must be equal: the static one wins over a symbol, a symbol over unknown.
    Raises ValueError for two different static dims."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise ValueError(f"dimensions {a} and {b} differ")
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a if a is not None else b


def dim_min(most: int, d: Dim) -> Dim:
    """min(most, d) for a plain symbol d: the symbol "Min(most, d)" (a table of `most` rows
    sliced to a sequence length d), which `broadcast_dim` matches with d; None otherwise."""
    if isinstance(d, str) and "*" not in d and "(" not in d:
        return f"Min({most}, {d})"
    return None


def min_bound(d: Dim) -> tuple[int, str] | None:
    """(most, symbol) of a dim written by `dim_min`, else None."""
    if isinstance(d, str) and d.startswith("Min(") and d.endswith(")"):
        most, _, name = d[4:-1].partition(", ")
        if most.isdigit() and name:
            return int(most), name
    return None


def clamped_slice(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX's slice of a dimension of size `dim` as a Python slice: negative start/end count
    from the end, then start is clamped to [0, dim] (step > 0) or [0, dim - 1] (step < 0) and
    end to [0, dim] or [-1, dim - 1], -1 meaning "past the first element". (Python clamps a
    too-negative start to -1 for negative steps, which would give nothing.)"""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)
