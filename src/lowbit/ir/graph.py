"""The one graph type that flows through every stage of lowbit.

A `Graph` is a list of `Node`s in topological order. Nodes read and write `Value`s; each value
has exactly one producer (a node, or nothing for a graph input). Weights are `Constant` nodes
whose `value` attribute holds a read-only numpy array, so passes see constants as ordinary nodes.
Omitted optional inputs are `None` in `Node.inputs`.

Control flow (If, Loop, Scan) holds subgraphs as `Graph`-valued attributes. A subgraph is
closed: what its body reads from the enclosing graph arrives through its `implicit` values,
bound to the node's trailing inputs (after the op's own inputs, in the same order for every
subgraph of the node), so passes, dead-code elimination and the interpreter see those reads as
ordinary inputs. Constants a body reads are copied into it (sharing the read-only array), so
inside the body they are constants too. Subgraphs share their root's name tables: every value
and node name is unique across all scopes, as ONNX requires.

A graph prints one line per node, `%y: <type> = Op(%x, %w) {attrs}  # name` (types as
`lowbit.ir.types` prints them).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.types import TensorType, format_shape, format_type

CONSTANT = "Constant"


class Value:
    """A tensor-valued edge: a name, a type and the node that produces it."""

    __slots__ = ("name", "producer", "type")

    def __init__(self, name: str, type: TensorType | None = None) -> None:
        self.name = name
        self.type = type
        self.producer: Node | None = None

    @property
    def is_constant(self) -> bool:
        return self.producer is not None and self.producer.op_type == CONSTANT

    @property
    def const_value(self) -> np.ndarray | None:
        """The array of a Constant-produced value, else None."""
        if self.is_constant:
            assert self.producer is not None
            return self.producer.attrs["value"]
        return None

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """One operation: op type, attributes, input values and output values."""

    __slots__ = ("attrs", "domain", "inputs", "name", "op_type", "outputs")

    def __init__(
        self,
        op_type: str,
        inputs: Sequence[Value | None],
        outputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        name: str = "",
        domain: str = "",
    ) -> None:
        self.op_type = op_type
        self.name = name
        self.domain = domain
        self.inputs: list[Value | None] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        for out in self.outputs:
            out.producer = self

    @property
    def output(self) -> Value:
        """The single output of a one-output node."""
        if len(self.outputs) != 1:
            raise ValueError(f"node '{self.name}' ({self.op_type}) has {len(self.outputs)} outputs")
        return self.outputs[0]

    def input_or_none(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def subgraphs(self) -> list[tuple[str, Graph]]:
        """The (attribute name, subgraph) pairs of a control-flow node, in attribute order."""
        return [(k, v) for k, v in self.attrs.items() if isinstance(v, Graph)]

    @property
    def captures(self) -> int:
        """How many trailing inputs feed the subgraphs' implicit values (0 without them)."""
        subs = self.subgraphs()
        return len(subs[0][1].implicit) if subs else 0

    def describe(self) -> str:
        """`'name' (OpType)`: how error messages refer to a node."""
        return f"node '{self.name}' ({self.op_type})"

    def __repr__(self) -> str:
        ins = ", ".join("%" + v.name if v else "_" for v in self.inputs)
        outs = ", ".join("%" + v.name for v in self.outputs)
        return f"{outs} = {self.op_type}({ins})  # {self.name}"


def constant_operand(node: Node) -> tuple[np.ndarray, Value] | None:
    """(the constant input's values as float64, the other input) of a two-input node with
    exactly one Constant-produced input (a bias Add, a scale Mul), else None."""
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return None
    a, b = node.inputs
    if b.is_constant and not a.is_constant:
        return np.asarray(b.const_value, np.float64), a
    if a.is_constant and not b.is_constant:
        return np.asarray(a.const_value, np.float64), b
    return None


