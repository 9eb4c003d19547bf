"""Graph construction, editing, copying and the verifier."""

from __future__ import annotations

import numpy as np
import pytest

from lowbit.errors import VerifyError
from lowbit.ir import Graph, Node, TensorType, Value, dtypes
from lowbit.passes import eliminate_dead_code, verify

F = TensorType(dtypes.FLOAT32, ("n", 4))


def chain(n: int = 3) -> Graph:
    g = Graph("chain")
    v = g.add_input("x", F)
    for i in range(n):
        v = g.make_node("Identity", [v], name=f"id{i}", output_types=[F]).output
    g.outputs = [v]
    return g


def test_valid_chain_verifies():
    verify(chain())


def test_unique_names():
    g = Graph()
    assert g.unique_name("a") == "a"
    assert g.unique_name("a") != "a"
    g.reserve_name("b")
    assert g.unique_name("b") != "b"


def test_constants_are_read_only_and_typed():
    g = Graph()
    c = g.add_constant(np.arange(6, dtype=np.int64).reshape(2, 3), "c")
    assert c.is_constant and c.type == TensorType(dtypes.INT64, (2, 3))
    with pytest.raises(ValueError):
        c.const_value[0, 0] = 1
    assert g.parameter_count() == (6, 48)


def test_verifier_catches_out_of_order_nodes():
    g = chain()
    g.nodes.reverse()
    with pytest.raises(VerifyError, match="comes later"):
        verify(g)


def test_verifier_catches_dangling_input():
    g = chain()
    g.nodes[1].inputs[0] = Value("ghost", F)
    with pytest.raises(VerifyError, match="produced by nothing"):
        verify(g)


def test_verifier_catches_double_assignment():
    g = chain()
    dup = Node("Identity", [g.inputs[0]], [], name="dup")
    dup.outputs = [g.nodes[0].output]
    g.nodes.append(dup)
    with pytest.raises(VerifyError):
        verify(g)


def test_verifier_catches_repeated_names():
    g = chain()
    g.nodes[1].outputs[0].name = g.nodes[0].outputs[0].name
    with pytest.raises(VerifyError, match="used by two values"):
        verify(g)


def test_verifier_catches_type_mismatch():
    g = chain()
    g.nodes[0].output.type = TensorType(dtypes.INT8, ("n", 4))
    with pytest.raises(VerifyError, match="infers"):
        verify(g)


def test_verifier_catches_writeable_constant():
    g = chain()
    c = g.add_constant(np.zeros(2, np.float32), "c")
    c.producer.attrs["value"] = np.zeros(2, np.float32)
    with pytest.raises(VerifyError, match="writeable"):
        verify(g)


def test_replace_all_uses_and_dead_code():
    g = chain(3)
    first = g.nodes[0].output
    g.replace_all_uses(g.nodes[1].output, first)
    eliminate_dead_code(g)
    assert [n.name for n in g.nodes] == ["id0", "id2"]
    verify(g)


def test_copy_is_structural():
    g = chain(2)
    h = g.copy()
    assert [n.name for n in h.nodes] == [n.name for n in g.nodes]
    assert h.nodes[0] is not g.nodes[0]
    assert h.outputs[0].producer is h.nodes[-1]
    h.nodes[0].attrs["x"] = 1
    assert "x" not in g.nodes[0].attrs
    verify(h)
