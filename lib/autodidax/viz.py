"""Pictures of the machinery: the interpreter stack, boxed values, and binds.

    with viz.capture() as snaps:          # look inside a transformation
      jvp(lambda x: viz.peek(x) * 2., (3.,), (1.,))
    snaps[0]                              # stack + boxing, drawn by graphviz

    with viz.record() as rec:             # every bind, in order
      vmap(f)(xs)
    rec.stepper()                         # a widget that steps through them

Rendering needs the `graphviz` Python package and a `dot` program; widgets
need ipywidgets. Neither is imported until a picture is asked for.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import sys
import textwrap
from contextlib import contextmanager

import numpy as np

from . import core
from .core import MainTrace, Tracer

# One colour per interpreter, so a level reads the same in every picture.
TRACE_COLORS = {"EvalTrace": "#e8e8e8", "JVPTrace": "#cfe2ff",
                "BatchTrace": "#ffe5b4", "NamedBatchTrace": "#ffe5b4",
                "PartialEvalTrace": "#f8d7da", "DynamicJaxprTrace": "#d4edda",
                "LinearizeTrace": "#e2d9f3"}
HIGHLIGHT = "#c0392b"


def _color(trace_type) -> str:
  return TRACE_COLORS.get(getattr(trace_type, "__name__", str(trace_type)), "#f3e8ff")


def _digraph(alt: str, **attrs):
  """A graph whose name is `alt`, a sentence saying what it shows: graphviz
  writes it as the SVG's <title>, which the book uses as the picture's alt text."""
  import graphviz
  if shutil.which("dot") is None:   # e.g. the venv's graphviz-pure shim, not on PATH
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "dot")):
      os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
  g = graphviz.Digraph(alt)
  g.attr(fontname="Helvetica", fontsize="11", bgcolor="transparent", **attrs)
  g.attr("node", fontname="Helvetica", fontsize="11")
  g.attr("edge", fontname="Helvetica", fontsize="10")
  return g


def short(x, max_elems: int = 4) -> str:
  """A one-line description of a value: a number, an aval, or a boxed tracer."""
  if isinstance(x, Tracer):
    return f"{type(x).__name__}@{x._trace.main.level}<{x.aval.str_short()}>"
  if type(x) in (bool, int, float):
    return repr(x)
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    a = np.asarray(x)
    aval = core.dtype_short(a.dtype) + str(list(a.shape)).replace(" ", "")
    if a.size <= max_elems:
      vals = ", ".join(_fmt(v) for v in a.ravel())
      return vals if a.ndim == 0 else f"{aval} [{vals}]"
    return aval
  return type(x).__name__


def _fmt(v) -> str:
  if isinstance(v, (np.floating, float)):
    return f"{float(v):.4g}"
  return str(v)


# --- The interpreter stack ------------------------------------------------------------

def _stack_html(stack, active=None, dynamic=None) -> str:
  """The stack as one table, top level first; the active level is outlined."""
  rows = []
  for main in reversed(stack):
    name = main.trace_type.__name__
    is_active = active is not None and main.level == active.level
    data = ""
    if main.global_data is not None:
      shown = html.escape(_global_data_label(name, main.global_data))
      data = f'<br/><font point-size="9">{shown}</font>'
    if dynamic is not None and main.level == dynamic.level:
      data += '<br/><font point-size="9">(the dynamic trace)</font>'
    mark = f'<font color="{HIGHLIGHT}"><b>  handles this bind</b></font>' if is_active else ""
    border = f' border="3" color="{HIGHLIGHT}"' if is_active else ' border="1"'
    rows.append(f'<tr><td{border} bgcolor="{_color(main.trace_type)}" width="190" '
                f'cellpadding="6"><b>level {main.level}</b>: {name}{mark}{data}</td></tr>')
  return ('<table border="0" cellborder="1" cellspacing="3" style="rounded">'
          + "".join(rows) + "</table>")


def _titled(title: str | None, alt: str) -> str:
  return f"{title}. {alt}" if title else alt


def _global_data_label(trace_name: str, data) -> str:
  """What a level's global data is, in a few words (never a raw object repr)."""
  if trace_name == "BatchTrace":
    return f"axis_size={data}"
  if trace_name == "NamedBatchTrace":   # vmap(..., axis_name=...): an AxisData
    return f"axis_size={data.size}, axis_name={data.name!r}"
  if hasattr(data, "eqns"):   # a staging trace's JaxprBuilder
    return f"{type(data).__name__}: {len(data.eqns)} equations so far"
  r = repr(data)
  return _clip(f"a {type(data).__name__}" if " object at 0x" in r else r, 40)


