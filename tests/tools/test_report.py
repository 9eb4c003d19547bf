"""lowbit compare --report: a self-contained HTML file whose numbers are the comparison's, whose
graph colours follow the SQNR scale, which lists the layers and says how to get Graphviz when
it is missing, and which headless Chromium renders with no console errors (a screenshot is
kept)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from shared_profiles import shared_profile

import lowbit
from lowbit.cli.demo import bundled
from lowbit.tools.report import GREY, sqnr_colour, write_report

MODEL = bundled("mnistnet.onnx")
ARTIFACTS = Path(__file__).resolve().parents[2] / ".cache" / "test-artifacts"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(MODEL)
    prof = shared_profile(graph, [{"input": x[i:i + 50]} for i in range(0, 200, 50)])
    quant = lowbit.quantize(graph, prof)
    comparison = lowbit.compare(graph, quant, [{"input": x[i:i + 50]}
                                               for i in range(200, 300, 50)], samples=5000)
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(comparison, graph, quant, path)
    return graph, quant, comparison, path.read_text(encoding="utf-8"), path


def test_the_file_is_self_contained(report):
    *_, text, _ = report
    assert re.findall(r'<img [^>]*src="(?!data:image/png;base64,)', text) == []
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "<script" not in text and "<link" not in text


def test_summary_names_the_worst_layers_in_order(report):
    _, _, comparison, text, _ = report
    table = text[text.index('<table id="worst">'):text.index("</table>")]
    named = re.findall(r"<tr><td>([^<]+)</td>", table)
    assert named == [html.escape(s.name) for s in comparison.worst_first()[:5]]
    worst = comparison.worst_first()[0]
    assert f"<td>{worst.sqnr:.2f}</td><td>{worst.own_sqnr:.2f}</td>" in table
    own = text[text.index('<table id="worst-own">'):]
    own = own[:own.index("</table>")]
    named = re.findall(r"<tr><td>([^<]+)</td>", own)
    assert named == [html.escape(s.name) for s in comparison.worst_first("own")[:5]]


def test_graph_has_every_node_coloured_by_its_sqnr(report):
    graph, _, comparison, text, _ = report
    svg = text[text.index("<svg"):text.index("</svg>")]
    nodes = re.findall(r'<g id="(n\d+)" class="node', svg)
    assert len(nodes) == sum(n.op_type != "Constant" for n in graph.nodes)
    by_value = {s.name: s for s in comparison.layers}
    layers = [n for n in graph.nodes if n.op_type != "Constant"]
    for nid, node in zip(sorted(nodes, key=lambda n: int(n[1:])), layers, strict=True):
        group = svg[svg.index(f'<g id="{nid}"'):]
        group = group[:group.index("</g>")]
        fill = re.search(r'<path fill="(#[0-9a-f]{6})"', group).group(1)
        stats = by_value.get(node.outputs[0].name)
        assert fill == (sqnr_colour(stats.sqnr) if stats else GREY), node.name
    assert sqnr_colour(5.0) == sqnr_colour(10.0) != sqnr_colour(25.0) != sqnr_colour(40.0)
    assert sqnr_colour(float("inf")) == sqnr_colour(60.0)


def test_histograms_draw_the_quantized_types_range(report):
    _, quant, comparison, text, _ = report
    types = {v.name: v.type for n in quant.nodes for v in n.outputs}
    shown = re.findall(r'<img class="histogram" id="histogram-\d+" alt="([^"]+)" src="[^"]+" '
                       r'data-lo="([^"]+)" data-hi="([^"]+)"', text)
    expected = [s.name for s in comparison.worst_first() if s.real_range][:5]
    assert [html.unescape(name) for name, _, _ in shown] == expected
    for name, lo, hi in shown:
        t = types[html.unescape(name)]
        want = t.quant.real_range(t.dtype)
        assert float(lo) == pytest.approx(want[0], rel=1e-8, abs=1e-12)
        assert float(hi) == pytest.approx(want[1], rel=1e-8)
    assert "precision: int8" in text[text.index('<pre id="config">'):]


def test_cli_without_dot_writes_every_table_and_plot_and_says_what_is_missing(tmp_path):
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(MODEL)
    prof = lowbit.profile(graph, [{"input": x[:100]}], progress=False)
    lowbit.save(lowbit.quantize(graph, prof), tmp_path / "q.onnx")
    np.save(tmp_path / "x.npy", x[300:340])
    bin_dir = tmp_path / "bin"  # a PATH without Graphviz
    bin_dir.mkdir()
    out = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "lowbit", "compare", str(MODEL),
                        str(tmp_path / "q.onnx"), "--data", str(tmp_path / "x.npy"),
                        "--report", str(out)],
                       capture_output=True, text=True,
                       env={**os.environ, "PATH": str(bin_dir)})
    assert r.returncode == 0, r.stderr
    assert "apt-get install graphviz" in r.stderr and "Graphviz" in r.stderr
    text = out.read_text(encoding="utf-8")
    assert "<svg" not in text and "apt-get install graphviz" in text
    for part in ('<table id="worst">', '<table id="worst-own">', 'id="sqnr-chart"',
                 'class="histogram"', '<pre id="config">'):
        assert part in text, part
    rows = re.findall(r'<tr style="background:(#[0-9a-f]{6})"><td>([^<]+)</td><td>([^<]+)</td>',
                      text[text.index('<table id="layers">'):])
    layers = [n for n in graph.nodes if n.op_type != "Constant"]
    assert [(op, name) for _, op, name in rows] == \
        [(n.op_type, html.escape(n.outputs[0].name)) for n in layers]
    assert {fill for fill, _, _ in rows} - {GREY}, "compared layers are coloured by SQNR"


def test_cli_writes_the_report(tmp_path):
    x = np.load(bundled("digits.npz"))["images"]
    graph = lowbit.load(MODEL)
    prof = lowbit.profile(graph, [{"input": x[:100]}], progress=False)
    lowbit.save(lowbit.quantize(graph, prof), tmp_path / "q.onnx", format="qdq")
    np.save(tmp_path / "x.npy", x[300:340])
    r = subprocess.run([sys.executable, "-m", "lowbit", "compare", str(MODEL),
                        str(tmp_path / "q.onnx"), "--data", str(tmp_path / "x.npy"), "--report",
                        str(tmp_path / "r.html")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<svg" in text and "calibration: mse" in text
    # The saved file's values come from QuantizeLinear nodes; the tables name the float op.
    table = text[text.index('<table id="worst">'):text.index("</table>")]
    ops = set(re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td>", table))
    assert ops and ops <= {n.op_type for n in graph.nodes}, ops


CHECK = """<script>window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.type)), true);
</script>"""
REPORT_BACK = """<script>window.addEventListener('load', () => {
  const images = [...document.images].map(i => [i.id, i.complete, i.naturalWidth]);
  const svg = document.querySelector('#graph svg');
  const box = svg ? svg.getBoundingClientRect() : null;
  document.body.setAttribute('data-check', JSON.stringify({images, errors: window.__errors,
    nodes: document.querySelectorAll('#graph g.node').length,
    svg: box ? [box.width, box.height] : null}));
});</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is installed by scripts/test"
    return subprocess.run([exe, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=120)


def test_chromium_renders_the_report_with_no_console_errors(report, tmp_path):
    graph, *_, text, path = report
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("<head>", "<head>" + CHECK, 1)
                     .replace("</body>", REPORT_BACK + "</body>", 1), encoding="utf-8")
    r = _chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'data-check="([^"]+)"', r.stdout)
    assert found, r.stdout[:500]
    check = json.loads(html.unescape(found.group(1)))
    assert check["errors"] == []
    assert len(check["images"]) >= 6  # the SQNR chart and five histograms
    assert all(complete and width > 0 for _, complete, width in check["images"])
    assert check["nodes"] == sum(n.op_type != "Constant" for n in graph.nodes) + len(graph.inputs)
    assert check["svg"][0] > 100 and check["svg"][1] > 100
    shot = tmp_path / "report.png"
    r = _chromium("--hide-scrollbars", "--window-size=1400,2600", f"--screenshot={shot}",
                  path.as_uri())
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line]
    assert r.returncode == 0 and console == [], console or r.stderr[-2000:]
    assert shot.stat().st_size > 20000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "report.png")
    print(f"screenshot: {ARTIFACTS / 'report.png'}")


