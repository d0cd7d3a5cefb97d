"""Context-based dispatch ("JAX today"): traces with parents, not a stack."""
from __future__ import annotations

import html
import textwrap
from contextlib import contextmanager

from .. import core, stackless as sl
from .binds import stepper_widget
from .draw import HIGHLIGHT, digraph, panes_html, short, svg_html, trace_color


def _sl_short(x) -> str:
  if isinstance(x, core.Tracer) and isinstance(x._trace, sl.Trace):
    return f"{type(x).__name__}#{x._trace.serial}<{x.aval.str_short()}>"
  return short(x)


def trace_chain_graph(traces, handling=None, title: str | None = None):
  """Each trace of `traces` and its chain of parents, down to the evaluator:
  an arrow goes from a trace to its parent; `handling` is outlined."""
  g = digraph("The chain of traces: each trace points to its parent, down to the "
               "evaluator", rankdir="TB")
  if title:
    g.attr(label=title, labelloc="t")
  seen: dict = {}
  todo = [t for t in traces if t is not None]
  while todo:
    t = todo.pop()
    if id(t) in seen:
      continue
    seen[id(t)] = t
    todo += [p for p in (t.parent, getattr(t, "tangent_trace", None)) if p is not None]
  for t in seen.values():
    extra = (f"<br/><font point-size='9'>axis_size={t.axis_size}</font>"
             if hasattr(t, "axis_size") else "")
    mark = (f"<br/><font color='{HIGHLIGHT}'><b>handles this bind</b></font>"
            if t is handling else "")
    g.node(f"t{id(t)}", f"<<b>{type(t).__name__}</b> #{t.serial}{extra}{mark}>",
           shape="box", style="rounded,filled", fillcolor=trace_color(type(t)),
           color=HIGHLIGHT if t is handling else "#555555",
           penwidth="3" if t is handling else "1")
    if t.parent is not None:
      g.edge(f"t{id(t)}", f"t{id(t.parent)}", label="parent")
    if getattr(t, "tangent_trace", None) is not None:
      g.edge(f"t{id(t)}", f"t{id(t.tangent_trace)}", label="tangents", style="dashed")
  return g


class DispatchRecording:
  """The binds made while a `record_dispatch()` block ran: which trace handled
  each one, the chain of parents it had, and what it was given."""

  def __init__(self):
    self.events: list = []   # (trace, prim, args, depth, root trace at depth 0, label)

  def __len__(self):
    return len(self.events)

  def lines(self, width: int | None = None) -> list[str]:
    """One line per bind; with `width`, a longer one is folded onto indented lines."""
    out = [f"{'  ' * d}{p.name}({', '.join(_sl_short(a) for a in args)})  → {label}"
           for _, p, args, d, _, label in self.events]
    if width is None:
      return out
    return ["\n".join(textwrap.wrap(line, width, subsequent_indent="    ",
                                     break_long_words=False)) for line in out]

  def __repr__(self):
    return "\n".join(self.lines())

  def frame_graph(self, i: int):
    t, p, _, _, root, _ = self.events[i]
    return trace_chain_graph([root, t], handling=t,
                             title=f"step {i + 1}/{len(self.events)}: bind({p.name})")

  def frame_html(self, i: int, context: int = 0) -> str:
    """One frame: the chain of traces (named for screen readers, fit to the
    column) beside the bind's operands; one below the other on a phone."""
    args = html.escape(", ".join(_sl_short(a) for a in self.events[i][2]))
    return panes_html([svg_html(self.frame_graph(i)),
                   f'<div style="font-family:monospace;font-size:14px"><b>in:</b> {args}</div>'])

  def stepper(self, max_frames: int = 60):
    """Like `Recording.stepper`, for the context-based design: it works offline."""
    return stepper_widget(self, max_frames, "the chain of traces")


@contextmanager
def record_dispatch():
  """Record every bind that autodidax.stackless dispatches inside the block."""
  rec = DispatchRecording()
  roots: list = [None]

  def observe(trace, prim, args, depth):
    if depth == 0:
      roots[0] = trace
    rec.events.append((trace, prim, tuple(args), depth, roots[0], repr(trace)))
  sl.dispatch_observers.append(observe)
  try:
    yield rec
  finally:
    sl.dispatch_observers.remove(observe)
