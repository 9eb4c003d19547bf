"""Bad models are refused at import with a message naming the cause, and nothing is written."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowbit
from lowbit.errors import ModelError, UnsupportedError


def _model(nodes, inputs=None, outputs=None, inits=(), opset=17):
    inputs = inputs if inputs is not None else [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])]
    outputs = outputs if outputs is not None else [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _ident(i="x", o="y", name="id"):
    return helper.make_node("Identity", [i], [o], name=name)


def test_good_model_loads(tmp_path):
    g = lowbit.load(_save(_model([_ident()]), tmp_path))
    assert [n.op_type for n in g.nodes] == ["Identity"]


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        lowbit.load(tmp_path / "nope.onnx")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        lowbit.load(p)


def test_truncated_model(tmp_path):
    data = _model([_ident()]).SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        lowbit.load(p)


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(tmp_path, seed):
    p = tmp_path / "noise.onnx"
    p.write_bytes(np.random.default_rng(seed).bytes(4096))
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        lowbit.load(p)


def test_text_file(tmp_path):
    p = tmp_path / "notes.onnx"
    p.write_text("This is a README, not a model.\n" * 20)
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        lowbit.load(p)


def test_unknown_op_lists_node_op_opset_and_supported(tmp_path):
    node = helper.make_node("FrobnicateTensor", ["x"], ["y"], name="frob")
    with pytest.raises(UnsupportedError) as info:
        lowbit.load(_save(_model([node]), tmp_path))
    msg = str(info.value)
    assert "frob" in msg and "FrobnicateTensor" in msg and "opset 17" in msg
    assert "supported ops:" in msg and "Identity" in msg


def test_every_unsupported_node_listed_at_once(tmp_path):
    nodes = [helper.make_node("Foo", ["x"], ["a"], name="n1"),
             helper.make_node("Bar", ["a"], ["y"], name="n2")]
    with pytest.raises(UnsupportedError) as info:
        lowbit.load(_save(_model(nodes), tmp_path))
    assert "n1" in str(info.value) and "n2" in str(info.value)


def test_a_branch_without_outputs_refused(tmp_path):
    body = helper.make_graph([], "b", [], [])
    node = helper.make_node("If", ["x"], ["y"], name="branch", then_branch=body,
                            else_branch=body)
    with pytest.raises(ModelError, match="subgraph 'branch/else_branch/' has no outputs"):
        lowbit.load(_save(_model([node]), tmp_path))


def test_a_branch_reading_nothing_known(tmp_path):
    body = helper.make_graph([helper.make_node("Relu", ["ghost"], ["r"], name="relu")], "b",
                             [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=body,
                            else_branch=body)
    with pytest.raises(ModelError, match=r"node 'branch' \(If\) reads 'ghost' in a subgraph"):
        lowbit.load(_save(_model([node], inputs=inputs), tmp_path))


def test_dangling_input(tmp_path):
    with pytest.raises(ModelError, match="'ghost', which no node"):
        lowbit.load(_save(_model([_ident("ghost", "y")]), tmp_path))


def test_cycle(tmp_path):
    nodes = [helper.make_node("Identity", ["b"], ["a"], name="first"),
             _ident("a", "b", "second"), _ident("a", "y", "third")]
    with pytest.raises(ModelError, match="cycle through nodes"):
        lowbit.load(_save(_model(nodes), tmp_path))


def test_duplicate_producer(tmp_path):
    nodes = [_ident("x", "y", "a"), _ident("x", "y", "b")]
    with pytest.raises(ModelError, match="produced twice"):
        lowbit.load(_save(_model(nodes), tmp_path))


def test_initializer_data_not_matching_shape(tmp_path):
    w = numpy_helper.from_array(np.zeros((2, 3), np.float32), "w")
    w.raw_data = w.raw_data[:-4]
    model = _model([_ident("w", "y")], inputs=[], inits=[w])
    with pytest.raises(ModelError, match=r"initializer 'w'.*does not match"):
        lowbit.load(_save(model, tmp_path))


def test_opset_newer_than_supported(tmp_path):
    from lowbit.frontends.onnx_import import MAX_OPSET

    model = _model([_ident()], opset=MAX_OPSET + 1)
    with pytest.raises(UnsupportedError, match=f"opset {MAX_OPSET + 1} is newer"):
        lowbit.load(_save(model, tmp_path))


@pytest.mark.parametrize("dims", [[1 << 40, 4], [1 << 20, 1 << 20, 1 << 20]])
def test_absurd_declared_dimensions(tmp_path, dims):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    with pytest.raises(ModelError, match="absurd"):
        lowbit.load(_save(_model([_ident()], inputs=inputs), tmp_path))


def test_minus_one_and_question_mark_dimensions_read_as_unknown(tmp_path):
    # PaddleOCR's classifier (through Paddle2ONNX) declares its input [-1, 3, "?", "?"]: two
    # "?" are two independent unknowns, not one named dimension
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])]
    graph = lowbit.load(_save(_model([_ident()], inputs=inputs), tmp_path))
    assert graph.inputs[0].type.shape == (None, 3, None, None)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 1, 4)
    np.testing.assert_array_equal(lowbit.run(graph, {"x": x})["y"], x)


@pytest.mark.parametrize("n", [-2, -7])
def test_other_negative_dimensions_refused(tmp_path, n):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3])]
    with pytest.raises(ModelError, match=f"dimension {n}, which is absurd"):
        lowbit.load(_save(_model([_ident()], inputs=inputs), tmp_path))


def test_absurd_initializer_dims(tmp_path):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 30, 1 << 30])
    with pytest.raises(ModelError, match="absurd"):
        lowbit.load(_save(_model([_ident("w", "y")], inputs=[], inits=[w]), tmp_path))


def test_unknown_attribute_refused(tmp_path):
    node = helper.make_node("Identity", ["x"], ["y"], name="id", flavour="spicy")
    with pytest.raises(ModelError, match=r"unknown attribute.*flavour"):
        lowbit.load(_save(_model([node]), tmp_path))


def _external_model(tmp_path, location):
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    w.external_data.add(key="offset", value="0")
    w.external_data.add(key="length", value="16")
    return _model([_ident("w", "y")], inputs=[], inits=[w])


def test_external_data_inside_folder_loads(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    g = lowbit.load(_save(_external_model(tmp_path, "w.bin"), tmp_path))
    out = lowbit.run(g, {})
    np.testing.assert_array_equal(out["y"], np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_folder_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    with pytest.raises(ModelError, match="outside the model's folder"):
        lowbit.load(_save(_external_model(tmp_path, location), folder))


def test_external_data_symlink_escaping_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    os.symlink(tmp_path / "secret.bin", folder / "link.bin")
    with pytest.raises(ModelError, match="outside the model's folder"):
        lowbit.load(_save(_external_model(tmp_path, "link.bin"), folder))


def test_external_data_truncated(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 8)
    with pytest.raises(ModelError, match="past the end"):
        lowbit.load(_save(_external_model(tmp_path, "w.bin"), tmp_path))


def test_save_is_atomic_and_round_trips(tmp_path):
    g = lowbit.load(_save(_model([_ident()]), tmp_path))
    out = tmp_path / "out.onnx"
    lowbit.save(g, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]
    onnx.checker.check_model(onnx.load(out))
    assert [n.op_type for n in lowbit.load(out).nodes] == ["Identity"]


def test_failed_save_leaves_nothing(tmp_path, monkeypatch):
    g = lowbit.load(_save(_model([_ident()]), tmp_path))

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(onnx, "save_model", boom)
    with pytest.raises(OSError):
        lowbit.save(g, tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
