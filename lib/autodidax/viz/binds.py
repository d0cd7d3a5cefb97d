"""Recording binds, then stepping through them (a widget) or drawing them as a tree."""
from __future__ import annotations

import html
from contextlib import contextmanager

from .. import core
from .draw import (HIGHLIGHT, clip, digraph, panes_html, short, svg_html, titled, trace_color,
                   wrap_words)
from .stack import stack_graph


class Recording:
  """The binds made while a `record()` block ran, in the order they started."""

  def __init__(self):
    self.events: list[core.BindEvent] = []

  def __len__(self):
    return len(self.events)

  def __getitem__(self, i):
    return self.events[i]

  def lines(self) -> list[str]:
    return [_event_line(e) for e in self.events]

  def __repr__(self):
    return "\n".join(self.lines())

  def frame_graph(self, i: int):
    e = self.events[i]
    return stack_graph(e.stack, active=e.main,
                       title=f"step {i + 1}/{len(self.events)}: bind({e.prim.name})")

  def frame_html(self, i: int, context: int = 6) -> str:
    """One frame: the stack picture beside the list of binds around step i
    (below it, in a narrow column)."""
    lo, hi = max(0, i - context), min(len(self.events), i + context + 1)
    items = []
    for j in range(lo, hi):
      line = html.escape(_event_line(self.events[j]))
      style = (f"color:{HIGHLIGHT};font-weight:bold" if j == i else "color:#555")
      items.append(f'<div style="{style};white-space:pre">{j + 1:3d} {line}</div>')
    e = self.events[i]
    detail = (f"<div style='margin-top:6px'><b>in:</b> "
              f"{html.escape(', '.join(short(a) for a in e.args))}<br/>"
              f"<b>out:</b> {html.escape(', '.join(short(o) for o in e.outs or []))}</div>")
    text = f'<div class="adx-code" style="overflow-x:auto">{"".join(items)}{detail}</div>'
    return panes_html([svg_html(self.frame_graph(i)), text])

  def stepper(self, max_frames: int = 60):
    """A widget stepping through the binds: pick one in the list to see the
    stack at that moment. Every frame is rendered up front and the list is
    linked to the frames in the browser, so it works without a kernel."""
    return stepper_widget(self, max_frames, "the interpreter stack")


def stepper_widget(rec, max_frames: int, what: str):
  import ipywidgets as w   # deferred: a widget library, loaded only when a widget is drawn
  lines = rec.lines()
  n = min(len(lines), max_frames)
  if n == 0:
    return w.HTML("<i>no binds were recorded</i>")
  frames = w.Stack([w.HTML(rec.frame_html(i, context=0)) for i in range(n)], selected_index=0)
  steps = w.Select(options=[f"{i + 1:3d} {line}" for i, line in enumerate(lines[:n])],
                   index=0, rows=min(n, 12), description="bind",
                   layout=w.Layout(width="100%"))
  w.jslink((steps, "index"), (frames, "selected_index"))
  note = w.HTML(f"<small>{n} of {len(lines)} binds; pick one to see "
                f"{what} as it is handled</small>")
  return w.VBox([note, steps, frames])


def _event_line(e: core.BindEvent) -> str:
  params = ", ".join(f"{k}={v}" for k, v in e.params.items())
  args = ", ".join(short(a) for a in e.args)
  return (f"{'  ' * e.depth}{e.prim.name}({args}{', ' if params else ''}{params})"
          f"  → {e.main.trace_type.__name__}@{e.main.level}")


def bind_tree(rec, title: str | None = None, max_binds: int = 60):
  """The binds of a `record()` as a tree, read left to right and top to
  bottom: each bind points to the binds made while it ran (a rule's own
  binds, a jaxpr's equations), and is coloured by the interpreter that
  handled it. Neighbouring binds that made none and were handled by the same
  interpreter share one box (`mul, add`)."""
  events = rec.events[:max_binds]
  parents, open_at = [], {}   # open_at[depth]: the last bind seen at that depth
  for i, e in enumerate(events):
    parents.append(open_at.get(e.depth - 1))
    open_at[e.depth] = i
  leaf = [i not in parents for i in range(len(events))]
  boxes: list = []   # [first event, [event indices]], in order
  for i, e in enumerate(events):
    last = boxes[-1][1] if boxes else None
    if (last and leaf[i] and leaf[last[-1]] and parents[last[-1]] == parents[i]
        and events[last[-1]].main is e.main):
      last.append(i)
    else:
      boxes.append([i, [i]])
  box_of = {i: b for b, (_, members) in enumerate(boxes) for i in members}
  where = lambda e: f"{e.main.trace_type.__name__} (level {e.main.level})"
  names = lambda members: ", ".join(events[i].prim.name for i in members)
  tops = [f"{names(m)} by {where(events[i])}" for i, m in boxes if parents[i] is None]
  alt = (f"The binds as a tree, each pointing to the binds it made: "
         f"{clip('; '.join(tops), 160)}")
  g = digraph(titled(title, alt), rankdir="LR", nodesep="0.1", ranksep="0.2",
              ordering="out")
  g.attr("node", margin="0.06,0.03")
  if title:
    g.attr(label=title, labelloc="t")
  g.node("start", "", shape="point", style="invis", width="0")
  for b, (i, members) in enumerate(boxes):
    e = events[i]
    label = (f"<<b>{wrap_words(names(members), 18)}</b><br/><font point-size='10'>"
             f"{e.main.trace_type.__name__}<br/>level {e.main.level}</font>>")
    g.node(f"b{b}", label, shape="box", style="rounded,filled",
           fillcolor=trace_color(e.main.trace_type))
    parent = parents[i]
    g.edge("start" if parent is None else f"b{box_of[parent]}", f"b{b}",
           style="invis" if parent is None else "solid")
  if len(rec.events) > max_binds:
    g.node("more", f"... {len(rec.events) - max_binds} more binds", shape="plaintext")
  return g


@contextmanager
def record():
  """Record every bind made inside the block (nesting depth included)."""
  rec = Recording()
  with core.observe_binds(rec.events.append):
    yield rec