class Graph:
    """Inputs, outputs and nodes in topological order, with the ONNX opset they follow."""

    def __init__(self, name: str = "graph", opset: int = 21) -> None:
        self.name = name
        self.opset = opset
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.metadata: dict[str, str] = {}
        self.fused_names: dict[str, str] = {}
        """Names of values a fusion removed -> the value now holding what they became (a
        Conv's result -> the Relu output the Conv now writes, its clamp fused): how tools find a
        removed name that another tool's file still uses."""
        self.implicit: list[Value] = []
        """A subgraph's reads of the enclosing graph, bound to its node's trailing inputs."""
        self._names: set[str] = set()
        self._node_names: set[str] = set()
        self._counter = itertools.count()

    def subgraph(self, name: str) -> Graph:
        """An empty subgraph sharing this graph's name tables (names stay unique across
        scopes)."""
        sub = Graph(name, self.opset)
        sub._names, sub._node_names, sub._counter = self._names, self._node_names, self._counter
        return sub

    # -- naming ---------------------------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        """A value name not used in this graph, derived from `hint`."""
        return self._unique(hint or "v", self._names)

    def unique_node_name(self, hint: str) -> str:
        """A node name not used in this graph, derived from `hint` (nodes and values have
        separate namespaces, as in ONNX)."""
        return self._unique(hint or "node", self._node_names)

    def _unique(self, hint: str, taken: set[str]) -> str:
        name = hint
        while name in taken:
            name = f"{hint}_{next(self._counter)}"
        taken.add(name)
        return name

    def reserve_name(self, name: str) -> None:
        self._names.add(name)

    def reserve_node_name(self, name: str) -> None:
        self._node_names.add(name)

    # -- construction ---------------------------------------------------------------------------
    def add_input(self, name: str, type: TensorType) -> Value:
        value = Value(self.unique_name(name), type)
        self.inputs.append(value)
        return value

    def make_node(
        self,
        op_type: str,
        inputs: Sequence[Value | None],
        attrs: dict[str, Any] | None = None,
        *,
        num_outputs: int = 1,
        name: str | None = None,
        output_names: Sequence[str] | None = None,
        output_types: Sequence[TensorType | None] | None = None,
        domain: str = "",
        before: Node | None = None,
    ) -> Node:
        """Create a node with fresh output values and insert it (at the end, or before `before`).

        Output types are left None unless given; `lowbit.ops.infer_node` fills them in.
        """
        node_name = self.unique_node_name(name or op_type)
        names = output_names or [f"{node_name}_out{i}" if num_outputs > 1 else f"{node_name}_out"
                                 for i in range(num_outputs)]
        types = list(output_types) if output_types is not None else [None] * len(names)
        outputs = [Value(self.unique_name(n), t) for n, t in zip(names, types, strict=True)]
        node = Node(op_type, inputs, outputs, attrs, node_name, domain)
        if before is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self.nodes.index(before), node)
        return node

    def add_constant(
        self, array: np.ndarray, name: str = "const", before: Node | None = None
    ) -> Value:
        """Add a Constant node holding a read-only copy of `array`; return its value."""
        array = np.array(array, copy=True)
        array.setflags(write=False)
        type = TensorType(dtypes.from_numpy(array.dtype), tuple(array.shape))
        node = self.make_node(
            CONSTANT, [], {"value": array}, name=name, output_names=[name],
            output_types=[type], before=before,
        )  # fmt: skip
        return node.output

    # -- queries --------------------------------------------------------------------------------
    def values(self) -> Iterator[Value]:
        """Every value: graph inputs, then node outputs in order."""
        yield from self.inputs
        for node in self.nodes:
            yield from node.outputs

    def value_map(self) -> dict[str, Value]:
        return {v.name: v for v in self.values()}

    def node_map(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def users(self) -> dict[Value, list[tuple[Node, int]]]:
        """For each value, the (node, input index) pairs that read it."""
        uses: dict[Value, list[tuple[Node, int]]] = {v: [] for v in self.values()}
        for node in self.nodes:
            for i, v in enumerate(node.inputs):
                if v is not None:
                    uses.setdefault(v, []).append((node, i))
        return uses

    def constants(self) -> Iterator[Node]:
        return (n for n in self.nodes if n.op_type == CONSTANT)

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op_type] = hist.get(n.op_type, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    def parameter_count(self) -> tuple[int, int]:
        """(number of elements, bytes) held in Constant nodes, subgraphs' included (an array
        shared by several scopes counts once)."""
        arrays = {id(n.attrs["value"]): n.attrs["value"] for n, _ in self.walk()
                  if n.op_type == CONSTANT}
        return (sum(int(a.size) for a in arrays.values()),
                sum(int(a.nbytes) for a in arrays.values()))

    def scopes(self, scope: str = "") -> Iterator[tuple[Graph, str]]:
        """This graph (scope "") and every subgraph below it, with its scope (`walk`)."""
        yield self, scope
        for node in self.nodes:
            for attr, sub in node.subgraphs():
                yield from sub.scopes(f"{scope}/{node.name}/{attr}" if scope
                                      else f"{node.name}/{attr}")

    def walk(self, scope: str = "") -> Iterator[tuple[Node, str]]:
        """Every node, subgraphs' included (after their node), with its scope: "" at the top,
        `"node/attr"` inside a subgraph (nested scopes joined by "/")."""
        for node in self.nodes:
            yield node, scope
            for attr, sub in node.subgraphs():
                yield from sub.walk(f"{scope}/{node.name}/{attr}" if scope
                                    else f"{node.name}/{attr}")

    # -- editing --------------------------------------------------------------------------------
    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every reader of `old` (nodes and graph outputs) read `new` instead."""
        for node in self.nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove_nodes(self, dead: Iterable[Node]) -> None:
        dead_ids = {id(n) for n in dead}
        self.nodes = [n for n in self.nodes if id(n) not in dead_ids]

    def copy(self, _root: Graph | None = None) -> Graph:
        """A structural copy: new Value and Node objects (subgraphs copied too), shared
        read-only constant arrays."""
        if _root is None:
            g = Graph(self.name, self.opset)
            g._names = set(self._names)
            g._node_names = set(self._node_names)
        else:
            g = _root.subgraph(self.name)
        g.metadata = dict(self.metadata)
        g.fused_names = dict(self.fused_names)
        mapping: dict[Value, Value] = {}
        for own, new in ((self.inputs, g.inputs), (self.implicit, g.implicit)):
            for v in own:
                nv = Value(v.name, v.type)
                mapping[v] = nv
                new.append(nv)
        for n in self.nodes:
            outs = [Value(v.name, v.type) for v in n.outputs]
            for v, nv in zip(n.outputs, outs, strict=True):
                mapping[v] = nv
            ins = [mapping[v] if v is not None else None for v in n.inputs]
            attrs = {k: v.copy(_root or g) if isinstance(v, Graph) else v
                     for k, v in n.attrs.items()}
            g.nodes.append(Node(n.op_type, ins, outs, attrs, n.name, n.domain))
        g.outputs = [mapping[v] for v in self.outputs]
        return g

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes, opset {self.opset}>"


# -- text form ---------------------------------------------------------------------------------
def _format_attr(value) -> str:
    if isinstance(value, Graph):
        return f"<graph {value.name}: {sum(n.op_type != CONSTANT for n in value.nodes)} nodes>"
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return np.array2string(value.reshape(-1), separator=",", threshold=8)
        return f"tensor{format_shape(tuple(value.shape))}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format_attr(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def format_node(node: Node) -> str:
    outs = ", ".join(f"%{v.name}: {format_type(v.type)}" for v in node.outputs)
    ins = ", ".join("%" + v.name if v is not None else "_" for v in node.inputs)
    attrs = ", ".join(f"{k}={_format_attr(v)}" for k, v in sorted(node.attrs.items()))
    attrs = f" {{{attrs}}}" if attrs else ""
    return f"{outs} = {node.op_type}({ins}){attrs}  # {node.name}"


def format_graph(graph: Graph, constants: bool = False) -> str:
    """The whole graph, one line per node, subgraphs indented under their node; Constant nodes
    are listed only if `constants`."""
    return "\n".join([f"graph {graph.name} (opset {graph.opset}) {{",
                      *format_body(graph, constants, "  "), "}"])


def format_body(graph: Graph, constants: bool = False, indent: str = "") -> list[str]:
    """The lines of a graph's inputs, nodes (with their subgraphs) and outputs."""
    lines = [f"{indent}input %{v.name}: {format_type(v.type)}" for v in graph.inputs]
    lines += [f"{indent}implicit %{v.name}: {format_type(v.type)}" for v in graph.implicit]
    for node in graph.nodes:
        if node.op_type == "Constant" and not constants:
            continue
        lines.append(indent + format_node(node))
        for attr, sub in node.subgraphs():
            lines.append(f"{indent}  {attr}: graph {sub.name} {{")
            lines += format_body(sub, constants, indent + "    ")
            lines.append(f"{indent}  }}")
    lines += [f"{indent}output %{v.name}: {format_type(v.type)}" for v in graph.outputs]
    return lines
