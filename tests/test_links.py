"""The exercise notebooks' "In the book" links, followed wherever learners open
notebooks, in headless chromium, each to a page that has its #anchor.

* On the site: a stub links `../book/<chapter>.html#<section>`, relative to the
  site's exercises/ folder, where the site serves the notebooks beside book/.
* Downloaded from the site: the chapter's download link rewrites them, as it
  downloads, to the site's absolute addresses (book/_static/autodidax.js).
* Downloaded, then opened in the JupyterLab of a learner who installed the
  site's zip in a fresh environment outside the repository, as
  book/running_exercises.md says: tests/test_install.py, which builds that
  environment, uses this module's site, download and lab helpers.
* Under `make lab`: the lab serves the built book itself and shows the links
  there (exercises/coursekit/learner/lab.py); each page is fetched from the lab, and a
  click opens one in a new tab.

The site is the session's build (test_site's `build` fixture, which reruns
nothing when the book is up to date), served over HTTP on localhost; nothing
else is reachable. Playwright's sync API runs in a thread of its own (an
earlier test in the worker may have left an asyncio loop running in the main
thread), as tests/test_install.py does.
"""
import contextlib
import functools
import http.server
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
from coursekit.learner.lab import ROUTE

from test_lab import MAKE, _env, _free_port
from test_site import CHROMIUM, CHROMIUM_ARGS, HTML, _skip_or_fail, build  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]
LINK = r"\]\(([^)\s]*book/[\w-]+\.html#[\w-]+)\)"
TOKEN = "links-test-token"

pytestmark = pytest.mark.timeout(900)


def _chapters() -> dict:
  import yaml
  return yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["adx_exercises"]


def _links(notebook: dict) -> list:
  return [link for cell in notebook["cells"] if cell["cell_type"] == "markdown"
          for link in re.findall(LINK, "".join(cell["source"]))]


def _in_browser(work, *args):
  """work(context, *args) in a fresh headless chromium that reaches only
  localhost, in a thread of its own."""
  if not CHROMIUM.exists():
    _skip_or_fail(f"no chromium at {CHROMIUM} (apt-get install chromium)")

  def run():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
      browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                  args=CHROMIUM_ARGS)
      context = browser.new_context(accept_downloads=True)
      context.route(lambda url: not url.startswith("http://127.0.0.1:"),
                    lambda route: route.abort())
      context.set_default_timeout(240_000)   # a busy machine loads JupyterLab slowly
      try:
        return work(context, *args)
      finally:
        browser.close()
  with ThreadPoolExecutor(1) as pool:
    return pool.submit(run).result()


def _missing_anchors(page, links) -> list:
  """The links whose page (each opened once) has no element with their #anchor."""
  missing, pages = [], {}
  for link in links:
    pages.setdefault(link.split("#")[0], []).append(link)
  for url, on_page in pages.items():
    if page.url.split("#")[0] != url:
      page.goto(url, wait_until="domcontentloaded")
    missing += [link for link in on_page if not page.evaluate(
        "a => document.getElementById(a) !== null", urlparse(link).fragment)]
  return missing


# --- On the site, and downloaded from it ------------------------------------------------------

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


def _download(page, site, doc) -> str:
  """The notebook that the chapter `doc`'s download link saves, as text."""
  page.goto(urljoin(site, f"{doc}.html"), wait_until="load")
  with page.expect_download() as download:
    page.click("a.adx-notebook")
  return Path(download.value.path()).read_text()


def _visit_site(context, site):
  """For each chapter: the links of its notebook as the site serves it, resolved
  from the notebook's address; the notebook its download link saves; and the links
  whose anchor is missing."""
  page, out = context.new_page(), {}
  for doc, notebook in sorted(_chapters().items()):
    served = json.loads((HTML / "exercises" / f"{notebook}.ipynb").read_text())
    on_site = [urljoin(urljoin(site, f"exercises/{notebook}.ipynb"), rel)
               for rel in _links(served)]
    saved = _download(page, site, doc)
    out[notebook] = dict(served=served, on_site=on_site, saved=saved,
                         missing=_missing_anchors(page, on_site))
  return out


@pytest.fixture(scope="module")
def visited(site):
  return _in_browser(_visit_site, site)


@pytest.mark.parametrize("notebook", sorted(set(_chapters().values())))
def test_a_notebooks_links_reach_their_sections_on_the_site(visited, notebook):
  v = visited[notebook]
  assert v["on_site"], f"{notebook} has no book link"
  assert not v["missing"], f"{notebook}: no such section"


@pytest.mark.parametrize("notebook", sorted(set(_chapters().values())))
def test_a_downloaded_notebook_links_the_sites_pages(visited, site, notebook):
  """The download holds the same links, absolute: they work wherever the file goes.
  Apart from them, it is the notebook the site serves."""
  v = visited[notebook]
  saved = json.loads(v["saved"])
  assert _links(saved) == v["on_site"]
  assert json.dumps(saved).replace(urljoin(site, "book/"), "../book/") == json.dumps(v["served"])


