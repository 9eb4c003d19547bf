"""lowbit.compare and `lowbit compare`: per-layer numbers equal independent numpy computations,
identical graphs are lossless, and a layer given less precision stands out."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import lowbit
from lowbit.backends.reference.interpreter import Interpreter
from lowbit.cli.demo import bundled
from lowbit.errors import InputError
from lowbit.quant.config import QuantConfig

MODEL = bundled("mnistnet.onnx")


@pytest.fixture(scope="module")
def mnist(mnist_profiled):
    graph, prof, x = mnist_profiled
    return graph, prof, [{"input": x[i:i + 20]} for i in range(200, 260, 20)]


@pytest.fixture(scope="module")
def compared(mnist):
    """MNISTNet quantized with the defaults, and lowbit.compare of it against the float model
    on the three batches (read, never changed, by the tests that use it)."""
    graph, prof, data = mnist
    q = lowbit.quantize(graph, prof)
    return q, lowbit.compare(graph, q, data)


def _values(graph, batch):
    store = {}

    def keep(node, outputs):
        for v, a in zip(node.outputs, outputs, strict=False):
            store[v.name] = (v, np.asarray(a))

    Interpreter(graph, [keep])(batch)
    return store


def test_identical_graphs_are_lossless(mnist):
    graph, _, data = mnist
    result = lowbit.compare(graph, graph, data[:1])
    assert len(result.layers) == sum(n.op_type != "Constant" for n in graph.nodes)
    assert all(s.sqnr == math.inf and s.cosine == pytest.approx(1.0) and s.max_abs == 0
               and s.own_sqnr == math.inf for s in result.layers)


def test_numbers_equal_numpy(mnist, compared):
    graph, _, data = mnist
    q, result = compared
    by_name = {s.name: s for s in result.layers}
    assert result.worst_first()[0].sqnr == min(s.sqnr for s in result.layers)
    runs = [(_values(graph, batch), _values(q, batch)) for batch in data]  # once per batch
    for name, layer in by_name.items():
        f_all, q_all, codes_all = [], [], []
        for float_values, quantized_values in runs:
            fv, qv = float_values[name][1], quantized_values[name]
            value, codes = qv
            qp = value.type.quant
            f_all.append(fv.astype(np.float64).ravel())
            if qp is None:
                q_all.append(codes.astype(np.float64).ravel())
                continue
            shape = [1] * codes.ndim
            if qp.axis is not None:
                shape[qp.axis] = -1
            scale = np.asarray(qp.scale, np.float64).reshape(shape)
            zero = np.asarray(qp.zero_point, np.float64).reshape(shape)
            q_all.append(((codes - zero) * scale).ravel())
            codes_all.append(codes.ravel().astype(np.int64))
        f, g = np.concatenate(f_all), np.concatenate(q_all)
        assert layer.sqnr == pytest.approx(10 * np.log10((f ** 2).sum() / ((g - f) ** 2).sum()))
        assert layer.cosine == pytest.approx(f @ g / np.linalg.norm(f) / np.linalg.norm(g))
        assert layer.max_abs == pytest.approx(np.abs(g - f).max())
        if codes_all:
            c = np.concatenate(codes_all)
            dtype = value.type.dtype
            assert layer.range_use == pytest.approx((c.max() - c.min()) / (dtype.qmax -
                                                                            dtype.qmin))
            if qp.axis is None:
                assert layer.steps == pytest.approx(np.abs(g - f).mean() / float(qp.scale))
    assert any(s.range_use is not None for s in result.layers)


def test_the_one_int8_layer_among_int16_stands_out(mnist):
    graph, prof, data = mnist
    convs = [n.name for n in graph.nodes if n.op_type == "Conv"]
    config = QuantConfig.from_dict({"default": {"precision": "int16",
                                                "weight_precision": "int16"},
                                    "rules": [{"name": convs[1], "precision": "int8",
                                               "weight_precision": "int8"}]})
    result = lowbit.compare(graph, lowbit.quantize(graph, prof, config), data)
    order = [s.name for s in result.layers]
    target = next(n for n in graph.nodes if n.name == convs[1]).outputs[0].name
    at = order.index(target)
    upstream = result.layers[:at]
    assert upstream and min(s.sqnr for s in upstream) > 60
    assert result.layers[at].sqnr < 45
    assert result.worst_first()[0].name in order[at:]
    assert result.worst_first()[0].sqnr <= result.layers[at].sqnr
    # every later layer carries its error (its SQNR is below its own); own error singles it
    # out, and the int16 products after it lose far less by themselves
    downstream = result.layers[at + 1:]
    assert downstream and all(s.sqnr < s.own_sqnr for s in downstream)
    assert result.worst_first("own")[0].name == target
    products = [s for s in downstream if s.op_type == "Gemm"]
    assert products and min(s.own_sqnr for s in products) > result.layers[at].own_sqnr + 8


def test_own_error_is_the_layer_run_on_the_float_models_values(mnist, compared):
    """A layer's own error equals its node run on the float model's input value, quantized to
    the input's type."""
    from lowbit.numerics import arith

    graph, _, data = mnist
    q, result = compared
    alone = q.copy()  # the conv reads a new input instead of the layers before it
    conv = next(n for n in alone.nodes
                if n.op_type == "Conv" and n.name.endswith("features.3/Conv"))
    x = conv.inputs[0]
    conv.inputs[0] = alone.add_input("x_alone", x.type)
    alone.outputs.append(conv.outputs[0])
    signal = noise = 0.0
    for batch in data:
        float_values = _values(graph, batch)
        f_x = float_values[x.name][1]
        got = lowbit.run(alone, {**batch, "x_alone": arith.quantize(f_x, x.type)})
        f = float_values[conv.outputs[0].name][1].astype(np.float64)
        d = arith.dequantize(got[conv.outputs[0].name], conv.outputs[0].type) - f
        signal += float((f * f).sum())
        noise += float((d * d).sum())
    layer = next(s for s in result.layers if s.name == conv.outputs[0].name)
    assert layer.own_sqnr == pytest.approx(10 * math.log10(signal / noise), rel=1e-6)
    assert layer.own_sqnr > layer.sqnr
    assert lowbit.compare(graph, q, data, own=False).layers[0].own_sqnr is None


