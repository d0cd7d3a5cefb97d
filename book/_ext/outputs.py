"""How chapters show outputs that the library's own reprs show too bluntly.

A chapter's hidden setup cell imports this module (`book/_ext` is on its
path, as for short_tracebacks). The library stays what the chapters teach;
these helpers only decide how its results look on the page:

- `compare(ours, theirs)`: two texts (jaxprs, StableHLO) in panes that sit
  side by side when both fit the column and stack otherwise, with every
  token that differs marked. Long lines wrap under their own indentation, so
  nothing is ever cut off. Both sides are normalised first, so that only
  real differences are marked: a `let name = {...} in` block, which JAX
  prints for a sub-jaxpr, is written in place where its name is used, as
  ours prints it (the pane's title says so); so is a reduction's one-op
  body, which MLIR's printer writes `applies stablehlo.add`; JAX's
  attributes that change nothing XLA runs (`jax.result_info`, the default
  precision, the mesh in a second spelling) are left out; MLIR's value
  names are alike, float literals compare by value, and arrays (and tuples
  of them) are written as NumPy writes them. `dtypes=False` compares
  float64 and float32 alike, for a pair whose sides differ in precision by
  design. A pair that differs throughout (two programs, two designs) is
  declared with `whole="why"`: the sentence shows under the panes, and the
  site test then allows more than a quarter of the lines marked.
- `panes({title: thing, ...})`: the same panes without the diff, for
  pictures or for more than two texts (`viz.Columns` and `viz.SideBySide`
  are accepted as they are).
- `without_metadata(hlo)`: compiled HLO without the `metadata={...}` that
  XLA attaches to every instruction (source file and line).
- `fold(text)`: lines longer than the page's code column folded at a space,
  the rest indented under the line's own start.
- `svg_plots()`: matplotlib figures drawn as SVG, their text kept as text.
- `trace_log()`: `viz.trace` prints tracers as `jvp@2 f64[]=2.0` (the
  interpreter, its level, the abstract value and, when known, the value)
  instead of their full repr.
"""
from __future__ import annotations

import difflib
import html
import re

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A float literal (`0.000000e+00`) is one token, so that it compares by value.
TOKEN = re.compile(r"\s+|\d+\.\d*e[-+]\d+|%?[\w.]+|.")


class Panes:
  """Titled panes in a grid: side by side while they fit, stacked when not."""

  def __init__(self, titles, bodies, widths, text, diff=False, whole=None):
    self.titles, self.bodies, self.widths, self.text = titles, bodies, widths, text
    self.diff, self.whole = diff, whole

  def _repr_html_(self):
    width = max(self.widths)
    cells = "".join(f'<figure class="adx-pane"><figcaption>{html.escape(t)}</figcaption>'
                    f"{b}</figure>" for t, b in zip(self.titles, self.bodies))
    kind = "adx-compare adx-diffed" if self.diff else "adx-compare"
    why = ""
    if self.whole:
      kind += " adx-whole"
      why = f'<p class="adx-why">{html.escape(self.whole)}</p>'
    return f'<div class="{kind}" style="--adx-pane:{width}">{cells}</div>{why}'

  def __repr__(self):
    return self.text


def _is_array(x) -> bool:
  return all(hasattr(x, a) for a in ("__array__", "shape", "dtype"))


def _values(x) -> str:
  """An array, or a tuple of them, as NumPy writes it: ours and JAX's arrays
  print alike, and only their values and dtypes can differ."""
  import numpy as np
  if isinstance(x, tuple):
    return "(" + ", ".join(map(_values, x)) + ("," if len(x) == 1 else "") + ")"
  return repr(np.asarray(x))


def _text(x) -> str:
  if _is_array(x) or (isinstance(x, tuple) and x and all(map(_is_array, x))):
    return _values(x)
  return ANSI.sub("", str(x)).rstrip("\n")


def _line_html(line: str, marks=()) -> str:
  """One line: its indentation as a hanging indent, its text with `marks`
  (character ranges) highlighted."""
  body = line.lstrip(" ")
  indent = len(line) - len(body)
  out, at = [], indent
  for lo, hi in sorted(marks):
    lo, hi = max(lo, at), max(hi, at)
    out.append(html.escape(line[at:lo]))
    if hi > lo:
      out.append(f'<mark class="adx-diff">{html.escape(line[lo:hi])}</mark>')
    at = hi
  out.append(html.escape(line[at:]))
  return f'<span class="adx-l" style="--adx-i:{indent}ch">{"".join(out) or " "}</span>'


