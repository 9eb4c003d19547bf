"""Second moments of what a constant weight multiplies, for error-compensating weight rounding.

A Conv, Gemm or MatMul with a constant weight computes, for each output element, a dot
product `y[n] = w[n] . x` of one weight row with one input vector x of length K. For each
such node the profile accumulates, over every input vector the calibration data produces,

    S[g] = sum x x^T    (K x K, float64)      count = number of vectors

per weight group g (Conv with `group` G: G blocks, each with its own K = C_in/G * prod(kernel);
Gemm and MatMul: one block). The input vectors are:

    Conv    the receptive fields: the input zero-padded by `pads` (or auto_pad), windows of
            `kernel_shape` with `dilations`, taken every `strides`, channel-major then kernel
            position (the order of `W.reshape(C_out, -1)`); one vector per output position and
            batch item, so that `W.reshape(C_out, -1) @ vectors` is the convolution
    Gemm    the rows of A (the columns with transA)
    MatMul  the vectors along the last axis of A (2-D constant B only)

`E[x x^T] = S / count` is the matrix H of `lowbit.quant.weight_rounding`: the expected squared
output error of a weight error d is `d^T H d`. Memory is fixed (K^2 per group, K at most
`MAX_SIZE`), whatever the number of batches, and the vectors are formed a bounded piece at a
time (`CHUNK` numbers). Each piece's products are summed in the input's precision (float32 for
float32 data, relative error about 1e-6, far below what changes a rounding decision) by a
matrix product; with the cpu backend's library, the float32 vectors of a 1x1 Conv (stride 1,
no padding) or a dense product are read in place by a C kernel instead (`stats.moments_upper`:
the upper triangle only, blocks of 256 vectors summed in float32 by fused multiply-adds in
order, the blocks in float64), and a 2-D depthwise Conv's (`depthwise_moments`: each
product rounded to float32 and summed in float32 over blocks of whole output rows, up to 256
positions, the blocks in float64; by a C kernel when the cpu backend's library loads); each
is added to the totals exactly (`lowbit.numerics.exact_sum`, in C likewise: the same whatever
the order, so moments profiled in shards merge into one pass's bit for bit).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from lowbit.ir.graph import Node
from lowbit.numerics.exact_sum import GridSum
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.ops.product import integer_product

CHUNK = 1 << 22
"""Numbers of input vectors formed at once while profiling (float64: 32 MiB)."""
PENDING = 4
"""Batches whose float32 triangles (one block of vectors each: `InputMoments.pending_slot`)
are kept before one exact addition adds them all (one pass over the limbs instead of one
each; the same limbs)."""
MAX_SIZE = 4096
"""Longest input vector K whose moments are kept (K x K float64 a group: 128 MiB at most);
products with longer rows round their weights to nearest."""


class InputMoments:
    """S and count (module docstring) of one product node, accumulated over batches.

    S is symmetric; while profiling only its upper triangle (row-major, diagonal included: the
    part a saved profile keeps) is summed, and `second` mirrors it."""

    def __init__(self, node: str, second: np.ndarray | None, count: int,
                 exact: GridSum | None = None, shape: tuple[int, int] | None = None) -> None:
        self.node = node
        self._second: np.ndarray | None = second
        self._exact = exact
        """S's upper triangle [G, K (K + 1) / 2] as an order-independent exact sum while
        profiling (`exact_sum.GridSum`), so that moments taken in shards and merged in any
        order equal one pass's bit for bit; None for moments read from a file (then they add
        in float64)."""
        if shape is None:
            assert second is not None
            shape = (int(second.shape[0]), int(second.shape[1]))
        self.shape = shape
        """(G, K)."""
        self.count = count
        self._pending: np.ndarray | None = None
        """[PENDING, G, K (K + 1) / 2] float32: triangles not yet added to `_exact`."""
        self._pending_used = 0

    @classmethod
    def empty(cls, node: str, groups: int, size: int) -> InputMoments:
        return cls(node, None, 0, GridSum((groups, size * (size + 1) // 2)), (groups, size))

    def can_defer(self) -> bool:
        """Whether a batch's triangle may be given as float32 in `pending_slot` (while the
        moments are an exact sum)."""
        return self._exact is not None

    def pending_slot(self) -> np.ndarray:
        """Where to write the next batch's triangle [G, K (K + 1) / 2] in float32 (the
        values it adds, each exactly a float32), before `commit_pending`."""
        if self._pending is None:
            self._pending = np.empty((PENDING, self.groups, self.size * (self.size + 1) // 2),
                                     np.float32)
        return self._pending[self._pending_used]

    def commit_pending(self, count: int) -> None:
        """Count the triangle written to `pending_slot` as S of `count` more vectors (added
        exactly with the others when PENDING are waiting, or when S is next read)."""
        self.count += count
        self._pending_used += 1
        if self._pending_used == PENDING:
            self.flush()

    def flush(self, release: bool = False) -> None:
        """Add the waiting triangles, in order, as `add_upper` would have one by one (done
        before S is read or merged; the profile calls it once its batches end, with
        `release` to free the waiting buffer)."""
        used, self._pending_used = self._pending_used, 0
        if used:
            assert self._pending is not None and self._exact is not None
            waiting = [self._pending[b] for b in range(used)]
            done = 0
            if _native():
                from lowbit.backends.cpu import stats

                done = stats.gridsum_add_many(self._exact, waiting)
                self._second = None
            for upper in waiting[done:]:  # a triangle with a NaN or an infinity, and after
                self._add_upper_values(upper.astype(np.float64))
        if release:
            self._pending = None

    @property
    def second(self) -> np.ndarray:
        """S: float64 [G, K, K]."""
        self.flush()
        if self._second is None:
            assert self._exact is not None
            if _native():  # the same values, in C
                from lowbit.backends.cpu import searches

                self._second = searches.unpack_upper_sum(self._exact, self.size)
            else:
                self._second = unpack_upper(self._exact.value(), self.size)
        return self._second

    def _add(self, second: np.ndarray) -> None:
        """Add S of some vectors, given whole ([G, K, K], symmetric)."""
        self.flush()
        if self._exact is not None:
            if _native():
                from lowbit.backends.cpu import stats

                if stats.gridsum_add_upper(self._exact, second):
                    self._second = None
                    return
            else:
                upper = second.reshape(self.groups, -1)[:, upper_flat(self.size)]
                if np.all(np.isfinite(upper)):
                    self._exact.add(upper)
                    self._second = None
                    return
        self._second = self.second + second
        self._exact = None

    def add_upper(self, upper: np.ndarray, count: int) -> None:
        """Add S of `count` vectors given as its upper triangle [G, K (K + 1) / 2]."""
        self.flush()
        self.count += count
        self._add_upper_values(upper)

    def _add_upper_values(self, upper: np.ndarray) -> None:
        if self._exact is not None and _native():
            from lowbit.backends.cpu import stats

            try:
                stats.gridsum_add(self._exact, upper)  # checks that every value is finite
                self._second = None
                return
            except ValueError:
                pass
        elif self._exact is not None and np.all(np.isfinite(upper)):
            self._exact.add(upper)
            self._second = None
            return
        self._second = self.second + unpack_upper(upper, self.size)
        self._exact = None

    def __getstate__(self) -> dict:
        """Pickled without the float64 S derived from the exact sum (it is recomputed where
        needed): a partial profile moving between processes carries its limbs only."""
        self.flush()
        state = dict(self.__dict__)
        state["_pending"] = None
        if self._exact is not None:
            state["_second"] = None
        return state

    @property
    def groups(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return self.shape[1]

    def observe(self, vectors: np.ndarray) -> None:
        """Add input vectors given as [G, K, P] (P vectors per group; any layout)."""
        self._add(np.matmul(vectors, vectors.transpose(0, 2, 1)))
        self.count += int(vectors.shape[2])

    def merge(self, other: InputMoments) -> None:
        self.flush()
        other.flush()
        if other.shape != self.shape:
            raise ValueError(f"input moments of '{self.node}' have shape (groups, size) "
                             f"{self.shape} and {other.shape}")
        if self._exact is not None and other._exact is not None:
            self._exact.merge(other._exact)
            self._second = None
        else:
            self._second = self.second + other.second
            self._exact = None
        self.count += other.count

    def copy(self, node: str | None = None) -> InputMoments:
        """A copy (for `node`, default the same), exact sums included."""
        self.flush()
        return InputMoments(self.node if node is None else node,
                            None if self._second is None else self._second.copy(), self.count,
                            None if self._exact is None else self._exact.copy(), self.shape)

    def correlation(self) -> np.ndarray:
        """H = E[x x^T], float64 [G, K, K] (zeros before any vector was seen)."""
        return self.second / max(self.count, 1)

    def scaled(self, factors: np.ndarray) -> InputMoments:
        """The moments of the vectors `x * factors` (one factor per element of K, or [G, K]
        one row per group): S becomes diag(f) S diag(f)."""
        f = np.asarray(factors, np.float64)
        f = f.reshape(1, -1) if f.ndim == 1 else f
        return InputMoments(self.node, self.second * f[:, :, None] * f[:, None, :], self.count)


@functools.lru_cache(maxsize=16)
def upper_flat(size: int) -> np.ndarray:
    """Flat indices (row * size + column) of a size x size matrix's upper triangle, row-major,
    diagonal included (`np.triu_indices` order; read-only)."""
    rows, cols = np.triu_indices(size)
    flat = rows * size + cols
    flat.setflags(write=False)
    return flat


def unpack_upper(upper: np.ndarray, size: int) -> np.ndarray:
    """The symmetric [G, size, size] float64 matrices whose upper triangles are `upper`
    [G, size (size + 1) / 2] (`upper_flat` order)."""
    rows, cols = np.triu_indices(size)
    out = np.zeros((upper.shape[0], size, size))
    out[:, rows, cols] = upper
    out[:, cols, rows] = upper
    return out


def moments_problem(node: Node) -> str | None:
    """Why `node` (a Conv, Gemm or MatMul) has no input moments, or None when it has."""
    geometry = integer_product(node)
    if geometry is None:
        return f"{node.op_type} is not a product"
    w = node.input_or_none(geometry.weight_input)
    if w is None or w.const_value is None:
        return "its weight is not constant"
    ndim = w.const_value.ndim
    if ndim < 3 if geometry.windowed else ndim != 2:
        return f"no input vectors for a {ndim}-D {node.op_type} weight"
    size = _shape(node)[1]
    if size > MAX_SIZE:
        return f"its rows are {size} long (moments are kept up to {MAX_SIZE})"
    return None


def moments_shape(node: Node) -> tuple[int, int] | None:
    """(G, K) of `node`'s input moments, or None when it has none (`moments_problem`)."""
    return None if moments_problem(node) is not None else _shape(node)


