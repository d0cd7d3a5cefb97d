"""Rematerialization: what a policy saves for the backward pass and what it
recomputes."""
from __future__ import annotations

import html

from .. import ad_checkpoint as ac
from ..ad_checkpoint import nothing_saveable, partial_eval_jaxpr_policy
from ..api import jvp, make_jaxpr
from ..jaxpr import Jaxpr, Lit, VarNames
from .draw import clip, digraph, titled


REMAT_STYLES = {   # fate of an equation: (fill, border style, its label)
    "saved": ("#b7e4c7", "filled,bold", "saved"),
    "not saved": ("#f1f3f5", "filled", "not saved"),
    "recomputed": ("#ffd8a8", "filled,dashed", "recomputed"),
    "linear": ("#cfe2ff", "filled", "linear"),
}


def remat_split(f, *args, policy=None):
  """Linearize `f` at `args` the way `checkpoint(f, policy=policy)` does:
  the JVP jaxpr split by `partial_eval_jaxpr_policy`, primals known and
  tangents unknown. Returns (jvp jaxpr, how many of its inputs are known,
  known part, staged part, number of residuals), with the jvp jaxpr's
  constants made known inputs."""
  n = len(args)
  closed = make_jaxpr(lambda *a: jvp(f, a[:n], a[n:]))(*args, *args)
  j = closed.jaxpr
  jaxpr = Jaxpr([], j.constvars + j.invars, j.eqns, j.outvars)
  unknowns = [False] * (len(j.constvars) + n) + [True] * n
  known, staged, _, num_res = partial_eval_jaxpr_policy(jaxpr, unknowns,
                                                        policy or nothing_saveable)
  return jaxpr, len(j.constvars) + n, known, staged, num_res