MAX_LINES, HEAD_LINES = 40, 24   # as book/_ext/long_outputs.py folds outputs


def _pre(lines_html) -> str:
  """A pane's lines; past MAX_LINES, the rest folded behind a toggle."""
  lines = list(lines_html)
  pre = lambda ls: f'<pre class="adx-code adx-wrap">{"".join(ls)}</pre>'
  if len(lines) <= MAX_LINES:
    return pre(lines)
  rest = lines[HEAD_LINES:]
  return (pre(lines[:HEAD_LINES]) + f'<details class="adx-more"><summary>show the other '
          f"{len(rest)} lines</summary>{pre(rest)}</details>")


SSA_NAME = re.compile(r"^%\w+$")   # `%3`, and JAX's `%cst`, `%arg1`
BINDER = re.compile(r"(?<![\w.])([a-z]+):(?=[a-z]+\d*\[)")   # `c:f64[3]` in a jaxpr
FLOAT = re.compile(r"^(f32|f64|float32|float64)$")
FLOAT_IN_TYPE = re.compile(r"(?<=x)f(32|64)$")           # `8x3xf64`, a tensor type
LITERAL = re.compile(r"^\d+\.\d*(e[-+]\d+)?$")


def _keyer(text: str, dtypes: bool = True):
  """What a text's tokens are compared as. A jaxpr's variables are alike, and
  so are MLIR's values (`%3`, `%cst`): one more equation or constant on one
  side renames everything after it, and marking every name would hide the
  differences that matter. JAX's `_`, a result nobody uses, stays itself.
  Float literals compare by value (`0.0` is `0.000000e+00`). Without
  `dtypes`, float32 and float64 are alike too, in tensor types as well."""
  names = set(BINDER.findall(text))

  def key(token):
    if SSA_NAME.match(token):
      return "%N"
    if token in names:
      return "v"
    if LITERAL.match(token):
      return repr(float(token))
    if not dtypes:
      return "float" if FLOAT.match(token) else FLOAT_IN_TYPE.sub("f", token)
    return token
  return key


# Our StableHLO printer writes a reduction's body as a region; MLIR's
# (JAX's) writes a body that applies one binary op as `applies <op>`.
REDUCER = re.compile(
    r"^(\s*%\w+ = stablehlo\.reduce\(.*?\)) (across dimensions = .*)\n"
    r"\s*reducer\((%\w+): [^,]+, (%\w+): [^)]+\) \{\n"
    r"\s*(%\w+) = (stablehlo\.\w+) \3, \4 : [^\n]+\n"
    r"\s*stablehlo\.return \5 : [^\n]+\n\s*\}$", re.M)


# Attributes JAX's StableHLO carries that change nothing XLA runs: the
# results' names, the default precision, and the mesh again in a second
# dialect's spelling.
JAX_ONLY = re.compile(r" \{jax\.result_info = [^{}]*\}|, precision = \[DEFAULT, DEFAULT\]"
                      r"| \{stablehlo\.mesh = \{axes = \[[^\]]*\]\}\}")


def compact_reducers(text: str) -> str:
  """`text` with each one-op reduction body written as MLIR's printer does."""
  return REDUCER.sub(r"\1 applies \6 \2", text)


LET = re.compile(r"^let (\w+) = (\{.*)$")
USE = re.compile(r"^(\s*)(\w+)=(\w+)$")   # `      jaxpr=name`, a parameter on its own line


def inline_lets(text: str) -> str:
  """JAX's jaxpr text with each `let name = { ... } in` block (a sub-jaxpr
  it names once and refers to by name) written where the name is used, as
  a parameter `jaxpr=name` on its own line, indented as ours prints it."""
  lines, blocks, i = text.split("\n"), {}, 0
  while i < len(lines) and (m := LET.match(lines[i])):
    j = i
    while not lines[j].endswith("} in"):
      j += 1
    blocks[m.group(1)] = [m.group(2)] + lines[i + 1:j] + [lines[j][:-len(" in")]]
    if j == i:
      blocks[m.group(1)] = [m.group(2)[:-len(" in")]]
    i = j + 1

  def expand(body):
    out = []
    for line in body:
      m = USE.match(line)
      if m and m.group(3) in blocks:
        sub = expand(blocks[m.group(3)])
        out += [f"{m.group(1)}{m.group(2)}={sub[0]}"] + [m.group(1) + l for l in sub[1:]]
      else:
        out.append(line)
    return out
  return "\n".join(expand(lines[i:])) if blocks else text


