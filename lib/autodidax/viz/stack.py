"""The interpreter stack, how one value is boxed, and snapshots of both taken
from inside a user function (`peek` within `capture`)."""
from __future__ import annotations

import html
from contextlib import contextmanager

from .. import core
from ..core import MainTrace, Tracer
from .draw import HIGHLIGHT, clip, digraph, short, titled, trace_color


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
    rows.append(f'<tr><td{border} bgcolor="{trace_color(main.trace_type)}" width="190" '
                f'cellpadding="6"><b>level {main.level}</b>: {name}{mark}{data}</td></tr>')
  return ('<table border="0" cellborder="1" cellspacing="3" style="rounded">'
          + "".join(rows) + "</table>")


def _global_data_label(trace_name: str, data) -> str:
  """What a level's global data is, in a few words (never a raw object repr)."""
  if trace_name == "BatchTrace":
    return f"axis_size={data}"
  if trace_name == "NamedBatchTrace":   # vmap(..., axis_name=...): an AxisData
    return f"axis_size={data.size}, axis_name={data.name!r}"
  if hasattr(data, "eqns"):   # a staging trace's JaxprBuilder
    return f"{type(data).__name__}: {len(data.eqns)} equations so far"
  r = repr(data)
  return clip(f"a {type(data).__name__}" if " object at 0x" in r else r, 40)


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
  g = digraph(titled(title, _stack_alt(stack, active)))
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
  color = trace_color(type(x._trace))
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
    alt = titled(self.label, f"{_stack_alt(self.stack)}. The value: {_boxing_alt(self.value)}")
    g = digraph(alt, compound="true")
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
