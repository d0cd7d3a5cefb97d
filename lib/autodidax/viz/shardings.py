"""Many devices: how a sharding lays an array out on a mesh, what a collective
moves between devices, and compiled programs' text made readable."""
from __future__ import annotations

import html
import re

from ..sharding import NamedSharding
from .draw import HIGHLIGHT, digraph, titled
from .panes import explorer


TILE_COLORS = ["#cfe2ff", "#ffe5b4", "#d4edda", "#f8d7da", "#e2d9f3", "#fff3cd",
               "#d1ecf1", "#f3e8ff", "#e8e8e8", "#ffd8a8", "#c3fae8", "#fcc2d7"]


def _span(s: slice, n: int) -> str:
  start, stop = (0, n) if s.start is None else (s.start, s.stop)
  return f"{start}:{stop}"


def sharding_graph(shape, sharding, title: str | None = None):
  """Where each part of an array of `shape` lives under `sharding` (a
  NamedSharding): the mesh of devices above, the array cut into tiles
  below, each tile and the devices that hold it in one colour. A
  colour that appears on several devices is a replicated tile."""
  shape = tuple(shape)
  if len(shape) > 2:
    raise ValueError("sharding_graph draws arrays of rank 0, 1 or 2")
  mesh, spec = sharding.mesh, sharding.spec
  index = sharding.devices_indices_map(shape)
  tiles = list(dict.fromkeys(tuple(_span(s, n) for s, n in zip(ix, shape))
                             for ix in index.values()))
  color = {t: TILE_COLORS[k % len(TILE_COLORS)] for k, t in enumerate(tiles)}
  holders = {t: [] for t in tiles}
  for dev, ix in index.items():
    holders[tuple(_span(s, n) for s, n in zip(ix, shape))].append(dev.id)
  rows, cols = (mesh.axis_sizes + (1,))[:2] if len(mesh.axis_sizes) < 2 else mesh.axis_sizes[-2:]
  names = mesh.axis_names
  per = max(len(h) for h in holders.values())
  alt = (f"An array of shape {shape} laid out by {spec!r} on a mesh "
         f"{' x '.join(f'{n}={k}' for n, k in mesh.shape.items())}: {len(tiles)} tile(s)"
         f" of shape {sharding.shard_shape(shape)}, each held by {per} device(s)")
  # The mesh above the array: narrow enough for a phone.
  g = digraph(titled(title, alt), rankdir="TB", nodesep="0.5", ranksep="0.3")
  if title:
    g.attr(label=title, labelloc="t")
  devs = mesh.devices.reshape(rows, cols) if mesh.devices.ndim <= 2 else None
  cells = []
  for r in range(rows):
    row = "".join(
        f'<TD BGCOLOR="{color[tuple(_span(s, n) for s, n in zip(index[d], shape))]}" '
        f'WIDTH="46" HEIGHT="30">dev {d.id}</TD>' for d in devs[r])
    cells.append(f"<TR>{row}</TR>")
  axes = (f"rows: {names[0]!r}" + (f", columns: {names[1]!r}" if len(names) > 1 else "")
          if len(names) <= 2 else "")
  g.node("mesh", f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="2"><TR><TD COLSPAN="{cols}" '
         f'BORDER="0"><B>mesh</B> ({html.escape(axes)})</TD></TR>{"".join(cells)}</TABLE>>',
         shape="plaintext")
  # The array: its tiles in a grid (rank 2), a row (rank 1) or one cell.
  spans = [sorted({t[d] for t in tiles}, key=lambda x: int(x.split(":")[0]))
           for d in range(len(shape))]
  grid_rows = spans[0] if len(shape) == 2 else [None]
  grid_cols = spans[-1] if shape else [None]
  body = []
  for rs in grid_rows:
    row = ""
    for cs in grid_cols:
      t = tuple(x for x in (rs, cs) if x is not None)[:len(shape)] if len(shape) == 2 else \
          ((cs,) if shape else ())
      who = ", ".join(map(str, holders[t]))
      where = "[" + ", ".join(t) + "]" if t else "the scalar"
      row += (f'<TD BGCOLOR="{color[t]}" WIDTH="70" HEIGHT="36">{html.escape(where)}'
              f'<BR/><FONT POINT-SIZE="9">dev {html.escape(who)}</FONT></TD>')
    body.append(f"<TR>{row}</TR>")
  head = f"<B>array</B> {shape}, {html.escape(repr(spec))}"
  g.node("array", f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="2"><TR><TD BORDER="0" '
         f'COLSPAN="{len(grid_cols)}">{head}</TD></TR>{"".join(body)}</TABLE>>',
         shape="plaintext")
  g.edge("mesh", "array", label=" holds", style="dashed")
  return g


def wrap_lines(text: str, width: int = 110) -> str:
  """Long lines broken after a comma, or else at a space (continuations
  indented), so that a program's text reads without scrolling sideways."""
  out = []
  for line in text.splitlines():
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    while len(line) > width:
      cut = line.rfind(", ", len(indent), width)
      skip = 2
      if cut < 0:
        cut, skip = line.rfind(" ", len(indent) + 1, width), 1
      if cut < 0:
        break
      out.append(line[:cut + (skip == 2)])
      line = indent + line[cut + skip:]
    out.append(line)
  return "\n".join(out)


