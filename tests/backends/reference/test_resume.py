"""Resumed runs: a graph that changes some nodes of one already run computes only what depends
on the change, and gives the same outputs as a full run."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from lowbit.backends.lowering import fold_quantized_constants
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.backends.reference.resume import RecordedRun, frontier, shared_values
from lowbit.cli.demo import bundled
from lowbit.errors import InputError
from lowbit.quant.config import NodeSettings, QuantConfig, Rule
from lowbit.quant.static import quantize


@pytest.fixture(scope="module")
def mnist():
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(bundled("mnistnet.onnx"))
    prof = lowbit.profile(graph, [{"input": x[:50]}], progress=False, moments=False)
    return graph, prof, [{"input": x[i:i + 5]} for i in range(100, 115, 5)]


def test_a_graph_resumes_after_the_nodes_it_shares(mnist):
    graph, prof, batches = mnist
    last = "/classifier/classifier.2/Gemm"
    alone = QuantConfig(NodeSettings(precision="float"), (Rule(name=last, precision="int8"),))
    candidate = quantize(graph, prof, alone).graph
    shared = shared_values(candidate, graph)
    names = {n.name for n in graph.nodes}
    before_last = [n for n in graph.nodes if n.name != last and n.op_type != "Constant"]
    assert all(v in shared for n in candidate.nodes if n.name in {m.name for m in before_last}
               for v in n.outputs)
    assert not any(v in shared for n in candidate.nodes if n.name == last for v in n.outputs)
    assert all(n.name in names for n in candidate.nodes if any(v in shared for v in n.outputs))
    record = RecordedRun(graph, batches)
    run = record.runner(candidate)
    for i, batch in enumerate(batches):
        full = lowbit.run(candidate, batch)
        assert np.array_equal(run(i)[0], full["logits"])
        assert np.array_equal(record.outputs_of[i][0], lowbit.run(graph, batch)["logits"])


def test_only_what_depends_on_the_change_runs(mnist):
    graph, prof, batches = mnist
    last = "/classifier/classifier.2/Gemm"
    alone = QuantConfig(NodeSettings(precision="float"), (Rule(name=last, precision="int8"),))
    candidate = fold_quantized_constants(quantize(graph, prof, alone).graph)
    given = frontier(candidate, shared_values(candidate, graph))
    assert [v.name for v in given] == [n.inputs[0].name for n in graph.nodes if n.name == last]
    interpreter = Interpreter(candidate, known=given)
    ran = [n.op_type for n, runs in zip(candidate.nodes, interpreter._runs, strict=True)
           if runs and n.op_type != "Constant"]
    assert ran == ["Quantize", "Gemm"]
    with pytest.raises(InputError, match="no array given"):
        interpreter(batches[0], {})


def test_a_record_holds_what_fits_and_runs_the_rest_in_full(mnist):
    graph, prof, batches = mnist
    candidate = quantize(graph, prof, QuantConfig().with_default(weight_rounding="nearest")).graph
    record = RecordedRun(graph, batches, max_bytes=1)
    assert record.recorded == 0
    run = record.runner(candidate)
    assert np.array_equal(run(2)[0], lowbit.run(candidate, batches[2])["logits"])
