"""Control flow: If, Loop and Scan (ONNX versions 21), whose bodies are subgraphs.

A body is a closed `Graph` (see `lowbit.ir.graph`): its formal inputs, then its implicit
values, bound to the node's trailing inputs (the outer values the body reads). Inferring a
node's types re-types its bodies from the node's input types (in place), so a body follows its
node when shapes become known (`lowbit.backends.reference.preflight`).

- If: runs `then_branch` when `cond` (a one-element bool tensor) is true, else `else_branch`;
  both give one value per output, of the same dtype.
- Loop: body(iteration, cond, carried...) -> (cond, carried..., scan outputs...), run while
  iteration < M (when given) and cond (when given) hold; outputs the final carried values and
  each scan output stacked along a new first axis.
- Scan: body(state..., one slice of each scan input...) -> (state..., scan output slices...),
  over the scan inputs' `scan_input_axes` (forward, or reversed by `scan_input_directions`);
  scan outputs stacked along `scan_output_axes` (reversed by `scan_output_directions`).
"""

from __future__ import annotations

from typing import ClassVar

from lowbit.errors import ModelError
from lowbit.ir import dtypes as dt
from lowbit.ir.graph import Graph, Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.common import normalize_axis
from lowbit.ops.registry import REQUIRED, Attr, OpDef, Work, fail, register
from lowbit.ops.shape_values import static_value
from lowbit.ops.work import graph_work


def body_inputs(node: Node, sub: Graph, formal: list[TensorType | None],
                in_types: list[TensorType | None]) -> None:
    """Type a body's formal inputs (`formal`, kept where the body declares more) and its
    implicit values (from the node's trailing input types), then re-infer the body."""
    from lowbit.ops import infer_graph

    if len(formal) != len(sub.inputs):
        raise fail(node, f"body '{sub.name}' takes {len(sub.inputs)} inputs; {node.op_type} "
                         f"gives it {len(formal)}")
    for v, t in zip(sub.inputs, formal, strict=True):
        if t is not None:
            v.type = _relaxed(v.type, t) if v.type is not None else t
    captured = in_types[len(in_types) - len(sub.implicit):] if sub.implicit else []
    for v, t in zip(sub.implicit, captured, strict=True):
        v.type = t
    infer_graph(sub)
    for v in sub.outputs:
        if v.type is None:
            raise fail(node, f"body '{sub.name}' output '{v.name}' has no type")


def _relaxed(declared: TensorType, given: TensorType) -> TensorType:
    """`given`, except where the body declares a dim of its own (a symbol or an unknown where
    `given` is static: a value whose shape changes between iterations)."""
    if declared.dtype != given.dtype or declared.shape is None or given.shape is None or \
            len(declared.shape) != len(given.shape):
        return given
    return TensorType(given.dtype, tuple(g if d is not None and not isinstance(d, str) else d
                                         for d, g in zip(declared.shape, given.shape,
                                                         strict=True)), given.quant)


def join(a: TensorType, b: TensorType) -> TensorType:
    """The type covering both: same dtype; dims that agree kept, others unknown."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, tuple(x if x == y else None for x, y in
                                     zip(a.shape, b.shape, strict=True)))


def condition(node: Node) -> bool | None:
    """An If's condition when known before running: a constant, or a value computed from
    static shapes (`lowbit.ops.shape_values`)."""
    cond = node.inputs[0] if node.inputs else None
    if cond is None:
        return None
    if cond.const_value is not None:
        return bool(cond.const_value.reshape(-1)[0]) if cond.const_value.size == 1 else None
    known = static_value(cond)
    return bool(known[0]) if known is not None and len(known) == 1 else None


def _was_typed(sub: Graph) -> bool:
    """Whether every value of a body has a type (it was typed before)."""
    return all(v.type is not None for n in sub.nodes for v in n.outputs)


def _check_captures(node: Node) -> int:
    """The number of formal inputs; every body must take the node's captures."""
    subs = node.subgraphs()
    counts = {len(sub.implicit) for _, sub in subs}
    if len(counts) != 1 or counts.pop() > len(node.inputs):
        raise fail(node, "its bodies read different outer values than the node passes")
    return len(node.inputs) - node.captures


class ControlFlow(OpDef):
    """Shared by If, Loop and Scan: bodies as graph attributes, captures as trailing inputs."""

    bodies: ClassVar[tuple[str, ...]] = ()

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        """A body's work times the iterations (If: the costlier branch, once)."""
        costs = [graph_work(node.attrs[b]) for b in self.live_bodies(node)]
        return Work(max(c.ops for c in costs) * self.iterations(node, in_types),
                    max(c.peak for c in costs))

    def iterations(self, node: Node, in_types: list[TensorType | None]) -> int:
        return 1

    def body_formals(self, node: Node, in_types: list[TensorType | None]
                     ) -> dict[str, list[TensorType | None]]:
        """The types of each body's formal inputs, from the node's input types."""
        raise NotImplementedError

    def live_bodies(self, node: Node) -> tuple[str, ...]:
        """The bodies that may run (and must type): all of them, but for an If whose
        condition is known."""
        return self.bodies


