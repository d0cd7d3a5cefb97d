"""The library's map: lib/autodidax's import graph, drawn layer by layer.

The book's page "The library's map" calls `picture()` and `summaries()` at
build time, on the same graph that tests/test_imports.py checks for cycles
(import_graph.py, deferred imports counted), so the page can't go stale.
"""
from __future__ import annotations

import ast
import html
import pathlib
import re

import graphviz

import import_graph

LIB = pathlib.Path(__file__).resolve().parents[2] / "lib" / "autodidax"
TOP = "autodidax"
PACKAGES = ("viz", "control_flow", "pallas")   # drawn as one box each
ALT = ("The modules of autodidax in layers, bottom up: each one above every module it "
       "imports, an arrow from a module to one it imports")

# Each module's part of the library, and its colour in the picture.
GROUPS = {
    "data types and the core": ("#eeeeee", [
        "util", "dtypes", "tree_util", "runtime", "effects", "mesh", "named_sharding",
        "core", "jaxpr", "api_util", "sharding_rules"]),
    "primitives": ("#cfe2f3", ["primitives"]),
    "transformations": ("#d9ead3", [
        "ad", "batching", "partial_eval", "lowering", "xla", "stackless", "flop_count",
        "spmd"]),
    "higher-order primitives, effects and state": ("#fce5cd", [
        "control_flow", "custom_derivatives", "ad_checkpoint", "parallel", "shard_map",
        "state", "callback"]),
    "the public API": ("#e6d9f2", [
        "api", "lax", "numpy", "nn", "debug", "sharding", "viz", "autodidax"]),
    "kernels": ("#fff2cc", ["pallas"]),
}


def short(module: str) -> str:
  return module.removeprefix(TOP + ".") if module != TOP else TOP


def box(module: str) -> str:
  """The box a module is drawn in: a package's modules share one."""
  name = short(module)
  return name.split(".")[0] if name.split(".")[0] in PACKAGES else name


def module_graph(root: pathlib.Path = LIB) -> dict[str, set[str]]:
  """{module: what it imports}, every import counted (deferred ones too)."""
  sources = import_graph.read_package(root)
  return import_graph.graph(import_graph.imports(sources, TOP), sources, TOP)


def boxes_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
  out: dict[str, set[str]] = {}
  for m, deps in g.items():
    out.setdefault(box(m), set()).update(box(d) for d in deps if box(d) != box(m))
  return out


def reduced(g: dict[str, set[str]]) -> dict[str, set[str]]:
  """The arrows no chain of other arrows implies (the transitive reduction)."""
  def reach(m, seen):
    for d in g[m]:
      if d not in seen:
        seen.add(d)
        reach(d, seen)
    return seen
  below = {m: reach(m, set()) for m in g}
  return {m: {d for d in deps if not any(d in below[e] for e in deps if e != d)}
          for m, deps in g.items()}


def colour(name: str) -> str:
  for fill, members in GROUPS.values():
    if name in members:
      return fill
  raise KeyError(f"library_map.GROUPS doesn't place the module {name!r}: add it to a group")


def picture(root: pathlib.Path = LIB) -> graphviz.Digraph:
  """The layers, bottom up: a module sits one layer above the highest one it
  imports. An arrow A -> B: A imports B (and nothing else implies it)."""
  g = boxes_graph(module_graph(root))
  level = import_graph.layers(g)
  dot = graphviz.Digraph(ALT, graph_attr=dict(
      rankdir="BT", nodesep="0.05", ranksep="0.28", bgcolor="transparent"),
      node_attr=dict(shape="box", style="rounded,filled", fontname="monospace",
                     fontsize="10", height="0.26", margin="0.04,0.02"),
      edge_attr=dict(color="#888888", arrowsize="0.5", dir="back"))
  for k in sorted(set(level.values())):
    with dot.subgraph() as same:
      same.attr(rank="same")
      for m in sorted(n for n, l in level.items() if l == k):
        same.node(m, m, fillcolor=colour(m))
  for m, deps in sorted(reduced(g).items()):
    for d in sorted(deps):
      dot.edge(d, m)   # laid out from below; the arrowhead is at d, the imported one
  return dot


def first_sentence(source: str) -> str:
  doc = (ast.get_docstring(ast.parse(source)) or "").split("\n\n")[0].replace("\n", " ")
  cut = doc.find(". ")
  return doc if cut < 0 else doc[:cut + 1]


def summaries(root: pathlib.Path = LIB) -> list[tuple[str, int, str]]:
  """(module, layer of its box, the first sentence of its docstring), top layer first."""
  sources = import_graph.read_package(root)
  level = import_graph.layers(boxes_graph(module_graph(root)))
  rows = []
  for path, source in sources.items():
    name = short(import_graph.module_name(path, TOP))
    if name.startswith("viz."):
      continue   # the pictures' modules: one row for the package
    rows.append((name, level[box(TOP + "." + name if name != TOP else TOP)],
                 first_sentence(source)))
  return sorted(rows, key=lambda r: (-r[1], r[0]))


def table_html(root: pathlib.Path = LIB) -> str:
  """summaries() as an HTML table (`backquoted` names as code)."""
  code = lambda t: re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(t, quote=False))
  rows = "".join(f"<tr><td>{layer}</td><td><code>{html.escape(name)}</code></td>"
                 f"<td>{code(text)}</td></tr>" for name, layer, text in summaries(root))
  return ('<div style="overflow-x: auto"><table class="table library-map"><thead><tr><th>layer</th><th>module</th>'
          f"<th>what it holds</th></tr></thead><tbody>{rows}</tbody></table></div>")
