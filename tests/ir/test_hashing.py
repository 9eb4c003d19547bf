"""The graph hash: stable, sensitive to content, blind to cosmetic names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lowbit.ir import Graph, QuantParams, TensorType, dtypes
from lowbit.ir.hashing import graph_hash

F = TensorType(dtypes.FLOAT32, ("n", 4))


def build(weight=None, attrs=None, out_name="y", op="Identity", in_type=F) -> Graph:
    g = Graph("g")
    x = g.add_input("x", in_type)
    w = g.add_constant(np.arange(4, dtype=np.float32) if weight is None else weight, "w")
    a = g.make_node(op, [x], attrs or {}, name="a", output_names=[out_name],
                    output_types=[in_type]).output
    b = g.make_node("Identity", [w], name="b", output_types=[w.type]).output
    g.outputs = [a, b]
    return g


def test_hash_is_stable_and_copy_invariant():
    g = build()
    h = graph_hash(g)
    assert h.startswith("sha256:") and len(h) == 7 + 64
    assert graph_hash(g.copy()) == h == graph_hash(build())


def test_hash_is_the_same_in_another_process():
    root = Path(__file__).resolve().parents[2]
    code = (f"import sys; sys.path[:0] = [{str(root / 'src')!r}, {str(root / 'tests/ir')!r}]; "
            "import test_hashing as t; print(t.graph_hash(t.build()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123"})
    assert out.stdout.strip() == graph_hash(build())


@pytest.mark.parametrize("change", [
    {"weight": np.array([0, 1, 2, 3.5], np.float32)},
    {"weight": np.arange(4, dtype=np.float64)},
    {"weight": np.arange(4, dtype=np.float32).reshape(2, 2)},
    {"attrs": {"seed": 1}},
    {"out_name": "z"},
    {"op": "Dropout"},
    {"in_type": TensorType(dtypes.FLOAT32, ("n", 5))},
    {"in_type": TensorType(dtypes.INT8, ("n", 4), QuantParams(0.5, 3))},
])
def test_hash_changes_with_content(change):
    assert graph_hash(build(**change)) != graph_hash(build())


def test_quant_params_are_part_of_the_hash():
    a = build(in_type=TensorType(dtypes.INT8, ("n", 4), QuantParams(0.5, 3)))
    b = build(in_type=TensorType(dtypes.INT8, ("n", 4), QuantParams(0.5, 4)))
    assert graph_hash(a) != graph_hash(b)


def test_cosmetic_names_do_not_change_the_hash():
    g = build()
    h = graph_hash(g)
    g.name = "renamed"
    g.metadata["producer"] = "someone"
    for n in g.nodes:
        n.name = n.name + "_renamed"
    assert graph_hash(g) == h


def test_attribute_order_does_not_matter():
    a = build(attrs={"p": 1, "q": [1.5, 2.0]})
    b = build(attrs={"q": [1.5, 2.0], "p": 1})
    assert graph_hash(a) == graph_hash(b)
    c = build(attrs={"p": 1, "q": [1.5, 2.0000001]})
    assert graph_hash(c) != graph_hash(a)


def test_unhashable_attribute_is_named():
    g = build(attrs={"weird": object()})
    with pytest.raises(TypeError, match="attribute 'weird' of node 'a'"):
        graph_hash(g)
