"""Each page says how much it weighs, and the widget JavaScript (4.5 MB)
loads only when a reader comes near a widget.

On a page without widgets, the widget scripts are dropped. On a page with
some, myst-nb's <script> tags for them become a JSON list
(`<script id="adx-widget-js" type="application/json">`): book/_static/
autodidax.js loads those scripts, in order, when a widget first comes near
the viewport. The widgets' saved state (every frame of every stepper, drawn
at build time) moves out of the page too, into _widget_state/<page>.js, the
first script of the list, which puts it back where the widget JavaScript
looks for it. Until then the page costs its text and pictures only. The
theme's fontawesome.js (1.5 MB, icons drawn as SVG) is dropped from every
page: the theme's style sheet draws the same icons with its icon font.

The footer (html.extra_footer in _config.yml) holds a placeholder, PAGE_WEIGHT;
after the build, each page's placeholder becomes the total size of the page
and of the files it loads at once (scripts, style sheets, images, and the
fonts those style sheets name), uncompressed, as a reader's browser fetches
them on a first visit. The widget JavaScript, loaded on demand, is counted apart.
"""
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

PLACEHOLDER = "PAGE_WEIGHT"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_JS = ("require.js", "embed-amd.js")
LOADS = re.compile(r'<(?:script|img|link|iframe|source)\b[^>]*?\b(?:src|href)="([^"]+)"[^>]*>')
CSS_URL = re.compile(r'url\(\s*[\'"]?([^\'")]+)')


STATE_DIR = "_widget_state"
FONTAWESOME_JS = re.compile(r'<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>\s*')
ON_DEMAND = re.compile(r'<script id="adx-widget-js" type="application/json">(.*?)</script>', re.S)


def _is_widget_js(js) -> bool:
  """myst-nb's scripts for widgets: require.js, embed-amd.js, and the inline
  line of offline_widgets that points require.js at our copies."""
  return ((js.filename or "").endswith(WIDGET_JS)
          or (not js.filename and "require.config" in js.attributes.get("body", "")))


def _widget_js_on_demand(app, pagename, templatename, context, doctree):
  """No widget scripts on a page without widgets; on a page with some, the
  scripts as a list that autodidax.js loads when a widget comes near."""
  from sphinx.builders.html._assets import _JavaScript
  scripts = context.get("script_files", [])
  widget_js = [js for js in scripts if _is_widget_js(js)]
  kept = [js for js in scripts if not _is_widget_js(js)]
  state = [js for js in kept if js.attributes.get("type") == WIDGET_STATE]
  if widget_js and state:
    pathto = context["pathto"]
    kept = [js for js in kept if js not in state]
    file = Path(app.outdir, STATE_DIR, pagename.replace("/", "--") + ".js")
    file.parent.mkdir(exist_ok=True)
    file.write_text(
        "(function () { var s = document.createElement('script');\n"
        f"  s.type = {json.dumps(WIDGET_STATE)};\n"
        f"  s.textContent = {json.dumps(state[0].attributes['body'])};\n"
        "  document.head.appendChild(s); })();\n")
    listed = [{"src": pathto(f"{STATE_DIR}/{file.name}", resource=True)}] + [{"src": js.filename if "://" in js.filename else pathto(js.filename, resource=True),
               "attrs": {k: v for k, v in js.attributes.items()
                         if k not in ("body", "priority") and v is not None}}
              if js.filename else {"body": js.attributes["body"]} for js in widget_js]
    body = json.dumps(listed).replace("</", "<\\/")
    kept.append(_JavaScript("", id="adx-widget-js", type="application/json", body=body))
  context["script_files"] = kept


def _local(page: Path, ref: str, root: Path) -> Path | None:
  parts = urlsplit(ref)
  if parts.scheme or parts.netloc or not parts.path:
    return None
  path = (page.parent / unquote(parts.path)).resolve()
  return path if path.is_file() and root in path.parents else None


def _css_files(css: Path, root: Path, seen: set) -> set:
  """The files a style sheet loads: @imports and, of its fonts, the woff2 ones."""
  found = set()
  for ref in CSS_URL.findall(css.read_text(errors="replace")):
    path = _local(css, ref, root)
    if path is None or path in seen:
      continue
    if path.suffix == ".css":
      seen.add(path)
      found |= {path} | _css_files(path, root, seen)
    elif path.suffix in (".woff2", ".png", ".svg", ".gif"):
      found.add(path)
  return found


def weigh(page: Path, root: Path) -> tuple[int, int]:
  """(bytes loaded at once, bytes of widget JavaScript loaded on demand) for
  a first visit to `page`."""
  text = page.read_text(errors="replace")
  files = {page}
  for ref in LOADS.findall(text):
    path = _local(page, ref, root)
    if path is not None and path.suffix != ".html":
      files.add(path)
      if path.suffix == ".css":
        files |= _css_files(path, root, set())
  on_demand = set()
  for listed in ON_DEMAND.findall(text):
    for item in json.loads(listed):
      path = _local(page, item.get("src", ""), root)
      if path is not None:
        on_demand.add(path)
  return (sum(f.stat().st_size for f in files - on_demand),
          sum(f.stat().st_size for f in on_demand))


def _mb(n: int) -> str:
  return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def _fill_in(app, exception):
  if exception is not None or app.builder.format != "html":
    return
  root = Path(app.outdir).resolve()
  for page in root.rglob("*.html"):
    text = FONTAWESOME_JS.sub("", page.read_text())
    page.write_text(text)
    if PLACEHOLDER not in text:
      continue
    total, widgets = weigh(page.resolve(), root)
    said = f"This page weighs {_mb(total)} uncompressed"
    said += (f"; its widgets, {_mb(widgets)} more, load when you come near one."
             if widgets else ".")
    page.write_text(text.replace(PLACEHOLDER, said))


def setup(app):
  app.connect("html-page-context", _widget_js_on_demand, priority=950)
  app.connect("build-finished", _fill_in)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
