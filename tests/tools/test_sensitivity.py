"""lowbit.sensitivity and `lowbit compare --sensitivity`: each layer's figure is the outputs' SQNR
with that layer alone quantized, a layer given less precision ranks first, and the generated
config (keeping the most sensitive layers in higher precision) lowers the error."""

from __future__ import annotations

import html
import math
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quant_checks import float_outputs

import lowbit
from lowbit.cli.demo import bundled
from lowbit.errors import InputError
from lowbit.quant.config import NodeSettings, QuantConfig, Rule
from lowbit.quant.static import quantize

MODEL = bundled("mnistnet.onnx")


@pytest.fixture(scope="module")
def mnist(mnist_profiled):
    graph, prof, x = mnist_profiled
    return graph, prof, [{"input": x[i:i + 25]} for i in range(200, 250, 25)]


@pytest.fixture(scope="module")
def ranked_defaults(mnist):
    """The ranking with default settings, which three tests read (each call ranks every layer
    by quantizing and running the model once per layer)."""
    graph, prof, data = mnist
    return lowbit.sensitivity(graph, data, profile=prof, progress=False)




def _sqnr(graph, quant, data) -> float:
    signal = noise = 0.0
    for batch in data:
        f = np.concatenate([a.ravel() for a in float_outputs(graph, batch).values()])
        q = np.concatenate([a.ravel() for a in lowbit.run(quant, batch).values()])
        signal += float((f.astype(np.float64) ** 2).sum())
        noise += float(((q.astype(np.float64) - f) ** 2).sum())
    return 10 * math.log10(signal / noise)


def test_each_figure_is_the_output_sqnr_with_that_layer_alone_quantized(mnist, ranked_defaults):
    graph, prof, data = mnist
    ranked = ranked_defaults
    weighted = {n.name for n in graph.nodes if n.op_type in ("Conv", "Gemm")}
    assert weighted <= {s.name for s in ranked.layers}
    assert [s.sqnr for s in ranked.layers] == sorted(s.sqnr for s in ranked.layers)
    for layer in ranked.layers[:2] + ranked.layers[-1:]:
        alone = QuantConfig(NodeSettings(precision="float"),
                            (Rule(name=layer.name, precision="int8"),))
        # the layer's result is rounded as in the whole model (whose next layers read integers)
        q = quantize(graph, prof, alone, plan_config=QuantConfig()).graph
        quantized = [n.name for n in q.nodes if n.name in {m.name for m in graph.nodes}
                     and any(v.type.quant is not None for v in n.inputs + n.outputs if v)]
        assert quantized == [layer.name]
        node = next(n for n in q.nodes if n.name == layer.name)
        assert node.outputs[0].type.quant is not None or node.outputs[0] in q.outputs
        assert layer.sqnr == pytest.approx(_sqnr(graph, q, data), rel=1e-9)
    assert ranked.all_quantized_sqnr == pytest.approx(
        _sqnr(graph, lowbit.quantize(graph, prof), data), rel=1e-9)


def test_the_one_int8_layer_among_int16_ranks_first_and_the_config_raises_it(mnist):
    graph, prof, data = mnist
    convs = [n.name for n in graph.nodes if n.op_type == "Conv"]
    base = QuantConfig.from_dict({"default": {"precision": "int16", "weight_precision": "int16"},
                                  "rules": [{"name": convs[1], "precision": "int8",
                                             "weight_precision": "int8"}]})
    ranked = lowbit.sensitivity(graph, data, profile=prof, config=base, progress=False)
    assert ranked.layers[0].name == convs[1]
    assert ranked.layers[0].sqnr < ranked.layers[1].sqnr - 20
    raised = ranked.config(1)
    assert raised.rules[:1] == base.rules
    node = next(n for n in graph.nodes if n.name == convs[1])
    assert raised.settings_for(node).precision == "int16"
    assert raised.settings_for(node).weight_precision == "int16"
    before = _sqnr(graph, lowbit.quantize(graph, prof, base), data)
    after = _sqnr(graph, lowbit.quantize(graph, prof, raised), data)
    assert after > before + 20


def test_keeping_the_top_layers_of_defaults_lowers_the_error(mnist, ranked_defaults):
    graph, prof, data = mnist
    ranked = ranked_defaults
    errors = [_sqnr(graph, lowbit.quantize(graph, prof, ranked.config(top)), data)
              for top in (0, 2)]
    assert errors[0] == pytest.approx(ranked.all_quantized_sqnr, rel=1e-9)
    assert errors[1] > errors[0] + 1


