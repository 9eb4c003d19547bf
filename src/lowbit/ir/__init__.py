"""The lowbit IR: Graph, Node, Value, TensorType, QuantParams, each with its text form."""

from lowbit.ir import dtypes
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import CONSTANT, Graph, Node, Value, format_graph
from lowbit.ir.types import Dim, QuantParams, TensorType, format_type

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
]
