"""Jaxprs as dataflow graphs, flat or with sub-jaxprs drawn inside their equations."""
from __future__ import annotations

import html

from ..jaxpr import (ClosedJaxpr, Jaxpr, Lit, VarNames, eqn_params, fmt_literal, has_jaxpr,
                     pp_param)
from .draw import (NARROW_COLUMN_PX, WIDE_COLUMN_PX, clip, digraph, natural_width, titled,
                   wrap_words)
from .panes import ByWidth, Stacked


def eqn_label(eqn, names, var_label) -> str:
  """An equation's node: the primitive, its literals, short params, outputs."""
  lits = [fmt_literal(x.val) for x in eqn.inputs if isinstance(x, Lit)]
  params = ", ".join(f"{k}={pp_param(v, names, 0)}" for k, v in eqn_params(eqn)
                     if not has_jaxpr(v))
  label = f"<<b>{html.escape(eqn.primitive.name)}</b>"
  if lits:
    label += f" {html.escape(' '.join(lits))}"
  if params:   # on lines of their own, so that a node stays narrow
    label += f'<br/><font point-size="10">{wrap_words(clip(params, 72), 16)}</font>'
  outs = ", ".join(var_label(v) for v in eqn.out_binders)
  return label + f'<br/><font point-size="10" color="#555555">{html.escape(outs)}</font>>'


def jaxpr_alt(jaxpr, names, kind="A jaxpr's dataflow graph") -> str:
  def atom(x):
    return fmt_literal(x.val) if isinstance(x, Lit) else f"{names[x]}:{x.aval.str_short()}"
  prims = list(dict.fromkeys(e.primitive.name for e in jaxpr.eqns))
  return (f"{kind}: inputs {', '.join(map(atom, jaxpr.invars)) or 'none'}; "
          f"{len(jaxpr.eqns)} equations ({clip(', '.join(prims), 80) or 'none'}); "
          f"outputs {', '.join(map(atom, jaxpr.outvars))}")


