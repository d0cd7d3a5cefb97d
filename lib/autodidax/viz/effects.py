"""The chapter "Side effects and state": the token threaded through a lowered
program, a Ref's discharge into plain values, and a stepper through discharge."""
from __future__ import annotations

import re

from .. import effects
from ..api import make_jaxpr
from ..jaxpr import Jaxpr, Lit, VarNames, pp_eqn
from ..state import (AbstractRef, addupdate_p, discharge_if_stateful, discharge_state, get_p,
                     new_ref_p, swap_p)
from .draw import HIGHLIGHT, digraph, titled
from .jaxprs import eqn_label, jaxpr_alt, jaxpr_graph, jaxpr_graph_nested
from .panes import Columns, SideBySide, explorer
_SSA_LINE = re.compile(r'^\s*(%[\w]+)(?::\d+)? = "?([\w.]+)"?(.*)$')


def token_graph(stablehlo_text: str, title: str | None = None):
  """The @main function of a StableHLO module as a dataflow graph: host
  callbacks orange, and the edges that carry the token bold red (from the
  runtime's `%token`, through each ordered callback, back to the runtime)."""
  body = stablehlo_text.split("func.func public @main", 1)[1].split("\n  }", 1)[0]
  ops, tokens, callbacks = [], {"%token"}, 0
  for line in body.splitlines()[1:]:
    if line.strip().startswith("return"):
      ops.append(("return", "return", re.findall(r"%[\w#]+", line.split(":")[0])))
      continue
    m = _SSA_LINE.match(line)
    if not m:
      continue
    name, op, rest = m.groups()
    args = re.findall(r"%[\w#]+", rest.split(" : ")[0].split("{")[0])
    short_op = op.replace("stablehlo.", "")
    if op == "stablehlo.custom_call":
      short_op = f"host callback #{callbacks}"
      callbacks += 1
    ops.append((name, short_op, args))
    if "after_all" in op or ("custom_call" in op and "-> !stablehlo.token" in rest) or (
        "custom_call" in op and "-> (!stablehlo.token" in rest):
      tokens.add(name if "-> !stablehlo.token" in rest or "after_all" in op else name + "#0")
  n_tok = sum(1 for _, o, a in ops if o.startswith("host") and any(x in tokens for x in a))
  alt = (f"The lowered program's operations in order: {', '.join(o for _, o, _ in ops)}; "
         f"{n_tok} host callbacks take the token in turn")
  g = digraph(titled(title, alt), rankdir="TB", nodesep="0.25", ranksep="0.3")
  if title:
    g.attr(label=title, labelloc="t")
  known = set()
  for name, op, args in ops:
    host = op.startswith("host")
    g.node(name, f"{name} {op}" if name != "return" else "return", shape="box",
           style="rounded,filled",
           fillcolor="#ffd8a8" if host else "#fff3cd" if name == "return" else "#cfe2ff")
    for a in args:
      src = a.split("#")[0]
      if src.startswith(("%arg", "%token")) and src not in known:
        g.node(src, src, shape="ellipse", style="filled", fillcolor="#d4edda")
        known.add(src)
      tok = a in tokens
      g.edge(src, name, color=HIGHLIGHT if tok else "black", penwidth="2.5" if tok else "1",
             label="token" if tok else "")
    known.add(name)
  return g