def _shape(node: Node) -> tuple[int, int]:
    """(groups, K) of a product with a constant weight."""
    geometry = integer_product(node)
    w = node.inputs[geometry.weight_input].const_value
    return geometry.groups, int(geometry.reduction_size(w.shape))


def vector_layout(node: Node) -> tuple:
    """What decides `node`'s input vectors besides the input itself: products reading one value
    with equal layouts (a transformer's Q, K and V projections) have the same moments."""
    geometry = integer_product(node)
    if geometry.windowed:
        window = ("group", "kernel_shape", "strides", "dilations", "pads", "auto_pad")
        return ("Conv", tuple(node.inputs[geometry.weight_input].const_value.shape[1:]),
                *(repr(node.attrs.get(k)) for k in window))
    return ("columns" if geometry.input_channel_axis == 0 else "rows", _shape(node)[1])


class InputPlan:
    """What `observe_input` decides from a product node and its input's shape and dtype alone
    (the depthwise window, how the input vectors are rows of views), derived once and reused
    for every batch of that shape (the profile's are all one shape)."""

    __slots__ = ("depthwise", "dtype", "native", "rows", "shape")

    def __init__(self, node: Node, x: np.ndarray) -> None:
        self.shape = x.shape
        self.dtype = x.dtype
        self.depthwise = _depthwise_window(node, x)
        """`_depthwise_window` of the node for x, or None."""
        self.native = _native()
        self.rows: tuple | None = None
        """How x's float32 input vectors are rows of views (`_rows_layout`): ("dense",
        geometry) or ("1x1", groups); None when they are not (or without the C kernels)."""
        if self.depthwise is None and self.native:
            self.rows = _rows_layout(node, x)

    def fits(self, x: np.ndarray) -> bool:
        """Whether the plan was derived for x's shape and dtype."""
        return x.shape == self.shape and x.dtype == self.dtype

    def row_vectors(self, x: np.ndarray) -> list[list[np.ndarray]] | None:
        """The input vectors of x (of the plan's shape and dtype) as float32 [P, K] views, per
        batch item and group, when they are rows of views (`rows`), else None."""
        if self.rows is None:
            return None
        kind, how = self.rows
        if kind == "dense":
            return [[how.input_rows(x)]]
        per_item = x.reshape(x.shape[0], how, x.shape[1] // how, -1)  # [N, G, K, P]
        return [[item[g].T for g in range(how)] for item in per_item]


def observe_input(moments: InputMoments, node: Node, x: np.ndarray,
                  plan: InputPlan | None = None) -> None:
    """Add the input vectors of `node` for its data input `x` to `moments`: a depthwise Conv's
    (one input channel per group, float32, at most 25 taps, 2-D) by `depthwise_moments`, in C
    when the kernel library loads; other products' by `input_vectors`, S of each piece by a
    float32 or float64 matrix product. `plan`: the node's `InputPlan` from an earlier batch
    (derived again when x's shape or dtype differs)."""
    if plan is None or not plan.fits(x):
        plan = InputPlan(node, x)
    depthwise = plan.depthwise
    if depthwise is not None:
        count = x.shape[0] * depthwise[-1][0] * depthwise[-1][1]
        if plan.native:
            from lowbit.backends.cpu import stats

            out_rows, out_cols = depthwise[-1]
            if x.shape[0] == 1 and out_rows <= depthwise_block_rows(out_cols) and \
                    moments.can_defer():  # one block: every value is a float32 (exactly)
                stats.depthwise_moments(x, *depthwise, out=moments.pending_slot())
                moments.commit_pending(count)
                return
            upper = stats.depthwise_moments(x, *depthwise)
        else:
            upper = depthwise_moments(x, *depthwise)
        moments.add_upper(upper, count)
        return
    items = plan.row_vectors(x)
    if items is not None:
        from lowbit.backends.cpu import stats

        if len(items) == 1 and 0 < items[0][0].shape[0] <= stats.MOMENTS_BLOCK and \
                moments.can_defer():  # one block: its float32 sums, added later
            slot = moments.pending_slot()
            for g, rows in enumerate(items[0]):
                stats.moments_block(rows, slot[g])
            moments.commit_pending(items[0][0].shape[0])
            return
        upper = stats.zeroed_scratch((moments.groups, moments.size * (moments.size + 1) // 2))
        for views in items:
            for g, rows in enumerate(views):
                stats.moments_upper(rows, upper[g])
        moments.add_upper(upper, sum(views[0].shape[0] for views in items))
        return
    for vectors in input_vectors(node, x):
        moments.observe(vectors)


def _rows_layout(node: Node, x: np.ndarray) -> tuple | None:
    """`InputPlan.rows` of `node` for `x`: whether the input vectors of float32 `x` are rows of
    strided views (a dense product: one item; a 1x1 convolution with stride 1 and no padding),
    and how, else None."""
    if x.dtype != np.float32 or x.size == 0:
        return None
    geometry = integer_product(node)
    if not geometry.windowed:
        return ("dense", geometry)
    w = node.inputs[geometry.weight_input].const_value
    window = window_from_attrs(node, w.shape[2:], x.ndim - 2)
    if int(np.prod(window.kernel)) != 1 or any(window.resolved_pads(x.shape[2:])) or \
            any(s != 1 for s in window.strides):
        return None
    return ("1x1", int(node.attrs.get("group", 1)))


@functools.cache
def _native() -> bool:
    """Whether the C forms of the exact sums and depthwise moments are used."""
    from lowbit.backends.cpu import stats

    return stats.available()


DEPTHWISE_TAPS = 25
"""Largest depthwise kernel `depthwise_moments` takes (more taps: `input_vectors`)."""


def _depthwise_window(node: Node, x: np.ndarray) -> tuple | None:
    """(kernel, strides, dilations, (pad top, pad left), (out rows, out columns)) of a 2-D
    depthwise Conv (one input channel per group) on float32 `x`, else None."""
    geometry = integer_product(node)
    if not geometry.windowed or x.dtype != np.float32 or x.ndim != 4:
        return None
    w = node.inputs[geometry.weight_input].const_value
    if w.shape[1] != 1 or int(node.attrs.get("group", 1)) != x.shape[1]:
        return None
    window = window_from_attrs(node, w.shape[2:], 2)
    kernel = tuple(int(k) for k in window.kernel)
    if kernel[0] * kernel[1] > DEPTHWISE_TAPS:
        return None
    pads = window.resolved_pads(x.shape[2:])
    outs = tuple((x.shape[2 + i] + pads[i] + pads[i + 2] - ((kernel[i] - 1)
                  * window.dilations[i] + 1)) // window.strides[i] + 1 for i in range(2))
    if min(outs) < 1:
        return None
    return (kernel, tuple(window.strides), tuple(window.dilations), (pads[0], pads[1]), outs)


DEPTHWISE_BLOCK = 256
"""Output positions (whole output rows, at least one) whose depthwise products
`depthwise_moments` sums in float32 before adding them to the float64 total."""


def depthwise_block_rows(out_cols: int) -> int:
    """Output rows a block of `depthwise_moments` holds: as many whole rows of `out_cols`
    positions as fit in DEPTHWISE_BLOCK, at least one."""
    return max(1, DEPTHWISE_BLOCK // out_cols)


def depthwise_moments(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int],
                      dilations: tuple[int, int], pads: tuple[int, int],
                      out_size: tuple[int, int]) -> np.ndarray:
    """The upper triangles [C, T] (T = taps (taps + 1) / 2, `np.triu_indices` order) of S for
    each channel of a depthwise convolution of x [N, C, H, W] (float32): v is the channel's
    receptive field at one output position (taps row-major, zero outside the input, `pads` =
    (top, left)), and S = sum of v v^T over the output positions in order (batch item, output
    row, output column), in blocks of whole output rows of one batch item, as many as fit in
    `DEPTHWISE_BLOCK` positions (at least one row): within a block each product v_a v_b is
    rounded to float32 and added to a float32 sum in position order (a multiply, then an add:
    two roundings, no fused multiply-add); each block's sum is then added to the float64
    total in block order. (Float32 halves the work of float64 products; a block of at most
    256 products keeps the relative error near 1e-6, which steers no rounding decision.)
    This is the definition the C kernel (`lowbit.backends.cpu.stats`) reproduces bit for
    bit; it loops over positions in Python (slow)."""
    n, c, h, w = x.shape
    taps = kernel[0] * kernel[1]
    rows, cols = np.triu_indices(taps)
    total = np.zeros((c, len(rows)))
    v = np.zeros((c, taps), np.float32)
    x = np.asarray(x, np.float32)
    block = depthwise_block_rows(out_size[1])
    for b in range(n):
        for first in range(0, out_size[0], block):
            s = np.zeros((c, len(rows)), np.float32)
            for oy in range(first, min(out_size[0], first + block)):
                for ox in range(out_size[1]):
                    v[...] = 0.0
                    for ky in range(kernel[0]):
                        iy = oy * strides[0] + ky * dilations[0] - pads[0]
                        for kx in range(kernel[1]):
                            ix = ox * strides[1] + kx * dilations[1] - pads[1]
                            if 0 <= iy < h and 0 <= ix < w:
                                v[:, ky * kernel[1] + kx] = x[b, :, iy, ix]
                    s = s + v[:, rows] * v[:, cols]  # float32: product rounded, then sum
            total = total + s.astype(np.float64)
    return total


def input_vectors(node: Node, x: np.ndarray) -> Iterator[np.ndarray]:
    """The input vectors of `node` for data input `x` (module docstring), as [G, K, P] pieces
    of about `CHUNK` numbers (float32 for float32 data, else float64; often a strided view)."""
    x = np.asarray(x)
    dtype = np.float32 if x.dtype == np.float32 else np.float64
    geometry = integer_product(node)
    if geometry.windowed:
        yield from _receptive_fields(node, x.astype(dtype, copy=False))
        return
    rows = geometry.input_rows(x)
    step = max(1, CHUNK // max(rows.shape[1], 1))
    for start in range(0, rows.shape[0], step):
        yield np.asarray(rows[start:start + step], dtype).T[None]


def _receptive_fields(node: Node, x: np.ndarray) -> Iterator[np.ndarray]:
    w = node.inputs[integer_product(node).weight_input].const_value
    spatial = x.ndim - 2
    window = window_from_attrs(node, w.shape[2:], spatial)
    pads = window.resolved_pads(x.shape[2:])
    groups = int(node.attrs.get("group", 1))
    channels = x.shape[1]
    taps = int(np.prod(window.kernel))
    if taps == 1 and not any(pads) and all(s == 1 for s in window.strides):
        # 1x1, stride 1: each position's channels are the vector, read in place
        per_item = x.reshape(x.shape[0], groups, channels // groups, -1)
        step = max(1, CHUNK // max(channels, 1))
        for item in per_item:
            for start in range(0, item.shape[2], step):
                yield item[:, :, start:start + step]
        return
    span = [(k - 1) * d + 1 for k, d in zip(window.kernel, window.dilations, strict=True)]
    offsets = list(np.ndindex(*window.kernel))
    for item in x:
        padded = np.pad(item, [(0, 0)] + [(pads[i], pads[i + spatial]) for i in range(spatial)])
        outs = [(padded.shape[1 + i] - span[i]) // window.strides[i] + 1 for i in range(spatial)]
        per_row = channels * taps * int(np.prod(outs[1:]))
        step = max(1, CHUNK // max(per_row, 1))
        for start in range(0, outs[0], step):
            rows = min(step, outs[0] - start)
            # [C, taps, rows, out_2..out_n]: one strided slice of the input per kernel offset
            piece = np.empty((channels, taps, rows, *outs[1:]), x.dtype)
            for t, offset in enumerate(offsets):
                begins = [start * window.strides[0] + offset[0] * window.dilations[0]] + [
                    offset[i] * window.dilations[i] for i in range(1, spatial)]
                sizes = [rows, *outs[1:]]
                piece[:, t] = padded[(slice(None),) + tuple(
                    slice(b, b + (n - 1) * st + 1, st)
                    for b, n, st in zip(begins, sizes, window.strides, strict=True))]
            # [G, C/G, taps, P] -> [G, K, P] (a view)
            yield piece.reshape(groups, (channels // groups) * taps, -1)
