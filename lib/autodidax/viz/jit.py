"""The jit pipeline: function, jaxpr, StableHLO, optimized HLO, executable."""
from __future__ import annotations

import html

from .draw import digraph


def jit_pipeline(jitted, *args):
  """Python function -> jaxpr -> StableHLO -> optimized HLO -> executable, for
  `jitted(*args)`, with the sizes of each stage and the state of both caches."""
  lowered = jitted.lower(*args)
  compiled = lowered.compile()
  jaxpr = lowered.jaxpr
  stablehlo = lowered.as_text()
  hlo = compiled.as_text()
  fused = hlo.count("fused_computation") + hlo.count("%fusion")
  name = getattr(jitted, "__name__", "f")
  n_ops, platform = stablehlo.count(" = stablehlo."), compiled.platform
  stages = [("py", "Python function", f"{name}(...)", "#e8e8e8"),
            ("jaxpr", "jaxpr", f"{len(jaxpr.eqns)} equations", "#d4edda"),
            ("shlo", "StableHLO", f"{n_ops} ops", "#cfe2ff"),
            ("hlo", "optimized HLO", f"{max(fused, 0)} fusion mentions", "#ffe5b4"),
            ("exe", "executable", f"on {platform}", "#f8d7da")]
  caches = f"traces: {jitted.trace_count}, specializations: {jitted.num_specializations}"
  alt = (f"The jit pipeline of {name}: " + " → ".join(f"{t} ({d})" for _, t, d, _ in stages)
         + f"; caches: {caches}")
  # Top to bottom, so that it stays narrow enough to read on a phone.
  g = digraph(alt, rankdir="TB", nodesep="0.4", ranksep="0.35")
  g.attr("node", shape="box", style="rounded,filled", fillcolor="#f8f9fa")
  for node, t, d, color in stages:
    g.node(node, f"<<b>{t}</b><br/>{html.escape(d)}>", fillcolor=color)
  g.edge("py", "jaxpr", label=" trace (make_jaxpr)")
  g.edge("jaxpr", "shlo", label=" lower (lowering rules)")
  g.edge("shlo", "hlo", label=" XLA passes")
  g.edge("hlo", "exe", label=" codegen")
  g.node("cache", f"<<b>caches</b><br/>traces: {jitted.trace_count}<br/>"
                  f"specializations: {jitted.num_specializations}>",
         shape="note", fillcolor="#fff3cd")
  g.edge("cache", "jaxpr", style="dashed", arrowhead="none")
  g.edge("cache", "exe", style="dashed", arrowhead="none")
  return g
