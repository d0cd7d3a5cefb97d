"""The website: it builds with warnings as errors, and its pages work in a real
browser with no network (graphviz diagrams and ipywidgets render, the console
stays clean).

The browser tests use Debian's chromium (/usr/bin/chromium) through Playwright,
and the widget JavaScript that scripts/fetch_widget_js.sh fetches. Without
those they are skipped, unless AUTODIDAX_REQUIRE_BROWSER=1 (.ci/run sets it).
The Part 1 screenshot goes to _build/screenshots/.
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
WIDGET_JS = ROOT / ".widgets-js" / "offline-widgets" / "embed-amd.js"
GRAPHVIZ_SVG = re.compile(r'<g\b[^>]*\bclass="graph"')  # graphviz's top-level group
CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
  "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync",
]

pytestmark = pytest.mark.timeout(1800)  # a cold build runs every chapter


@pytest.fixture(scope="session")
def build():
  """Builds the book once per session (as `make book` does; the execution cache
  makes rebuilds fast unless lib/ changed)."""
  venv_bin = Path(sys.executable).parent
  env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
  proc = subprocess.run(   # the same script as `make book`
    ["bash", "scripts/build_book.sh"],
    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  return proc


def test_build_succeeds_with_warnings_as_errors(build):
  if build.returncode != 0:
    pytest.fail(f"jupyter-book build failed (exit {build.returncode}):\n"
                + build.stdout[-6000:])
  assert (HTML / "index.html").is_file()
  assert (HTML / "book" / "intro.html").is_file()


def test_widget_js_is_local_when_fetched(build):
  """With .widgets-js fetched, widget pages load require.js and embed-amd.js
  from the site itself, not from CDNs."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  if not WIDGET_JS.is_file():
    pytest.skip("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  pages = [p for p in HTML.rglob("*.html") if "widget-state+json" in p.read_text()]
  for page in pages:
    text = page.read_text()
    assert "_static/offline-widgets/embed-amd.js" in text, page
    assert "_static/offline-widgets/require.js" in text, page
    assert "cdnjs.cloudflare.com" not in text and "html-manager@" not in text, page


# -- In a browser --------------------------------------------------------------

def _skip_or_fail(reason):
  if os.environ.get("AUTODIDAX_REQUIRE_BROWSER") == "1":
    pytest.fail(f"{reason}, and AUTODIDAX_REQUIRE_BROWSER=1")
  pytest.skip(reason)


@pytest.fixture(scope="session")
def browser():
  if not CHROMIUM.exists():
    _skip_or_fail(f"no chromium at {CHROMIUM} (apt-get install chromium)")
  from playwright.sync_api import sync_playwright
  with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
    context = p.chromium.launch_persistent_context(
      profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
      offline=True, viewport={"width": 1280, "height": 900})
    # Nothing leaves the machine: every request that is not a file is refused.
    context.route(lambda url: not url.startswith("file://"),
                  lambda route: route.abort())
    yield context
    context.close()


class Page:
  """A page opened from disk, recording console errors and failed requests."""

  def __init__(self, context, path):
    self.problems = []
    self.page = page = context.new_page()
    page.set_default_timeout(90_000)   # generous: a loaded 2-core machine is slow
    page.on("console", lambda m: m.type in ("error", "assert")
            and self.problems.append(f"console {m.type}: {m.text} {m.location}"))
    page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: self.problems.append(
      f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and self.problems.append(
      f"HTTP {r.status}: {r.url}"))
    page.goto(path.as_uri(), wait_until="load")

  def settle(self):
    self.page.wait_for_load_state("networkidle")
    self.page.wait_for_timeout(500)  # late console messages


def _page(build, browser, rel):
  if build.returncode != 0:
    pytest.skip("the build failed")
  path = HTML / rel
  if not path.is_file():
    pytest.skip(f"{rel} is not built")
  return Page(browser, path)


def test_intro_page_loads_cleanly(build, browser):
  p = _page(build, browser, "book/intro.html")
  p.settle()
  assert "Autodidax" in p.page.title()
  assert p.problems == []
  p.page.close()


def test_part1_renders_graphs_and_widgets_offline(build, browser):
  if not WIDGET_JS.is_file():
    # Then the page loads the widget JavaScript from CDNs, which are blocked here.
    _skip_or_fail("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  p = _page(build, browser, "book/part1_interpreters.html")
  page = p.page

  # An ipywidget, rendered by the html-manager from the embedded state.
  widget = page.locator(".cell_output .jupyter-widgets").first
  widget.wait_for(state="visible", timeout=20_000)
  _assert_drawn(widget)
  assert page.locator(".cell_output [class*='widget-']").count() > 0

  # A graphviz diagram: inline (in a widget), or an <img> of a graphviz SVG file.
  drawn = [page.locator("svg:has(g.graph)").filter(visible=True)]
  images = page.locator("img[src$='.svg']")
  drawn += [images.nth(i) for i in range(images.count())
            if GRAPHVIZ_SVG.search(_svg_source(images.nth(i)))]
  drawn = [d.first for d in drawn if d.count()]
  assert drawn, "no graphviz SVG on the page"
  _assert_drawn(drawn[0])

  # The bind stepper works without a kernel: picking a bind shows its frame.
  step_title = """() => [...document.querySelectorAll('.widget-html')]
      .map(e => (e.innerText.match(/step \\d+\\/\\d+/) || [''])[0]).filter(x => x)"""
  assert page.evaluate(step_title)[0].startswith("step 1/")
  binds = page.locator(".widget-select select").first
  binds.scroll_into_view_if_needed()
  binds.select_option(index=3)
  page.wait_for_function(f"() => ({step_title})().some(t => t.startsWith('step 4/'))",
                         timeout=20_000)

  p.settle()
  # From the top, so the sticky header and sidebars are drawn where they belong.
  page.evaluate("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
  SCREENSHOTS.mkdir(parents=True, exist_ok=True)
  page.screenshot(path=str(SCREENSHOTS / "part1_interpreters.png"), full_page=True)
  assert p.problems == []
  page.close()


def test_jax_today_dispatch_stepper_steps_offline(build, browser):
  """The chapter "JAX today": its dispatch stepper steps without a kernel."""
  if not WIDGET_JS.is_file():
    _skip_or_fail("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  p = _page(build, browser, "book/jax_today.html")
  page = p.page
  step_title = """() => [...document.querySelectorAll('.widget-html')]
      .map(e => (e.innerText.match(/step \\d+\\/\\d+/) || [''])[0]).filter(x => x)"""
  page.locator(".widget-select select").first.wait_for(state="visible", timeout=20_000)
  assert page.evaluate(step_title)[0].startswith("step 1/")
  binds = page.locator(".widget-select select").first
  binds.scroll_into_view_if_needed()
  binds.select_option(index=2)
  page.wait_for_function(f"() => ({step_title})().some(t => t.startsWith('step 3/'))",
                         timeout=20_000)
  assert p.problems == []
  page.close()


def _assert_drawn(locator):
  """Visible, with a size; for an <img>, its file loaded."""
  locator.scroll_into_view_if_needed()
  assert locator.is_visible()
  box = locator.bounding_box()
  assert box and box["width"] > 0 and box["height"] > 0, box
  assert locator.evaluate("e => e.tagName != 'IMG' || (e.complete && e.naturalWidth > 0)")


def _svg_source(img):
  """The text of the SVG file an <img> shows (pages are opened from disk)."""
  src = img.evaluate("img => img.src")
  if not src.startswith("file://"):
    return ""
  path = Path(unquote(urlparse(src).path))
  return path.read_text(errors="replace") if path.is_file() else ""


# -- Every page of the site -------------------------------------------------------

def _toc_pages() -> list[str]:
  """The built pages in the order of _toc.yml (root first)."""
  import yaml
  toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
  files = [toc["root"]]

  def walk(entries):
    for e in entries or []:
      if "file" in e:
        files.append(e["file"])
      walk(e.get("chapters") or e.get("sections"))

  walk(toc.get("chapters"))
  for part in toc.get("parts") or []:
    walk(part.get("chapters"))
  return [f + ".html" for f in files]


@pytest.mark.parametrize("rel", _toc_pages())
def test_every_page_renders_offline_without_errors(build, browser, rel):
  """No console errors or failed requests with the network off; every image
  loaded and every inline picture drawn with a size."""
  if not WIDGET_JS.is_file():
    _skip_or_fail("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  p = _page(build, browser, rel)
  p.settle()
  page = p.page
  broken = page.evaluate("""() => [...document.images]
      .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)""")
  assert broken == [], f"images that did not load: {broken}"
  empty = page.evaluate("""() => [...document.querySelectorAll('.cell_output svg')]
      .filter(s => s.closest('.widget-stack, .jupyter-widgets') === null)
      .filter(s => { const b = s.getBoundingClientRect(); return !(b.width > 0 && b.height > 0); })
      .length""")
  assert empty == 0, f"{empty} inline SVG pictures have no size"
  assert p.problems == []
  page.close()


def test_internal_links_and_anchors_resolve(build):
  """Every relative link in the built site points at a file that exists, and
  every #fragment at an id on that page (Sphinx's -n catches most of these at
  build time; this also covers raw HTML and the theme's navigation)."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  href = re.compile(r'href="([^"#?]*)(#[^"]*)?"')
  ids_cache: dict = {}

  def ids(path):
    if path not in ids_cache:
      ids_cache[path] = set(re.findall(r'id="([^"]+)"', path.read_text(errors="replace")))
    return ids_cache[path]

  bad = []
  for page in HTML.rglob("*.html"):
    if "_static" in page.parts or "_sources" in page.parts:
      continue
    for target, frag in href.findall(page.read_text(errors="replace")):
      if re.match(r"^[a-z]+:", target) or target.startswith("//"):
        continue   # external (the site makes none that matter offline)
      dest = (page.parent / unquote(target)).resolve() if target else page
      if dest.is_dir():
        dest = dest / "index.html"
      if not dest.exists():
        bad.append(f"{page.relative_to(HTML)} -> {target}")
      elif frag and len(frag) > 1 and dest.suffix == ".html" and unquote(frag[1:]) not in ids(dest):
        bad.append(f"{page.relative_to(HTML)} -> {target}{frag}")
  assert bad == [], "broken internal links:\n" + "\n".join(sorted(set(bad))[:40])


def test_navigation_follows_the_table_of_contents(build):
  """Each page's "next" link goes to the next page of _toc.yml."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  pages = _toc_pages()
  for here, there in zip(pages, pages[1:]):
    text = (HTML / here).read_text()
    m = re.search(r'<a class=[\'"]right-next[\'"][^>]*href="([^"]+)"', text)
    assert m, f"{here} has no 'next' link"
    assert (HTML / here).parent.joinpath(m.group(1)).resolve() == (HTML / there).resolve(), \
        f"{here}: next is {m.group(1)}, expected {there}"


@pytest.mark.parametrize("rel", ["book/part2_jaxprs.html", "book/part4_autodiff.html",
                                 "book/jaxpr_language.html"])
def test_explorers_switch_panes_without_a_kernel(build, browser, rel):
  """viz.explorer links its dropdown to its panes in the browser: picking
  another example shows another pane, with no kernel running."""
  if not WIDGET_JS.is_file():
    _skip_or_fail("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  p = _page(build, browser, rel)
  page = p.page
  pick = page.locator(".widget-dropdown select").first
  pick.wait_for(state="visible", timeout=30_000)
  pane = """() => document.querySelector('.widget-dropdown').closest('.widget-vbox')
      .querySelector('.widget-box, .widget-container:not(.widget-dropdown)').innerText"""
  before = page.evaluate(pane)
  pick.select_option(index=1)
  page.wait_for_function(f"b => ({pane})() != b", arg=before, timeout=20_000)
  assert p.problems == []
  page.close()
