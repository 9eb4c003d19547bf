"""Elementwise nodes after a product, computed in its epilogue (lb_post in lowbit_rt.h).

After a quantized Conv (not a depthwise one) whose result only one node reads, the code
generator looks for
  1. a chain of one-input quantized functions of that 16-bit result (unary_chain: Sigmoid,
     Mul and Add of scalars, Relu, Clip, ...), which becomes one table indexed by the
     product's code (8-bit results keep their 256-entry table as a step of its own, which
     lb_lookup runs faster than a gather per code), or a HardSwish alone (with the scalar Mul
     and Add the quantizer folded into it), computed by its float32 formula
     (int_activation.HardSwishParams) instead of a gather, and/or
  2. then a quantized Mul of the result by a constant per channel (or one scalar), such as
     the per-channel scale cross-layer equalization inserts before the next convolution:
     y = requant((t - z_t) * (k_c - z_k)), requant per tensor (int_combine's Mul),
and computes them on each code in the product's epilogue before it is stored:

    out = mul(table[requant(acc) - qmin]),

so the product's own result and the chain's intermediate codes are never stored. The table is
the reference's kernels run on every code (unary_chain.chain_table), the HardSwish and the Mul
the reference's formulas, so results are the reference's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowbit.backends.cpu import params
from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, stored_dtype
from lowbit.backends.cpu.codegen.unary_chain import chain_table, unary_chain
from lowbit.backends.reference.kernels import is_quantized
from lowbit.ir.graph import Node, Value
from lowbit.ir.types import TensorType

INT32_LIMIT = 2**31
TYPE_NAMES = {np.dtype(np.uint8): "LB_U8", np.dtype(np.int16): "LB_I16",
              np.dtype(np.uint16): "LB_U16"}


@dataclass
class PostStage:
    """Nodes computed in a product's epilogue: `nodes` (fused, in order), `value` (the last
    one's result, which the product now stores), `lines` (C declaring `post`) and whether the
    first is a HardSwish computed in float32 (`float_hard_swish`, else a table if any)."""

    nodes: list[Node]
    value: Value
    lines: list[str]
    float_hard_swish: bool = False


def _shift(t: TensorType) -> int:
    return 128 if stored_dtype(t)[1] else 0


def _per_tensor_8_16(t: TensorType | None) -> bool:
    return t is not None and t.quant is not None and t.quant.per_tensor and \
        np.dtype(stored_dtype(t)[0]) in TYPE_NAMES


def _channel_constant(lw: Lowering, v: Value, channels: int) -> np.ndarray | None:
    """The codes of constant `v` as one per channel of an NCHW result with `channels`
    channels (broadcast from one value or a [C, 1, 1] / [1, C, 1, 1] array), else None."""
    codes = np.asarray(lw.const_array(v))
    if codes.size == 1:
        return np.full(channels, int(codes.reshape(-1)[0]), np.int64)
    shape = tuple(codes.shape)
    if shape in ((channels, 1, 1), (1, channels, 1, 1)):
        return codes.reshape(-1).astype(np.int64)
    return None


def _channel_mul(lw: Lowering, node: Node, x: Value, channels: int):
    """(mul per channel, z of x in stored codes, requant arrays) when `node` is a quantized Mul
    of x by a constant that the epilogue can compute exactly, else None."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or \
            not is_quantized(node) or len(node.inputs) != 2 or node.inputs.count(x) != 1:
        return None
    i = node.inputs.index(x)
    other = node.inputs[1 - i]
    out_t = node.outputs[0].type
    if not other.is_constant or other.type is None or other.type.quant is None or \
            not other.type.quant.per_tensor or not _per_tensor_8_16(x.type) or \
            not _per_tensor_8_16(out_t) or lw.shape(node.outputs[0]) != lw.shape(x):
        return None
    codes = _channel_constant(lw, other, channels)
    if codes is None:
        return None
    pm = params.of(node)
    zx, zk = int(pm.input_zeros[i]), int(pm.input_zeros[1 - i])
    mul = codes - zk
    dt = x.type.dtype
    span = max(dt.qmax - zx, zx - dt.qmin)
    if span * int(np.abs(mul).max(initial=0)) >= INT32_LIMIT:
        return None  # the product may leave int32: the Mul's own kernel clamps it
    arrays = cexpr.requant_arrays(pm.requant, 1, _shift(out_t))
    return mul, zx + _shift(x.type), arrays


