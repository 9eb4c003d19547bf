"""Emitters of the ops PyTorch's imported models need: lowbit's TorchDynamicQuantize (fbgemm's
activation parameters for a dynamically quantized Linear, lb_torch_dq_run in rt_torchdq.c).

The kernel computes `lowbit.numerics.torch_params` step for step (float32 and float64 IEEE
operations in the reference's order), so codes, scale and zero point equal the reference's.
"""

from __future__ import annotations

import numpy as np

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