def _clip(text: str, n: int) -> str:
  """`text` cut to at most `n` characters, at a word or comma, with an ellipsis."""
  if len(text) <= n:
    return text
  cut = text[:n - 1]
  at = max(cut.rfind(" "), cut.rfind(","))
  return (cut[:at] if at > n // 2 else cut).rstrip(" ,") + "…"


def _stack_alt(stack, active=None) -> str:
  levels = ", ".join(f"level {m.level} {m.trace_type.__name__}" for m in reversed(stack))
  alt = f"The interpreter stack, top first: {levels}"
  if active is not None:
    alt += f"; level {active.level} ({active.trace_type.__name__}) handles this bind"
  return alt


def stack_graph(stack=None, active: MainTrace | None = None, title: str | None = None,
                dynamic: MainTrace | None = None):
  """The interpreter stack, top level first; `active` is highlighted."""
  stack = list(core.trace_stack if stack is None else stack)
  g = _digraph(_titled(title, _stack_alt(stack, active)))
  if title:
    g.attr(label=title, labelloc="t")
  g.node("stack", f"<{_stack_html(stack, active, dynamic)}>", shape="plaintext")
  return g


# --- How one value is boxed -------------------------------------------------------------

def _tracer_fields(t: Tracer) -> list[tuple[str, object]]:
  """The payload of a tracer: every slot but the trace (primal/tangent, val, ...)."""
  names = []
  for cls in type(t).__mro__:
    names += [s for s in getattr(cls, "__slots__", ()) if s != "_trace" and s not in names]
  return [(n, getattr(t, n)) for n in names if hasattr(t, n)]


def _boxing_html(x) -> str:
  if not isinstance(x, Tracer):
    return (f'<table border="1" cellborder="0" cellspacing="0" bgcolor="white">'
            f'<tr><td>{html.escape(short(x))}</td></tr></table>')
  name = type(x).__name__
  rows = [f'<tr><td align="left"><b>{name}</b> (level {x._trace.main.level}) : '
          f'{x.aval.str_short()}</td></tr>']
  for field, val in _tracer_fields(x):
    if isinstance(val, Tracer) or hasattr(val, "shape"):
      rows.append(f'<tr><td align="left"><i>{field}</i></td></tr>'
                  f'<tr><td>{_boxing_html(val)}</td></tr>')
    else:
      rows.append(f'<tr><td align="left"><i>{field}</i> = '
                  f'{html.escape(short(val))[:30]}</td></tr>')
  color = _color(type(x._trace))
  return (f'<table border="1" cellborder="0" cellspacing="4" bgcolor="{color}">'
          + "".join(rows) + "</table>")


def _boxing_alt(x) -> str:
  """'a JVPTracer (level 2) boxing a BatchTracer (level 1) boxing f64[3]'."""
  if not isinstance(x, Tracer):
    return short(x)
  inner = [v for _, v in _tracer_fields(x) if isinstance(v, Tracer) or hasattr(v, "shape")]
  alt = f"a {type(x).__name__} (level {x._trace.main.level}) of type {x.aval.str_short()}"
  return alt + (f" boxing {' and '.join(_boxing_alt(v) for v in inner)}" if inner else "")


# --- Snapshots from inside a user function --------------------------------------------------

class Snapshot:
  """The stack and a value's boxing at one moment inside a transformation."""

  def __init__(self, value, label: str | None):
    self.value, self.label = value, label
    self.stack = tuple(core.trace_stack)
    self.dynamic = core.dynamic_trace

  def graph(self):
    alt = _titled(self.label, f"{_stack_alt(self.stack)}. The value: {_boxing_alt(self.value)}")
    g = _digraph(alt, compound="true")
    if self.label:
      g.attr(label=self.label, labelloc="t")
    with g.subgraph(name="cluster_stack") as s:
      s.attr(label="the interpreter stack", style="rounded", color="#999999")
      s.node("stack", f"<{_stack_html(self.stack, dynamic=self.dynamic)}>",
             shape="plaintext")
    with g.subgraph(name="cluster_value") as v:
      v.attr(label="the value", style="rounded", color="#999999")
      v.node("v", f"<{_boxing_html(self.value)}>", shape="plaintext")
    g.edge("stack", "v", style="invis")   # one above the other: narrow enough for a phone
    return g

  def _repr_mimebundle_(self, include=None, exclude=None):
    return self.graph()._repr_mimebundle_(include, exclude)


_snapshots: list | None = None


def peek(x, label: str | None = None):
  """Record the stack and `x`'s boxing (inside `capture()`); returns `x`."""
  if _snapshots is not None:
    _snapshots.append(Snapshot(x, label))
  return x


@contextmanager
def capture():
  """Collect a Snapshot for every `peek` call made inside the block."""
  global _snapshots
  prev, _snapshots = _snapshots, []
  try:
    yield _snapshots
  finally:
    _snapshots = prev


# --- Recording binds, and stepping through them -----------------------------------------------

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
    return _panes([svg_html(self.frame_graph(i)), text])

  def stepper(self, max_frames: int = 60):
    """A widget stepping through the binds: pick one in the list to see the
    stack at that moment. Every frame is rendered up front and the list is
    linked to the frames in the browser, so it works without a kernel."""
    return _stepper(self, max_frames, "the interpreter stack")


def _stepper(rec, max_frames: int, what: str):
  import ipywidgets as w
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


def _wrapped(text: str, width: int) -> str:
  """`text` (comma-separated) as escaped lines of about `width` characters."""
  lines, line = [], ""
  for word in text.split(" "):
    if line and len(line) + 1 + len(word) > width:
      lines.append(line)
      line = word
    else:
      line = f"{line} {word}" if line else word
  return "<br/>".join(html.escape(l) for l in lines + [line])


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
         f"{_clip('; '.join(tops), 160)}")
  g = _digraph(_titled(title, alt), rankdir="LR", nodesep="0.1", ranksep="0.3",
               ordering="out")
  if title:
    g.attr(label=title, labelloc="t")
  g.node("start", "", shape="point", style="invis", width="0")
  for b, (i, members) in enumerate(boxes):
    e = events[i]
    label = (f"<<b>{_wrapped(names(members), 26)}</b><br/>"
             f"<font point-size='9'>{where(e)}</font>>")
    g.node(f"b{b}", label, shape="box", style="rounded,filled",
           fillcolor=_color(e.main.trace_type))
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