def _state_graph(jaxpr, title: str):
  """A jaxpr's graph with each Ref a cylinder: writes (swap, addupdate) go
  into it, reads (get) come out of it."""
  names = VarNames()
  alt = jaxpr_alt(jaxpr, names, "A jaxpr with Refs")
  g = digraph(titled(title, alt), rankdir="TB", nodesep="0.2", ranksep="0.3")
  g.attr(label=title, labelloc="t")
  producer = {}
  label = lambda v: f"{names[v]}:{v.aval.str_short()}"
  for v in jaxpr.constvars + jaxpr.invars:
    producer[v] = f"v{id(v)}"
    g.node(producer[v], label(v), shape="ellipse", style="filled", fillcolor="#d4edda")
  for i, eqn in enumerate(jaxpr.eqns):
    node, p = f"e{i}", eqn.primitive
    stateful = p in (get_p, swap_p, addupdate_p, new_ref_p)
    g.node(node, eqn_label(eqn, names, label), shape="box", style="rounded,filled",
           fillcolor="#ffd8a8" if stateful else "#cfe2ff")
    for k, x in enumerate(eqn.inputs):
      if isinstance(x, Lit) or x not in producer:
        continue
      if not isinstance(x.aval, AbstractRef):
        g.edge(producer[x], node)
        continue
      on_k = {type(e) for e in effects.eqn_effects(eqn) | effects.inner_ref_effects(eqn)
              if isinstance(e, effects.RefEffect) and e.input_index == k}
      writes = bool(on_k & {effects.WriteEffect, effects.AccumEffect})
      if writes and effects.ReadEffect in on_k:   # a loop's body, say
        g.edge(node, producer[x], color=HIGHLIGHT, penwidth="2", dir="both",
               label="reads, writes")
      elif writes:
        g.edge(node, producer[x], color=HIGHLIGHT, penwidth="2", label="writes")
      else:
        g.edge(producer[x], node, color=HIGHLIGHT, style="dashed", label="reads")
    for v in eqn.out_binders:
      if isinstance(v.aval, AbstractRef):
        producer[v] = f"r{id(v)}"
        g.node(producer[v], f"Ref {label(v)}", shape="cylinder", style="filled",
               fillcolor="#f8d7da")
        g.edge(node, producer[v])
      else:
        producer[v] = node
  for k, x in enumerate(jaxpr.outvars):
    g.node(f"out{k}", f"out {k}", shape="ellipse", peripheries="2", style="filled",
           fillcolor="#fff3cd")
    if not isinstance(x, Lit) and x in producer:
      g.edge(producer[x], f"out{k}")
  return g


def discharge_graph(f, *args):
  """`f`'s jaxpr with its Refs (left) and discharged (right): each write
  makes a new value, which the next read takes, as a carry would."""
  jaxpr = make_jaxpr(f)(*args).jaxpr
  pure = discharge_if_stateful(jaxpr)
  nested = any(e.params.get("jaxpr") is not None or "branches" in e.params
               or "body_jaxpr" in e.params for e in pure.eqns)
  after = (jaxpr_graph_nested(pure, title="discharged") if nested
           else jaxpr_graph(pure, title="discharged"))
  return Columns({"with a Ref": _state_graph(jaxpr, "with a Ref"), "discharged": after})


def discharge_frames(jaxpr) -> list[tuple[str, str]]:
  """One frame per equation: (the jaxpr with that equation marked, the
  pure jaxpr that discharge has made of the equations so far, whose
  outputs are what each Ref holds at that point)."""
  names = VarNames()
  for v in jaxpr.constvars + jaxpr.invars:   # named first, as pp_jaxpr does
    names[v]
  lines = [pp_eqn(e, names, 0) for e in jaxpr.eqns]
  frames = []
  for k in range(1, len(jaxpr.eqns) + 1):
    refs = list(dict.fromkeys(v for e in jaxpr.eqns[:k] for v in e.out_binders
                              if isinstance(v.aval, AbstractRef)))
    prefix = Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.eqns[:k], refs)
    pure, _ = discharge_state(prefix)
    left = "\n".join(("▶ " if i == k - 1 else "  ") + line for i, line in enumerate(lines))
    frames.append((left, str(pure)))
  return frames


def discharge_stepper(f, *args):
  """A kernel-free widget: pick an equation to see what discharge has made
  so far. Without ipywidgets, every frame, one after the other."""
  jaxpr = make_jaxpr(f)(*args).jaxpr
  frames = discharge_frames(jaxpr)
  titles = ("the jaxpr with Refs", "discharged so far (outputs: what each Ref holds)")
  steps = {f"after equation {k + 1}: {left.splitlines()[k].strip('▶ ')}":
           (lambda left=left, right=right: [SideBySide(left, titles=titles[:1]),   # stacked
                                            SideBySide(right, titles=titles[1:])])
           for k, (left, right) in enumerate(frames)}
  try:
    return explorer(steps, lambda make: make())
  except ImportError:
    return Columns({name: make() for name, make in steps.items()})