def _mul_fields(lw: Lowering, user: Node | None, v: Value, channels: int
                ) -> tuple[str, int, str] | None:
    """lb_post's (mul, z, rq) initializers when `user` (v's sole reader) is a per-channel Mul
    an lb_post computes (`_channel_mul`), else None."""
    if user is None or user in lw.fused:
        return None
    found = _channel_mul(lw, user, v, channels)
    if found is None:
        return None
    mul, z, arrays = found
    padded = np.zeros(-(-channels // 16) * 16, np.int32)
    padded[:channels] = mul
    return lw.prog.data(padded), z, cexpr.requant(lw.prog, arrays)


def post_stage(lw: Lowering, node: Node, channels: int, groups: int = 1) -> PostStage | None:
    """The nodes after product `node` that its epilogue can compute (module docstring)."""
    v = node.outputs[0]
    if groups != 1 or not _per_tensor_8_16(v.type):
        return None
    user = lw.sole_user(v)
    if user is None or user in lw.fused:
        return None
    nodes: list[Node] = []
    table_c, table_type, table_min = "NULL", "LB_U8", 0
    hsw: list[str] = []
    chain = unary_chain(lw, user)
    if chain and v.type.dtype.bits == 8:
        return None  # a 256-entry table runs faster as its own step (lb_lookup's byte path)
    if len(chain) == 1 and chain[0].op_type == "HardSwish" and chain[0].inputs == [v] and \
            _per_tensor_8_16(chain[0].outputs[0].type):
        hsw = _hard_swish(chain[0])  # its float32 formula costs less than a table gather
        nodes = chain
        v = chain[0].outputs[0]
        user = lw.sole_user(v)
    elif chain and chain[0].inputs.count(v) >= 1 and \
            all(_per_tensor_8_16(n.outputs[0].type) for n in chain):
        last_t = chain[-1].outputs[0].type
        tab = chain_table(chain).astype(np.int64) + _shift(last_t)
        dtype = np.dtype(stored_dtype(last_t)[0])
        padded = np.zeros(tab.size + 4, dtype)  # the vector kernel reads 4 bytes per entry
        padded[:tab.size] = tab
        table_c = lw.prog.data(padded)
        table_type = TYPE_NAMES[dtype]
        table_min = v.type.dtype.qmin + _shift(v.type)
        nodes = chain
        v = chain[-1].outputs[0]
        user = lw.sole_user(v)
    mul_c, z, rq = "NULL", 0, "{0}"
    mul = _mul_fields(lw, user, v, channels)
    if mul is not None:
        mul_c, z, rq = mul
        nodes = [*nodes, user]
        v = user.outputs[0]
    if not nodes:
        return None
    fields = [f".table = {table_c}", f".table_type = {table_type}", f".table_min = {table_min}",
              f".mul = {mul_c}", f".z = {z}", f".rq = {rq}", *hsw]
    return PostStage(nodes, v, [f"const lb_post post = {{{', '.join(fields)}}};"], bool(hsw))


def hard_swish_map(lw: Lowering, node: Node) -> PostStage | None:
    """A quantized HardSwish of 16-bit codes that no product's epilogue computed (after a
    depthwise convolution, say), with the per-channel Mul after it if any, as lb_post's float32
    HardSwish then Mul (the same formulas as in an epilogue) for lb_post_map over the
    channels-last input; None when `node` is not such a HardSwish, or when its input is not
    stored channels last."""
    x = node.inputs[0]
    out_t = node.outputs[0].type
    if node.op_type != "HardSwish" or node.domain not in ("", "ai.onnx") or \
            not _per_tensor_8_16(x.type) or x.type.dtype.bits != 16 or \
            not _per_tensor_8_16(out_t) or unary_chain(lw, node) != [node]:
        return None
    t = lw.tensors.get(x)
    shape = lw.shape(x)
    if t is None or t.layout != "nhwc" or len(shape) != 4 or not isinstance(shape[1], int):
        return None
    channels = int(shape[1])
    v = node.outputs[0]
    nodes = [node]
    mul_c, z, rq = "NULL", 0, "{0}"
    user = lw.sole_user(v)
    mul = _mul_fields(lw, user, v, channels)
    if mul is not None:
        mul_c, z, rq = mul
        nodes.append(user)
        v = user.outputs[0]
    fields = [".table = NULL", ".table_type = LB_U8", ".table_min = 0", f".mul = {mul_c}",
              f".z = {z}", f".rq = {rq}", *_hard_swish(node)]
    return PostStage(nodes, v, [f"const lb_post post = {{{', '.join(fields)}}};"], True)


def _hard_swish(node: Node) -> list[str]:
    """lb_post's fields computing quantized HardSwish `node` in float32
    (int_activation.HardSwishParams; zero points and bounds in stored codes)."""
    p = params.of(node)
    sx, sy = _shift(node.inputs[0].type), _shift(node.outputs[0].type)
    return [".hsw = 1", f".hsw_zx = {p.z_x + sx}", f".hsw_zy = {p.z_y + sy}",
            f".hsw_qmin = {p.qmin + sy}", f".hsw_qmax = {p.qmax + sy}",
            f".hsw_c1 = {cexpr.flt(p.c1)}", f".hsw_c2 = {cexpr.flt(p.c2)}",
            f".hsw_c3 = {cexpr.flt(p.c3)}"]
