"""Each page says how much it weighs, and the widget JavaScript stays off
pages without widgets.

The footer (html.extra_footer in _config.yml) holds a placeholder, PAGE_WEIGHT;
after the build, each page's placeholder becomes the total size of the page
and of the files it loads (scripts, style sheets, images, and the fonts those
style sheets name), uncompressed, as a reader's browser fetches them on a
first visit. The widget JavaScript is counted apart.
"""
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

PLACEHOLDER = "PAGE_WEIGHT"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_JS = ("require.js", "embed-amd.js")
LOADS = re.compile(r'<(?:script|img|link|iframe|source)\b[^>]*?\b(?:src|href)="([^"]+)"[^>]*>')
CSS_URL = re.compile(r'url\(\s*[\'"]?([^\'")]+)')


def _drop_widget_js(app, pagename, templatename, context, doctree):
  """myst-nb adds the widget scripts to a page with widget state only; make
  sure of it, whatever else adds them."""
  scripts = context.get("script_files", [])
  if any(js.attributes.get("type") == WIDGET_STATE for js in scripts):
    return
  context["script_files"] = [js for js in scripts
                             if not (js.filename or "").endswith(WIDGET_JS)]


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
  """(bytes in all, bytes of widget JavaScript) for a first visit to `page`."""
  files = {page}
  for ref in LOADS.findall(page.read_text(errors="replace")):
    path = _local(page, ref, root)
    if path is not None and path.suffix != ".html":
      files.add(path)
      if path.suffix == ".css":
        files |= _css_files(path, root, set())
  total = sum(f.stat().st_size for f in files)
  widgets = sum(f.stat().st_size for f in files if f.name in WIDGET_JS)
  return total, widgets


def _mb(n: int) -> str:
  return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def _fill_in(app, exception):
  if exception is not None or app.builder.format != "html":
    return
  root = Path(app.outdir).resolve()
  for page in root.rglob("*.html"):
    text = page.read_text()
    if PLACEHOLDER not in text:
      continue
    total, widgets = weigh(page.resolve(), root)
    said = f"This page weighs {_mb(total)} uncompressed"
    said += f", {_mb(widgets)} of it the widgets' JavaScript." if widgets else "."
    page.write_text(text.replace(PLACEHOLDER, said))


def setup(app):
  app.connect("html-page-context", _drop_widget_js, priority=950)
  app.connect("build-finished", _fill_in)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
