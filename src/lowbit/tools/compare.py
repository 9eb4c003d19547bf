"""Layer-by-layer comparison of a float graph and its quantized version.

Values are matched by name:
- lowbit's quantizer keeps each node output's name on its quantized version (inserted
  Quantize/Dequantize nodes get derived names), and its QDQ export names the QuantizeLinear
  output after the float value, so a saved and reloaded model matches too;
- where the matched value of the quantized graph is read only by a QuantizeLinear (ONNX
  Runtime's QDQ files keep the float name on the product and name the QuantizeLinear's result
  `<name>_QuantizeLinear_Output`), that QuantizeLinear's result is compared instead: it is what
  the next layers read, with the range's clamp (often the float model's Relu) applied;
- ONNX Runtime's QOperator files name each result `<float name>_quantized`, after the Conv's
  result where the float graph has fused a Relu into the Conv: such names match the float value
  that now holds the Conv's clamped result (`Graph.fused_names`), unless a value of the
  quantized graph has that float name itself;
- integer and boolean values of the float graph (shapes, indices, masks) are not compared.

Integer values are dequantized with their QuantParams, `real = scale * (q - zero_point)`. For
each matched value, over all batches (accumulated, no tensor kept):

    SQNR    = 10 log10(sum f^2 / sum (q - f)^2) dB       (inf when identical)
    own     = 10 log10(sum f^2 / sum (o - f)^2) dB       (with `own=True`)
    cosine  = sum f q / sqrt(sum f^2 * sum q^2)
    max_abs = max |q - f|
    steps   = mean |q - f| / scale                      (integer values: error in steps)
    clipped = share of float values beyond the represented range [scale (qmin - zero_point),
              scale (qmax - zero_point)] by more than half a step   (integer values)
    range   = (max code - min code) / (qmax - qmin)     (integer values: share of range used)

SQNR measures everything the quantized model lost up to that value. `own` measures what the
layer itself loses: `o` is the value the quantized graph computes when every matched value
before it is replaced by the float model's, in its quantized type (`quantize(f)`: the rounding
to the input's grid is the only error the layer receives).

Each batch runs the float graph first, keeping the matched values of that batch only, then the
quantized graph, whose values are compared as they are produced, then (with `own`) the
quantized graph again with the substitutions. With `samples=N`, each layer also keeps at most N
of its float values (an evenly strided subset of each batch, thinned by half whenever it would
exceed N), for the report's histograms: memory stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from lowbit.backends.reference.interpreter import Interpreter
from lowbit.errors import InputError
from lowbit.ir.graph import Graph, Node, Value
from lowbit.numerics import arith
from lowbit.ops.registry import QUANT_DOMAIN


@dataclass
class LayerStats:
    """The accumulated comparison of one value (see the module docstring for the formulas)."""

    name: str
    op_type: str
    """The float graph's op computing this value (a QDQ file's QuantizeLinear is not shown)."""
    type_text: str
    signal: float = 0.0
    noise: float = 0.0
    own_noise: float | None = None
    """sum (o - f)^2 of the own-error run (module docstring), None without it."""
    dot: float = 0.0
    quant_energy: float = 0.0
    max_abs: float = 0.0
    step_error: float = 0.0
    count: int = 0
    clipped: int = 0
    code_min: float = math.inf
    code_max: float = -math.inf
    code_span: int | None = None
    real_range: tuple[float, float] | None = None
    """The real range the quantized value's type represents (its clipping range)."""
    sample: np.ndarray | None = None
    """Up to `samples` float values of this layer (compare's `samples`), else None."""

    @property
    def sqnr(self) -> float:
        if self.noise == 0:
            return math.inf
        if self.signal == 0:
            return -math.inf
        return 10 * math.log10(self.signal / self.noise)

    @property
    def own_sqnr(self) -> float | None:
        """What this layer loses by itself, in dB (module docstring); None without `own`."""
        if self.own_noise is None:
            return None
        if self.own_noise == 0:
            return math.inf
        if self.signal == 0:
            return -math.inf
        return 10 * math.log10(self.signal / self.own_noise)

    @property
    def cosine(self) -> float:
        if self.signal == 0 or self.quant_energy == 0:
            return 1.0 if self.signal == self.quant_energy else 0.0
        return self.dot / math.sqrt(self.signal * self.quant_energy)

    @property
    def steps(self) -> float | None:
        return self.step_error / self.count if self.code_span is not None and self.count else None

    @property
    def clipped_share(self) -> float | None:
        return self.clipped / self.count if self.code_span is not None and self.count else None

    @property
    def range_use(self) -> float | None:
        if self.code_span is None or not self.count:
            return None
        return (self.code_max - self.code_min) / self.code_span

    def keep_sample(self, f: np.ndarray, limit: int) -> None:
        """Add an evenly strided subset of `f` to `sample`, keeping at most `limit` values."""
        flat = f.reshape(-1)
        step = max(1, -(-flat.size // limit))
        part = flat[::step].astype(np.float32)
        sample = part if self.sample is None else np.concatenate([self.sample, part])
        while sample.size > limit:
            sample = sample[::2]
        self.sample = sample

    def add(self, f: np.ndarray, q: np.ndarray, codes: np.ndarray | None, value: Value) -> None:
        d = q - f
        self.signal += float((f * f).sum())
        self.noise += float((d * d).sum())
        self.dot += float((f * q).sum())
        self.quant_energy += float((q * q).sum())
        self.max_abs = max(self.max_abs, float(np.abs(d).max(initial=0.0)))
        self.count += f.size
        if codes is not None:
            t = value.type
            qp = t.quant
            self.code_span = t.dtype.qmax - t.dtype.qmin
            self.real_range = qp.real_range(t.dtype)
            self.step_error += float((np.abs(d) / _broadcast(qp.scale, qp.axis, codes)).sum())
            scale = _broadcast(qp.scale, qp.axis, codes)
            zero = _broadcast(qp.zero_point, qp.axis, codes)
            lo = scale * (t.dtype.qmin - zero - 0.5)
            hi = scale * (t.dtype.qmax - zero + 0.5)
            self.clipped += int(((f < lo) | (f > hi)).sum())
            if codes.size:
                self.code_min = min(self.code_min, float(codes.min()))
                self.code_max = max(self.code_max, float(codes.max()))


@dataclass
class Comparison:
    """Per-layer statistics in the quantized graph's order; `worst_first()` sorts by SQNR."""

    layers: list[LayerStats] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)

    def worst_first(self, by: str = "sqnr") -> list[LayerStats]:
        """Layers by SQNR (`by="sqnr"`, all error up to each value) or by own SQNR (`"own"`,
        each layer's own error; layers without one last), lowest first."""
        if by not in ("sqnr", "own"):
            raise InputError(f"sort by 'sqnr' or 'own', not {by!r}")
        if by == "own":
            return sorted(self.layers, key=lambda s: (s.own_sqnr is None,
                                                      s.own_sqnr or 0.0, s.name))
        return sorted(self.layers, key=lambda s: (s.sqnr, s.name))

    def table(self, top: int | None = None, by: str = "sqnr"):
        """A rich Table of the worst `top` layers (all when None), sorted as `worst_first(by)`."""
        from rich.table import Table

        table = Table(title=f"float vs quantized, worst {'own ' if by == 'own' else ''}SQNR "
                      f"first")
        own = any(s.own_noise is not None for s in self.layers)
        cols = ("value", "op", "type", "SQNR dB", *(("own dB",) if own else ()), "cosine",
                "max abs", "err/step", "clipped", "range use")
        for col in cols:
            table.add_column(col, justify="left" if col in ("value", "op", "type") else "right")
        for s in self.worst_first(by)[:top]:
            table.add_row(s.name, s.op_type, s.type_text, f"{s.sqnr:.2f}",
                          *((_opt(s.own_sqnr, "{:.2f}"),) if own else ()), f"{s.cosine:.6f}",
                          f"{s.max_abs:.4g}", _opt(s.steps, "{:.3f}"),
                          _opt(s.clipped_share, "{:.2%}"), _opt(s.range_use, "{:.1%}"))
        if own:
            table.caption = ("SQNR: all error up to this value; own: this layer's alone, its "
                             "inputs the float model's values in their quantized types")
        return table


def compare(float_graph: Graph, quant_graph: Graph,
            batches: Iterable[Mapping[str, np.ndarray]], *, samples: int = 0,
            own: bool = True) -> Comparison:
    """Run both graphs on each batch and compare every float value of `float_graph` they share
    by name (module docstring); with `samples`, keep up to that many float values per layer;
    with `own`, also measure each layer's own error (one more run of `quant_graph`). Raises
    InputError for an empty set of batches or graphs with nothing in common."""
    # integer and boolean values (shapes, indices, masks) are not quantized: nothing to compare
    float_ops = {v.name: n.op_type for n in float_graph.nodes for v in n.outputs
                 if v.type is None or v.type.dtype.is_float}
    matched: dict[Value, str] = {}
    stats: dict[str, LayerStats] = {}
    unmatched = []
    users = quant_graph.users()
    found: list[tuple[bool, Value, str]] = []  # (renamed, quantized value, float name)
    for node in quant_graph.nodes:
        if node.op_type == "Constant":
            continue
        for v in node.outputs:
            name, exact = _float_name(v.name, float_ops, float_graph.fused_names)
            if name is not None:
                found.append((not exact, v, name))
            elif node.domain != QUANT_DOMAIN:
                unmatched.append(v.name)
    # values carrying the float name itself first; a renamed one only where none does
    for _, v, name in sorted(found, key=lambda item: item[0]):
        if name not in stats:
            kept = _through_quantize(v, users)
            matched[kept] = name
            stats[name] = LayerStats(name, float_ops[name], str(kept.type))
    if not matched:
        raise InputError("the two graphs share no value names: compare a float model with a "
                         "quantization of it (lowbit quantize keeps value names)")
    seen = 0
    for batch in batches:
        seen += 1
        _compare_batch(float_graph, quant_graph, batch, matched, stats, samples, own)
    if not seen:
        raise InputError("compare needs at least one batch of inputs")
    return Comparison([s for s in stats.values() if s.count], unmatched)


QOPERATOR_SUFFIX = "_quantized"
"""ONNX Runtime's QOperator files name a quantized result after its float value plus this."""


def _float_name(name: str, float_ops: Mapping[str, str], fused: Mapping[str, str]
                ) -> tuple[str | None, bool]:
    """The float graph's value a quantized graph's value `name` stands for, and whether that
    value has the name itself: `name`, or `name` without ONNX Runtime's `_quantized` suffix,
    found directly, or through the float graph's `fused_names` (a Conv's result that its fused
    Relu's output replaced; QOperator files fuse the Relu the same way)."""
    candidates = [name]
    if name.endswith(QOPERATOR_SUFFIX):
        candidates.append(name[:-len(QOPERATOR_SUFFIX)])
    for exact, c in enumerate(candidates):
        seen = set()
        while c not in float_ops and c in fused and c not in seen:
            seen.add(c)
            c = fused[c]
        if c in float_ops:
            return c, exact == 0 and not seen
    return None, False


def _through_quantize(v: Value, users: dict[Value, list[tuple[Node, int]]]) -> Value:
    """The value standing for float value `v` in a quantized graph: the result of the ONNX
    QuantizeLinear that alone reads `v`, when there is one (a QDQ file keeps the float name on
    the product before its QuantizeLinear, which may still lack a Relu the quantization range
    applies), else `v` itself."""
    readers = users.get(v, [])
    if len(readers) == 1:
        node = readers[0][0]
        if node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx") \
                and node.outputs[0].type is not None and node.outputs[0].type.quant is not None:
            return node.outputs[0]
    return v


def _compare_batch(float_graph: Graph, quant_graph: Graph, batch: Mapping[str, np.ndarray],
                   matched: dict[Value, str], stats: dict[str, LayerStats],
                   samples: int = 0, own: bool = False) -> None:
    ref: dict[str, np.ndarray] = {}
    Interpreter(float_graph, [_keep(ref, set(matched.values()))])(batch)

    def matched_outputs(node: Node, outputs):
        """(value, array, float name, float array) of each of `node`'s outputs matched to a
        float value of the same shape (each float name has one matched value)."""
        for v, a in zip(node.outputs, outputs, strict=False):
            a = np.asarray(a)
            name = matched.get(v)
            if name is not None and name in ref and ref[name].shape == a.shape:
                yield v, a, name, ref[name]

    def observe(node: Node, outputs) -> None:
        for v, a, name, f in matched_outputs(node, outputs):
            codes = a if a.dtype.kind in "iu" and v.type.quant is not None else None
            stats[name].add(f.astype(np.float64), _dequantize(a, v), codes, v)
            if samples:
                stats[name].keep_sample(f, samples)

    Interpreter(quant_graph, [observe])(batch)
    if not own:
        return

    def observe_own(node: Node, outputs) -> None:
        for v, a, name, f in matched_outputs(node, outputs):
            d = _dequantize(a, v) - f
            s = stats[name]
            s.own_noise = (s.own_noise or 0.0) + float((d * d).sum())

    def substitute(v: Value, a: np.ndarray) -> np.ndarray | None:
        name = matched.get(v)
        f = ref.get(name) if name is not None else None
        if f is None or f.shape != a.shape:
            return None
        if a.dtype.kind in "iu" and v.type is not None and v.type.quant is not None:
            return arith.quantize(f, v.type)
        return f.astype(a.dtype) if a.dtype.kind == "f" else None

    Interpreter(quant_graph, [observe_own], substitute)(batch)


def _keep(store: dict[str, np.ndarray], names: set[str]):
    def observe(node: Node, outputs) -> None:
        for v, a in zip(node.outputs, outputs, strict=False):
            if v.name in names:
                store[v.name] = np.asarray(a)
    return observe


def _dequantize(a: np.ndarray, v: Value) -> np.ndarray:
    qp = v.type.quant if v.type is not None else None
    if a.dtype.kind not in "iu" or qp is None:
        return a.astype(np.float64)
    z = _broadcast(qp.zero_point, qp.axis, a)
    return (a.astype(np.float64) - z) * _broadcast(qp.scale, qp.axis, a)


def _broadcast(p: np.ndarray, axis: int | None, like: np.ndarray) -> np.ndarray:
    p = np.asarray(p, np.float64)
    if axis is None or p.ndim == 0:
        return p
    shape = [1] * like.ndim
    shape[axis % like.ndim] = p.size
    return p.reshape(shape)


def _opt(x: float | None, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)
