"""Serve the ipywidgets JavaScript from the book itself when it has been fetched.

myst-nb loads require.js and @jupyter-widgets/html-manager's embed-amd.js from
CDNs on pages with widgets, so a reader who is offline sees no widgets.
scripts/fetch_widget_js.sh puts those exact versions into .widgets-js/; when
they are there, this extension copies them into the site's _static/ and points
myst-nb's `nb_ipywidgets_js` at them. Otherwise the CDN defaults stay.
"""
from pathlib import Path

from myst_nb.core.config import ipywidgets_js_factory

# The folder scripts/fetch_widget_js.sh fills, relative to the book's root.
FETCHED = Path(".widgets-js")
SUBDIR = "offline-widgets"  # becomes _static/offline-widgets/
FILES = ("require.js", "embed-amd.js")


def _use_local_copies(app, config):
  root = Path(app.confdir) / FETCHED
  if not all((root / SUBDIR / f).is_file() for f in FILES):
    return  # not fetched: keep loading from the CDNs
  if config.nb_ipywidgets_js != ipywidgets_js_factory():
    return  # the book's own configuration wins
  # Everything inside an html_static_path folder is copied into _static/.
  config.html_static_path = [*config.html_static_path, str(root.resolve())]
  # Same attributes as myst-nb's defaults, less those only meaningful for a
  # CDN: the SRI hash was for cdnjs' require.min.js, and `crossorigin` would
  # make the browser refuse the file when the page is opened from disk.
  # `data-jupyter-widgets-cdn` stays: embed-amd.js loads the (rare) widget
  # modules it does not bundle from there. In between, a one-line script maps
  # embed-amd's own modules onto our folder: it looks for its icon fonts next
  # to the URL requirejs gives those modules (by default, the page's folder).
  config.nb_ipywidgets_js = {
    f"{SUBDIR}/require.js": {},
    "": {"body": REQUIRE_PATHS},
    f"{SUBDIR}/embed-amd.js": {
      "data-jupyter-widgets-cdn": "https://cdn.jsdelivr.net/npm/",
    },
  }


REQUIRE_PATHS = (
  "(function () { var here = new URL(document.documentElement.dataset.content_root"
  f" + '_static/{SUBDIR}', document.baseURI).href; require.config({{paths: {{"
  "'@jupyter-widgets': here, '@jupyter-widgets/html-manager/dist': here}}); })();")


def setup(app):
  app.setup_extension("myst_nb")  # defines nb_ipywidgets_js
  app.connect("config-inited", _use_local_copies)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
