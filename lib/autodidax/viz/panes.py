"""Things shown side by side: texts in columns, titled panes, and an explorer
widget that picks one example of several."""
from __future__ import annotations

import html
import re

from .draw import as_html, panes_html


class SideBySide:
  """Texts in columns, e.g. our jaxpr beside `str(jax.make_jaxpr(f)(x))`;
  the columns stack when the page is narrow."""

  def __init__(self, *columns, titles=None):
    self.columns = [re.sub(r"\x1b\[[0-9;]*m", "", str(c)) for c in columns]  # no ANSI colours
    self.titles = list(titles or [f"#{i}" for i in range(len(columns))])

  def _repr_html_(self):
    return panes_html([f'<div style="font-weight:bold">{html.escape(t)}</div>'
                   f'<pre class="adx-code" style="white-space:pre;overflow-x:auto">'
                   f'{html.escape(c)}</pre>' for t, c in zip(self.titles, self.columns)])

  def __repr__(self):
    return "\n\n".join(f"--- {t}\n{c}" for t, c in zip(self.titles, self.columns))


class Columns:
  """Several titled panes side by side (text, graphs, or anything HTML-able)."""

  def __init__(self, panes: dict):
    self.panes = panes

  def _repr_html_(self):
    return panes_html(f'<div style="font-weight:bold;margin-bottom:4px">{html.escape(t)}</div>'
                  f'{as_html(p)}' for t, p in self.panes.items())

  def __repr__(self):
    return "\n\n".join(f"--- {t}\n{p}" for t, p in self.panes.items())


def side_by_side(*columns, titles=("autodidax", "JAX")):
  return SideBySide(*columns, titles=titles)


def explorer(examples: dict, make):
  """A kernel-free widget: pick an example, see what `make(fn)` renders.

  `examples` maps a name to a function of no arguments returning what to show
  (anything with an HTML or SVG representation). Every choice is rendered up
  front and the dropdown is linked in the browser.
  """
  import ipywidgets as w   # deferred: a widget library, loaded only when a widget is drawn
  names = list(examples)
  panes = [w.HTML(as_html(make(examples[n]))) for n in names]
  stack = w.Stack(panes, selected_index=0)
  width = f"{min(max(map(len, names)) + 12, 60)}ch"   # room for the longest name
  pick = w.Dropdown(options=names, index=0, description="example",
                    layout=w.Layout(width=width, max_width="100%"))
  w.jslink((pick, "index"), (stack, "selected_index"))
  return w.VBox([pick, stack])


class ByWidth:
  """One picture laid out twice: `wide` (say, left to right) for a wide
  column, `narrow` (top to bottom) for a phone's. The page shows the one
  that fits, by CSS alone, so it works without JavaScript too."""

  def __init__(self, wide, narrow, at: int = 700):
    self.wide, self.narrow, self.at = wide, narrow, at

  def _repr_html_(self):
    css = (f"@media (max-width:{self.at - 0.02}px){{.adx-wide-only{{display:none}}}}"
           f"@media (min-width:{self.at}px){{.adx-narrow-only{{display:none}}}}")
    return (f"<style>{css}</style><div class=\"adx-wide-only\">{as_html(self.wide)}</div>"
            f"<div class=\"adx-narrow-only\">{as_html(self.narrow)}</div>")

  def __repr__(self):
    return repr(self.wide)


class Stacked:
  """Pictures one below the other, each as wide as the column allows."""

  def __init__(self, pictures):
    self.pictures = list(pictures)

  def _repr_html_(self):
    return as_html(self.pictures)

  def __repr__(self):
    return "\n\n".join(repr(p) for p in self.pictures)
