"""If, Loop and Scan: import with subgraphs reading outer values, the reference interpreter
against ONNX Runtime, folding an If on a fixed input, the verifier, printer and copies."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.errors import KernelError, VerifyError
from lowbit.ir.graph import format_graph
from lowbit.passes import verify

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(0)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model


def _save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _agree(path, feeds, **load):
    want = ort.InferenceSession(str(path)).run(None, feeds)
    graph = lowbit.load(path, **load)
    got = lowbit.run(graph, {k: v for k, v in feeds.items()
                             if k in {i.name for i in graph.inputs}})
    for w, g in zip(want, got.values(), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return graph


def _if_model():
    """y = If(sum(x) > 0): then relu(x @ w) * s, else (x - b) with a nested If on `flag`
    choosing sigmoid or tanh; s, flag are graph inputs read by the branches (captured), w and b
    initializers (copied into the branches)."""
    w = numpy_helper.from_array(RNG.normal(size=(4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.normal(size=(3,)).astype(np.float32), "b")
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"),
         helper.make_node("Relu", ["xw"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "s"], ["t_out"], name="scale")],
        "then", [], [_vi("t_out", F, None)])
    inner_then = helper.make_graph([helper.make_node("Sigmoid", ["d"], ["sig"], name="sig")],
                                   "inner_then", [], [_vi("sig", F, None)])
    inner_else = helper.make_graph([helper.make_node("Tanh", ["d"], ["tanh"], name="tanh")],
                                   "inner_else", [], [_vi("tanh", F, None)])
    els = helper.make_graph(
        [helper.make_node("Slice", ["x", "zero", "three", "one"], ["x3"], name="cut"),
         helper.make_node("Sub", ["x3", "b"], ["d"], name="sub"),
         helper.make_node("If", ["flag"], ["e_out"], name="inner", then_branch=inner_then,
                          else_branch=inner_else)],
        "else", [], [_vi("e_out", F, None)])
    consts = [numpy_helper.from_array(np.array([v], np.int64), n)
              for n, v in (("zero", 0), ("three", 3), ("one", 1))]
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["total", "zero_f"], ["positive"], name="gt"),
             helper.make_node("If", ["positive"], ["y"], name="branch", then_branch=then,
                              else_branch=els)]
    return _model(nodes, [_vi("x", F, [2, 4]), _vi("s", F, [1]), _vi("flag", B, [])],
                  [_vi("y", F, [2, 3])],
                  [w, b, *consts, numpy_helper.from_array(np.float32(0), "zero_f")])


@pytest.mark.parametrize(("sign", "flag"), [(1, True), (-1, True), (-1, False)])
def test_if_with_captures_and_a_nested_if_equals_onnx_runtime(tmp_path, sign, flag):
    path = _save(_if_model(), tmp_path)
    x = (sign * np.abs(RNG.normal(size=(2, 4)))).astype(np.float32)
    feeds = {"x": x, "s": np.array([1.5], np.float32), "flag": np.array(flag)}
    graph = _agree(path, feeds, optimize=False)
    node = next(n for n in graph.nodes if n.op_type == "If")
    assert node.inputs[0].name == "positive"
    assert sorted(v.name for v in node.inputs[1:]) == ["flag", "s", "x"]
    then = node.attrs["then_branch"]
    assert [v.name for v in then.implicit] == [v.name for v in node.inputs[1:]]
    assert any(n.op_type == "Constant" and n.output.name == "w" for n in then.nodes)
    _agree(path, feeds)  # optimized: passes ran inside the branches too


def test_if_folds_to_its_branch_once_its_input_is_fixed(tmp_path):
    nodes = [helper.make_node("Equal", ["sr", "k16"], ["is16"], name="eq"),
             helper.make_node("If", ["is16"], ["y"], name="choose",
                              then_branch=helper.make_graph(
                                  [helper.make_node("Relu", ["x"], ["a"], name="relu")],
                                  "t", [], [_vi("a", F, None)]),
                              else_branch=helper.make_graph(
                                  [helper.make_node("Neg", ["x"], ["b"], name="neg")],
                                  "e", [], [_vi("b", F, None)]))]
    model = _model(nodes, [_vi("x", F, ["n", 3]), _vi("sr", I64, [])], [_vi("y", F, None)],
                   [numpy_helper.from_array(np.array(16000, np.int64), "k16")])
    path = _save(model, tmp_path)
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    for sr, op in ((16000, "Relu"), (8000, "Neg")):
        graph = _agree(path, {"x": x, "sr": np.array(sr)}, fixed_inputs={"sr": sr})
        assert [n.op_type for n in graph.nodes] == [op]
        assert [v.name for v in graph.inputs] == ["x"] and graph.outputs[0].name == "y"


def _loop_model(with_m: bool = True, stop_at: int = 3):
    """Loop: carried acc += x * i; scan output acc; runs M = 5 times or until i >= stop_at."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F, name="cast"),
         helper.make_node("Mul", ["x", "fi"], ["xi"], name="mul"),
         helper.make_node("Add", ["acc_in", "xi"], ["acc_out"], name="add"),
         helper.make_node("Identity", ["acc_out"], ["acc_scan"], name="copy"),
         helper.make_node("Add", ["i", "one"], ["next"], name="inc"),
         helper.make_node("Less", ["next", "stop"], ["go"], name="less")],
        "body", [_vi("i", I64, []), _vi("c", B, []), _vi("acc_in", F, [3])],
        [_vi("go", B, []), _vi("acc_out", F, [3]), _vi("acc_scan", F, [3])])
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(stop_at, np.int64), "stop"),
             numpy_helper.from_array(np.array(5, np.int64), "m"),
             numpy_helper.from_array(np.array(True), "t")]
    loop = helper.make_node("Loop", ["m" if with_m else "", "t", "acc0"], ["acc", "accs"],
                            body=body, name="loop")
    return _model([loop], [_vi("x", F, [3]), _vi("acc0", F, [3])],
                  [_vi("acc", F, [3]), _vi("accs", F, None)], inits)


