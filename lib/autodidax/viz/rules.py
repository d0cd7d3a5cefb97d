"""Which rules each transformation uses: a primitive's rule tables, and the
parts of a custom function's equation."""
from __future__ import annotations

from .. import ad, batching, core, lowering
from .draw import HIGHLIGHT, digraph, titled


# Which rule tables each transformation consults for a primitive it meets.
TRANSFORMATION_RULES = {
    "evaluation": ["impl"],
    "make_jaxpr": ["abstract eval"],
    "jit": ["abstract eval", "lowering"],
    "jvp": ["JVP", "impl"],   # outside jit, the rule's own binds are evaluated
    "grad / vjp": ["JVP", "abstract eval", "transpose", "impl"],
    "vmap": ["batching", "impl"],
}


def rules_graph(prim, title: str | None = None):
  """Transformations on the left, the rule tables they use on the right; a
  rule `prim` has is drawn solid, a missing one dashed (its transformations fail)."""
  tables = {"impl": core.impl_rules, "abstract eval": core.abstract_eval_rules,
            "lowering": lowering.lowering_rules, "JVP": ad.jvp_rules,
            "transpose": ad.transpose_rules, "batching": batching.vmap_rules}
  name = getattr(prim, "name", prim)
  have = [r for r, table in tables.items() if prim in table]
  missing = [r for r in tables if r not in have]
  failing = [t for t, rules in TRANSFORMATION_RULES.items() if not set(rules) <= set(have)]
  alt = (f"Which rule tables each transformation uses for {name}: it has "
         f"{', '.join(have) or 'no'} rules" + (f"; missing {', '.join(missing)}, so "
         f"{', '.join(failing)} fail" if missing else "; every transformation works"))
  g = digraph(titled(title, alt), rankdir="LR", nodesep="0.15", ranksep="1.1")
  if title:
    g.attr(label=title, labelloc="t")
  for rule, table in tables.items():
    have = prim in table
    g.node(f"r_{rule}", f"{rule} rule" + ("" if have else "\n(missing)"), shape="box",
           style="rounded,filled" if have else "rounded,dashed",
           fillcolor="#d4edda" if have else "white", color="black" if have else HIGHLIGHT,
           fontcolor="black" if have else HIGHLIGHT)
  for t, rules in TRANSFORMATION_RULES.items():
    ok = all(prim in tables[r] for r in rules)
    g.node(f"t_{t}", t, shape="box", style="filled",
           fillcolor="#cfe2ff" if ok else "#f8d7da")
    for r in rules:
      g.edge(f"t_{t}", f"r_{r}", style="solid" if prim in tables[r] else "dashed")
  return g


# What each transformation runs of a custom function's equation (custom_derivatives.py).
CUSTOM_CALL_USES = {
    "custom_jvp": {"evaluation": ["body"], "jit": ["body"], "vmap": ["body", "rule"],
                   "jvp": ["rule"], "linearize": ["rule"], "grad, vjp": ["rule"]},
    "custom_vjp": {"evaluation": ["body"], "jit": ["body"], "vmap": ["body", "fwd", "bwd"],
                   "jvp": ["fwd"], "linearize": ["fwd"], "grad, vjp": ["fwd", "bwd"]},
}


# Where forward mode fails for a custom_vjp function.
CUSTOM_VJP_FAILS = {"jvp": "raises", "linearize": "applying it raises"}


def custom_call_graph(kind: str = "custom_jvp", title: str | None = None):
  """Transformations on the left; on the right, the parts of a `custom_jvp_call`
  (body, rule) or a `custom_vjp_call` (body, fwd, bwd) equation that each one
  runs (vmap batches them all). For custom_vjp, tangents can't be pushed
  forwards: jvp runs fwd, then fails; linearize runs fwd and stages the rest,
  and the linear function it returns fails when applied."""
  uses = CUSTOM_CALL_USES[kind]
  parts = {"body": "the body<br/><font point-size='9'>call_jaxpr</font>",
           "rule": "the rule<br/><font point-size='9'>jvp</font>",
           "fwd": "fwd<br/><font point-size='9'>output, residuals</font>",
           "bwd": "bwd<br/><font point-size='9'>cotangents</font>"}
  fails = CUSTOM_VJP_FAILS if kind == "custom_vjp" else {}
  alt = (f"What each transformation runs of a {kind}_call equation: "
         + "; ".join(f"{t}: {' and '.join(p)}" + (f", then {fails[t]}" if t in fails else "")
                     for t, p in uses.items()))
  g = digraph(titled(title, alt), rankdir="LR", nodesep="0.12", ranksep="0.9")
  if title:
    g.attr(label=title, labelloc="t")
  for t in uses:
    failing = t in fails
    label = f"<{t}<br/><font point-size='9'>{fails[t]}</font>>" if failing else t
    g.node(f"t_{t}", label, shape="box", style="filled",
           fillcolor="#f8d7da" if failing else "#cfe2ff")
  for part in dict.fromkeys(p for ps in uses.values() for p in ps):
    g.node(f"p_{part}", f"<{parts[part]}>", shape="box", style="rounded,filled",
           fillcolor="#e8e8e8" if part == "body" else "#d4edda")
  for t, ps in uses.items():
    for part in ps:
      g.edge(f"t_{t}", f"p_{part}", style="dashed" if t == "vmap" else "solid")
  return g
