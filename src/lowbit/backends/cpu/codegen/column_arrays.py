"""Per-column constants of a product whose column count is known only at run time.

The int8 product kernels read one entry per output column from each requantization array
(lb_requant's p0..p3, zero_point, dscale) and from the row-sum term's weight zero points,
padded with zeros to a multiple of 16 entries (lowbit_rt.h). A product of two activations
quantized per tensor (attention's Q K^T over a run-time sequence length S) has S columns and
one value per array: the generated code fills arena scratch with that value for the first
`n` entries and zeros up to the next multiple of 16, once per run, before the product.

Arena bytes are a monomial in the dimension variables (program.Size), so the scratch is sized
by a bound: ceil16(n) <= 16 n for every n >= 1 (n = 0 fills nothing).
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu import packing
from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.program import Program, Size, Tensor, dim_c, dim_size


def ceil_bound(d, q: int) -> Size:
    """ceil(d / q) for a static d; for a run-time d, d itself (an upper bound when d >= 0)."""
    if isinstance(d, (int, np.integer)):
        return Size(-(-int(d) // q))
    return dim_size(d)


def column_arrays(prog: Program, arrays: packing.RequantArrays, zb: int | None, n,
                  name: str) -> tuple[list[str], str, str, Tensor]:
    """(C lines filling the arrays, an lb_requant initializer reading them, the col_zb
    pointer expression (or "NULL"), the scratch tensor) for `n` columns (a lowered run-time
    dimension) of a product quantized per tensor: `arrays` built for 1 column, `zb` the
    weight zero point of the row-sum term (None: no term)."""
    ints = [a[0] for a in arrays.p] + [arrays.zero_point[0]]
    if zb is not None:
        ints.append(np.int32(zb))
    doubles = [] if arrays.dscale is None else [arrays.dscale[0]]
    if arrays.fmul is not None:
        raise ValueError("float32 requantization (ONNX Runtime's) has no run-time columns")
    per_column = 4 * len(ints) + 8 * len(doubles)
    scratch = prog.scratch(Size(16 * per_column) * dim_size(n), name)
    cols = dim_c(n)
    fills = "".join(f" c_[{j} * nc_ + i_] = in_ ? {int(v)} : 0;" for j, v in enumerate(ints))
    if doubles:
        fills += f" d_[i_] = in_ ? {float(doubles[0])!r} : 0.0;"
    code = [f"int32_t *c_ = (int32_t *){scratch.ptr};",
            f"const int64_t nc_ = (({cols}) + 15) / 16 * 16;",
            f"double *d_ = (double *)(c_ + {len(ints)} * nc_);" if doubles else "",
            f"for (int64_t i_ = 0; i_ < nc_; i_++) {{ const int in_ = i_ < ({cols});{fills} }}"]
    p = [f"c_ + {j} * nc_" for j in range(4)]
    rq = (f"{{{cexpr.RQ_NAMES[arrays.method]}, {arrays.qmin}, {arrays.qmax}, {', '.join(p)}, "
          f"c_ + 4 * nc_, NULL, {'d_' if doubles else 'NULL'}, {cexpr.flt(arrays.fmin)}, "
          f"{cexpr.flt(arrays.fmax)}}}")
    col_zb = "c_ + 5 * nc_" if zb is not None else "NULL"
    return [c for c in code if c], rq, col_zb, scratch