def remat_graph(f, *args, policy=None, title: str | None = None):
  """What reverse mode of `checkpoint(f, policy=policy)` keeps and redoes.

  The JVP of `f`, split in two as the policy splits it. Above, the forward
  pass, which runs now: each equation whose result is **saved** for the
  backward pass is green and bold, the others grey. Below, the part left
  for the backward pass: the primal equations it **recomputes** from the
  saved values (orange, dashed), and the linear ones (blue), which the
  backward pass runs transposed. Bold green edges carry the saved values
  (and saved inputs) from the forward pass down."""
  jaxpr, n_primal, known, staged, num_res = remat_split(f, *args, policy=policy)
  residuals = known.outvars[len(known.outvars) - num_res:]
  res_set = {v for v in residuals if not isinstance(v, Lit)}
  fate = {id(e): "saved" if any(v in res_set for v in e.out_binders) else "not saved"
          for e in known.eqns}
  linear = set(staged.invars[num_res:])   # the tangents, and what depends on them
  for e in staged.eqns:
    if any(x in linear for x in e.inputs if not isinstance(x, Lit)):
      linear.update(e.out_binders)
      fate[id(e), "bwd"] = "linear"
    else:
      fate[id(e), "bwd"] = "recomputed"
  recomputed = [e for e in staged.eqns if fate[id(e), "bwd"] == "recomputed"]
  names = VarNames()
  var_label = lambda v: f"{names[v]}:{v.aval.str_short()}"
  pname = policy_name(policy)
  alt = (f"Reverse mode of checkpoint with policy {pname}: the forward pass runs "
         f"{len(known.eqns)} equations and saves {num_res} values ("
         f"{', '.join(v.aval.str_short() for v in residuals) or 'none'}); the backward "
         f"pass recomputes {len(recomputed)} equations "
         f"({clip(', '.join(e.primitive.name for e in recomputed), 60) or 'none'}) and runs "
         f"{len(staged.eqns) - len(recomputed)} linear ones")
  g = digraph(titled(title, alt), rankdir="TB", nodesep="0.1", ranksep="0.25",
              compound="true")
  g.attr("node", margin="0.06,0.03")
  g.attr(label=title or f"policy: {pname}. {num_res} saved, {len(recomputed)} recomputed",
         labelloc="t")
  fwd, bwd = {}, {}   # Var -> node id, in each pass

  def eqn_node(sg, node, e, kind):   # short labels: the primitive, a name, the fate
    fill, style, word = REMAT_STYLES[kind]
    prim = e.primitive.name + (f" {e.params['name']}" if "name" in e.params
                               and isinstance(e.params["name"], str) else "")
    outs = ", ".join(var_label(v) for v in e.out_binders)
    label = (f'<<b>{html.escape(prim)}</b><br/><font point-size="10" color="#555555">'
             f'{html.escape(outs)}</font><br/><i>{word}</i>>')
    sg.node(node, label, shape="box", style=f"rounded,{style}", fillcolor=fill,
            penwidth="2.5" if kind == "saved" else "1")

  with g.subgraph(name="cluster_fwd") as s:
    s.attr(label="forward pass: runs now", style="rounded", color="#999999")
    for v in jaxpr.invars[:n_primal]:
      fwd[v] = f"in{id(v)}"
      s.node(fwd[v], var_label(v) + ("\nsaved" if v in res_set else ""), shape="ellipse",
             style="filled,bold" if v in res_set else "filled",
             fillcolor="#b7e4c7" if v in res_set else "#e9f5ec",
             penwidth="2.5" if v in res_set else "1")
    for i, e in enumerate(known.eqns):
      eqn_node(s, f"f{i}", e, fate[id(e)])
      for x in e.inputs:
        if not isinstance(x, Lit) and x in fwd:
          s.edge(fwd[x], f"f{i}")
      for v in e.out_binders:
        fwd[v] = f"f{i}"
  with g.subgraph(name="cluster_bwd") as s:
    s.attr(label="later, in the backward pass", style="rounded", color="#999999")
    for v in jaxpr.invars[n_primal:]:
      bwd[v] = f"in{id(v)}"
      s.node(bwd[v], var_label(v) + "\ntangent", shape="ellipse", style="filled",
             fillcolor="#e7f0ff")
    for i, e in enumerate(staged.eqns):
      eqn_node(s, f"b{i}", e, fate[id(e), "bwd"])
      for v in e.out_binders:
        bwd[v] = f"b{i}"
  for i, e in enumerate(staged.eqns):   # edges into the backward pass, saved ones bold
    for x in e.inputs:
      if isinstance(x, Lit):
        continue
      if x in res_set and x not in {v for ee in staged.eqns[:i] for v in ee.out_binders}:
        g.edge(fwd[x], f"b{i}", color="#2b8a3e", penwidth="2.5")
      elif x in bwd:
        g.edge(bwd[x], f"b{i}")
  for k, x in enumerate(jaxpr.outvars):
    if isinstance(x, Lit):
      continue
    src = bwd.get(x) if x in staged.outvars else fwd.get(x)
    if src is not None:
      g.node(f"out{k}", f"out {k}: {var_label(x)}", shape="ellipse", peripheries="2",
             style="filled", fillcolor="#fff3cd")
      g.edge(src, f"out{k}")
      if x not in staged.outvars:   # the backward pass below the forward one: narrow
        for v in jaxpr.invars[n_primal:]:
          g.edge(f"out{k}", bwd[v], style="invis")
  return g


def policy_name(policy) -> str:
  """A policy as the user would write it: `dots_saveable`, `save_only_these_names('h')`."""
  if policy is None:
    return "nothing_saveable (the default)"
  for name, p in vars(ac.checkpoint_policies).items():
    if p is policy:
      return name
  if isinstance(policy, (ac.SaveOnlyTheseNames, ac.SaveAnyNamesButThese)):
    maker = ("save_only_these_names" if isinstance(policy, ac.SaveOnlyTheseNames)
             else "save_any_names_but_these")
    names = policy.saveable_names if isinstance(policy, ac.SaveOnlyTheseNames) else policy.names
    return f"{maker}({', '.join(map(repr, sorted(names)))})"
  if isinstance(policy, ac.SaveFromBothPolicies):
    return (f"save_from_both_policies({policy_name(policy.policy_1)}, "
            f"{policy_name(policy.policy_2)})")
  return getattr(policy, "__qualname__", None) or repr(policy)
