"""The structure docs/architecture.md describes, checked on the source: no import cycle between
packages (imports inside functions count too), product facts read from the op definitions
(`lowbit.ops.product`) instead of op-type branches, transA / transB read in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import lowbit

SRC = Path(lowbit.__file__).parent
# backends/ holds layers on both sides of passes/ and frontends/: the reference kernels below
# them (constant folding runs them), the cpu code generator above (it folds constants first)
SPLIT = {"backends": ("cpu", "reference", "lowering")}


def unit(module: str) -> str:
    """The package (architecture floor) a dotted lowbit module belongs to."""
    parts = module.split(".")[1:] or ["lowbit"]
    if len(parts) > 1 and parts[1] in SPLIT.get(parts[0], ()):
        return f"{parts[0]}.{parts[1]}"
    return parts[0].removesuffix(".py")


def sources() -> dict[str, ast.Module]:
    trees = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts).removesuffix(".__init__")
        trees[module] = ast.parse(path.read_text(), str(path))
    return trees


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, tree in sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("lowbit.") and unit(target) != unit(module):
                    graph.setdefault(unit(module), set()).add(unit(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_packages():
    graph = import_graph()
    assert {"passes", "backends.reference", "backends.cpu", "quant"} <= set(graph)
    assert cycles(graph) == []


def test_cycle_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _lines_outside_ops(pattern: str) -> list[str]:
    hits = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("ops/"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


PRODUCT_OP = r"""op_type\b[^#\n]*["'](Conv|ConvTranspose|Gemm|MatMul)["']"""


def test_product_op_type_branches_are_few():
    """Issue #23: the branches naming a product op outside ops/ are the few about one op alone
    (which QLinear op an exporter writes, how batch norm folds into a Gemm): at most 8."""
    hits = _lines_outside_ops(PRODUCT_OP)
    assert hits, "the pattern no longer finds anything: check it"
    assert len(hits) <= 8, "\n".join(hits)


def test_transposition_attributes_read_in_one_place():
    """Gemm's transA / transB are read only by `lowbit.ops.product.gemm_product`."""
    reads = r"""attrs(\[|\.get\()\s*["']trans[AB]["']"""
    assert _lines_outside_ops(reads) == []
    inside = [p.name for p in (SRC / "ops").glob("*.py") if re.search(reads, p.read_text())]
    assert inside == ["product.py"]
