"""`lowbit compare --report report.html`: one self-contained HTML file (no external resource;
charts are inline base64 PNG, the graph inline SVG) with

- the summary: both models, the number of compared layers, the outputs' SQNR, the worst layers
  by SQNR and by own SQNR (lowbit.tools.compare);
- the SQNR of every layer in graph order (matplotlib bar chart, worst layers in red, own SQNR
  as dots);
- for the `histograms` worst quantized layers, the histogram of their float values (compare's
  `samples`) with the clipping range their quantized type represents drawn on, and the share
  of values beyond it (a dynamically quantized model has no fixed range: the worst layers'
  histograms alone);
- the float graph drawn by Graphviz `dot` as SVG, each node filled by the SQNR of its output
  (colour scale below) and labelled with its op type, its value's name and the compared
  value's printed type; without Graphviz, the same nodes as a table in graph order, coloured
  alike, and a note saying how to install Graphviz (`write_report` returns the note);
- with a sensitivity ranking (`lowbit compare --report --sensitivity`), the ranking and the
  rules keeping the most sensitive layers in higher precision;
- the QuantConfig YAML the quantized model records (`lowbit.quant_config` metadata).

Colour of a node: hue = 120 * clamp((SQNR - 10) / 30, 0, 1) degrees in HSL (red at 10 dB and
below, green at 40 dB and above, infinite SQNR green); grey when the node has no compared
output.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import shutil
import subprocess

import numpy as np

from lowbit.errors import LowbitError
from lowbit.fileio import write_atomically
from lowbit.ir.graph import Graph
from lowbit.ir.types import format_type
from lowbit.tools.compare import Comparison, LayerStats
from lowbit.tools.sensitivity import Sensitivity

GREY = "#d0d0d0"
SQNR_RED, SQNR_GREEN = 10.0, 40.0


MISSING_DOT = ("the graph drawing needs Graphviz `dot`, which is not on PATH; install it "
               "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; conda: "
               "conda install graphviz) and run again to get it. The report lists the layers in "
               "graph order instead.")


class ReportError(LowbitError):
    """The report cannot be made (Graphviz `dot` failed or timed out)."""


def sqnr_colour(sqnr: float | None) -> str:
    """The fill colour of a node whose output has this SQNR (module docstring)."""
    if sqnr is None or math.isnan(sqnr):
        return GREY
    t = 1.0 if sqnr == math.inf else min(1.0, max(0.0, (sqnr - SQNR_RED) /
                                                  (SQNR_GREEN - SQNR_RED)))
    return _hsl_hex(120.0 * t, 0.75, 0.62)


def _hsl_hex(hue: float, sat: float, light: float) -> str:
    c = (1 - abs(2 * light - 1)) * sat
    x = c * (1 - abs((hue / 60) % 2 - 1))
    m = light - c / 2
    r, g, b = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][int(hue // 60) % 6]
    return "#" + "".join(f"{round((v + m) * 255):02x}" for v in (r, g, b))


def find_dot() -> str | None:
    """The path of Graphviz `dot`, or None when it is not on PATH."""
    return shutil.which("dot")


def write_report(comparison: Comparison, float_graph: Graph, quant_graph: Graph,
                 path: str | os.PathLike, *, title: str = "lowbit quantization report",
                 histograms: int = 5, sensitivity: Sensitivity | None = None,
                 keep: int = 3) -> list[str]:
    """Write the report (module docstring) to `path`, atomically: on any error no file is
    left. With `sensitivity`, also its ranking and the rules keeping the `keep` most sensitive
    layers in higher precision. Returns what the report had to leave out and why (the graph
    drawing when Graphviz `dot` is missing), the same notes the page shows."""
    dot = find_dot()
    notes = [] if dot is not None else [MISSING_DOT]
    by_value = {s.name: s for s in comparison.layers}
    worst = comparison.worst_first()
    outputs = [by_value[v.name] for v in float_graph.outputs if v.name in by_value]
    parts = [
        _summary(comparison, float_graph, quant_graph, outputs, worst[:5], title),
        "<h2>SQNR per layer</h2>",
        f'<img id="sqnr-chart" alt="SQNR per layer" src="{_sqnr_chart(comparison)}">',
        *_worst_histograms(worst, histograms),
        "<h2>Graph, coloured by SQNR</h2>",
        _legend(),
        f'<div id="graph">{_graph_svg(float_graph, quant_graph, by_value, dot)}</div>'
        if dot is not None else _layer_list(float_graph, quant_graph, by_value),
        *(_sensitivity_section(sensitivity, keep) if sensitivity is not None else ()),
        "<h2>QuantConfig</h2>",
        f'<pre id="config">{html.escape(_config_text(quant_graph))}</pre>',
    ]
    text = _page(title, "\n".join(parts))
    write_atomically(path, text.encode("utf-8"))
    return notes


# -- sections ---------------------------------------------------------------------------------


def _summary(comparison: Comparison, float_graph: Graph, quant_graph: Graph,
             outputs: list[LayerStats], worst: list[LayerStats], title: str) -> str:
    out = ", ".join(f"{html.escape(s.name)} {_db(s.sqnr)} dB" for s in outputs) or "-"
    text = (f"<h1>{html.escape(title)}</h1>"
            f"<p>float model <b>{html.escape(float_graph.metadata.get('source', float_graph.name))}"
            f"</b>, quantized model <b>"
            f"{html.escape(quant_graph.metadata.get('source', quant_graph.name))}</b></p>"
            f"<p>{len(comparison.layers)} layers compared; outputs: {out}</p>"
            f"{_layer_table('worst', 'worst layers', worst)}")
    if any(s.own_sqnr is not None for s in comparison.layers):
        text += ("<p>SQNR: all the error up to a layer. Own SQNR: what the layer loses itself, "
                 "its inputs the float model's values in their quantized types.</p>"
                 + _layer_table("worst-own", "worst own SQNR",
                                comparison.worst_first("own")[:len(worst)]))
    return text


def _layer_table(table_id: str, heading: str, layers: list[LayerStats]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{html.escape(s.op_type)}</td>"
        f"<td><code>{html.escape(s.type_text)}</code></td><td>{_db(s.sqnr)}</td>"
        f"<td>{'-' if s.own_sqnr is None else _db(s.own_sqnr)}</td>"
        f"<td>{s.cosine:.6f}</td><td>{_pct(s.clipped_share)}</td><td>{_pct(s.range_use)}</td>"
        f"</tr>" for s in layers)
    return (f'<table id="{table_id}"><tr><th>{heading}</th><th>op</th><th>type</th>'
            f"<th>SQNR dB</th><th>own SQNR dB</th><th>cosine</th><th>clipped</th>"
            f"<th>range use</th></tr>{rows}</table>")


def _sensitivity_section(ranked: Sensitivity, keep: int) -> list[str]:
    rows = "".join(f"<tr><td>{i}</td><td>{html.escape(s.name)}</td>"
                   f"<td>{html.escape(s.op_type)}</td><td>{_db(s.sqnr)}</td>"
                   f"<td>{s.cosine:.6f}</td></tr>"
                   for i, s in enumerate(ranked.layers, 1))
    snippet = ranked.yaml_rules(keep)
    return ["<h2>Sensitivity: each layer quantized alone</h2>",
            f"<p>{ranked.mode} quantization, one layer at a time with this model's config, the "
            f"rest float; the outputs' SQNR with every layer quantized: "
            f"{_db(ranked.all_quantized_sqnr)} dB.</p>",
            '<table id="sensitivity"><tr><th>rank</th><th>layer</th><th>op</th>'
            f"<th>output SQNR dB</th><th>output cosine</th></tr>{rows}</table>",
            f"<p>Rules keeping the {min(keep, len(ranked.layers))} most sensitive layers in "
            f"higher precision (paste under <code>rules:</code>):</p>"
            f'<pre id="keep-rules">{html.escape(snippet or "(none)")}</pre>']


def _sqnr_chart(comparison: Comparison) -> str:
    plt = _pyplot()
    layers = comparison.layers
    finite = [s.sqnr for s in layers if math.isfinite(s.sqnr)]
    top = (max(finite) if finite else 60.0) + 5
    values = [min(s.sqnr, top) if s.sqnr != -math.inf else 0.0 for s in layers]
    worst = {s.name for s in comparison.worst_first()[:5]}
    fig, ax = plt.subplots(figsize=(12, 3.2), dpi=100)
    ax.bar(range(len(layers)), values, color=["#d62728" if s.name in worst else "#4c72b0"
                                              for s in layers], label="SQNR")
    own = [(i, min(s.own_sqnr, top)) for i, s in enumerate(layers)
           if s.own_sqnr is not None and s.own_sqnr != -math.inf]
    if own:
        ax.plot([i for i, _ in own], [v for _, v in own], "k.", markersize=4,
                label="own SQNR (the layer's own error)")
        ax.legend(loc="upper left", ncol=2, fontsize=8)
    for i, s in enumerate(layers):
        if s.name in worst:
            ax.annotate(s.name, (i, values[i]), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8, rotation=90, color="#d62728")
    ax.set_ylim(0, top + 0.25 * top)
    ax.set_xlabel("layer (graph order); red: the 5 worst, named")
    ax.set_ylabel("SQNR (dB)")
    ax.set_xlim(-1, max(len(layers), 1))
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _worst_histograms(worst: list[LayerStats], count: int) -> list[str]:
    """The heading and histograms of the `count` worst layers whose type has a clipping range;
    when none has one (dynamic quantization: ranges computed at run time), of the `count` worst
    layers with samples, without a range."""
    ranged = [s for s in worst if s.sample is not None and s.real_range][:count]
    if ranged or not any(s.sample is not None for s in worst):
        return ["<h2>Worst layers: float values and the clipping range</h2>", _histograms(ranged)]
    return ["<h2>Worst layers: float values</h2><p>No fixed clipping range: this model's "
            "activation ranges are computed at run time (dynamic quantization).</p>",
            _histograms([s for s in worst if s.sample is not None][:count])]


def _histograms(layers: list[LayerStats]) -> str:
    if not layers:
        return "<p>no compared layer kept samples</p>"
    plt = _pyplot()
    items = []
    for i, s in enumerate(layers):
        data = s.sample.astype(np.float64)
        fig, ax = plt.subplots(figsize=(6, 2.6), dpi=100)
        ax.set_title(f"{s.name}  ({_db(s.sqnr)} dB)", fontsize=9)
        if s.real_range is None:
            ax.hist(data, bins=120, color="#4c72b0", log=True)
            ax.set_xlabel("float value", fontsize=8)
            attrs = ""
            caption = f"float values from {data.min():.6g} to {data.max():.6g}"
        else:
            lo, hi = s.real_range
            beyond = float(((data < lo) | (data > hi)).mean())
            ax.hist(data, bins=120, range=(min(lo, data.min()), max(hi, data.max())),
                    color="#4c72b0", log=True)
            for x in (lo, hi):
                ax.axvline(x, color="#d62728", linewidth=1.5)
            ax.set_xlabel("float value; red: clipping range of the quantized type", fontsize=8)
            attrs = f' data-lo="{lo:.9g}" data-hi="{hi:.9g}"'
            caption = (f"clipping range [{lo:.6g}, {hi:.6g}], {beyond:.3%} of the sampled "
                       f"values beyond it")
        items.append(f'<figure><img class="histogram" id="histogram-{i}" alt="{html.escape(s.name)}'
                     f'" src="{_png(fig)}"{attrs}><figcaption>{html.escape(s.name)}: {caption}'
                     f"</figcaption></figure>")
    return "".join(items)


def _legend() -> str:
    stops = [10, 15, 20, 25, 30, 35, 40]
    cells = "".join(f'<span style="background:{sqnr_colour(v)}">{v} dB</span>' for v in stops)
    return (f'<p class="legend">{cells}<span style="background:{GREY}">not compared</span>'
            f"</p>")


def _layer_list(float_graph: Graph, quant_graph: Graph, by_value: dict[str, LayerStats]) -> str:
    """The graph's nodes as a table in graph order (what the drawing shows, without Graphviz):
    op, output value, its inputs, the compared type and SQNR, the row filled like the node."""
    rows = []
    for node, out, shown, stats in _graph_nodes(float_graph, quant_graph, by_value):
        ins = ", ".join(html.escape(v.name) for v in node.inputs
                        if v is not None and not v.is_constant)
        rows.append(f'<tr style="background:{sqnr_colour(stats.sqnr if stats else None)}">'
                    f"<td>{html.escape(node.op_type)}</td><td>{html.escape(out.name)}</td>"
                    f"<td>{ins}</td><td><code>{html.escape(shown)}</code></td>"
                    f"<td>{_db(stats.sqnr) if stats else '-'}</td></tr>")
    return (f'<p class="note" id="graph-missing">{html.escape(MISSING_DOT)}</p>'
            f'<table id="layers"><tr><th>op</th><th>value</th><th>inputs</th><th>type</th>'
            f"<th>SQNR dB</th></tr>{''.join(rows)}</table>")


def _graph_nodes(float_graph: Graph, quant_graph: Graph, by_value: dict[str, LayerStats]):
    """(node, output value, printed compared type, stats or None) of each non-constant node of
    the float graph, in graph order."""
    quant_types = {v.name: v.type for n in quant_graph.nodes for v in n.outputs}
    for node in float_graph.nodes:
        if node.op_type == "Constant":
            continue
        out = node.outputs[0]
        stats = by_value.get(out.name)
        shown = stats.type_text if stats is not None \
            else format_type(quant_types.get(out.name, out.type))
        yield node, out, shown, stats


def _graph_svg(float_graph: Graph, quant_graph: Graph, by_value: dict[str, LayerStats],
               dot: str) -> str:
    lines = ["digraph G {", 'graph [rankdir=TB, fontname="Helvetica"];',
             'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];']
    ids: dict[str, str] = {}
    producer: dict[str, str] = {}
    for i, (node, out, shown, stats) in enumerate(_graph_nodes(float_graph, quant_graph,
                                                                by_value)):
        nid = f"n{i}"
        ids[node.name] = nid
        sqnr = f"\\n{_db(stats.sqnr)} dB" if stats is not None else ""
        label = f"{_dot(node.op_type)} {_dot(out.name)}\\n{_dot(shown)}{sqnr}"
        tooltip = _dot(f"{node.name}: {out.name}")
        fill = sqnr_colour(stats.sqnr if stats else None)
        lines.append(f'{nid} [label="{label}", fillcolor="{fill}", tooltip="{tooltip}", '
                     f'id="{nid}", class="layer"];')
        for v in node.outputs:
            producer[v.name] = nid
    for v in float_graph.inputs:
        lines.append(f'"in:{_dot(v.name)}" [label="{_dot(v.name)}\\n{_dot(format_type(v.type))}",'
                     f' shape=ellipse, fillcolor="#ffffff"];')
        producer[v.name] = f'"in:{_dot(v.name)}"'
    for node in float_graph.nodes:
        if node.name not in ids:
            continue
        for v in node.inputs:
            if v is not None and v.name in producer:
                lines.append(f"{producer[v.name]} -> {ids[node.name]};")
    lines.append("}")
    try:
        done = subprocess.run([dot, "-Tsvg"], input="\n".join(lines).encode("utf-8"),
                              capture_output=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        raise ReportError("Graphviz dot took more than 5 minutes to lay out the graph") from None
    if done.returncode != 0:
        raise ReportError(f"Graphviz dot failed: {done.stderr.decode(errors='replace')[:500]}")
    svg = done.stdout.decode("utf-8")
    return svg[svg.index("<svg"):]


# -- helpers ----------------------------------------------------------------------------------


def _config_text(graph: Graph) -> str:
    return graph.metadata.get("lowbit.quant_config") or "not recorded in the quantized model"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    _pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _dot(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _db(x: float) -> str:
    return "inf" if x == math.inf else ("-inf" if x == -math.inf else f"{x:.2f}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _page(title: str, body: str) -> str:
    style = ("body{font-family:Helvetica,Arial,sans-serif;margin:24px;max-width:1400px}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
             "font-size:13px;text-align:left}pre{background:#f6f6f6;padding:8px}"
             "figure{display:inline-block;margin:6px}figcaption{font-size:12px}"
             ".legend span{display:inline-block;padding:2px 8px;margin-right:2px;font-size:12px}"
             "#graph svg{max-width:100%;height:auto}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{style}</style></head>"
            f"<body>{body}</body></html>")