@pytest.mark.parametrize("form", ["QDQ", "QOperator"])
def test_onnx_runtime_files_match_every_layer(mnist, tmp_path, form):
    """ONNX Runtime's quantize_static drops each Relu (the output range does the clamp). In QDQ
    it keeps the Relu's name on the Conv's float result: compare follows it through the
    QuantizeLinear, which the next layers read, instead of comparing a pre-Relu tensor. In
    QOperator it names the QLinearConv's result after the Conv's (`<name>_quantized`), a name
    the float graph fused away: compare finds the Relu output that replaced it."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    graph, _, batches = mnist
    x = np.load(bundled("digits.npz"))["images"]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"input": x[i:i + 50]} for i in range(0, 200, 50)])

        def get_next(self):
            return next(self.batches, None)

    path = tmp_path / "ort.onnx"
    quantize_static(str(MODEL), str(path), Reader(), quant_format=getattr(QuantFormat, form),
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    ort_graph = lowbit.load(path)
    relus = [n.outputs[0].name for n in graph.nodes if "Relu" in n.outputs[0].name]
    assert relus and not any(n.op_type == "Relu" for n in ort_graph.nodes)
    result = lowbit.compare(graph, ort_graph, batches)
    by_name = {s.name: s for s in result.layers}
    for name in relus:
        s = by_name[name]
        assert s.type_text.startswith(("u8[S:", "i8[S:")) and s.range_use is not None
        assert s.sqnr > 30, (name, s.sqnr)  # a pre-Relu tensor measured below 0 dB
    assert all(s.sqnr > 25 for s in result.layers), result.worst_first()[0]
    assert len(result.layers) == len(relus) + 4  # two MaxPools, the Flatten, the logits


def test_graphs_with_nothing_in_common_or_no_data_are_refused(mnist):
    graph, _, data = mnist
    with pytest.raises(InputError, match="at least one batch"):
        lowbit.compare(graph, graph, [])
    other = lowbit.load(MODEL)
    for node in other.nodes:
        for v in node.outputs:
            v.name = "other_" + v.name
    with pytest.raises(InputError, match="share no value names"):
        lowbit.compare(graph, other, data[:1])
    with pytest.raises(InputError, match="'sqnr' or 'own'"):
        lowbit.compare(graph, graph, data[:1]).worst_first("cosine")


def test_cli_compares_a_saved_quantized_model(mnist, tmp_path):
    graph, prof, _ = mnist
    lowbit.save(lowbit.quantize(graph, prof), tmp_path / "q.onnx", format="qdq")
    np.save(tmp_path / "x.npy", np.load(bundled("digits.npz"))["images"][300:340])
    cmd = [sys.executable, "-m", "lowbit", "compare", str(MODEL), str(tmp_path / "q.onnx"),
           "--data", str(tmp_path / "x.npy"), "--top", "3"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={"PATH": ""})
    assert r.returncode == 0, r.stderr
    # piped output: one line per layer, not rich's 80 columns folding every cell
    rows = [line for line in r.stdout.splitlines() if line.startswith("│ ")]
    assert "SQNR dB" in r.stdout and len(rows) == 3
    # the saved model stores activations as uint8 (code + 128), ONNX Runtime's fast path; its
    # values come from QuantizeLinear nodes, and the table names the float op computing them
    float_ops = {n.op_type for n in graph.nodes}
    for row in rows:
        op = row.split("│")[2].strip()
        assert op in float_ops and " u8[S:" in row, row
    r = subprocess.run(cmd + ["--sort", "own"], capture_output=True, text=True,
                       env={"PATH": ""})
    assert r.returncode == 0 and "worst own SQNR first" in r.stdout, r.stderr
    own = [float(line.split("│")[5]) for line in r.stdout.splitlines() if line.startswith("│ ")]
    assert len(own) == 3 and own == sorted(own)
    r = subprocess.run(cmd[:5] + [str(tmp_path / "missing.onnx"), "--data",
                                  str(tmp_path / "x.npy")], capture_output=True, text=True)
    assert r.returncode == 1 and "missing.onnx" in r.stderr and "Traceback" not in r.stderr
