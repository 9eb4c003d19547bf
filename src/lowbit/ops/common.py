"""Shape helpers shared by op modules: broadcasting with symbolic dims, axis normalisation."""

from __future__ import annotations

from lowbit.errors import ModelError
from lowbit.ir.graph import Node
from lowbit.ir.types import Dim
from lowbit.ops.symbolic import min_bound


def normalize_axis(node: Node, axis: int, rank: int) -> int:
    """Map a possibly negative axis into [0, rank); refuse it naming the node if out of range."""
    if not -rank <= axis < rank:
        raise ModelError(f"{node.describe()}: axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """Numpy broadcasting of two dims. Unknown (None) and symbolic dims are assumed to be
    compatible; a static dim other than 1 wins over them. A symbol against an unknown dim gives
    unknown: either could be 1 at run time."""
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise ValueError(f"dimensions {a} and {b} do not broadcast")
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    if a == b:
        return a
    # a table cut to a sequence length, min(n, S), against S: equal whenever they broadcast
    # (and S when min(n, S) is 1 because S is)
    for x, y in ((a, b), (b, a)):
        bound = min_bound(x)
        if bound is not None and bound[1] == y:
            return y
    return None


def broadcast_shapes(*shapes: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """Multidirectional (numpy) broadcast of shapes; None if any rank is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)  # type: ignore[arg-type]
    out: list[Dim] = [1] * rank
    for s in shapes:
        assert s is not None
        padded = (1,) * (rank - len(s)) + tuple(s)
        out = [broadcast_dim(x, y) for x, y in zip(out, padded, strict=True)]
    return tuple(out)