def hlo_entry(hlo_text: str, width: int = 110) -> str:
  """The entry computation of compiled HLO (the program each device runs),
  without XLA's metadata and backend configs, lines wrapped."""
  text = hlo_text[hlo_text.index("ENTRY"):] if "ENTRY" in hlo_text else hlo_text
  text = re.sub(r", metadata=\{[^}]*\}", "", text)
  text = re.sub(r', backend_config=(\{.*?\}|"[^"]*")(?=,|$)', "", text, flags=re.M)
  text = text.split("\n}\n")[0] + "\n}" if "\n}\n" in text else text
  return wrap_lines(text, width)


def sharding_explorer(shape, mesh, specs):
  """A widget: pick a PartitionSpec, see how it lays out an array of `shape`
  on `mesh` (every choice drawn up front, so it works without a kernel)."""
  return explorer({repr(s): (lambda s=s: sharding_graph(shape, NamedSharding(mesh, s)))
                   for s in specs}, lambda make: make())


def collective_graph(kind: str, n: int = 4, perm=None, title: str | None = None):
  """What a collective does across `n` devices, as dataflow: each device's
  input on the left, its output on the right. `kind` is psum, all_gather,
  psum_scatter or ppermute (with `perm`, default a shift by one)."""
  xs = [f"x{k}" for k in range(n)]
  blocks = lambda k: [f"x{j}[{k}]" for j in range(n)]
  if kind == "psum":
    outs, sources = [" + ".join(xs)] * n, [list(range(n))] * n
  elif kind == "all_gather":
    outs, sources = ["[" + ", ".join(xs) + "]"] * n, [list(range(n))] * n
  elif kind == "psum_scatter":
    outs, sources = [" + ".join(blocks(k)) for k in range(n)], [list(range(n))] * n
  elif kind == "ppermute":
    perm = perm if perm is not None else [(k, (k + 1) % n) for k in range(n)]
    src = {d: s for s, d in perm}
    outs = [f"x{src[k]}" if k in src else "0" for k in range(n)]
    sources = [[src[k]] if k in src else [] for k in range(n)]
  else:
    raise ValueError(f"collective_graph: unknown collective {kind!r}")
  alt = (f"{kind} over {n} devices: " + "; ".join(f"device {k} gets {o}"
                                                  for k, o in enumerate(outs)))
  g = digraph(titled(title, alt), rankdir="LR", nodesep="0.15", ranksep="1.2")
  if title:
    g.attr(label=title, labelloc="t")
  for side, label in (("in", lambda k: f"dev {k}: x{k}"), ("out", lambda k: f"dev {k}: {outs[k]}")):
    with g.subgraph(name=f"{side}s") as column:   # devices top to bottom, in order
      column.attr(rank="same")
      for k in range(n):
        column.node(f"{side}{k}", label(k), shape="box", style="rounded,filled",
                    fillcolor=TILE_COLORS[k % len(TILE_COLORS)] if side == "in" else "#f8f9fa")
      for k in range(n - 1):
        column.edge(f"{side}{k}", f"{side}{k + 1}", style="invis")
  for k, srcs in enumerate(sources):
    for j in srcs:
      g.edge(f"in{j}", f"out{k}", color="#555555" if j != k else HIGHLIGHT)
  return g


# Shardings in types: a jaxpr whose edges carry each value's type, coloured by
# the mesh axes that cut it.

AXIS_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]   # one per mesh axis


def typed_jaxpr_graph(jaxpr, title: str | None = None):
  """A jaxpr's dataflow, each value's type on its edge: an edge is drawn in
  the colour of the mesh axis that cuts the value (black: whole), so a
  sharding rule shows as the colours an equation passes on."""
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
  axes = list(dict.fromkeys(a for v in (*jaxpr.invars, *(o for e in jaxpr.eqns
                                                        for o in e.out_binders))
                            if v.aval.sharding is not None
                            for d in v.aval.sharding.spec.normalized(v.aval.ndim) for a in d))
  color = {a: AXIS_COLORS[k % len(AXIS_COLORS)] for k, a in enumerate(axes)}

  def edge_color(aval):
    cut = [a for d in (aval.sharding.spec.normalized(aval.ndim) if aval.sharding else ())
           for a in d]
    return ":".join(color[a] for a in cut) or "black"
  alt = (f"A jaxpr of {len(jaxpr.eqns)} equation(s), each edge labelled with its value's "
         f"type and coloured by the mesh axes that cut it ({', '.join(axes) or 'none'})")
  g = digraph(titled(title, alt), rankdir="TB", nodesep="0.3", ranksep="0.35")
  producer = {}
  for k, v in enumerate(jaxpr.invars):
    producer[v] = f"in{k}"
    g.node(f"in{k}", f"input {k}", shape="plaintext")
  for k, eqn in enumerate(jaxpr.eqns):
    g.node(f"e{k}", eqn.primitive.name, shape="box", style="rounded,filled",
           fillcolor="#f3f3f3")
    for x in eqn.inputs:
      if x in producer:
        g.edge(producer[x], f"e{k}", label=f" {x.aval.str_short()}",
               color=edge_color(x.aval), penwidth="2")
    for v in eqn.out_binders:
      producer[v] = f"e{k}"
  for k, v in enumerate(jaxpr.outvars):
    g.node(f"out{k}", f"output {k}", shape="plaintext")
    if v in producer:
      g.edge(producer[v], f"out{k}", label=f" {v.aval.str_short()}",
             color=edge_color(v.aval), penwidth="2")
  return g
