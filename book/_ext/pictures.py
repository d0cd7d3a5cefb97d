"""Pictures that say what they show, stay readable at every width and zoom
in place, and widgets that leave a static picture for readers without
JavaScript.

- Alt text. myst-nb writes a cell's SVG output to a file named by its hash,
  and uses that path as the <img>'s alt text. autodidax.viz names each graph
  with a sentence saying what it shows; graphviz writes it as the SVG's
  <title>, and that becomes the alt text. A picture with no alt text but its
  path (a matplotlib plot, say) is a build warning: give it one with the
  cell's `mystnb: image: alt:` metadata.
- Readable labels, zoom in place. Each picture sits in a frame
  (`div.adx-zoom`) that knows, from the SVG file, how wide the picture must
  be drawn for its smallest label to measure MIN_LABEL_PX: 10 px on a wide
  screen, 8 px on a phone. It is never drawn narrower than that: a picture
  too wide for the column then scrolls inside its frame, never the page. A
  tap or click (book/_static/autodidax.js) shows it at full size in the same
  frame, and another tap fits it again: the reader never leaves the chapter.
- No object ids. Graphviz writes each node's and edge's internal name as a
  <title> (a tooltip) and a comment; names made from Python's `id()` would
  show a machine's memory addresses. After the build they are renumbered
  `v1`, `v2`, ..., in the pictures' files and in the widgets' saved state.
- No JavaScript. A widget is a <script> that the widget JavaScript draws. A
  <noscript> beside it holds what it shows first: its HTML panes (pictures
  included) and the first choice of its dropdowns and lists.
"""
import html
import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

SVG_TITLE = re.compile(r'<g id="graph0" class="graph"[^>]*>\s*<title>(.*?)</title>', re.S)
WIDGET_VIEW = re.compile(
    r'<script type="application/vnd.jupyter.widget-view\+json">(.*?)</script>', re.S)


def _is_path(alt: str, uri: str) -> bool:
  return not alt or alt == uri or Path(alt).name == Path(uri).name


def _svg_alt(path: Path) -> str | None:
  m = SVG_TITLE.search(path.read_text(errors="replace"))
  title = html.unescape(m.group(1)).strip() if m else ""
  return None if not title or title.startswith("%") else title   # %3: an unnamed graph


MIN_LABEL_PX = {"wide": 10, "phone": 8}   # the smallest label as drawn
SVG_SIZE = re.compile(r'<svg[^>]*\bwidth="([0-9.]+)pt"[^>]*viewBox="[-0-9. ]*?([0-9.]+) [0-9.]+"')
SVG_FONT = re.compile(r'font-size(?:="|:\s*)([0-9.]+)')   # graphviz's, matplotlib's


def _min_widths(path: Path) -> str:
  """CSS variables for an SVG picture's frame: its natural width, and the
  widths at which its smallest label measures MIN_LABEL_PX."""
  text = path.read_text(errors="replace")
  size, fonts = SVG_SIZE.search(text), [float(f) for f in SVG_FONT.findall(text)]
  if not size:
    return ""
  natural = float(size.group(1)) * 4 / 3            # pt -> px
  css = f"--adx-natural:{natural:.0f}px;"
  if fonts:
    label = min(fonts) * natural / float(size.group(2))   # px, at natural size
    for screen, px in MIN_LABEL_PX.items():
      css += f"--adx-min-{screen}:{min(natural, natural * px / label):.0f}px;"
  return css


def _pictures(app, doctree, docname):
  for img in list(doctree.findall(nodes.image)):
    uri = img["uri"]
    src = Path(app.srcdir, uri)
    if _is_path(img.get("alt", ""), uri):
      alt = _svg_alt(src) if uri.endswith(".svg") and src.is_file() else None
      if alt:
        img["alt"] = alt
      else:
        logger.warning(f"a picture has no alt text ({uri}): give its cell "
                       "`mystnb: image: alt: ...` metadata", location=img)
    parent = img.parent
    if "adx-zoomed" in img["classes"] or parent is None:
      continue
    img["classes"].append("adx-zoomed")
    style = _min_widths(src) if uri.endswith(".svg") and src.is_file() else ""
    at = parent.index(img)
    parent.insert(at + 1, nodes.raw("", "</div>", format="html"))
    parent.insert(at, nodes.raw(
        "", f'<div class="adx-zoom" style="{style}" tabindex="0" role="group" '
        'aria-label="picture: tap to zoom">', format="html"))


# -- No object ids in the pictures ------------------------------------------------

ID_NAME = re.compile(r"\b([a-z]{1,3})(\d{9,})\b")
SVG_NAMES = re.compile(r"(<title>|<!-- )(.*?)(</title>| -->)", re.S)


def scrub_ids(text: str) -> str:
  """Graphviz names made from `id()` (`v140061853514720`), in <title>s and
  comments, renumbered in order of appearance."""
  numbers: dict = {}

  def rename(m):
    n = numbers.setdefault(m.group(2), len(numbers) + 1)
    return f"{m.group(1)}{n}"

  return SVG_NAMES.sub(lambda m: m.group(1) + ID_NAME.sub(rename, m.group(2)) + m.group(3),
                       text)


def _scrub(app, exception):
  if exception is not None or app.builder.format != "html":
    return
  out = Path(app.outdir)
  for f in [*out.glob("_images/*.svg"), *out.glob("_widget_state/*.js"),
            *out.rglob("*.html")]:
    text = f.read_text(errors="replace")
    new = scrub_ids(text)
    if new != text:
      f.write_text(new)


# -- Widgets without JavaScript -------------------------------------------------

def _static_view(models: dict, model_id: str, depth: int = 0) -> str:
  """The HTML a widget shows first, from its saved state."""
  model = models.get(model_id)
  if model is None or depth > 20:
    return ""
  state, kind = model["state"], model["model_name"]
  children = [c.removeprefix("IPY_MODEL_") for c in state.get("children", [])]
  if kind == "HTMLModel":
    return f'<div class="adx-static-pane">{state.get("value", "")}</div>'
  if kind == "StackModel":
    i = state.get("selected_index") or 0
    return _static_view(models, children[i], depth + 1) if children else ""
  if kind in ("DropdownModel", "SelectModel"):
    labels = state.get("_options_labels", [])
    i = state.get("index") or 0
    if not labels:
      return ""
    desc = html.escape(state.get("description") or "choice")
    return (f'<p class="adx-static-choice">{desc}: <b>{html.escape(labels[i])}</b> '
            f"(the other {len(labels) - 1} choices need JavaScript)</p>")
  return "".join(_static_view(models, c, depth + 1) for c in children)


def _widget_fallbacks(app, doctree, docname):
  from myst_nb.sphinx_ import NbMetadataCollector
  state = NbMetadataCollector.get_js_files(app.env, docname).get("ipywidgets_state")
  if not state:
    return
  models = json.loads(state[1]["body"])["state"]
  for raw in list(doctree.findall(nodes.raw)):
    m = WIDGET_VIEW.search(raw.astext())
    if not m:
      continue
    view = _static_view(models, json.loads(m.group(1))["model_id"])
    if view:
      raw.parent.insert(raw.parent.index(raw) + 1, nodes.raw(
          "", f'<noscript><div class="adx-widget-static">{view}</div></noscript>',
          format="html"))


def setup(app):
  app.connect("doctree-resolved", _pictures)
  app.connect("doctree-resolved", _widget_fallbacks)
  app.connect("build-finished", _scrub)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