@pytest.mark.parametrize("stop_at", [3, 9])
def test_loop_with_carried_and_scan_outputs_equals_onnx_runtime(tmp_path, stop_at):
    path = _save(_loop_model(stop_at=stop_at), tmp_path)
    feeds = {"x": RNG.normal(size=3).astype(np.float32),
             "acc0": RNG.normal(size=3).astype(np.float32)}
    graph = _agree(path, feeds)
    assert lowbit.run(graph, feeds)["accs"].shape == (min(stop_at, 5), 3)


def test_a_loop_that_never_ends_is_stopped_by_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWBIT_MAX_OPS", "1e7")
    path = _save(_loop_model(with_m=False, stop_at=2**62), tmp_path)
    graph = lowbit.load(path)
    feeds = {"x": np.ones(3, np.float32), "acc0": np.zeros(3, np.float32)}
    with pytest.raises(KernelError, match=r"node 'loop' \(Loop\): stopped after 167 "
                                          r"iterations: .*does the loop's condition ever"):
        lowbit.run(graph, feeds)


def test_scan_with_axes_and_directions_equals_onnx_runtime(tmp_path):
    """Cumulative sum and product over axis 1 of `a`, reversed over `b`, outputs stacked on
    axis 1 and reversed for the second, a captured scale multiplying every step."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "a_t"], ["sum_out"], name="add"),
         helper.make_node("Mul", ["prod_in", "b_t"], ["prod_out"], name="mul"),
         helper.make_node("Mul", ["sum_out", "scale"], ["y_t"], name="scaled"),
         helper.make_node("Identity", ["prod_out"], ["z_t"], name="copy")],
        "body", [_vi("sum_in", F, [2]), _vi("prod_in", F, [2]), _vi("a_t", F, [2]),
                 _vi("b_t", F, [2])],
        [_vi("sum_out", F, [2]), _vi("prod_out", F, [2]), _vi("y_t", F, [2]),
         _vi("z_t", F, [2])])
    scan = helper.make_node("Scan", ["s0", "p0", "a", "b"], ["s", "p", "ys", "zs"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0],
                            scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                            scan_output_directions=[0, 1], name="scan")
    model = _model([scan], [_vi("s0", F, [2]), _vi("p0", F, [2]), _vi("a", F, [2, 5]),
                            _vi("b", F, [5, 2]), _vi("scale", F, [])],
                   [_vi(n, F, None) for n in ("s", "p", "ys", "zs")])
    feeds = {"s0": np.zeros(2, np.float32), "p0": np.ones(2, np.float32),
             "a": RNG.normal(size=(2, 5)).astype(np.float32),
             "b": RNG.normal(size=(5, 2)).astype(np.float32), "scale": np.array(2.0, np.float32)}
    graph = _agree(_save(model, tmp_path), feeds)
    assert graph.nodes[-1].captures == 1  # scale


def test_verifier_refuses_a_body_reading_an_outer_value_directly(tmp_path):
    graph = lowbit.load(_save(_if_model(), tmp_path), optimize=False)
    node = next(n for n in graph.nodes if n.op_type == "If")
    then = node.attrs["then_branch"]
    mul = next(n for n in then.nodes if n.op_type == "Mul")
    mul.inputs[1] = graph.inputs[1]  # the outer 's' itself, not the branch's implicit value
    with pytest.raises(VerifyError, match=r"in node 'branch' \(If\) then_branch: node 'scale' "
                                          r"\(Mul\) input 1 's' is produced by nothing"):
        verify(graph)


def test_printer_copy_and_dead_captures(tmp_path):
    graph = lowbit.load(_save(_if_model(), tmp_path), optimize=False)
    text = format_graph(graph)
    assert "  then_branch: graph then {" in text and "    implicit %s: f32<1>" in text
    assert "      else_branch: graph inner_else {" in text
    copy = graph.copy()
    node, twin = (next(n for n in g.nodes if n.op_type == "If") for g in (graph, copy))
    assert twin.attrs["then_branch"] is not node.attrs["then_branch"]
    twin.attrs["then_branch"].nodes.clear()
    assert node.attrs["then_branch"].nodes
    # Once the branches stop reading 's', the If stops passing it.
    from lowbit.ir.dead_code import eliminate_dead_code

    then = node.attrs["then_branch"]
    mul = next(n for n in then.nodes if n.op_type == "Mul")
    then.outputs = [mul.inputs[0]]
    eliminate_dead_code(graph)
    assert sorted(v.name for v in node.inputs[1:]) == ["flag", "x"]
    assert [v.name for v in then.implicit] == [v.name for v in node.inputs[1:]]
    verify(graph)


def test_fixed_inputs_are_checked(tmp_path):
    from lowbit.errors import InputError

    path = _save(_if_model(), tmp_path)
    with pytest.raises(InputError, match="cannot fix input 'sr': the model's inputs are x, s, "
                                         "flag"):
        lowbit.load(path, fixed_inputs={"sr": 16000})
    with pytest.raises(InputError, match=r"cannot fix input 's' to \[0.5, 1.5\]: a value of "
                                         r"shape \(2,\) does not fit|shape \(2,\) does not fit"):
        lowbit.load(path, fixed_inputs={"s": [0.5, 1.5]})
    with pytest.raises(InputError, match=r"cannot fix input 'flag' to 2: bool does not hold it "
                                         r"exactly"):
        lowbit.load(path, fixed_inputs={"flag": 2})


def test_fix_input_on_the_command_line(tmp_path):
    from hostile.harness import run_verb

    path = _save(_if_model(), tmp_path)
    x = np.abs(RNG.normal(size=(2, 4))).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "s.npy", np.array([2.0], np.float32))
    outcome = run_verb(["run", str(path), "--fix-input", "flag=1", "--input",
                        f"x={tmp_path / 'x.npy'}", f"s={tmp_path / 's.npy'}"])
    assert outcome.code == 0, outcome.stderr
    outcome = run_verb(["inspect", str(path), "--fix-input", "flag=1", "s=2"])
    assert outcome.code == 0 and "flag" not in outcome.stdout.split("outputs:")[0]
    outcome = run_verb(["inspect", str(path), "--fix-input", "flag"])
    assert outcome.code == 1 and "--fix-input 'flag': write NAME=VALUE" in outcome.stderr


def _export_agrees(graph, tmp_path, feeds, rtol=1e-5, atol=1e-6):
    out = tmp_path / "exported.onnx"
    lowbit.save(graph, out)
    want = lowbit.run(graph, {k: v for k, v in feeds.items()
                              if k in {i.name for i in graph.inputs}})
    got = ort.InferenceSession(str(out)).run(None, {k: v for k, v in feeds.items()
                                                     if k in {i.name for i in graph.inputs}})
    for w, g in zip(want.values(), got, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_export_keeps_if_loop_and_scan_bodies(tmp_path):
    x = np.abs(RNG.normal(size=(2, 4))).astype(np.float32)
    feeds = {"x": x, "s": np.array([1.5], np.float32), "flag": np.array(False)}
    for sign in (1, -1):
        feeds["x"] = sign * x
        _export_agrees(lowbit.load(_save(_if_model(), tmp_path)), tmp_path, feeds)
    feeds = {"x": RNG.normal(size=3).astype(np.float32),
             "acc0": RNG.normal(size=3).astype(np.float32)}
    _export_agrees(lowbit.load(_save(_loop_model(), tmp_path)), tmp_path, feeds)


def _matmul_branches_model():
    """y = If(c): x @ w1 (a branch reading the outer x), else relu(x) @ w2."""
    w1 = numpy_helper.from_array(RNG.normal(size=(64, 48)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.normal(size=(64, 48)).astype(np.float32), "w2")
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1")],
                             "then", [], [_vi("a", F, None)])
    els = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                             helper.make_node("MatMul", ["r", "w2"], ["b"], name="mm2")],
                            "else", [], [_vi("b", F, None)])
    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then,
                            else_branch=els)
    return _model([node], [_vi("x", F, ["n", 64]), _vi("c", B, [])], [_vi("y", F, None)],
                  [w1, w2])


def test_dynamic_quantization_reaches_into_branches(tmp_path):
    from lowbit.quant.dynamic import quantize_dynamic

    graph = lowbit.load(_save(_matmul_branches_model(), tmp_path))
    result = quantize_dynamic(graph)
    assert sorted((r.name, r.mode) for r in result.summary.rows) == [
        ("choose/else_branch/mm2", "int8"), ("choose/then_branch/mm1", "int8")]
    assert "choose/then_branch/mm1" in result.summary.text()
    x = RNG.normal(size=(5, 64)).astype(np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        float_y = lowbit.run(graph, feeds)["y"]
        quant_y = lowbit.run(result.graph, feeds)["y"]
        assert np.abs(quant_y - float_y).max() < 0.05 * np.abs(float_y).max()
        _export_agrees(result.graph, tmp_path, feeds, rtol=1e-4, atol=1e-4)


def test_static_quantization_says_it_does_not_reach_into_bodies(tmp_path):
    from lowbit.quant.static import quantize

    graph = lowbit.load(_save(_matmul_branches_model(), tmp_path))
    x = RNG.normal(size=(8, 64)).astype(np.float32)
    profile = lowbit.profile(graph, [{"x": x, "c": np.array(True)}], progress=False)
    rows = quantize(graph, profile).summary.rows
    assert [r.name for r in rows] == ["choose"]
    assert rows[0].detail.startswith("static quantization does not reach into If bodies (2 "
                                     "products inside): fix the inputs that decide it")
