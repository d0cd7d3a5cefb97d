"""What every picture shares: the colours, a graphviz graph named by its alt
text, short descriptions of values, and the HTML that fits a picture or panes
of text to the column."""
from __future__ import annotations

import html
import os
import re
import shutil
import sys

import numpy as np

from .. import core
from ..core import Tracer

# One colour per interpreter, so a level reads the same in every picture.
TRACE_COLORS = {"EvalTrace": "#e8e8e8", "JVPTrace": "#cfe2ff",
                "BatchTrace": "#ffe5b4", "NamedBatchTrace": "#ffe5b4",
                "PartialEvalTrace": "#f8d7da", "DynamicJaxprTrace": "#d4edda",
                "LinearizeTrace": "#e2d9f3"}
HIGHLIGHT = "#c0392b"


def trace_color(trace_type) -> str:
  return TRACE_COLORS.get(getattr(trace_type, "__name__", str(trace_type)), "#f3e8ff")


def digraph(alt: str, **attrs):
  """A graph whose name is `alt`, a sentence saying what it shows: graphviz
  writes it as the SVG's <title>, which the book uses as the picture's alt text."""
  import graphviz   # deferred: loaded only when a picture is drawn (an optional dependency)
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
      vals = ", ".join(fmt_number(v) for v in a.ravel())
      return vals if a.ndim == 0 else f"{aval} [{vals}]"
    return aval
  return type(x).__name__


def fmt_number(v) -> str:
  if isinstance(v, (np.floating, float)):
    return f"{float(v):.4g}"
  return str(v)


def titled(title: str | None, alt: str) -> str:
  return f"{title}. {alt}" if title else alt


def clip(text: str, n: int) -> str:
  """`text` cut to at most `n` characters, at a word or comma, with an ellipsis."""
  if len(text) <= n:
    return text
  cut = text[:n - 1]
  at = max(cut.rfind(" "), cut.rfind(","))
  return (cut[:at] if at > n // 2 else cut).rstrip(" ,") + "…"


def wrap_words(text: str, width: int) -> str:
  """`text` (comma-separated) as escaped lines of about `width` characters."""
  lines, line = [], ""
  for word in text.split(" "):
    if line and len(line) + 1 + len(word) > width:
      lines.append(line)
      line = word
    else:
      line = f"{line} {word}" if line else word
  return "<br/>".join(html.escape(l) for l in lines + [line])


# The widest a picture may be drawn, in px at its natural size, to fit a
# desktop's column (about 940 px at 1280) with labels of 10 px, if its
# smallest label is 10 pt (13.3 px).
WIDE_COLUMN_PX = 940 * 13.3 / 10
# The same for a phone's pane (about 300 px at 390) with labels of 8 px.
NARROW_COLUMN_PX = 300 * 13.3 / 8


def natural_width(graph) -> float:
  """How wide graphviz draws `graph`, in px."""
  svg = graph.pipe(format="svg").decode()
  return float(re.search(r'<svg width="([0-9.]+)pt"', svg).group(1)) * 4 / 3


def svg_html(graph) -> str:
  """A graphviz graph as inline SVG that shrinks to fit its column (in the
  book, a click shows it full size), named for screen readers by the graph's
  alt text."""
  svg = graph.pipe(format="svg").decode()
  svg = svg[svg.index("<svg"):]
  # Lighter pages: graphviz's comments, and each node's and edge's <title>
  # (its internal name), go; the picture's own title stays.
  svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.S)
  first = svg.find("</title>") + len("</title>")
  svg = svg[:first] + re.sub(r"<title>.*?</title>\n?", "", svg[first:], flags=re.S)
  alt = html.escape(graph.name or "a graph", quote=True)
  svg = svg.replace("<svg", f'<svg role="img" aria-label="{alt}" '
                    'style="max-width:100%;height:auto"', 1)
  return f'<div class="adx-fit">{svg}</div>'


def panes_html(parts) -> str:
  """Side by side while there is room, one below the other when there is not."""
  return ('<div class="adx-panes" style="display:flex;flex-wrap:wrap;gap:16px;'
          'align-items:flex-start">' + "".join(
              f'<div style="flex:1 1 320px;min-width:0;max-width:100%">{p}</div>'
              for p in parts) + "</div>")


def as_html(obj) -> str:
  """HTML for a pane: a tuple's items side by side, a list's stacked."""
  if isinstance(obj, tuple):
    return panes_html(as_html(o) for o in obj)
  if isinstance(obj, list):
    return "".join(f"<div>{as_html(o)}</div>" for o in obj)
  if hasattr(obj, "pipe"):          # a graphviz graph
    return svg_html(obj)
  if hasattr(obj, "_repr_html_"):
    return obj._repr_html_()
  return f'<pre class="adx-code" style="overflow-x:auto">{html.escape(str(obj))}</pre>'
