"""Partial evaluation: the graph of tracers and recipes, and a jaxpr unzipped
into its known and unknown parts."""
from __future__ import annotations

from .. import partial_eval as pe
from ..api import jvp, linearize, make_jaxpr, vjp
from ..core import full_raise, get_aval, new_main, raise_to_shaped
from ..jaxpr import ClosedJaxpr
from .draw import clip, digraph, fmt_number, short, titled
from .jaxprs import jaxpr_graph
from .panes import Columns


def partial_eval_graph(f, args, known, title: str | None = None):
  """Run `f(*args)` with only the `known` arguments known, and draw the graph
  of tracers and recipes it leaves: known values (green) are computed on the
  spot; unknown tracers (orange) point to the recipes that will compute them,
  numbered in the topological order that becomes the jaxpr."""
  pvals = [pe.PartialVal.known(x) if k else pe.PartialVal.unknown(raise_to_shaped(get_aval(x)))
           for x, k in zip(args, known)]
  with new_main(pe.PartialEvalTrace) as main:
    trace = pe.PartialEvalTrace(main)
    tracers_in = [trace.new_arg(p) for p in pvals]
    outs = f(*tracers_in)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    tracers_out = [full_raise(trace, o) for o in outs]
  unknown_out = [t for t in tracers_out if t.pval.is_unknown]
  order = pe.toposort(unknown_out, pe.tracer_parents)
  step = {}
  for t in order:
    if isinstance(t.recipe, pe.JaxprEqnRecipe) and id(t.recipe) not in step:
      step[id(t.recipe)] = (len(step) + 1, t.recipe.prim.name)
  knowns = ", ".join(f"x{i} {'known' if t.pval.is_known else 'unknown'}"
                     for i, t in enumerate(tracers_in))
  steps = ", ".join(f"{n}. {p}" for n, p in step.values())
  alt = (f"Partial evaluation's graph of tracers and recipes: inputs {knowns}; "
         f"recipes for the unknown values, in jaxpr order: {clip(steps, 100) or 'none'}; "
         f"{len(unknown_out)} of {len(tracers_out)} outputs unknown")
  g = digraph(titled(title, alt), rankdir="TB", nodesep="0.15", ranksep="0.3")
  if title:
    g.attr(label=title, labelloc="t")
  names = {}
  tid = lambda t: f"t{id(t)}"
  value = lambda x: fmt_number(x) if isinstance(x, float) else short(x)   # 4 digits: narrow

  def tracer_name(t):
    if id(t) not in names:
      names[id(t)] = f"t{len(names)}"
    return names[id(t)]

  for i, t in enumerate(tracers_in):
    label = f"x{i}: " + (f"known {value(t.pval.const)}" if t.pval.is_known else t.aval.str_short())
    color = "#d4edda" if t.pval.is_known else "#ffe5b4"
    g.node(tid(t), label, shape="ellipse", style="filled", fillcolor=color, penwidth="2")
  drawn_recipes = set()
  for t in order:
    r = t.recipe
    if isinstance(r, pe.LambdaBindingRecipe):
      continue
    if id(t) not in {id(x) for x in tracers_in}:
      g.node(tid(t), f"{tracer_name(t)}: {t.aval.str_short()}", shape="ellipse",
             style="filled", fillcolor="#ffe5b4")
    if isinstance(r, pe.ConstRecipe):
      rid = f"r{id(t)}"
      g.node(rid, f"const\n{value(r.val)}", shape="box", style="filled,dashed",
             fillcolor="#d4edda")
      g.edge(rid, tid(t), style="dashed")
    elif isinstance(r, pe.JaxprEqnRecipe):
      rid = f"r{id(r)}"
      if id(r) not in drawn_recipes:
        drawn_recipes.add(id(r))
        g.node(rid, f"<<b>{r.prim.name}</b><br/><font point-size='10'>step {step[id(r)][0]}</font>>",
               shape="box", style="rounded,filled", fillcolor="#cfe2ff")
        for x in r.tracers_in:
          g.edge(tid(x), rid)
      g.edge(rid, tid(t))
  with g.subgraph(name="outputs") as s:   # at the foot, beside each other
    s.attr(rank="sink")
    for k, t in enumerate(tracers_out):
      if t.pval.is_known:
        s.node(f"out{k}", f"out {k}: known {value(t.pval.const)}", shape="note",
               style="filled", fillcolor="#d4edda")
      else:
        s.node(f"out{k}", f"out {k}", shape="doublecircle", style="filled", fillcolor="#fff3cd",
               width="0.3")
        g.edge(tid(t), f"out{k}")
  return g


def unzipping(jaxpr, unknowns, graphs: bool = True):
  """A jaxpr beside its known part (runs now) and unknown part (staged)."""
  if isinstance(jaxpr, ClosedJaxpr):
    assert not jaxpr.consts, "unzipping takes a jaxpr without constants"
    jaxpr = jaxpr.jaxpr
  jaxpr1, jaxpr2, _, num_res = pe.partial_eval_jaxpr(jaxpr, unknowns)
  show = (lambda j, t: [j, jaxpr_graph(j, t)]) if graphs else (lambda j, t: j)
  return Columns({"the jaxpr": show(jaxpr, None),
                  "known part: runs now": show(jaxpr1, f"{num_res} residuals out"),
                  "unknown part: staged": show(jaxpr2, f"{num_res} residuals in")})


def forward_linear_transposed(f, *args):
  """The jvp jaxpr of `f`, its linear part (from linearize), and the transpose
  of that (the vjp's backward pass), side by side."""
  n = len(args)
  forward = make_jaxpr(lambda *a: _jvp_pair(f, a[:n], a[n:]))(*args, *args)
  _, f_lin = linearize(f, *args)
  out, f_vjp = vjp(f, *args)
  transposed = make_jaxpr(f_vjp)(out)
  return Columns({"jvp (forward)": forward, "linearized (linear part)": f_lin.jaxpr,
                  "transposed (backward pass)": transposed})


def _jvp_pair(f, primals, tangents):
  return jvp(f, tuple(primals), tuple(tangents))
