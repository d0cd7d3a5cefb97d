"""The exercise notebooks' "In the book" links, followed where learners open notebooks.

* On the site: a stub links `../book/<chapter>.html#<section>`, relative to the
  site's exercises/ folder, where the site serves the notebooks beside book/.
* Downloaded from the site: the chapter's download link rewrites them, as it
  downloads, to the site's absolute addresses (book/_static/autodidax.js), so
  they work wherever the file is opened.

The site is served over HTTP on localhost and driven by headless chromium (the
download is a real click); every link of every notebook is opened and its anchor
found on the page. Not yet covered: `make lab` (its server's root is exercises/,
so `../book/` is outside it) and a notebook from the installed zip.
"""
import functools
import http.server
import json
import re
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

from test_site import CHROMIUM, CHROMIUM_ARGS, HTML, build, playwright  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]*book/[\w-]+\.html#[\w-]+)\)")

pytestmark = pytest.mark.timeout(1800)   # the build fixture may run every chapter


@pytest.fixture(scope="module")
def site(build):
  if build.returncode != 0:
    pytest.skip("the build failed")
  class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
      pass
  handler = functools.partial(Quiet, directory=str(HTML))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{server.server_address[1]}/"
  server.shutdown()


@pytest.fixture(scope="module")
def page(playwright, site):  # noqa: F811 (the fixture imported above)
  browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                       args=CHROMIUM_ARGS)
  context = browser.new_context(accept_downloads=True)
  context.route(lambda url: not url.startswith(site), lambda route: route.abort())
  page = context.new_page()
  page.set_default_timeout(90_000)
  yield page
  browser.close()


def _chapters() -> dict:
  import yaml
  return yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["adx_exercises"]


def _links(notebook: dict) -> list:
  return [link for cell in notebook["cells"] if cell["cell_type"] == "markdown"
          for link in LINK.findall("".join(cell["source"]))]


def _missing_anchors(page, links) -> list:
  """The links whose page (each opened once) has no element with their #anchor."""
  missing, pages = [], {}
  for link in links:
    pages.setdefault(link.split("#")[0], []).append(link)
  for url, on_page in pages.items():
    page.goto(url, wait_until="load")
    missing += [link for link in on_page if not page.evaluate(
        "a => document.getElementById(a) !== null", urlparse(link).fragment)]
  return missing


@pytest.mark.parametrize("doc, notebook", sorted(_chapters().items()))
def test_a_downloaded_notebooks_links_reach_their_sections(page, site, doc, notebook):
  page.goto(urljoin(site, f"{doc}.html"), wait_until="load")
  with page.expect_download() as download:
    page.click("a.adx-notebook")
  saved = json.loads(Path(download.value.path()).read_text())
  served = json.loads((HTML / "exercises" / f"{notebook}.ipynb").read_text())
  links, relative = _links(saved), _links(served)
  assert links and len(links) == len(relative), (links, relative)
  for link, rel in zip(links, relative):
    on_site = urljoin(urljoin(site, f"exercises/{notebook}.ipynb"), rel)   # opened on the site
    assert link == on_site, f"{notebook}: {rel} was saved as {link}"
  assert not _missing_anchors(page, links), f"{notebook}: no such section"
  # Apart from its links, the download is the notebook the site serves.
  assert json.dumps(saved).replace(urljoin(site, "book/"), "../book/") == json.dumps(served)
