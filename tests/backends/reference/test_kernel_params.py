"""The integer kernels' parameter functions (`integer_params`): what they return is what the
kernels compute with, and the zero-point correction form they offer a compiled backend gives
the same accumulators as the reference's centred operands."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.backends.reference.kernels import all_params, integer_params
from lowbit.backends.reference.kernels.int_linear import LinearParams, matmul_exact
from lowbit.backends.reference.windows import conv_nd
from lowbit.cli.demo import bundled
from lowbit.ops.conv_geometry import window_from_attrs
from lowbit.ops.product import product_of
from lowbit.ops.registry import TABLE, all_ops


@pytest.fixture(scope="module")
def asymmetric_mnist():
    """MNISTNet with asymmetric weights (non-zero weight zero points), its node inputs' arrays
    on 3 digits."""
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(bundled("mnistnet.onnx"))
    prof = lowbit.profile(graph, [{"input": x[:100]}], progress=False)
    q = lowbit.quantize(graph, prof, lowbit.QuantConfig.from_dict(
        {"default": {"weight_scheme": "asymmetric"}}))
    q = lowbit.backends.lowering.fold_quantized_constants(q)
    values: dict[str, np.ndarray] = {"input": x[200:203]}

    def keep(node, outputs):
        values.update({v.name: a for v, a in zip(node.outputs, outputs, strict=False)})

    Interpreter(q, [keep])({"input": x[200:203]})
    for node in q.nodes:
        if node.op_type == "Constant":
            values[node.output.name] = node.output.const_value
    return q, values


def test_every_op_with_an_integer_kernel_has_a_parameter_function():
    from lowbit.backends.reference.kernels import all_kernels

    with_params = set(all_params())
    integer = {(d, t) for (d, t, quantized) in all_kernels() if quantized}
    assert integer <= with_params
    tables = {(d, t) for (d, t), op in all_ops().items() if op.quant_rule == TABLE}
    assert tables <= with_params


def test_zero_point_correction_gives_the_reference_accumulator(asymmetric_mnist):
    """acc = sum x (w - z_w) + b - z_x * weight_sums, with the Conv's input padded by z_x,
    equals the reference's sum (x - z_x)(w - z_w) + b on every product of the model."""
    q, values = asymmetric_mnist
    checked = 0
    for node in q.nodes:
        if node.op_type not in ("Conv", "Gemm"):
            continue
        inputs = [values[v.name] for v in node.inputs]
        p = integer_params(node, inputs)
        assert isinstance(p, LinearParams)
        assert np.any(p.weight_zero != 0)
        x, w, b = (a.astype(np.int64) for a in inputs)
        geometry = product_of(node)
        shape = [1] * w.ndim
        shape[geometry.weight_channel_axis] = -1
        wc = w - p.weight_zero.reshape(shape)
        if geometry.windowed:
            window = window_from_attrs(node, w.shape[2:], x.ndim - 2)
            centred = conv_nd(x - p.input_zero, wc, window, 1)
            corrected = conv_nd(x, wc, window, 1, pad_value=p.input_zero) \
                - p.input_zero * p.weight_sums.reshape(1, -1, 1, 1)
            b = b.reshape(1, -1, 1, 1)
        else:
            centred = matmul_exact(*geometry.operands(x - p.input_zero, wc))
            corrected = matmul_exact(*geometry.operands(x, wc)) - p.input_zero * p.weight_sums
        assert np.array_equal(centred + b, corrected + b), node.name
        assert p.reduction_size == geometry.reduction_size(w.shape)
        checked += 1
    assert checked == 4