# --- Jaxprs as dataflow graphs ------------------------------------------------------------

def _eqn_label(eqn, names, var_label) -> str:
  """An equation's node: the primitive, its literals, short params, outputs."""
  from .jaxpr import Lit, eqn_params, fmt_literal, has_jaxpr, pp_param
  lits = [fmt_literal(x.val) for x in eqn.inputs if isinstance(x, Lit)]
  params = ", ".join(f"{k}={pp_param(v, names, 0)}" for k, v in eqn_params(eqn)
                     if not has_jaxpr(v))
  label = f"<<b>{html.escape(eqn.primitive.name)}</b>"
  if lits:
    label += f" {html.escape(' '.join(lits))}"
  if params:
    label += f'<br/><font point-size="9">{html.escape(_clip(params, 60))}</font>'
  outs = ", ".join(var_label(v) for v in eqn.out_binders)
  return label + f'<br/><font point-size="9" color="#555555">{html.escape(outs)}</font>>'


def _jaxpr_alt(jaxpr, names, kind="A jaxpr's dataflow graph") -> str:
  from .jaxpr import Lit, fmt_literal
  def atom(x):
    return fmt_literal(x.val) if isinstance(x, Lit) else f"{names[x]}:{x.aval.str_short()}"
  prims = list(dict.fromkeys(e.primitive.name for e in jaxpr.eqns))
  return (f"{kind}: inputs {', '.join(map(atom, jaxpr.invars)) or 'none'}; "
          f"{len(jaxpr.eqns)} equations ({_clip(', '.join(prims), 80) or 'none'}); "
          f"outputs {', '.join(map(atom, jaxpr.outvars))}")


