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
from lowbit.ir.graph import Graph, Node
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


MAX_DIM = 1 << 31
"""The largest dimension, pad, stride or dilation a model may declare: 2**31 (a dimension
beyond it is a corrupt or hostile file, not a model)."""


@dataclass(frozen=True)
class Attr:
    """One attribute: its kind (int, float, string, ints, floats, strings, tensor), default and
    allowed values.

    `default=None` means optional with no value (the node's attrs omit it); `REQUIRED` means the
    node is refused without it. `choices` lists the allowed values of an int or string (each
    element of ints); `low` and `high` bound an int or each element of ints, both included.
    """

    kind: str
    default: Any = None
    choices: tuple = ()
    low: int | None = None
    high: int | None = None


def flag(default: int) -> Attr:
    """An int attribute that is 0 or 1 (transA, keepdims, ceil_mode, ...)."""
    return Attr("int", default, choices=(0, 1))


def sizes(low: int, default: Any = None) -> Attr:
    """An ints attribute of window sizes (kernel_shape, strides, dilations, pads), each element
    in [low, MAX_DIM]."""
    return Attr("ints", default, low=low, high=MAX_DIM)


_KINDS = {"int": int, "float": float, "string": str, "tensor": np.ndarray, "graph": Graph}
_LIST_KINDS = {"ints": int, "floats": float, "strings": str}


@dataclass(frozen=True)
class Work:
    """What running one node costs the reference interpreter: multiply-adds (or elementary
    operations) and bytes of temporaries beyond its inputs and outputs (padded copies, im2col
    columns, float64 accumulators). `lowbit.backends.reference.preflight` adds them up."""

    ops: int
    scratch: int = 0


def numel(t: TensorType | None) -> int:
    """Elements of a type with a static shape, else 0 (unknown sizes are not counted)."""
    return 0 if t is None or t.numel is None else t.numel


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

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        """The node's cost for these (static) types; by default one operation per output
        element and a float64 temporary of the outputs. Products and sliding windows say
        more."""
        n = sum(numel(t) for t in out_types)
        return Work(n, 8 * n)

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


def _kind_of(value: Any) -> str:
    """The attribute kind of a plain Python attribute value (as `onnx_import` makes them)."""
    if isinstance(value, list | tuple):
        kinds = {k for k, t in _LIST_KINDS.items() if all(type(v) is t for v in value)}
        return next(iter(kinds)) if len(kinds) == 1 else "ints|floats|strings" if value \
            else "list"
    for kind, t in _KINDS.items():
        if type(value) is t or (t in (np.ndarray, Graph) and isinstance(value, t)):
            return kind
    return type(value).__name__


def check_attributes(op: OpDef, node: Node, known: dict[str, Attr] | None = None) -> None:
    """Refuse unknown and missing required attributes, values of the wrong kind and values out
    of their declared range, naming the node and the attribute; then fill in the defaults.
    `known` defaults to the op's ONNX attributes."""
    known = op.attrs if known is None else known
    unknown = sorted(set(node.attrs) - set(known))
    if unknown:
        raise fail(node, f"unknown attribute(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known)) or 'none'}")
    for name, spec in known.items():
        if name not in node.attrs:
            if spec.default is REQUIRED:
                raise fail(node, f"missing required attribute '{name}'")
            if spec.default is not None:
                default = spec.default
                node.attrs[name] = list(default) if isinstance(default, list | tuple) \
                    else default
            continue
        value = node.attrs[name]
        kind = _kind_of(value)
        if kind != spec.kind and not (kind == "list" and spec.kind in _LIST_KINDS):
            raise fail(node, f"attribute '{name}' must be {_KIND_TEXT[spec.kind]}, got "
                             f"{_KIND_TEXT.get(kind, kind)} {_short(value)}")
        elements = value if spec.kind in _LIST_KINDS else [value]
        for v in elements:
            if spec.choices and v not in spec.choices:
                texts = [repr(c) for c in spec.choices]
                allowed = " or ".join(texts) if len(texts) <= 2 else \
                    f"one of {', '.join(texts)}"
                raise fail(node, f"attribute '{name}' is {_short(value)}; allowed: {allowed}")
            if (spec.low is not None and v < spec.low) or (spec.high is not None
                                                            and v > spec.high):
                each = "each value " if spec.kind in _LIST_KINDS else ""
                raise fail(node, f"attribute '{name}' is {_short(value)}; {each}must be "
                                 f"{_range_text(spec.low, spec.high)}")


def _range_text(low: int | None, high: int | None) -> str:
    if high is None:
        return f"at least {low}"
    if low is None:
        return f"at most {high}"
    return f"in [{low}, {high}]"


_KIND_TEXT = {"int": "an integer", "float": "a float", "string": "a string",
              "tensor": "a tensor", "ints": "a list of integers", "floats": "a list of floats",
              "strings": "a list of strings", "graph": "a graph", "graphs": "a list of graphs"}


def _short(value: Any) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) and value.size <= 8 else value)
    return text if len(text) <= 60 else text[:57] + "..."


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