def test_the_chromium_probe_sees_broken_images_and_script_errors(tmp_path):
    """The check above can fail: a broken image and a throwing script are both reported."""
    probe = tmp_path / "broken.html"
    probe.write_text(f"<html><head>{CHECK}</head><body><img id='bad' src='data:image/png;base64,"
                     f"AAAA'><script>notDefined()</script>{REPORT_BACK}</body></html>",
                     encoding="utf-8")
    r = _chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    check = json.loads(html.unescape(re.search(r'data-check="([^"]+)"', r.stdout).group(1)))
    assert check["images"] == [["bad", True, 0]]
    assert any("notDefined" in e for e in check["errors"])


def test_a_dynamic_models_report_draws_histograms_without_a_range(tmp_path):
    """Dynamic quantization has no fixed clipping range: the worst layers' histograms are drawn
    alone, and integer values (a Shape's result) are not compared."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(size=(16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(32, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["m"], name="second"),
             helper.make_node("Shape", ["m"], ["s"], name="shape"),
             helper.make_node("Reshape", ["m", "s"], ["y"], name="reshape")]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 5, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 5, 8]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [3])],
                          [w1, w2])
    import onnx

    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]),
              tmp_path / "mlp.onnx")
    graph = lowbit.load(tmp_path / "mlp.onnx")
    assert any(n.op_type == "Shape" for n in graph.nodes)
    quant = lowbit.quantize_dynamic(graph)
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    comparison = lowbit.compare(graph, quant, [{"x": x}], samples=1000)
    assert {s.name for s in comparison.layers} == {"r", "m", "y"}
    write_report(comparison, graph, quant, tmp_path / "r.html")
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "computed at run time (dynamic quantization)" in text
    shown = re.findall(r'<img class="histogram" id="histogram-\d+" alt="([^"]+)"', text)
    assert shown == [s.name for s in comparison.worst_first()]
    assert "data-lo=" not in text