def test_yaml_rules_paste_under_rules(mnist, ranked_defaults):
    graph, _, _ = mnist
    ranked = ranked_defaults
    snippet = ranked.yaml_rules(3)
    text = "rules:\n" + "".join(f"  {line}\n" for line in snippet.splitlines())
    config = QuantConfig.from_yaml_text(text)
    assert [r.name for r in config.rules] == [s.name for s in ranked.layers[:3]]
    assert all(r.precision == "int16" and r.weight_precision == "int16" for r in config.rules)
    assert config.check(graph) == []
    assert ranked.yaml_rules(0) == ""


def _mlp(path, rng):
    """x[B, S, 16] -> MatMul w1 -> Relu -> MatMul w2 -> y[B, S, 8]."""
    w1 = rng.normal(size=(16, 32)).astype(np.float32)
    w2 = rng.normal(size=(32, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="second")]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), path)


def test_dynamic_ranks_the_coarser_product_first_and_keeps_it_float(tmp_path):
    rng = np.random.default_rng(0)
    _mlp(tmp_path / "mlp.onnx", rng)
    graph = lowbit.load(tmp_path / "mlp.onnx")
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    x[..., 3] *= 20  # an outlier channel
    data = [{"x": x}]
    for coarse in ("first", "second"):  # 7-bit symmetric codes per tensor: about 6 bits
        base = QuantConfig(rules=(Rule(name=coarse, granularity="tensor", reduce_range=True,
                                       scheme="symmetric"),))
        ranked = lowbit.sensitivity(graph, data, config=base, dynamic=True, progress=False)
        assert ranked.mode == "dynamic" and ranked.layers[0].name == coarse
        assert len(ranked.layers) == 2
        keep = ranked.config(1)
        node = next(n for n in graph.nodes if n.name == coarse)
        assert keep.settings_for(node).precision == "float"
        q = lowbit.quantize_dynamic(graph, keep)
        assert {n.name for n in q.nodes if n.op_type == "MatMul"} == {coarse}
        assert _sqnr(graph, q, data) > _sqnr(graph, lowbit.quantize_dynamic(graph, base), data)


def test_bad_calls_are_refused(mnist):
    graph, prof, data = mnist
    with pytest.raises(InputError, match="needs the calibration profile"):
        lowbit.sensitivity(graph, data, progress=False)
    with pytest.raises(InputError, match="at least one batch"):
        lowbit.sensitivity(graph, [], profile=prof, progress=False)
    with pytest.raises(InputError, match="nothing to rank"):
        lowbit.sensitivity(graph, data, profile=prof, progress=False,
                           config=QuantConfig.from_dict({"default": {"precision": "float"}}))


def test_cli_writes_the_suggested_config(mnist, tmp_path):
    graph, prof, _ = mnist
    images = np.load(bundled("digits.npz"))["images"]
    prof.save(tmp_path / "profile.yaml")
    lowbit.save(lowbit.quantize(graph, prof), tmp_path / "q.onnx", format="qdq")
    np.save(tmp_path / "x.npy", images[300:340])
    out = tmp_path / "keep2.yaml"
    report = tmp_path / "r.html"
    cmd = [sys.executable, "-m", "lowbit", "compare", str(MODEL), str(tmp_path / "q.onnx"),
           "--data", str(tmp_path / "x.npy"), "--sensitivity", "--keep", "2",
           "--profile", str(tmp_path / "profile.yaml"), "--config-out", str(out)]
    # one ranking (the costly part) for both outputs: the config, and with --report the
    # ranking and the rules in the report too
    r = subprocess.run(cmd + ["--report", str(report)], capture_output=True, text=True,
                       env={"COLUMNS": "200", "PATH": ""})
    assert r.returncode == 0, r.stderr
    config = QuantConfig.from_yaml(out)
    expected = lowbit.sensitivity(graph, [{"input": images[300:340][i:i + 8]}
                                          for i in range(0, 40, 8)], profile=prof,
                                  progress=False)
    assert [rule.name for rule in config.rules] == [s.name for s in expected.layers[:2]]
    assert "paste under `rules:`" in r.stdout and f"- name: {expected.layers[0].name}" in r.stdout
    text = report.read_text(encoding="utf-8")
    table = text[text.index('<table id="sensitivity">'):]
    table = table[:table.index("</table>")]
    ranked = re.findall(r"<tr><td>\d+</td><td>([^<]+)</td>", table)
    assert ranked == [html.escape(s.name) for s in expected.layers]
    assert f'<pre id="keep-rules">{html.escape(expected.yaml_rules(2))}</pre>' in text
    r = subprocess.run(cmd[:8] + ["--config-out", str(tmp_path / "no.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "go with --sensitivity" in r.stderr
    assert not (tmp_path / "no.yaml").exists()
