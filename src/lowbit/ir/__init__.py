"""The lowbit IR: Graph, Node, Value, TensorType, QuantParams, printer and verifier."""

from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import CONSTANT, Graph, Node, Value
from lowbit.ir.printer import format_graph, format_type
from lowbit.ir.types import Dim, QuantParams, TensorType
from lowbit.ir.verifier import verify

__all__ = [
    "CONSTANT",
    "DType",
    "Dim",
    "Graph",
    "Node",
    "QuantParams",
    "TensorType",
    "Value",
    "dtypes",
    "format_graph",
    "format_type",
    "verify",
]