@register
class If(ControlFlow):
    op_type = "If"
    inputs = ("cond", "captured*")
    outputs = ("outputs*",)
    attrs = {"then_branch": Attr("graph", REQUIRED), "else_branch": Attr("graph", REQUIRED)}
    bodies = ("then_branch", "else_branch")

    def body_formals(self, node: Node, in_types: list[TensorType | None]
                     ) -> dict[str, list[TensorType | None]]:
        return {"then_branch": [], "else_branch": []}

    def live_bodies(self, node: Node) -> tuple[str, ...]:
        """Only the branch taken when the condition is known (a constant, or computed from
        static shapes, as exporters write rank tests): the other one need not even fit the
        shapes, and constant folding drops it."""
        known = condition(node)
        return self.bodies if known is None else (self.bodies[0] if known else self.bodies[1],)

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        formal = _check_captures(node)
        if formal != 1:
            raise fail(node, f"If takes one input (cond), got {formal}")
        cond = in_types[0]
        if cond is None or cond.dtype != dt.BOOL:
            raise fail(node, f"cond must be bool, got {cond}")
        if cond.numel not in (None, 1):
            raise fail(node, f"cond must hold one value, got shape {cond.shape}")
        branches = [node.attrs[attr] for attr in self.live_bodies(node)]
        for sub in branches:
            if len(sub.outputs) != len(node.outputs):
                raise fail(node, f"branch '{sub.name}' gives {len(sub.outputs)} values for "
                                 f"{len(node.outputs)} outputs")
        typed, errors = [], []
        for sub in branches:
            try:
                body_inputs(node, sub, [], in_types)
                typed.append(sub)
            except ModelError as exc:
                errors.append((sub, exc))
        # Re-typed for new input shapes (once the inputs are known), a branch that does not
        # fit them is one this run cannot take (Silero VAD's 8 kHz network given a 16 kHz
        # chunk): were it taken, its nodes would fail naming themselves. The If then has the
        # types of the branch that fits; a branch never typed before must type.
        if not typed or any(not _was_typed(sub) for sub, _ in errors):
            raise errors[0][1]
        branches = typed
        out: list[TensorType] = []
        for i, values in enumerate(zip(*(b.outputs for b in branches), strict=True)):
            types = [v.type for v in values]
            if len({t.dtype for t in types}) != 1:
                raise fail(node, f"output {i}: the branches give {types[0].dtype} and "
                                 f"{types[1].dtype}")
            out.append(types[0] if len(types) == 1 else join(types[0], types[1]))
        return out


@register
class Loop(ControlFlow):
    op_type = "Loop"
    inputs = ("M?", "cond?", "v_initial*")
    outputs = ("v_final_and_scan_outputs*",)
    attrs = {"body": Attr("graph", REQUIRED)}
    bodies = ("body",)

    def body_formals(self, node: Node, in_types: list[TensorType | None]
                     ) -> dict[str, list[TensorType | None]]:
        formal = _check_captures(node)
        return {"body": [TensorType(dt.INT64, ()), TensorType(dt.BOOL, ()),
                         *in_types[2:formal]]}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        formal = _check_captures(node)
        if formal < 2:
            raise fail(node, "Loop takes M and cond (either may be empty) before its carried "
                             "values")
        for i, want in ((0, dt.INT64), (1, dt.BOOL)):
            t = in_types[i]
            if t is not None and (t.dtype != want or t.numel not in (None, 1)):
                raise fail(node, f"input {i} must be a one-value {want} tensor, got {t}")
        carried = in_types[2:formal]
        n, k = len(carried), len(node.outputs) - len(carried)
        body: Graph = node.attrs["body"]
        if k < 0 or len(body.outputs) != 1 + n + k:
            raise fail(node, f"body gives {len(body.outputs)} values; the node needs 1 + "
                             f"{n} carried + {max(k, 0)} scan outputs")
        scalar_i, scalar_b = TensorType(dt.INT64, ()), TensorType(dt.BOOL, ())
        body_inputs(node, body, [scalar_i, scalar_b, *carried], in_types)
        # A carried value whose dims change between iterations: relax them and infer again.
        looser = [join(t, v.type) if t is not None and v.type is not None else t
                  for t, v in zip(carried, body.outputs[1:1 + n], strict=True)]
        if any(a != b for a, b in zip(looser, carried, strict=True)):
            for v, t in zip(body.inputs[2:], looser, strict=True):
                v.type = t
            body_inputs(node, body, [scalar_i, scalar_b, *looser], in_types)
        out = [join(t, v.type) if t is not None else v.type
               for t, v in zip(looser, body.outputs[1:1 + n], strict=True)]
        trips = self._trips(node)
        for v in body.outputs[1 + n:]:
            shape = None if v.type.shape is None else (trips, *v.type.shape)
            out.append(TensorType(v.type.dtype, shape))
        return out  # type: ignore[return-value]

    @staticmethod
    def _trips(node: Node) -> Dim:
        """The iteration count when M is constant and there is no condition, else unknown."""
        m = node.inputs[0]
        if m is None or m.const_value is None or node.inputs[1] is not None:
            return None
        return max(0, int(m.const_value.reshape(-1)[0]))

    def iterations(self, node: Node, in_types: list[TensorType | None]) -> int:
        m = node.inputs[0]
        return max(1, int(m.const_value.reshape(-1)[0])) if m is not None and \
            m.const_value is not None else 1