def jaxpr_graph(jaxpr, title: str | None = None, max_eqns: int = 200):
  """Inputs, constvars, one node per equation (literals shown inline), outputs."""
  if isinstance(jaxpr, ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  names = VarNames()
  g = digraph("", rankdir="TB", nodesep="0.12", ranksep="0.3")
  if title:
    g.attr(label=title, labelloc="t")
  producer = {}   # Var -> node id

  def var_label(v):
    return f"{names[v]}:{v.aval.str_short()}"

  for v in jaxpr.constvars:
    producer[v] = f"v{id(v)}"
    g.node(producer[v], f"const {var_label(v)}", shape="box", style="filled,dashed",
           fillcolor="#eeeeee")
  with g.subgraph(name="inputs") as s:
    s.attr(rank="source")
    for v in jaxpr.invars:
      producer[v] = f"v{id(v)}"
      s.node(producer[v], var_label(v), shape="ellipse", style="filled",
             fillcolor="#d4edda")
  for i, eqn in enumerate(jaxpr.eqns[:max_eqns]):
    node = f"e{i}"
    label = eqn_label(eqn, names, var_label)
    g.node(node, label, shape="box", style="rounded,filled", fillcolor="#cfe2ff")
    for x in eqn.inputs:
      if not isinstance(x, Lit) and x in producer:
        g.edge(producer[x], node)
    for v in eqn.out_binders:
      producer[v] = node
  if len(jaxpr.eqns) > max_eqns:
    g.node("more", f"... {len(jaxpr.eqns) - max_eqns} more equations", shape="plaintext")
  with g.subgraph(name="outputs") as s:
    s.attr(rank="sink")
    for k, x in enumerate(jaxpr.outvars):
      label = f"out {k}: " + (fmt_literal(x.val) if isinstance(x, Lit) else var_label(x))
      s.node(f"out{k}", label, shape="ellipse", peripheries="2", style="filled",
             fillcolor="#fff3cd")
      if not isinstance(x, Lit) and x in producer:
        g.edge(producer[x], f"out{k}")
  g.name = titled(title, jaxpr_alt(jaxpr, names))   # the names as drawn
  return g


# --- Jaxprs with sub-jaxprs (cond, while, scan, xla_call) as nested clusters ----------------

def jaxpr_graph_nested(jaxpr, title: str | None = None, max_eqns: int = 200,
                       split: bool = False, chain: bool = False):
  """Like `jaxpr_graph`, but a higher-order equation is drawn as a cluster
  holding its sub-jaxprs (each a cluster of its own, named by its parameter),
  with edges from the equation's operands to the sub-jaxprs' inputs.
  Names are shared across levels, as in the printed jaxpr. With `split`, the
  sub-jaxprs are pictures of their own instead, one below the other (narrow
  enough for a phone): a `Stacked` of graphs, the outer jaxpr first. With
  `chain`, each equation gets a row of its own, in program order, so that a
  jaxpr of many independent equations is as narrow as its widest node."""
  if isinstance(jaxpr, ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  names = VarNames()
  kind = "A jaxpr's dataflow graph, sub-jaxprs of higher-order equations drawn inside them"
  g = digraph("", rankdir="TB", nodesep="0.12", ranksep="0.3", compound="true")
  if title:
    g.attr(label=title, labelloc="t")
  counter = [0]

  def fresh(prefix):
    counter[0] += 1
    return f"{prefix}{counter[0]}"

  def var_label(v):
    return f"{names[v]}:{v.aval.str_short()}"

  def sub_jaxprs(eqn):
    for k, v in sorted(eqn.params.items()):
      items = v if isinstance(v, tuple) else (v,)
      js = [x.jaxpr if isinstance(x, ClosedJaxpr) else x for x in items
            if isinstance(x, (Jaxpr, ClosedJaxpr))]
      for i, j in enumerate(js):
        yield (f"{k}[{i}]" if len(js) > 1 else k), j

  def draw(sg, jx, producer, outer_inputs=None, depth=0):
    """Draw `jx` into graph `sg`; `outer_inputs[i]` (a node or None) feeds invar i.
    Returns the node ids producing its outputs."""
    for v in jx.constvars:
      producer[v] = fresh("c")
      sg.node(producer[v], f"const {var_label(v)}", shape="box", style="filled,dashed",
              fillcolor="#eeeeee")
    for i, v in enumerate(jx.invars):
      producer[v] = fresh("v")
      sg.node(producer[v], var_label(v), shape="ellipse", style="filled",
              fillcolor="#d4edda" if depth == 0 else "#e9f5ec")
      if outer_inputs is not None and i < len(outer_inputs) and outer_inputs[i] is not None:
        sg.edge(outer_inputs[i], producer[v], style="dashed", color="#888888")
    prev = None
    for eqn in jx.eqns[:max_eqns]:
      label = eqn_label(eqn, names, var_label)
      subs = list(sub_jaxprs(eqn))
      node = fresh("e")
      if chain and prev is not None:   # one row per equation
        sg.edge(prev, node, style="invis", weight="20")
      prev = node
      ins = [producer.get(x) if not isinstance(x, Lit) else None for x in eqn.inputs]
      if not subs or split:
        sg.node(node, label, shape="box", style="rounded,filled",
                fillcolor="#d9d2e9" if subs else "#cfe2ff")
        for src in ins:
          if src is not None:
            sg.edge(src, node)
        for pname, sj in subs:   # split: each sub-jaxpr a picture of its own
          outs = ", ".join(names[v] for v in eqn.out_binders)
          what = f"{pname} of the {eqn.primitive.name} giving {outs}"
          piece = digraph("", rankdir="TB", nodesep="0.12", ranksep="0.3")
          piece.attr(label=what, labelloc="t")
          pieces.append(piece)
          res = draw(piece, sj, {}, None, depth + 1)
          for k, r in enumerate(res):
            if r is not None:
              piece.node(f"out{k}", f"out {k}", shape="ellipse", peripheries="2",
                         style="filled", fillcolor="#fff3cd")
              piece.edge(r, f"out{k}")
          piece.name = titled(what, jaxpr_alt(sj, names))
      else:
        with sg.subgraph(name=f"cluster_{node}") as c:
          c.attr(label="", style="rounded,filled", fillcolor="#f7f3ff", color="#8e7cc3")
          c.node(node, label, shape="box", style="rounded,filled", fillcolor="#d9d2e9")
          for src in ins:
            if src is not None:
              sg.edge(src, node)
          for pname, sj in subs:
            with c.subgraph(name=f"cluster_{fresh('s')}") as s:
              s.attr(label=pname, style="rounded,dashed", color="#8e7cc3", fillcolor="white")
              # Operands map to the sub-jaxpr's last inputs (cond: after the index).
              k = len(sj.invars)
              feed = ins[len(ins) - k:] if eqn.primitive.name != "cond" else ins[1:]
              if eqn.primitive.name in ("while",):
                feed = None
              res = draw(s, sj, {}, feed, depth + 1)
              for r in res:
                if r is not None:
                  s.edge(r, node, style="dotted", color="#8e7cc3", arrowhead="none")
      for v in eqn.out_binders:
        producer[v] = node
    return [producer.get(x) if not isinstance(x, Lit) else None for x in jx.outvars]

  pieces = [g]
  outs = draw(g, jaxpr, {})
  with g.subgraph(name="outputs") as s:
    s.attr(rank="sink")
    for k, (x, src) in enumerate(zip(jaxpr.outvars, outs)):
      label = f"out {k}: " + (fmt_literal(x.val) if isinstance(x, Lit) else var_label(x))
      s.node(f"out{k}", label, shape="ellipse", peripheries="2", style="filled",
             fillcolor="#fff3cd")
      if src is not None:
        g.edge(src, f"out{k}")
  g.name = titled(title, jaxpr_alt(jaxpr, names, kind))   # the names as drawn
  return Stacked(pieces) if split else g


def jaxpr_picture(jaxpr, title: str | None = None):
  """A jaxpr with sub-jaxprs, laid out for the column: nested in one picture
  on a wide page, split into one picture per jaxpr on a phone, and split on
  every page when the nested picture is too wide to read even there. A
  split picture still too wide for a phone (a flat jaxpr of many side-by-side
  equations, like a batched `cond`'s `select_n`s) gets one row per equation."""
  nested = jaxpr_graph_nested(jaxpr, title)
  split = jaxpr_graph_nested(jaxpr, title, split=True)
  if max(natural_width(g) for g in split.pictures) > NARROW_COLUMN_PX:
    split = jaxpr_graph_nested(jaxpr, title, split=True, chain=True)
  return split if natural_width(nested) > WIDE_COLUMN_PX else ByWidth(nested, split)
