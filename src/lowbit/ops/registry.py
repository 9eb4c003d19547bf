"""The op registry: one `OpDef` subclass per ONNX op, declared in its family's module.

An `OpDef` states the op's inputs, outputs and attributes with defaults, which ONNX versions of
the op it implements, how to check a node (bad attributes are refused at import, naming the
node), and how to infer output types from input types. Backends register one kernel per op
type separately; `tests/test_registry.py` checks every op has one.

Attribute values inside lowbit are plain Python: int, float, str, bytes, list[int],
list[float], list[str], or np.ndarray for tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lowbit.errors import ModelError, UnsupportedError
from lowbit.ir.attrs import FUSED_CLIP, REQUANT
from lowbit.ir.graph import Node
from lowbit.ir.types import TensorType

if TYPE_CHECKING:
    from lowbit.ops.product import ProductGeometry

REQUIRED = object()
"""Default marker for an attribute that must be present."""

QUANT_DOMAIN = "lowbit"
"""Domain of lowbit's own ops (Quantize, Dequantize, Requantize)."""

# Quantization rules: how an op computes when its inputs are quantized (see lowbit.quant.static).
COMPUTE = "compute"
"""Integer products accumulated in int32, requantized to output parameters from the profile."""
KEEP = "keep"
"""Moves, selects or clamps values: the output keeps the input's parameters, computed exactly."""
RESCALE = "rescale"
"""Combines inputs at different scales (Add, Mul, Concat, averages): each rescaled in integers
to output parameters from the profile."""
TABLE = "table"
"""A float function of one input: a lookup table over every input code (256 entries for 8 bits,
65536 for 16)."""

# Data movement (`OpDef.moves_data`): the op's outputs are elements of its data input, unchanged.
REARRANGES = "rearranges"
"""Every input element reaches the output, reshaped, transposed, repeated or concatenated, and
padding adds only a constant (a range that holds the input's holds the output's)."""
SELECTS = "selects"
"""The output holds some of the input elements (slices, gathers, splits, maxima, minima)."""


@dataclass(frozen=True)
class Attr:
    """One attribute: its kind (int, float, string, ints, floats, strings, tensor) and default.

    `default=None` means optional with no value (the node's attrs omit it); `REQUIRED` means the
    node is refused without it.
    """

    kind: str
    default: Any = None


