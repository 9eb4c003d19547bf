"""The lb_qbinary parameters of a quantized Add/Sub/Mul, and the residual squeeze-excitation
`x + x * s` of 8-bit NHWC codes as one step of per-channel tables (lb_qse_residual).

PP-OCR's RSE blocks (det's neck) compute Mul(x, s) with s one code per image and channel
(HardSigmoid of a pooled branch, [N, C, 1, 1]) and then Add(x, that product). With x 8-bit,
the result at channel c is a function of x's code alone once s[n, c] is known: the C computes,
per image, each channel's 256 results with the Mul's and the Add's own integer expressions
(the spans of lb_qbinary_run) and looks every code up, so the Mul's codes are never stored and
one pass over x replaces two. Bit-exact by construction: each table entry is the pair of
kernels the unfused steps would run on that code.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu import params
from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.add_linear import linear_add
from lowbit.backends.cpu.codegen.lower import Lowering, stored_dtype
from lowbit.backends.cpu.codegen.program import Size, dim_c
from lowbit.backends.reference.kernels import is_quantized
from lowbit.ir.graph import Node, Value
from lowbit.ir.types import TensorType

INT32_LIMIT = 2**31
# The tables cost 256 entries a channel: below this many pixels the two steps are cheaper.
MIN_PIXELS = 512


def _shift(t: TensorType) -> int:
    return 128 if stored_dtype(t)[1] else 0


def qbinary_c(lw: Lowering, node: Node, types: tuple[str, str, str]) -> str:
    """The lb_qbinary initializer of quantized Add/Sub/Mul `node` with operand and result
    type names `types` (a = inputs[0], b = inputs[1]; zero points in stored codes)."""
    t1, t2, out_t = node.inputs[0].type, node.inputs[1].type, node.outputs[0].type
    s1, s2, so = _shift(t1), _shift(t2), _shift(out_t)
    narrow = 1
    if node.op_type == "Mul":
        pm = params.of(node)
        (z1, z2), rq = pm.input_zeros, pm.requant
        add = (0, z1 + s1, 0, 0, 0, z2 + s2, 0, 0, 0, 0)
        op = "LB_QMUL"
        spans = [max(t.dtype.qmax - z, z - t.dtype.qmin) for t, z in ((t1, z1), (t2, z2))]
        narrow = int(spans[0] * spans[1] < INT32_LIMIT)
    else:
        ps = params.of(node)
        rq = ps.requant
        q1, q2 = ps.aligners
        add = (ps.shift, ps.input_zeros[0] + s1, int(q1.multiplier), int(q1.left_shift),
               int(q1.right_shift), ps.input_zeros[1] + s2, int(q2.multiplier),
               int(q2.left_shift), int(q2.right_shift), int(node.op_type == "Sub"))
        op = "LB_QADD" if node.op_type == "Add" else "LB_QSUB"
    arrays = cexpr.requant_arrays(rq, 1, so)
    lin = linear_add(node) if types == ("LB_U8", "LB_U8", "LB_U8") else None
    lin_c = "0, 0, 0, 0, 0, 0, NULL" if lin is None else \
        (f"1, {int(lin.swap)}, {lin.c}, {lin.shift}, {lin.lo}, {lin.hi}, "
         f"(const int16_t *){cexpr.int_array(lw.prog, lin.table, np.int16)}")
    return (f"{{{op}, {types[0]}, {types[1]}, {types[2]}, "
            f"{{{', '.join(map(str, add))}, {cexpr.requant(lw.prog, arrays)}}}, {narrow}, NULL, "
            f"{lin_c}}}")


def _eight_bit(v: Value) -> bool:
    t = v.type
    return t is not None and t.quant is not None and t.quant.per_tensor and t.dtype.bits == 8


def _plain_node(node: Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and \
        node.domain in ("", "ai.onnx") and is_quantized(node) and len(node.inputs) == 2 and \
        len(node.outputs) == 1


def se_residual(lw: Lowering, mul: Node) -> tuple[Node, Value, Value] | None:
    """(the Add, x, s) when quantized Mul `mul` and the Add after it compute x + x * s as
    the module docstring describes, with x stored NHWC and images of >= MIN_PIXELS pixels."""
    if not _plain_node(mul, "Mul"):
        return None
    m = mul.outputs[0]
    add = lw.sole_user(m)
    if not _plain_node(add, "Add") or add in lw.fused or add.inputs.count(m) != 1:
        return None
    x = add.inputs[1] if add.inputs[0] is m else add.inputs[0]
    if mul.inputs.count(x) != 1 or x.is_constant or not lw.available(x):
        return None
    s = mul.inputs[1] if mul.inputs[0] is x else mul.inputs[0]
    if s.is_constant or not lw.available(s) or \
            not all(_eight_bit(v) for v in (x, s, m, add.outputs[0])):
        return None
    shape = lw.shape(x)
    if len(shape) != 4 or lw.shape(m) != shape or lw.shape(add.outputs[0]) != shape:
        return None
    n, c, h, w = shape
    if not all(isinstance(d, int) for d in (c, h, w)) or h * w < MIN_PIXELS or \
            lw.shape(s) != (n, c, 1, 1) or lw.tensor_of(x).layout != "nhwc":
        return None
    return add, x, s


def emit_se_residual(lw: Lowering, mul: Node) -> bool:
    """Emit Mul `mul` and the Add after it as one lb_qse_residual step when se_residual
    finds the pattern; False (nothing emitted) otherwise."""
    found = se_residual(lw, mul)
    if found is None:
        return False
    add, x_v, s_v = found
    x = lw.operand(x_v, "nhwc")
    s = lw.operand(s_v, None)
    out = lw.result(add.outputs[0], "nhwc")
    n, c, h, w = x.shape
    u8 = ("LB_U8", "LB_U8", "LB_U8")
    tables = lw.prog.scratch(Size(c * 256 + 64), "se_tables")
    code = [f"const lb_qse op = {{{qbinary_c(lw, mul, u8)}, {qbinary_c(lw, add, u8)}, "
            f"{int(mul.inputs[1] is x_v)}, {int(add.inputs[1] is x_v)}}};",
            f"lb_qse_residual(ctx, &op, {dim_c(n)}, {h * w}, {c}, {x.ptr}, {s.ptr}, "
            f"{out.ptr}, {tables.ptr});"]
    lw.prog.step(f"{mul.name}: quantized Mul + Add ({add.name}) as {c} per-channel tables",
                 code, [x, s], [out], [tables])
    lw.fused.add(add)
    return True