def _token_marks(a: str, b: str, key_a, key_b):
  """Character ranges of the tokens that differ between lines a and b."""
  ta, tb = TOKEN.findall(a), TOKEN.findall(b)
  pos_a = [0]; pos_b = [0]
  for t in ta: pos_a.append(pos_a[-1] + len(t))
  for t in tb: pos_b.append(pos_b[-1] + len(t))
  ma, mb = [], []
  matcher = difflib.SequenceMatcher(None, [key_a(t) for t in ta], [key_b(t) for t in tb],
                                    autojunk=False)
  for op, i1, i2, j1, j2 in matcher.get_opcodes():
    if op != "equal":
      if i2 > i1 and "".join(ta[i1:i2]).strip():
        ma.append((pos_a[i1], pos_a[i2]))
      if j2 > j1 and "".join(tb[j1:j2]).strip():
        mb.append((pos_b[j1], pos_b[j2]))
  return ma, mb


def _diff(a_lines, b_lines, dtypes=True):
  """Each side's lines as HTML, with what differs from the other side marked."""
  out_a, out_b = [], []
  key_a, key_b = _keyer("\n".join(a_lines), dtypes), _keyer("\n".join(b_lines), dtypes)
  keyed = lambda ls, key: ["".join(key(t) for t in TOKEN.findall(l)) for l in ls]
  sm = difflib.SequenceMatcher(None, keyed(a_lines, key_a), keyed(b_lines, key_b),
                               autojunk=False)
  for op, i1, i2, j1, j2 in sm.get_opcodes():
    if op == "equal":
      out_a += [_line_html(l) for l in a_lines[i1:i2]]
      out_b += [_line_html(l) for l in b_lines[j1:j2]]
      continue
    pairs = min(i2 - i1, j2 - j1) if op == "replace" else 0
    for k in range(pairs):
      ma, mb = _token_marks(a_lines[i1 + k], b_lines[j1 + k], key_a, key_b)
      out_a.append(_line_html(a_lines[i1 + k], ma))
      out_b.append(_line_html(b_lines[j1 + k], mb))
    out_a += [_line_html(l, [(0, len(l))]) for l in a_lines[i1 + pairs:i2]]
    out_b += [_line_html(l, [(0, len(l))]) for l in b_lines[j1 + pairs:j2]]
  return out_a, out_b


def _width_ch(lines) -> str:
  return f"{max([len(l) for l in lines] + [20]) + 3}ch"


def compare(ours, theirs, titles=("autodidax", "JAX"), dtypes=True,
            whole: str | None = None) -> Panes:
  """Two texts, normalised (see the module's docstring), each token that
  differs between them marked."""
  titles, texts = list(titles), [_text(ours), _text(theirs)]
  for k, t in enumerate(texts):
    if inline_lets(t) != t:
      texts[k] = inline_lets(t)
      titles[k] += " (let blocks written in place)"
    if compact_reducers(t) != t:
      texts[k] = compact_reducers(texts[k])
      titles[k] += " (reductions written as MLIR prints them)"
    if JAX_ONLY.search(texts[k]):
      texts[k] = JAX_ONLY.sub("", texts[k])
      titles[k] += " (result names, default precision, mesh mirror left out)"
  a, b = texts[0].split("\n"), texts[1].split("\n")
  html_a, html_b = _diff(a, b, dtypes)
  text = "\n\n".join(f"--- {t}\n{s}" for t, s in zip(titles, texts))
  return Panes(titles, [_pre(html_a), _pre(html_b)], [_width_ch(a), _width_ch(b)], text,
               diff=True, whole=whole)


def _body(x):
  """(HTML, width) for one pane: a picture, something with HTML, or text."""
  if hasattr(x, "pipe"):   # a graphviz graph
    from autodidax import viz
    svg = viz.svg_html(x)
    m = re.search(r'<svg[^>]*\bwidth="([0-9.]+)pt"', svg)
    return svg, f"{round(float(m.group(1)) * 4 / 3) if m else 300}px"
  if isinstance(x, list):   # stacked: a jaxpr above its graph, say
    parts = [_body(v) for v in x]
    return "".join(f"<div>{h}</div>" for h, _ in parts), f"max({', '.join(w for _, w in parts)})"
  if hasattr(x, "_repr_html_") and not hasattr(x, "eqns"):
    return x._repr_html_(), "40ch"
  lines = _text(x).split("\n")
  return _pre(_line_html(l) for l in lines), _width_ch(lines)