class OpDef:
    """Schema, validation and type inference of one op.

    Subclasses set the class attributes and override `infer`, and where needed `check` and
    `upgrade`. Input names ending in `?` are optional; a trailing name ending in `*` is variadic.
    """

    op_type: ClassVar[str]
    domain: ClassVar[str] = ""
    inputs: ClassVar[tuple[str, ...]] = ()
    outputs: ClassVar[tuple[str, ...]] = ("Y",)
    attrs: ClassVar[dict[str, Attr]] = {}
    min_version: ClassVar[int] = 1
    """Earliest ONNX since-version whose semantics lowbit implements (after `upgrade`)."""
    fusable: ClassVar[bool] = False
    """Whether a following Relu/Clip may be fused into this op as `FUSED_CLIP`."""
    quant_rule: ClassVar[str | None] = None
    """How the op computes on quantized inputs (COMPUTE, KEEP, RESCALE, TABLE), or None if it
    only computes in float."""
    moves_data: ClassVar[str | None] = None
    """REARRANGES or SELECTS when the op only moves its data input's elements (on quantized
    codes it is exact and adds no error of its own), None when it computes. The one list of
    data-movement ops: quantization, sensitivity ranking and the exporters ask it."""

    @classmethod
    def all_attrs(cls) -> dict[str, Attr]:
        """The ONNX attributes plus lowbit's own (`fused_clip` on fusable ops, `requant` on
        ops that requantize)."""
        extra: dict[str, Attr] = {}
        if cls.fusable:
            extra[FUSED_CLIP] = Attr("floats")
        if cls.quant_rule in (COMPUTE, RESCALE):
            extra[REQUANT] = Attr("string")
        return {**cls.attrs, **extra} if extra else cls.attrs

    # -- arity ----------------------------------------------------------------------------------
    @classmethod
    def input_arity(cls) -> tuple[int, int | None]:
        """(minimum, maximum or None for variadic) number of inputs."""
        required = sum(1 for n in cls.inputs if not n.endswith(("?", "*")))
        if cls.inputs and cls.inputs[-1].endswith("*"):
            return required, None
        return required, len(cls.inputs)

    @classmethod
    def output_arity(cls) -> tuple[int, int | None]:
        required = sum(1 for n in cls.outputs if not n.endswith(("?", "*")))
        if cls.outputs and cls.outputs[-1].endswith("*"):
            return max(required, 1), None
        return required, len(cls.outputs)

    # -- hooks ----------------------------------------------------------------------------------
    def upgrade(self, node: Node, since_version: int) -> None:
        """Rewrite `node`, written against ONNX op version `since_version`, into the canonical
        (newest) form in place. Called at import only when `since_version` is older than the
        version the canonical form follows; the default does nothing."""

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        """Refuse bad attributes or inputs with a ModelError naming the node (default: none)."""

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        """Output types from input types. Constant inputs are available as
        `node.inputs[i].const_value`. Unknown dimensions are None, unknown rank is shape None."""
        raise NotImplementedError(f"{self.op_type} has no type inference")

    def product(self, node: Node) -> ProductGeometry | None:
        """Where `node`'s weight, bias and channels are, if the op is a product
        (`lowbit.ops.product`); None for every other op (the default)."""
        return None

    def integer_problem(self, node: Node) -> str | None:
        """Why `node` cannot compute in integers although its settings ask for them (a Gemm
        with alpha other than 1), or None (the default)."""
        return None


_REGISTRY: dict[tuple[str, str], OpDef] = {}


def register(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator adding an OpDef to the registry."""
    key = (_canonical_domain(cls.domain), cls.op_type)
    if key in _REGISTRY:
        raise RuntimeError(f"op {cls.op_type} registered twice")
    _REGISTRY[key] = cls()
    return cls


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def lookup(op_type: str, domain: str = "") -> OpDef | None:
    _load_all()
    return _REGISTRY.get((_canonical_domain(domain), op_type))


def get(op_type: str, domain: str = "") -> OpDef:
    op = lookup(op_type, domain)
    if op is None:
        raise UnsupportedError(
            f"op {op_type}{' (domain ' + domain + ')' if domain else ''} is not supported; "
            f"supported ops: {', '.join(supported_ops())}"
        )
    return op


def all_ops() -> dict[tuple[str, str], OpDef]:
    _load_all()
    return dict(_REGISTRY)


def supported_ops() -> list[str]:
    _load_all()
    return sorted(t if not d else f"{d}.{t}" for d, t in _REGISTRY)


_loaded = False


def _load_all() -> None:
    """Import every module of the ops package so their `@register` decorators run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    import lowbit.ops as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in ("registry", "common"):
            importlib.import_module(f"lowbit.ops.{info.name}")


# -- helpers for op modules -----------------------------------------------------------------------
def fail(node: Node, message: str) -> ModelError:
    """A ModelError naming the node: `raise fail(node, "kernel_shape must be positive")`."""
    return ModelError(f"{node.describe()}: {message}")


def const_input(node: Node, index: int) -> np.ndarray | None:
    """The constant array feeding input `index`, or None if absent or not constant."""
    v = node.input_or_none(index)
    return None if v is None else v.const_value


def require_known(node: Node, in_types: list[TensorType | None], *indices: int) -> None:
    for i in indices:
        if i < len(in_types) and node.inputs[i] is not None and in_types[i] is None:
            raise fail(node, f"type of input {i} is unknown")


InferFn = Callable[[Node, list[TensorType | None]], list[TensorType]]
