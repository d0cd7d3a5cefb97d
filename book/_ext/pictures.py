"""Pictures that say what they show, open full size on a tap, and widgets
that leave a static picture for readers without JavaScript.

- Alt text. myst-nb writes a cell's SVG output to a file named by its hash,
  and uses that path as the <img>'s alt text. autodidax.viz names each graph
  with a sentence saying what it shows; graphviz writes it as the SVG's
  <title>, and that becomes the alt text. A picture with no alt text but its
  path (a matplotlib plot, say) is a build warning: give it one with the
  cell's `mystnb: image: alt:` metadata.
- Full size. Each picture links to its own file, so that a tap on a phone
  opens it at full size (book/_static/autodidax.js adds a hint when the page
  shows it shrunk).
- No JavaScript. A widget is a <script> that the widget JavaScript draws. A
  <noscript> beside it holds what it shows first: its HTML panes (pictures
  included) and the first choice of its dropdowns and lists.
"""
import html
import json
import posixpath
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


def _pictures(app, doctree, docname):
  for img in list(doctree.findall(nodes.image)):
    uri = img["uri"]
    if _is_path(img.get("alt", ""), uri):
      src = Path(app.srcdir, uri)
      alt = _svg_alt(src) if uri.endswith(".svg") and src.is_file() else None
      if alt:
        img["alt"] = alt
      else:
        logger.warning(f"a picture has no alt text ({uri}): give its cell "
                       "`mystnb: image: alt: ...` metadata", location=img)
    if uri in app.env.images and not isinstance(img.parent, nodes.reference):
      target = posixpath.relpath(f"{app.builder.imagedir}/{app.env.images[uri][1]}",
                                 posixpath.dirname(docname) or ".")
      link = nodes.reference("", "", refuri=target, classes=["adx-full-size"],
                             reftitle="open the picture full size")
      img.replace_self(link)
      link += img


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
  return {"parallel_read_safe": True, "parallel_write_safe": True}
