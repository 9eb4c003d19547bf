"""Reference kernels, one module per op family; each registers with `@kernel("OpType")`.

A kernel is `fn(node, inputs) -> list of arrays`, where `inputs` has None for omitted optional
inputs. Kernels read attributes from `node.attrs` (defaults are filled in at import) and must
not modify their inputs. Integer kernels define lowbit's arithmetic exactly: every other backend
reproduces them bit for bit.

Each integer kernel takes every integer it computes with (effective multipliers and their
encoded shifts, zero points and zero-point corrections, clamp bounds, lookup tables,
accumulator narrowing) from one parameter function of its op, registered with
`@params("OpType")` in the kernel's module and reached through `integer_params(node, inputs)`.
Each returns a plain dataclass of numpy integer arrays and ints whose docstring states the
exact formula; `lowbit dump`, the exporters and compiled backends call the same functions, so
nobody re-derives a multiplier:

    int_linear      Conv, Gemm, MatMul                          LinearParams
    int_combine     Add, Sub / Mul / Concat                     AddParams / MulParams /
                                                                ConcatParams
    int_pool        AveragePool, GlobalAveragePool, ReduceMean  AverageParams
    int_activation  Relu, Clip / every TABLE op (Sigmoid, ...)  ClampParams / TableParams
    requant         lowbit Requantize                           lowbit.numerics.arith.Requant
    dynamic         lowbit DynamicMatMul                        DynamicMatMulParams
    quantized       ONNX QLinearConv, QLinearMatMul             QLinearParams
    ort_contrib     com.microsoft QGemm                         QLinearParams
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lowbit.ir.graph import Node

Kernel = Callable[[Node, Sequence[np.ndarray | None]], Sequence[np.ndarray]]

_KERNELS: dict[tuple[str, str, bool], Kernel] = {}

Inputs = Sequence[np.ndarray | None]
ParamsFn = Callable[[Node, Inputs], Any]
_PARAMS: dict[tuple[str, str], tuple[ParamsFn, bool]] = {}


def kernel(op_type: str, domain: str = "", *, quantized: bool = False
           ) -> Callable[[Kernel], Kernel]:
    """Decorator registering a reference kernel for `op_type`: the float (plain) kernel, or with
    `quantized=True` the integer kernel run when the node's types are quantized."""

    def deco(fn: Kernel) -> Kernel:
        key = ("" if domain in ("", "ai.onnx") else domain, op_type, quantized)
        if key in _KERNELS:
            raise RuntimeError(f"reference kernel for {op_type} registered twice")
        _KERNELS[key] = fn
        return fn

    return deco


def params(*op_types: str, domain: str = "", typed: bool = True
           ) -> Callable[[ParamsFn], ParamsFn]:
    """Decorator registering the integer parameter function of `op_types` (see the module
    docstring). `typed`: the op computes in integers only when its types are quantized (ONNX
    ops with a quantization rule); lowbit's own and ONNX's QLinear ops always do."""

    def deco(fn: ParamsFn) -> ParamsFn:
        for op_type in op_types:
            key = ("" if domain in ("", "ai.onnx") else domain, op_type)
            if key in _PARAMS:
                raise RuntimeError(f"kernel parameters of {op_type} registered twice")
            _PARAMS[key] = (fn, typed)
        return fn

    return deco


def integer_params(node: Node, inputs: Inputs) -> Any:
    """The integer parameters `node`'s kernel computes with on `inputs` (its input arrays, None
    for an omitted optional one, exactly as the kernel receives them: only the values a
    parameter depends on are read, e.g. a bias or Clip's bounds, and the others' shapes); None
    for a node computing in float or only moving codes (Reshape, MaxPool, ...)."""
    _load_all()
    found = _PARAMS.get(("" if node.domain in ("", "ai.onnx") else node.domain, node.op_type))
    if found is None:
        return None
    fn, typed = found
    if typed and not is_quantized(node):
        return None
    return fn(node, inputs)


def all_params() -> dict[tuple[str, str], ParamsFn]:
    """Every registered parameter function, by (domain, op type)."""
    _load_all()
    return {key: fn for key, (fn, _) in _PARAMS.items()}


_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def get_kernel(op_type: str, domain: str = "", quantized: bool = False) -> Kernel | None:
    _load_all()
    return _KERNELS.get(("" if domain in ("", "ai.onnx") else domain, op_type, quantized))


def all_kernels() -> dict[tuple[str, str, bool], Kernel]:
    _load_all()
    return dict(_KERNELS)


def is_quantized(node: Node) -> bool:
    """Whether `node` computes on quantized types (an ONNX-domain op with a quantized input or
    output); lowbit's own Quantize/Dequantize/Requantize are plain kernels."""
    if node.domain not in ("", "ai.onnx"):
        return False
    return any(v is not None and v.type is not None and v.type.quant is not None
               for v in (*node.inputs, *node.outputs))


def kernel_for(node: Node) -> Kernel | None:
    """The kernel that runs `node`: the integer kernel for a quantized node of an op with a
    quantization rule, where KEEP ops may use their plain kernel (they move, select or clamp
    values, exactly on integers); the plain kernel otherwise."""
    from lowbit.ops.registry import KEEP, lookup

    op = lookup(node.op_type, node.domain)
    if op is None or op.quant_rule is None or not is_quantized(node):
        return get_kernel(node.op_type, node.domain)
    found = get_kernel(node.op_type, node.domain, quantized=True)
    if found is None and op.quant_rule == KEEP:
        return get_kernel(node.op_type, node.domain)
    return found


def reads_quant_params(node: Node) -> bool:
    """Whether `node`, given quantized operands, computes with their quantization parameters
    (on the reals the integers stand for) rather than on the integer codes alone: lowbit's own
    ops, ops whose quantization rule is not KEEP, and KEEP ops with an integer kernel of their
    own (Relu and Clip clamp at real bounds). Moving and selecting ops (Reshape, MaxPool, ...)
    and ops without a quantization rule read only the codes."""
    from lowbit.ops.registry import KEEP, QUANT_DOMAIN, lookup

    if node.domain == QUANT_DOMAIN:
        return True
    if node.domain not in ("", "ai.onnx"):
        return False
    op = lookup(node.op_type, node.domain)
    if op is None or op.quant_rule is None:
        return False
    return op.quant_rule != KEEP or get_kernel(node.op_type, node.domain, quantized=True) \
        is not None
