"""Check that `lowbit dump` prints the integer parameters the reference kernels compute with:
record what every kernel's parameter function returned while the interpreter ran, then dump the
same graph on the same inputs and compare, number by number."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from lowbit.backends.reference import kernels
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.ir.dtypes import DType
from lowbit.ir.graph import Graph
from lowbit.tools.dump import dump


def flatten(obj, prefix: str = "") -> dict[str, object]:
    """Every number of a parameters object, keyed by its path (`requant.encoding.scale`)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            out.update(flatten(getattr(obj, f.name), f"{prefix}{f.name}."))
        if hasattr(obj, "method"):
            out[f"{prefix}method"] = obj.method
        return out
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, tuple | list):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
        return out
    if isinstance(obj, DType):
        return {prefix.rstrip("."): obj.name}
    return {prefix.rstrip("."): obj}


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def kernel_parameters(graph: Graph, inputs: Mapping[str, np.ndarray], monkeypatch
                      ) -> dict[str, object]:
    """The parameters each kernel of `graph` computed with on `inputs`, by node name."""
    seen: dict[str, object] = {}

    def recording(fn):
        def record(node, args):
            result = fn(node, args)
            assert node.name not in seen, f"{node.name}: parameters derived twice in one run"
            seen[node.name] = result
            return result
        return record

    kernels.all_params()
    with monkeypatch.context() as m:
        for key, (fn, typed) in list(kernels._PARAMS.items()):
            m.setitem(kernels._PARAMS, key, (recording(fn), typed))
        Interpreter(graph)(inputs)
    return seen


def check_dump_matches_kernels(graph: Graph, inputs: Mapping[str, np.ndarray], monkeypatch
                               ) -> dict[str, int]:
    """Assert that dump's parameters equal the kernels' on every node that has some, and that
    every node run by an integer kernel has some; returns how many nodes of each op type were
    compared."""
    from_kernels = kernel_parameters(graph, inputs, monkeypatch)
    records, _ = dump(graph, inputs)
    printed = {r.name: r for r in records}
    integer = {n.name for n in graph.nodes if n.op_type != "Constant"
               and kernels.kernel_for(n) is kernels.get_kernel(n.op_type, n.domain, True)
               and kernels.get_kernel(n.op_type, n.domain, True) is not None}
    assert integer <= {name for name, p in from_kernels.items() if p is not None}
    compared: dict[str, int] = {}
    for name, params in from_kernels.items():
        record = printed[name]
        assert record.params is not None, name
        ours, theirs = flatten(params), flatten(record.params)
        assert ours.keys() == theirs.keys(), name
        for key in ours:
            assert same(ours[key], theirs[key]), (name, key, ours[key], theirs[key])
        assert record.integer, name
        compared[record.op_type] = compared.get(record.op_type, 0) + 1
    return compared
