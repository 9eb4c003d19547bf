"""A stable content hash of a Graph: what a profile or cache is keyed by.

The hash covers everything that changes what the graph computes or what its values are called:
the opset; graph inputs (names and types); every node's op type, domain, input and output value
names, output types and attributes (sorted by name), with constants hashed by dtype, shape and
bytes; and the graph outputs. It leaves out what is cosmetic: node names, the graph's name and
metadata. It is the same across processes and machines (no Python `hash`, no object ids), and
two graphs with the same hash have the same values with the same names, so per-value statistics
transfer between them.

Encoding: each item is written as a one-byte tag, an 8-byte little-endian length and its bytes,
so no two different sequences of items share an encoding.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np

from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType

VERSION = b"lowbit-graph-hash-1"


class _Hasher:
    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def item(self, tag: bytes, data: bytes | memoryview) -> None:
        self.h.update(tag)
        self.h.update(struct.pack("<Q", len(data)))
        self.h.update(data)

    def text(self, s: str) -> None:
        self.item(b"s", s.encode("utf-8"))

    def array(self, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a)
        self.text(a.dtype.str if a.dtype.names is None else str(a.dtype))
        self.text(repr(tuple(a.shape)))
        self.item(b"a", a.reshape(-1).view(np.uint8).data)

    def type(self, t: TensorType | None) -> None:
        if t is None:
            self.item(b"t", b"?")
            return
        self.text(t.dtype.name)
        self.text(repr(t.shape))
        if t.quant is None:
            self.item(b"q", b"")
        else:
            self.item(b"q", repr(t.quant.axis).encode())
            self.array(t.quant.scale)
            self.array(t.quant.zero_point)

    def value(self, v: Any, where: str) -> None:
        """One attribute value: plain Python data, numpy arrays and scalars, types, sub-graphs."""
        if v is None:
            self.item(b"n", b"")
        elif isinstance(v, bool):
            self.item(b"b", b"1" if v else b"0")
        elif isinstance(v, int):
            self.item(b"i", str(v).encode())
        elif isinstance(v, float):
            self.item(b"f", float.hex(v).encode())
        elif isinstance(v, str):
            self.text(v)
        elif isinstance(v, bytes):
            self.item(b"y", v)
        elif isinstance(v, (list, tuple)):
            self.item(b"l", str(len(v)).encode())
            for x in v:
                self.value(x, where)
        elif isinstance(v, np.ndarray | np.generic):
            self.array(np.asarray(v))
        elif isinstance(v, TensorType):
            self.type(v)
        elif isinstance(v, Graph):
            self.item(b"g", graph_hash(v).encode())
        else:
            raise TypeError(f"cannot hash {where} of type {type(v).__name__}")


def graph_hash(graph: Graph) -> str:
    """`sha256:<hex>` of the graph's content (see the module docstring)."""
    h = _Hasher()
    h.item(b"v", VERSION)
    h.item(b"o", str(graph.opset).encode())
    for v in graph.inputs:
        h.text(v.name)
        h.type(v.type)
    for node in graph.nodes:
        h.item(b"N", b"")
        h.text(node.op_type)
        h.text(node.domain)
        h.value([v.name if v is not None else None for v in node.inputs], "inputs")
        for out in node.outputs:
            h.text(out.name)
            h.type(out.type)
        for key in sorted(node.attrs):
            h.text(key)
            h.value(node.attrs[key], f"attribute '{key}' of {node.describe()}")
    h.item(b"O", b"")
    for v in graph.outputs:
        h.text(v.name)
    return "sha256:" + h.h.hexdigest()
