"""The printed forms engineers read when debugging."""

from __future__ import annotations

import numpy as np

from lowbit.ir import Graph, QuantParams, TensorType, dtypes, format_type


def test_per_tensor_quantized_type():
    t = TensorType(dtypes.INT8, (1, 56, 56, 64), QuantParams(0.0255, -128))
    assert format_type(t) == "i8[S:0.025500000 O:-128][0.000,6.502]<1 x 56 x 56 x 64>"


def test_per_channel_type_shows_axis_and_scale_range():
    t = TensorType(dtypes.INT8, (3, 2), QuantParams([0.5, 0.25, 0.125], 0, axis=0))
    assert format_type(t) == "i8[axis:0 S:0.125000000..0.500000000 O:0][-64.000,63.500]<3 x 2>"


def test_per_channel_zero_point_range():
    t = TensorType(dtypes.UINT8, (2,), QuantParams([1.0, 1.0], [3, 7], axis=0))
    assert "O:3..7" in format_type(t)


def test_float_symbolic_and_unknown_dims():
    assert format_type(TensorType(dtypes.FLOAT32, ("batch", None, 384))) == "f32<batch x ? x 384>"
    assert format_type(TensorType(dtypes.FLOAT16, None)) == "f16<*>"
    assert format_type(TensorType(dtypes.INT64, ())) == "i64<>"


def test_graph_listing_hides_constants_by_default():
    g = Graph("tiny")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, ("n", 2)))
    w = g.add_constant(np.ones(2, np.float32), "w")
    node = g.make_node("Identity", [x], name="id", output_types=[x.type])
    g.outputs = [node.output]
    text = str(g)
    assert "input %x: f32<n x 2>" in text
    assert "= Identity(%x)  # id" in text
    assert "Constant" not in text
    assert w.name == "w"