def jaxpr_graph(jaxpr, title: str | None = None, max_eqns: int = 200):
  """Inputs, constvars, one node per equation (literals shown inline), outputs."""
  from .jaxpr import ClosedJaxpr, Lit, VarNames, fmt_literal
  if isinstance(jaxpr, ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  names = VarNames()
  g = _digraph("", rankdir="TB", nodesep="0.2", ranksep="0.3")
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
    label = _eqn_label(eqn, names, var_label)
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
  g.name = _titled(title, _jaxpr_alt(jaxpr, names))   # the names as drawn
  return g


class SideBySide:
  """Texts in columns, e.g. our jaxpr beside `str(jax.make_jaxpr(f)(x))`;
  the columns stack when the page is narrow."""

  def __init__(self, *columns, titles=None):
    self.columns = [re.sub(r"\x1b\[[0-9;]*m", "", str(c)) for c in columns]  # no ANSI colours
    self.titles = list(titles or [f"#{i}" for i in range(len(columns))])

  def _repr_html_(self):
    return _panes([f'<div style="font-weight:bold">{html.escape(t)}</div>'
                   f'<pre class="adx-code" style="white-space:pre;overflow-x:auto">'
                   f'{html.escape(c)}</pre>' for t, c in zip(self.titles, self.columns)])

  def __repr__(self):
    return "\n\n".join(f"--- {t}\n{c}" for t, c in zip(self.titles, self.columns))


def side_by_side(*columns, titles=("autodidax", "JAX")):
  return SideBySide(*columns, titles=titles)


def explorer(examples: dict, make):
  """A kernel-free widget: pick an example, see what `make(fn)` renders.

  `examples` maps a name to a function of no arguments returning what to show
  (anything with an HTML or SVG representation). Every choice is rendered up
  front and the dropdown is linked in the browser.
  """
  import ipywidgets as w
  names = list(examples)
  panes = [w.HTML(_as_html(make(examples[n]))) for n in names]
  stack = w.Stack(panes, selected_index=0)
  width = f"{min(max(map(len, names)) + 12, 60)}ch"   # room for the longest name
  pick = w.Dropdown(options=names, index=0, description="example",
                    layout=w.Layout(width=width, max_width="100%"))
  w.jslink((pick, "index"), (stack, "selected_index"))
  return w.VBox([pick, stack])


def svg_html(graph) -> str:
  """A graphviz graph as inline SVG that shrinks to fit its column (in the
  book, a click shows it full size), named for screen readers by the graph's
  alt text."""
  svg = graph.pipe(format="svg").decode()
  svg = svg[svg.index("<svg"):]
  alt = html.escape(graph.name or "a graph", quote=True)
  svg = svg.replace("<svg", f'<svg role="img" aria-label="{alt}" '
                    'style="max-width:100%;height:auto"', 1)
  return f'<div class="adx-fit">{svg}</div>'


def _panes(parts) -> str:
  """Side by side while there is room, one below the other when there is not."""
  return ('<div class="adx-panes" style="display:flex;flex-wrap:wrap;gap:16px;'
          'align-items:flex-start">' + "".join(
              f'<div style="flex:1 1 320px;min-width:0;max-width:100%">{p}</div>'
              for p in parts) + "</div>")


def _as_html(obj) -> str:
  """HTML for a pane: a tuple's items side by side, a list's stacked."""
  if isinstance(obj, tuple):
    return _panes(_as_html(o) for o in obj)
  if isinstance(obj, list):
    return "".join(f"<div>{_as_html(o)}</div>" for o in obj)
  if hasattr(obj, "pipe"):          # a graphviz graph
    return svg_html(obj)
  if hasattr(obj, "_repr_html_"):
    return obj._repr_html_()
  return f'<pre class="adx-code" style="overflow-x:auto">{html.escape(str(obj))}</pre>'


# --- The jit pipeline -----------------------------------------------------------------------

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
  g = _digraph(alt, rankdir="TB", nodesep="0.4", ranksep="0.35")
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


# --- Many devices: shardings on a mesh, and collectives ------------------------------------------

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
  g = _digraph(_titled(title, alt), rankdir="TB", nodesep="0.5", ranksep="0.3")
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
  from .sharding import NamedSharding
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
  g = _digraph(_titled(title, alt), rankdir="LR", nodesep="0.15", ranksep="1.2")
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


# --- Partial evaluation: the recipe DAG and the unzipping --------------------------------------

def partial_eval_graph(f, args, known, title: str | None = None):
  """Run `f(*args)` with only the `known` arguments known, and draw the graph
  of tracers and recipes it leaves: known values (green) are computed on the
  spot; unknown tracers (orange) point to the recipes that will compute them,
  numbered in the topological order that becomes the jaxpr."""
  from . import partial_eval as pe
  from .core import full_raise, get_aval, new_main, raise_to_shaped
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
         f"recipes for the unknown values, in jaxpr order: {_clip(steps, 100) or 'none'}; "
         f"{len(unknown_out)} of {len(tracers_out)} outputs unknown")
  g = _digraph(_titled(title, alt), rankdir="TB", nodesep="0.25", ranksep="0.3")
  if title:
    g.attr(label=title, labelloc="t")
  names = {}
  tid = lambda t: f"t{id(t)}"

  def tracer_name(t):
    if id(t) not in names:
      names[id(t)] = f"t{len(names)}"
    return names[id(t)]

  for i, t in enumerate(tracers_in):
    label = f"x{i}: " + (f"known {short(t.pval.const)}" if t.pval.is_known else t.aval.str_short())
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
      g.node(rid, f"const\n{short(r.val)}", shape="box", style="filled,dashed",
             fillcolor="#d4edda")
      g.edge(rid, tid(t), style="dashed")
    elif isinstance(r, pe.JaxprEqnRecipe):
      rid = f"r{id(r)}"
      if id(r) not in drawn_recipes:
        drawn_recipes.add(id(r))
        g.node(rid, f"<<b>{r.prim.name}</b><br/><font point-size='9'>step {step[id(r)][0]}</font>>",
               shape="box", style="rounded,filled", fillcolor="#cfe2ff")
        for x in r.tracers_in:
          g.edge(tid(x), rid)
      g.edge(rid, tid(t))
  for k, t in enumerate(tracers_out):
    if t.pval.is_known:
      g.node(f"out{k}", f"out {k}: known {short(t.pval.const)}", shape="note",
             style="filled", fillcolor="#d4edda")
    else:
      g.node(f"out{k}", f"out {k}", shape="doublecircle", style="filled", fillcolor="#fff3cd",
             width="0.3")
      g.edge(tid(t), f"out{k}")
  return g


