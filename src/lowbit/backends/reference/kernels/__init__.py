"""Reference kernels, one module per op family; each registers with `@kernel("OpType")`.

A kernel is `fn(node, inputs) -> list of arrays`, where `inputs` has None for omitted optional
inputs. Kernels read attributes from `node.attrs` (defaults are filled in at import) and must
not modify their inputs. Integer kernels define lowbit's arithmetic exactly: every other backend
reproduces them bit for bit.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence

import numpy as np

from lowbit.ir.graph import Node

Kernel = Callable[[Node, Sequence[np.ndarray | None]], Sequence[np.ndarray]]

_KERNELS: dict[tuple[str, str], Kernel] = {}


def kernel(op_type: str, domain: str = "") -> Callable[[Kernel], Kernel]:
    """Decorator registering a reference kernel for `op_type`."""

    def deco(fn: Kernel) -> Kernel:
        key = ("" if domain in ("", "ai.onnx") else domain, op_type)
        if key in _KERNELS:
            raise RuntimeError(f"reference kernel for {op_type} registered twice")
        _KERNELS[key] = fn
        return fn

    return deco


_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def get_kernel(op_type: str, domain: str = "") -> Kernel | None:
    _load_all()
    return _KERNELS.get(("" if domain in ("", "ai.onnx") else domain, op_type))


def all_kernels() -> dict[tuple[str, str], Kernel]:
    _load_all()
    return dict(_KERNELS)