# --- In JupyterLab ----------------------------------------------------------------------------

@contextlib.contextmanager
def _lab(cmd, tmp_path, cwd=ROOT, env=None):
  """A JupyterLab started by `cmd` + flags for a port and a token: its address."""
  port = _free_port()
  flags = (f"--no-browser --ip=127.0.0.1 --port={port} --port-retries=0 "
           f"--IdentityProvider.token={TOKEN}")
  if cmd[0] == "make":
    args = [*cmd, f"LAB_ARGS={flags}"]
  else:   # make lab adds --allow-root as root; so must we
    args = [*cmd, *flags.split(), *(["--allow-root"] if os.geteuid() == 0 else [])]
  log = tmp_path / f"lab-{port}.log"   # a file: a full pipe would stall the server
  with log.open("w") as out:
    proc = subprocess.Popen(args, cwd=cwd, env=env or _env(tmp_path), stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
  url = f"http://127.0.0.1:{port}/"
  try:
    deadline = time.monotonic() + 300   # a busy machine starts it slowly
    while time.monotonic() < deadline and proc.poll() is None:
      try:   # /api answers without a token
        urllib.request.urlopen(url + "api", timeout=2).close()
        break
      except OSError:
        time.sleep(0.5)
    else:
      pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
    yield url
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGTERM)   # make, bash and jupyter: one session of ours
    proc.wait(timeout=60)


def _shown(lab: str, notebook: str) -> list:
  """The links of a notebook as the lab gives it to the browser (its contents API)."""
  with urllib.request.urlopen(f"{lab}api/contents/{notebook}.ipynb?token={TOKEN}",
                              timeout=60) as r:
    return _links(json.load(r)["content"])


def _missing_over_http(links) -> list:
  """The links whose page, fetched with the lab's token, has no element with their
  #anchor (each page fetched once; a browser is for the clicks)."""
  missing, ids = [], {}
  for link in links:
    url = link.split("#")[0]
    if url not in ids:
      with urllib.request.urlopen(f"{url}?token={TOKEN}", timeout=60) as r:
        ids[url] = set(re.findall(r'\bid="([^"]+)"', r.read().decode()))
    if urlparse(link).fragment not in ids[url]:
      missing.append(link)
  return missing


def _click_in_lab(context, lab, notebook):
  """Opens the notebook in JupyterLab, clicks its first book link, and returns the
  address the new tab opened and whether that page has the anchor."""
  page = context.new_page()
  page.goto(f"{lab}lab/tree/{notebook}.ipynb?token={TOKEN}")
  link = page.locator("a[href*='book/'][href*='.html#']").first
  with context.expect_page() as opened:
    link.click()
  tab = opened.value
  tab.wait_for_load_state("domcontentloaded")
  return tab.url, tab.evaluate("() => document.getElementById(location.hash.slice(1)) !== null")


def test_under_make_lab_the_links_open_the_built_book(build, tmp_path):
  """`make lab` serves the built book; every notebook shows its links there, each
  page (fetched from the lab) has its anchor, and a click in the lab opens one in a
  new tab at its section. The files on disk keep their site-relative links."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  notebooks = sorted(set(_chapters().values()))
  with _lab(MAKE, tmp_path) as lab:
    book = f"{lab}{ROUTE}book/"
    shown = {nb: _shown(lab, nb) for nb in notebooks}
    for nb in notebooks:
      on_disk = _links(json.loads((ROOT / "exercises" / f"{nb}.ipynb").read_text()))
      assert shown[nb] == [link.replace("../book/", f"/{ROUTE}book/") for link in on_disk], nb
    every = [urljoin(lab, link) for nb in notebooks for link in shown[nb]]
    assert all(link.startswith(book) for link in every)
    assert not _missing_over_http(every)
    url, found = _in_browser(_click_in_lab, lab, notebooks[0])
  assert url == every[0] and found, url


# --- Where no site can be reached -------------------------------------------------------------

@pytest.mark.parametrize("notebook", sorted(set(_chapters().values())))
def test_a_links_text_names_its_chapter_and_section(notebook):
  """Read without the site, a link still says where to look: "Chapter, *Section*",
  the chapter's name as the glossary gives it, the section's title as its heading."""
  import yaml
  from docutils.nodes import make_id
  config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
  names = config["adx_chapter_names"]
  nb = json.loads((ROOT / "exercises" / f"{notebook}.ipynb").read_text())
  found = [m for cell in nb["cells"] if cell["cell_type"] == "markdown"
           for m in re.findall(r"\[([^\]]+)\]\(([^)\s]*book/([\w-]+)\.html#([\w-]+))\)",
                               "".join(cell["source"]))]
  assert len(found) == len(_links(nb)) > 0
  for text, link, page, anchor in found:
    m = re.fullmatch(r"(.+?), \*(.+)\*", text)
    assert m and names.get(m.group(1)) == f"book/{page}", (text, link)
    assert make_id(m.group(2).replace("`", "")) == anchor, (text, link)