class Columns:
  """Several titled panes side by side (text, graphs, or anything HTML-able)."""

  def __init__(self, panes: dict):
    self.panes = panes

  def _repr_html_(self):
    return _panes(f'<div style="font-weight:bold;margin-bottom:4px">{html.escape(t)}</div>'
                  f'{_as_html(p)}' for t, p in self.panes.items())

  def __repr__(self):
    return "\n\n".join(f"--- {t}\n{p}" for t, p in self.panes.items())


def unzipping(jaxpr, unknowns, graphs: bool = True):
  """A jaxpr beside its known part (runs now) and unknown part (staged)."""
  from . import partial_eval as pe
  from .jaxpr import ClosedJaxpr
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
  from .api import linearize, make_jaxpr, vjp
  n = len(args)
  forward = make_jaxpr(lambda *a: _jvp_pair(f, a[:n], a[n:]))(*args, *args)
  _, f_lin = linearize(f, *args)
  out, f_vjp = vjp(f, *args)
  transposed = make_jaxpr(f_vjp)(out)
  return Columns({"jvp (forward)": forward, "linearized (linear part)": f_lin.jaxpr,
                  "transposed (backward pass)": transposed})


def _jvp_pair(f, primals, tangents):
  from .api import jvp
  return jvp(f, tuple(primals), tuple(tangents))