@register
class Scan(ControlFlow):
    op_type = "Scan"
    inputs = ("initial_state_and_scan_inputs*",)
    outputs = ("final_state_and_scan_outputs*",)
    attrs = {"body": Attr("graph", REQUIRED), "num_scan_inputs": Attr("int", REQUIRED, low=1),
             "scan_input_axes": Attr("ints"), "scan_input_directions": Attr("ints", choices=(0, 1)),
             "scan_output_axes": Attr("ints"),
             "scan_output_directions": Attr("ints", choices=(0, 1))}
    bodies = ("body",)

    def _split(self, node: Node) -> tuple[int, int, int]:
        """(states N, scan inputs M, scan outputs K)."""
        formal = _check_captures(node)
        m = int(node.attrs["num_scan_inputs"])
        n = formal - m
        k = len(node.outputs) - n
        if n < 0 or k < 0:
            raise fail(node, f"{formal} inputs and {len(node.outputs)} outputs do not fit "
                             f"num_scan_inputs={m}")
        for name, count in (("scan_input_axes", m), ("scan_input_directions", m),
                            ("scan_output_axes", k), ("scan_output_directions", k)):
            given = node.attrs.get(name)
            if given is not None and len(given) != count:
                raise fail(node, f"{name} {list(given)} must have {count} values")
        return n, m, k

    def input_axis(self, node: Node, j: int, rank: int) -> int:
        axes = node.attrs.get("scan_input_axes") or [0] * (j + 1)
        return normalize_axis(node, int(axes[j]), rank)

    def output_axis(self, node: Node, j: int, rank: int) -> int:
        axes = node.attrs.get("scan_output_axes") or [0] * (j + 1)
        return normalize_axis(node, int(axes[j]), rank + 1)

    def _elements(self, node: Node, in_types: list[TensorType | None]
                  ) -> tuple[list[TensorType | None], Dim]:
        """The types of one slice of each scan input, and the scan length."""
        n, m, _ = self._split(node)
        elements: list[TensorType | None] = []
        length: Dim = None
        for j, t in enumerate(in_types[n:n + m]):
            if t is None or t.shape is None:
                elements.append(None if t is None else TensorType(t.dtype, None))
                continue
            if not t.shape:
                raise fail(node, f"scan input {j} is a scalar; it needs an axis to scan")
            axis = self.input_axis(node, j, len(t.shape))
            length = t.shape[axis] if length is None else length
            elements.append(TensorType(t.dtype, t.shape[:axis] + t.shape[axis + 1:]))
        return elements, length

    def body_formals(self, node: Node, in_types: list[TensorType | None]
                     ) -> dict[str, list[TensorType | None]]:
        n = self._split(node)[0]
        return {"body": [*in_types[:n], *self._elements(node, in_types)[0]]}

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        n, _, k = self._split(node)
        body: Graph = node.attrs["body"]
        if len(body.outputs) != n + k:
            raise fail(node, f"body gives {len(body.outputs)} values; the node needs {n} "
                             f"states + {k} scan outputs")
        states = in_types[:n]
        elements, length = self._elements(node, in_types)
        body_inputs(node, body, [*states, *elements], in_types)
        out = [join(t, v.type) if t is not None else v.type
               for t, v in zip(states, body.outputs[:n], strict=True)]
        for j, v in enumerate(body.outputs[n:]):
            if v.type.shape is None:
                out.append(TensorType(v.type.dtype, None))
                continue
            axis = self.output_axis(node, j, len(v.type.shape))
            out.append(TensorType(v.type.dtype, v.type.shape[:axis] + (length,)
                                  + v.type.shape[axis:]))
        return out  # type: ignore[return-value]

    def iterations(self, node: Node, in_types: list[TensorType | None]) -> int:
        n, m, _ = self._split(node)
        for j, t in enumerate(in_types[n:n + m]):
            if t is not None and t.shape:
                d = t.shape[self.input_axis(node, j, len(t.shape))]
                if isinstance(d, int):
                    return max(1, d)
        return 1