def panes(columns, titles=None) -> Panes:
  """Several titled panes: `{title: thing}`, or a viz.Columns / SideBySide."""
  if hasattr(columns, "panes"):          # viz.Columns
    columns = columns.panes
  elif hasattr(columns, "columns"):      # viz.SideBySide
    columns = dict(zip(columns.titles, columns.columns))
  elif titles is not None:
    columns = dict(zip(titles, columns))
  bodies = [_body(x) for x in columns.values()]
  text = "\n\n".join(f"--- {t}\n{x}" for t, x in columns.items())
  return Panes(list(columns), [b for b, _ in bodies], [w for _, w in bodies], text)


# -- Compiled HLO -----------------------------------------------------------------

METADATA = re.compile(r",? metadata=\{[^{}]*\}")


def without_metadata(hlo: str) -> str:
  """HLO text without the source-location metadata on each instruction."""
  return METADATA.sub("", hlo)


def fold(text: str, width: int = 100) -> str:
  """`text` with each line over `width` characters folded at spaces; the
  continuation lines are indented four more than the line they continue."""
  import textwrap
  out = []
  for line in _text(text).split("\n"):
    if len(line) <= width:
      out.append(line)
      continue
    indent = " " * (len(line) - len(line.lstrip(" ")))
    out += textwrap.wrap(line, width, initial_indent="", subsequent_indent=indent + "    ",
                         break_long_words=False, break_on_hyphens=False,
                         drop_whitespace=True) or [line]
  return "\n".join(out)


# -- Trace logs -----------------------------------------------------------------

TRACE_NAMES = {"EvalTrace": "eval", "JVPTrace": "jvp", "BatchTrace": "vmap",
               "DynamicJaxprTrace": "stage", "PartialEvalTrace": "pe",
               "JaxprTrace": "stage"}


def _aval(a) -> str:
  from autodidax import core
  text = a.str_short()
  if isinstance(a, core.ConcreteArray):
    from autodidax import viz
    return f"{text}={viz.pp_traced(a.val)}"
  return text


def compact(x, _full=None) -> str:
  """A value as a trace log line shows it: tracers as `jvp@2 f64[]=2.0`."""
  from autodidax import core
  main = getattr(getattr(x, "_trace", None), "main", None)
  if isinstance(x, core.Tracer) and main is not None:
    name = TRACE_NAMES.get(main.trace_type.__name__, main.trace_type.__name__)
    return f"{name}@{main.level} {_aval(x.aval)}"
  if isinstance(x, core.ShapedArray):
    return _aval(x)
  if isinstance(x, tuple):
    return f"({_items(x)}{',' if len(x) == 1 else ''})"
  if isinstance(x, list):
    return f"[{_items(x)}]"
  if type(x).__name__ == "LoweringContext":
    return "ctx"
  return _full(x) if _full else str(x)


def _items(xs) -> str:
  """Items; a run of three or more tracers that print the same, once, `×n`."""
  shown = [compact(x) for x in xs]
  out, i = [], 0
  while i < len(shown):
    j = i
    while j < len(shown) and shown[j] == shown[i]:
      j += 1
    run = j - i >= 3 and "@" in shown[i]
    out.append(f"{shown[i]} ×{j - i}" if run else ", ".join(shown[i:j]))
    i = j
  return ", ".join(out)


def trace_log():
  """Make `viz.trace` print tracers compactly (see `compact`): it prints
  through `pp_traced` of its own module, autodidax/viz/calls.py."""
  from autodidax.viz import calls
  full = calls.pp_traced
  if getattr(full, "__name__", "") != "pp_traced":
    return
  calls.pp_traced = lambda x: compact(x, full)


def svg_plots():
  """Draw matplotlib figures as SVG whose text stays text: sharp at any
  width, and the site test can measure a plot's ticks as drawn."""
  import matplotlib
  from matplotlib_inline.backend_inline import set_matplotlib_formats
  matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "autodidax"})
  set_matplotlib_formats("svg", metadata={"Date": None})
