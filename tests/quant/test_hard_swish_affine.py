"""The quantizer folds the scalar Mul and Add after a quantized HardSwish (PP-LCNetV3's
learnable affine) into it (`fold_hard_swish_affine`), and the quantized HardSwish is defined
by a float32 formula on codes (`int_activation.HardSwishParams`): its codes are the real
function's rounded to nearest, within float32's error, and ONNX Runtime runs the QDQ export
(the Mul and Add written back) to the same values."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from test_equalization import _block, _data

import lowbit
from lowbit.backends.reference.kernels import integer_params
from lowbit.ir import dtypes
from lowbit.ir.attrs import AFFINE
from lowbit.ir.types import QuantParams, TensorType
from lowbit.quant.static import quantize


def _exact_codes(node, q: np.ndarray) -> np.ndarray:
    """The real a * HardSwish(x) + b of each code, in float64, in output codes (unrounded)."""
    tx, ty = node.inputs[0].type, node.outputs[0].type
    a, b = node.attrs.get(AFFINE) or (1.0, 0.0)
    x = float(tx.quant.scale) * (q - int(tx.quant.zero_point))
    y = a * x * np.clip(x / 6 + 0.5, 0, 1) + b
    return y / float(ty.quant.scale) + int(ty.quant.zero_point)


def test_learnable_affine_folds_into_the_hard_swish():
    graph = _block(1.0, False)
    q = quantize(graph, lowbit.profile(graph, _data(6), progress=False)).graph
    ops = [n.op_type for n in q.nodes]
    assert "Add" not in ops and ops.count("Mul") == 0, ops
    hs = next(n for n in q.nodes if n.op_type == "HardSwish")
    assert hs.outputs[0].name == "z"  # the chain's last value, read by conv2
    assert np.allclose(hs.attrs[AFFINE], [0.7, 0.1], rtol=1e-6)
    test = _data(4)
    ref = np.concatenate([lowbit.run(graph, x)["y"] for x in test])
    got = np.concatenate([lowbit.run(q, x)["y"] for x in test])
    sqnr = 10 * np.log10((ref ** 2).sum() / ((got - ref) ** 2).sum())
    assert sqnr >= 25, sqnr


def _hard_swish(tx: TensorType, ty: TensorType, affine: list[float] | None):
    g = lowbit.Graph("hs")
    x = g.add_input("x", tx)
    node = g.make_node("HardSwish", [x], {AFFINE: affine} if affine else {})
    node.output.type = ty
    return node


def test_codes_are_the_real_function_rounded_to_nearest():
    rng = np.random.default_rng(0)
    for case in range(12):
        xdt = [dtypes.INT8, dtypes.UINT8, dtypes.INT16][case % 3]
        ydt = [dtypes.INT8, dtypes.UINT8, dtypes.INT16, dtypes.UINT16][case % 4]
        zx = 0 if xdt == dtypes.INT16 else int(rng.integers(xdt.qmin, xdt.qmax + 1))
        tx = TensorType(xdt, (4,), QuantParams(float(2.0 ** rng.uniform(-12, -2)), zx))
        affine = None if case < 3 else [float(rng.choice([-1, 1]) * rng.uniform(0.1, 4)),
                                        float(rng.uniform(-2, 2))]
        reach = 8 * float(tx.quant.scale) * (xdt.qmax - xdt.qmin)
        ty = TensorType(ydt, (4,), QuantParams(reach / (ydt.qmax - ydt.qmin),
                                               int(rng.integers(ydt.qmin, ydt.qmax + 1))))
        node = _hard_swish(tx, ty, affine)
        p = integer_params(node, [np.zeros(4, xdt.np_dtype)])
        codes = np.arange(xdt.qmin, xdt.qmax + 1)
        exact = np.clip(_exact_codes(node, codes), ydt.qmin, ydt.qmax)
        got = p.table[codes - p.offset].astype(np.float64)
        assert np.abs(got - exact).max() <= 0.5 + 1e-3, (case, np.abs(got - exact).max())
        assert np.mean(got == np.clip(np.round(exact), ydt.qmin, ydt.qmax)) >= 0.999


def test_onnxruntime_runs_the_folded_affine_as_a_mul_and_an_add(tmp_path):
    graph = _block(1.0, False)
    q = quantize(graph, lowbit.profile(graph, _data(6), progress=False)).graph
    lowbit.save(q, tmp_path / "q.onnx", format="qdq")
    test = _data(4)
    sess = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    theirs = np.concatenate([sess.run(None, x)[0] for x in test])
    ours = np.concatenate([lowbit.run(q, x)["y"] for x in test])
    ref = np.concatenate([lowbit.run(graph, x)["y"] for x in test])
    # within a small part of the quantization error itself
    assert np.sqrt(np.mean((theirs - ours) ** 2)) <= 0.25 * np.sqrt(np.mean((ref - ours) ** 2))