# --- Rematerialization: what a policy saves and what it recomputes -----------------------------

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
  from .ad_checkpoint import nothing_saveable, partial_eval_jaxpr_policy
  from .api import jvp, make_jaxpr
  from .jaxpr import Jaxpr
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
  from .jaxpr import Lit, VarNames
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
         f"({_clip(', '.join(e.primitive.name for e in recomputed), 60) or 'none'}) and runs "
         f"{len(staged.eqns) - len(recomputed)} linear ones")
  g = _digraph(_titled(title, alt), rankdir="TB", nodesep="0.2", ranksep="0.3",
               compound="true")
  g.attr(label=title or f"policy: {pname}. {num_res} saved, {len(recomputed)} recomputed",
         labelloc="t")
  fwd, bwd = {}, {}   # Var -> node id, in each pass

  def eqn_node(sg, node, e, kind):   # short labels: the primitive, a name, the fate
    fill, style, word = REMAT_STYLES[kind]
    prim = e.primitive.name + (f" {e.params['name']}" if "name" in e.params
                               and isinstance(e.params["name"], str) else "")
    outs = ", ".join(var_label(v) for v in e.out_binders)
    label = (f'<<b>{html.escape(prim)}</b><br/><font point-size="9" color="#555555">'
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
  return g


def policy_name(policy) -> str:
  """A policy as the user would write it: `dots_saveable`, `save_only_these_names('h')`."""
  from . import ad_checkpoint as ac
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


# --- Tracing calls: who calls which rule, with what ---------------------------------------

_call_depth = 0   # how many traced calls are running (the indentation)
_tracing = True   # whether `trace` prints; see `tracing`


class tracing:
  """`viz.tracing(False)` silences every `trace` decorator, `viz.tracing(True)`
  turns them back on; as a `with` block, the old setting returns at its end."""

  def __init__(self, enabled: bool):
    global _tracing
    self._prev, _tracing = _tracing, enabled

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    global _tracing
    _tracing = self._prev


def _pp_aval(a) -> str:
  if isinstance(a, core.ConcreteArray):
    return f"ConcreteArray({a.str_short()}, {pp_traced(a.val)})"
  return repr(a)


def pp_traced(x) -> str:
  """A value as `trace` prints it: tracers as their aval and interpreter."""
  if isinstance(x, Tracer):
    main = x._trace.main
    return f"Traced<{_pp_aval(x.aval)}>with<{main.trace_type.__name__} level={main.level}>"
  if isinstance(x, core.ShapedArray):
    return _pp_aval(x)
  if isinstance(x, tuple):
    return f"({', '.join(map(pp_traced, x))}{',' if len(x) == 1 else ''})"
  if isinstance(x, list):
    return f"[{', '.join(map(pp_traced, x))}]"
  if type(x) in (bool, int, float, str) or x is None:
    return str(x)
  if isinstance(x, np.generic):
    return str(x.item())
  if hasattr(x, "shape") and hasattr(x, "dtype"):   # NumPy and device arrays
    a = np.asarray(x)
    if a.ndim == 0:
      return str(a.item())
    return np.array2string(a, threshold=8) if a.size <= 8 else short(a)
  r = repr(x)
  return f"<{type(x).__name__}>" if " object at 0x" in r else r


def trace_note(msg: str):
  """Print `msg` at the indentation of the traced call that is running."""
  if _tracing:
    print("  " * _call_depth + msg)


def trace(name: str):
  """A decorator printing each call of a function and what it returns,
  indented by nesting, with tracers shown as their abstract value and their
  interpreter, e.g. `Traced<ShapedArray(f64[])>with<JVPTrace level=1>`:

      @viz.trace("multiply_add_impl")
      def multiply_add_impl(x, y, z): ...

  The indentation is restored when the function raises. `viz.tracing(False)`
  silences it; `viz.trace_note(msg)` prints a note at the current indentation.
  """
  import functools

  def decorate(fun):
    @functools.wraps(fun)
    def traced(*args, **kwargs):
      global _call_depth
      if not _tracing:
        return fun(*args, **kwargs)
      shown = [pp_traced(a) for a in args] + [f"{k}={pp_traced(v)}" for k, v in kwargs.items()]
      trace_note(f"call {name}({', '.join(shown)})")
      _call_depth += 1
      try:
        out = fun(*args, **kwargs)
      except BaseException as e:
        _call_depth -= 1
        trace_note(f"|<- {name} raised {type(e).__name__}")
        raise
      _call_depth -= 1
      trace_note(f"|<- {name} = {pp_traced(out)}")
      return out
    return traced
  return decorate


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
  from . import ad, batching, lowering
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
  g = _digraph(_titled(title, alt), rankdir="LR", nodesep="0.15", ranksep="1.1")
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


def custom_call_graph(kind: str = "custom_jvp", title: str | None = None):
  """Transformations on the left; on the right, the parts of a `custom_jvp_call`
  (body, rule) or a `custom_vjp_call` (body, fwd, bwd) equation that each one
  runs (vmap batches them all). For custom_vjp, jvp's tangents can't be
  computed: it runs fwd, then fails."""
  uses = CUSTOM_CALL_USES[kind]
  parts = {"body": "the body<br/><font point-size='9'>call_jaxpr</font>",
           "rule": "the rule<br/><font point-size='9'>jvp</font>",
           "fwd": "fwd<br/><font point-size='9'>output, residuals</font>",
           "bwd": "bwd<br/><font point-size='9'>cotangents</font>"}
  alt = (f"What each transformation runs of a {kind}_call equation: "
         + "; ".join(f"{t}: {' and '.join(p)}" for t, p in uses.items()))
  g = _digraph(_titled(title, alt), rankdir="LR", nodesep="0.12", ranksep="0.9")
  if title:
    g.attr(label=title, labelloc="t")
  for t in uses:
    failing = kind == "custom_vjp" and t == "jvp"
    label = f"<{t}<br/><font point-size='9'>raises</font>>" if failing else t
    g.node(f"t_{t}", label, shape="box", style="filled",
           fillcolor="#f8d7da" if failing else "#cfe2ff")
  for part in dict.fromkeys(p for ps in uses.values() for p in ps):
    g.node(f"p_{part}", f"<{parts[part]}>", shape="box", style="rounded,filled",
           fillcolor="#e8e8e8" if part == "body" else "#d4edda")
  for t, ps in uses.items():
    for part in ps:
      g.edge(f"t_{t}", f"p_{part}", style="dashed" if t == "vmap" else "solid")
  return g


# --- Jaxprs with sub-jaxprs (cond, while, scan, xla_call) as nested clusters ----------------

def jaxpr_graph_nested(jaxpr, title: str | None = None, max_eqns: int = 200):
  """Like `jaxpr_graph`, but a higher-order equation is drawn as a cluster
  holding its sub-jaxprs (each a cluster of its own, named by its parameter),
  with edges from the equation's operands to the sub-jaxprs' inputs.
  Names are shared across levels, as in the printed jaxpr."""
  from .jaxpr import ClosedJaxpr, Jaxpr, Lit, VarNames, fmt_literal
  if isinstance(jaxpr, ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  names = VarNames()
  kind = "A jaxpr's dataflow graph, sub-jaxprs of higher-order equations drawn inside them"
  g = _digraph("", rankdir="TB", nodesep="0.2", ranksep="0.3", compound="true")
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
    for eqn in jx.eqns[:max_eqns]:
      label = _eqn_label(eqn, names, var_label)
      subs = list(sub_jaxprs(eqn))
      node = fresh("e")
      ins = [producer.get(x) if not isinstance(x, Lit) else None for x in eqn.inputs]
      if not subs:
        sg.node(node, label, shape="box", style="rounded,filled", fillcolor="#cfe2ff")
        for src in ins:
          if src is not None:
            sg.edge(src, node)
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

  outs = draw(g, jaxpr, {})
  with g.subgraph(name="outputs") as s:
    s.attr(rank="sink")
    for k, (x, src) in enumerate(zip(jaxpr.outvars, outs)):
      label = f"out {k}: " + (fmt_literal(x.val) if isinstance(x, Lit) else var_label(x))
      s.node(f"out{k}", label, shape="ellipse", peripheries="2", style="filled",
             fillcolor="#fff3cd")
      if src is not None:
        g.edge(src, f"out{k}")
  g.name = _titled(title, _jaxpr_alt(jaxpr, names, kind))   # the names as drawn
  return g


# --- Context-based dispatch ("JAX today"): traces with parents, not a stack -----------------

def _sl_short(x) -> str:
  from . import stackless as sl
  if isinstance(x, core.Tracer) and isinstance(x._trace, sl.Trace):
    return f"{type(x).__name__}#{x._trace.serial}<{x.aval.str_short()}>"
  return short(x)


def trace_chain_graph(traces, handling=None, title: str | None = None):
  """Each trace of `traces` and its chain of parents, down to the evaluator:
  an arrow goes from a trace to its parent; `handling` is outlined."""
  g = _digraph("The chain of traces: each trace points to its parent, down to the "
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
           shape="box", style="rounded,filled", fillcolor=_color(type(t)),
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
    return _panes([svg_html(self.frame_graph(i)),
                   f'<div style="font-family:monospace;font-size:14px"><b>in:</b> {args}</div>'])

  def stepper(self, max_frames: int = 60):
    """Like `Recording.stepper`, for the context-based design: it works offline."""
    return _stepper(self, max_frames, "the chain of traces")


@contextmanager
def record_dispatch():
  """Record every bind that autodidax.stackless dispatches inside the block."""
  from . import stackless as sl
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


def dtype_lattice():
  """JAX's type-promotion lattice (autodidax.dtypes.LATTICE), lowest at the
  bottom: two dtypes promote to the lowest node above both. The weak types
  of Python scalars are dashed."""
  from .dtypes import LATTICE
  name = lambda n: n if isinstance(n, str) else core.dtype_short(n)
  g = _digraph("JAX's type-promotion lattice: each dtype points to the types it "
              "promotes to; two dtypes promote to the lowest type above both", rankdir="BT")
  for node in LATTICE:
    weak = isinstance(node, str)
    g.node(name(node), shape="box", style="dashed" if weak else "solid")
  for node, above in LATTICE.items():
    for up in above:
      g.edge(name(node), name(up))
  return g
