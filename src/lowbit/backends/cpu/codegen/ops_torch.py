"""Emitters of the ops PyTorch's imported models need: lowbit's TorchDynamicQuantize (fbgemm's
activation parameters for a dynamically quantized Linear, lb_torch_dq_run in rt_torchdq.c) and
TorchGelu (the exporter's erf-form GELU in one pass, lb_torch_gelu in rt_torchgelu.c).

The kernels compute the reference's steps (`lowbit.numerics.torch_params`; TorchGelu's five
float32 operations, erf as the Erf kernel), so results equal the reference's bit for bit.
"""

from __future__ import annotations

import numpy as np

from lowbit.backends.cpu.codegen import cexpr
from lowbit.backends.cpu.codegen.lower import Lowering, emitter
from lowbit.backends.cpu.codegen.ops_tensor import cprod
from lowbit.errors import UnsupportedError
from lowbit.ops.registry import QUANT_DOMAIN


@emitter("TorchDynamicQuantize", domain=QUANT_DOMAIN, dynamic=True)
def torch_dynamic_quantize(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    if x.dtype != np.float32:
        raise UnsupportedError(f"{node.describe()}: TorchDynamicQuantize of {x.dtype}")
    q, scale, zero = (lw.result(v) for v in node.outputs)
    top = 127 if node.attrs.get("reduce_range", 1) else 255
    lw.prog.step(f"{node.name}: TorchDynamicQuantize (fbgemm, {top.bit_length()}-bit codes)", [
        f"const lb_torch_dq tq = {{{cprod(*x.shape)}, (const float *){x.ptr}, {q.ptr}, "
        f"(float *){scale.ptr}, {zero.ptr}, {top}}};",
        "lb_torch_dq_run(ctx, &tq);"], [x], [q, scale, zero])


@emitter("TorchGelu", domain=QUANT_DOMAIN, dynamic=True)
def torch_gelu(lw: Lowering, node) -> None:
    x = lw.operand(node.inputs[0])
    out = lw.result(node.outputs[0])
    a = node.attrs
    lw.prog.step(f"{node.name}: TorchGelu (erf form)", [
        f"lb_torch_gelu(ctx, {cprod(*x.shape)}, (const float *){x.ptr}, "
        f"{cexpr.flt(a['divisor'])}, {cexpr.flt(a['one'])}, {cexpr.flt(a['half'])}, "
        f"(float *){out.ptr});"], [x], [out])
