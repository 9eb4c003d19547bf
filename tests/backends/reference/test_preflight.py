"""Before a run, the interpreter re-infers the model's types from the inputs' shapes and adds up
the memory and operations they need, refusing with the figures before allocating anything."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.backends.reference.preflight import preflight, specialize
from lowbit.errors import InputError, ModelError
from lowbit.ops.work import graph_work as cost

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _window_model(op: str, attrs: dict, channels: int = 8) -> onnx.ModelProto:
    """input (N, 1, 28, 28) -> op -> GlobalMaxPool -> (N, C, 1, 1)."""
    inits = []
    inputs = ["input"]
    if op == "Conv":
        w = np.ones((channels, 1, 3, 3), np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        inputs.append("w")
    nodes = [helper.make_node(op, inputs, ["big"], name="big_op", **attrs),
             helper.make_node("GlobalMaxPool", ["big"], ["y"], name="pool")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                   ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _load(model: onnx.ModelProto, tmp_path) -> lowbit.ir.graph.Graph:
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return lowbit.load(path)


def test_memory_beyond_the_machine_refused_with_the_figure(tmp_path):
    """A 10026 x 10026 convolution output per channel: 3.2 GB a sample, 3.2 TB for 1000."""
    graph = _load(_window_model("Conv", {"pads": [5000] * 4}), tmp_path)
    x = np.zeros((1000, 1, 28, 28), np.float32)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"inputs of shape \(1000, 1, 28, 28\) needs about "
                       r"[0-9.]+ TB of memory, most while computing node 'big_op' \(Conv\); "
                       r"this machine has [0-9.]+ [GMT]?B available"):
        lowbit.run(graph, {"input": x})
    assert time.perf_counter() - start < 5


def test_memory_limit_with_a_given_budget(tmp_path):
    graph = _load(_window_model("Conv", {"pads": [100] * 4}), tmp_path)
    x = np.zeros((2, 1, 28, 28), np.float32)
    g = specialize(graph, [x])
    need = cost(g)
    # output 2 x 8 x 226 x 226 float32, its float64 copy and the float64 padded input
    assert need.peak >= 2 * 8 * 226 * 226 * (4 + 8) + 2 * 228 * 228 * 8
    preflight(graph, [x], memory=int(need.peak / 0.8) + 1)
    with pytest.raises(InputError, match="needs about"):
        preflight(graph, [x], memory=int(need.peak / 0.8) - 1)


def test_a_resumed_run_checks_what_it_runs(tmp_path):
    """A run given the conv's output (a resumed run, lowbit.backends.reference.resume) runs the
    pool alone: its check counts the given array, alive from the start, and the pool, not the
    conv's float64 temporaries it never allocates; a budget that refuses the full run lets it
    run."""
    graph = _load(_window_model("Conv", {"pads": [100] * 4}), tmp_path)
    x = np.zeros((2, 1, 28, 28), np.float32)
    big = next(v for n in graph.nodes for v in n.outputs if v.name == "big")
    given = {big: np.full((2, 8, 226, 226), 3.0, np.float32)}
    interpreter = Interpreter(graph, known=[big])
    g = specialize(graph, [x], interpreter._runs, given)
    resumed = cost(g, interpreter._runs, [v for n in g.nodes for v in n.outputs if v is not None
                                          and v.name == "big"])
    full = cost(specialize(graph, [x]))
    assert resumed.peak_node.name == "pool" and full.peak_node.name == "big_op"
    assert given[big].nbytes <= resumed.peak < full.peak and resumed.ops < full.ops
    memory = int(resumed.peak / 0.8) + 1
    preflight(graph, [x], memory=memory, runs=interpreter._runs, known=given)
    with pytest.raises(InputError, match="needs about"):
        preflight(graph, [x], memory=memory)
    assert (interpreter({"input": x}, given)["y"] == 3.0).all()


def test_operations_beyond_the_limit_refused_before_running(tmp_path, monkeypatch):
    """A 2000 x 2000 max pool over a padded 28 x 28 image: 2027**2 windows of 4e6 each."""
    graph = _load(_window_model("MaxPool", {"kernel_shape": [2000, 2000],
                                            "pads": [1999] * 4}), tmp_path)
    x = np.zeros((1, 1, 28, 28), np.float32)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"takes about 1.64e\+13 multiply-adds, more than the "
                                         r"reference interpreter's limit of 2e\+12"):
        lowbit.run(graph, {"input": x})
    assert time.perf_counter() - start < 5
    monkeypatch.setenv("LOWBIT_MAX_OPS", "1e14")
    assert cost(specialize(graph, [x])).ops == pytest.approx(2027 ** 2 * 2000 ** 2)


def test_shapes_contradicting_once_the_batch_is_known(tmp_path):
    """Flatten on axis 0 folds the batch into K: fine for the import (N unknown), refused by
    the run with the Gemm's own message."""
    w = numpy_helper.from_array(np.ones((10, 784), np.float32), "w")
    nodes = [helper.make_node("Flatten", ["input"], ["flat"], axis=0, name="flat"),
             helper.make_node("Gemm", ["flat", "w"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                   ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    g = _load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    lowbit.run(g, {"input": np.zeros((1, 1, 28, 28), np.float32)})  # N = 1 is consistent
    with pytest.raises(ModelError, match=r"inputs of shape input \(3, 1, 28, 28\): node 'fc' "
                                         r"\(Gemm\): inner dimensions differ: A is \(1, 2352\)"):
        lowbit.run(g, {"input": np.zeros((3, 1, 28, 28), np.float32)})


def test_an_absurd_computed_value_refused_at_import(tmp_path):
    model = _window_model("Conv", {"pads": [2**30] * 4})
    with pytest.raises(ModelError, match=r"node 'big_op' \(Conv\) computes 'big' of shape "
                                         r"\('N', 8, 2147483674, 2147483674\), more than"):
        _load(model, tmp_path)


def test_the_cli_refuses_without_allocating(tmp_path):
    """Under a 3 GB address-space limit, the refusal comes from the estimate, not from a failed
    allocation: same message, exit code 1."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_window_model("Conv", {"pads": [5000] * 4}).SerializeToString())
    np.save(tmp_path / "x.npy", np.zeros((1000, 1, 28, 28), np.float32))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    r = subprocess.run([sys.executable, "-m", "lowbit", "run", str(path), "--input",
                        str(tmp_path / "x.npy")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC}, preexec_fn=limit, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("lowbit: error: running the model on inputs of shape "
                               "(1000, 1, 28, 28) needs about"), r.stderr


def test_costly_constant_subgraphs_are_not_folded_at_import(tmp_path):
    """A huge max pool over a constant: loading stays quick (the fold is left to run time),
    and the run is refused by its operations."""
    c = numpy_helper.from_array(np.ones((1, 1, 28, 28), np.float32), "c")
    nodes = [helper.make_node("MaxPool", ["c"], ["big"], kernel_shape=[2000, 2000],
                              pads=[1999] * 4, name="big_op"),
             helper.make_node("ReduceMax", ["big"], ["m"], keepdims=0, name="max"),
             helper.make_node("Add", ["x", "m"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [c])
    start = time.perf_counter()
    g = _load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    assert time.perf_counter() - start < 5
    with pytest.raises(InputError, match="multiply-adds, more than the reference"):
        lowbit.run(g, {"x": np.zeros(1, np.float32)})
