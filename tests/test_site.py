"""The website: it builds with warnings as errors, and its pages work in a real
browser with no network (graphviz diagrams and ipywidgets render, the console
stays clean).

The browser tests use Debian's chromium (/usr/bin/chromium) through Playwright,
and the widget JavaScript that scripts/fetch_widget_js.sh fetches. Without
those they are skipped, unless AUTODIDAX_REQUIRE_BROWSER=1 (.ci/run sets it).
Every page of _toc.yml is opened at a phone's, a tablet's and a desktop's
width (390, 800 and 1280 px), in every state of its widgets, and held to the
reading rules a browser can measure (READING_RULES below): nothing cut at
1280 px, no table or prose that scrolls, no output line over 120 characters
or block over 40 lines unless folded, short tracebacks shown once, no object
ids, no full tracer reprs or HLO metadata, picture labels of at least 10 px
(8 px on a phone), navigation that fits. Screenshots of each chapter at 390
and 1280 px go to _build/screenshots/ (JPEG).
"""
import html
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import toc  # tests/toc.py: _toc.yml's pages

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
  pages = [p for p in HTML.rglob("*.html") if "widget-view+json" in p.read_text()]
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
def playwright():
  if not CHROMIUM.exists():
    _skip_or_fail(f"no chromium at {CHROMIUM} (apt-get install chromium)")
  from playwright.sync_api import sync_playwright
  with sync_playwright() as p:
    yield p


@pytest.fixture(scope="session")
def browser(playwright):
  with tempfile.TemporaryDirectory() as profile:
    context = playwright.chromium.launch_persistent_context(
      profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
      offline=True, viewport={"width": 1280, "height": 900})
    # Nothing leaves the machine: every request that is not a file is refused.
    context.route(lambda url: not url.startswith("file://"),
                  lambda route: route.abort())
    yield context
    context.close()


FIRST_WIDGET = "document.querySelector(\"script[type='application/vnd.jupyter.widget-view+json']\")"
MAX_PAGE_BYTES = 1.5e6   # what a page fetches before the reader does anything
MAX_SCREENS = 25         # a chapter's length at 1280 x 900, folded blocks folded


class Page:
  """A page opened from disk, recording console errors and failed requests."""

  def __init__(self, context, path, width=1280):
    self.problems = []
    self.page = page = context.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.set_default_timeout(90_000)   # generous: a loaded 2-core machine is slow
    page.on("console", lambda m: m.type in ("error", "assert", "warning")
            and self.problems.append(f"console {m.type}: {m.text} {m.location}"))
    page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: self.problems.append(
      f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and self.problems.append(
      f"HTTP {r.status}: {r.url}"))
    page.goto(path.as_uri(), wait_until="load")

  def wake_widgets(self):
    """Bring the first widget into view, so that the widget JavaScript loads
    (it loads on demand), wait until the widgets are drawn, and go back to
    the top."""
    if not self.page.evaluate(FIRST_WIDGET + "!== null"):
      return
    self.page.evaluate(FIRST_WIDGET + ".parentElement.scrollIntoView()")
    self.page.locator(".cell_output .jupyter-widgets").first.wait_for(state="attached",
                                                                     timeout=60_000)
    self.page.evaluate("window.scrollTo(0, 0)")

  def settle(self):
    # Not "networkidle": chromium's late favicon request can hold that off.
    self.page.wait_for_load_state("load")
    self.page.evaluate("document.fonts.ready.then(() => true)")
    self.page.wait_for_timeout(500)  # late console messages


def _page(build, browser, rel, width=1280):
  if build.returncode != 0:
    pytest.skip("the build failed")
  path = HTML / rel
  if not path.is_file():
    pytest.skip(f"{rel} is not built")
  return Page(browser, path, width)


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
  p.wake_widgets()

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
  _step_to(page, 4)

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
  p.wake_widgets()
  page.locator(".widget-select select").first.wait_for(state="visible", timeout=20_000)
  _step_to(page, 3)
  assert p.problems == []
  page.close()


STEP_TITLES = """() => [...document.querySelectorAll('.widget-html')]
    .map(e => (e.innerText.match(/step \\d+\\/\\d+/) || [''])[0]).filter(x => x)"""


def _step_to(page, step: int):
  """Pick bind number `step` in the page's first stepper (it starts at step 1),
  and wait until the stepper shows it: the widgets work without a kernel."""
  assert page.evaluate(STEP_TITLES)[0].startswith("step 1/")
  binds = page.locator(".widget-select select").first
  binds.scroll_into_view_if_needed()
  binds.select_option(index=step - 1)
  page.wait_for_function(f"() => ({STEP_TITLES})().some(t => t.startsWith('step {step}/'))",
                         timeout=20_000)


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
  return [f + ".html" for f in toc.toc_files()]


WIDTHS = (390, 800, 1280)   # a phone, a tablet, a desktop
def _course_chapters() -> list[str]:
  """The chapters: the pages of _toc.yml's "The course" part."""
  return [f + ".html" for f in toc.course_chapters()]


def min_label_px(width: int) -> int:
  """The smallest label a picture may show: 10 px on a wide screen, 8 on a phone."""
  return 10 if width >= 992 else 8


CHAPTERS = _course_chapters()

# Everything in the article wider than its column, unless a box that scrolls
# sideways (and is marked as such by autodidax.js) holds it.
TOO_WIDE = """() => {
  const article = document.querySelector('.bd-article');
  const col = article.getBoundingClientRect();
  const bad = [];
  const scrolls = e => { const s = getComputedStyle(e);
    return (s.overflowX == 'auto' || s.overflowX == 'scroll') && e.scrollWidth > e.clientWidth + 1; };
  for (const e of article.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    if (!(r.width > 0 && r.height > 0) || (r.right <= col.right + 1 && r.left >= col.left - 1)) continue;
    if (e.closest('svg') && e.tagName.toLowerCase() != 'svg') continue;   // its <svg> is checked
    let a = e.parentElement, held = false;
    while (a && a != article) {
      if (scrolls(a)) {
        const ar = a.getBoundingClientRect();
        if (!a.classList.contains('adx-scrolls')) { bad.push('unmarked scroller ' + a.className); }
        else if (ar.right <= col.right + 1 && ar.left >= col.left - 1) { held = true; }
        break;
      }
      a = a.parentElement;
    }
    if (!held) bad.push(`${e.tagName.toLowerCase()}.${e.className.baseVal ?? e.className}`
                        + ` spans ${Math.round(r.left)}..${Math.round(r.right)},`
                        + ` column ${Math.round(col.left)}..${Math.round(col.right)}`);
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 1)
    bad.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px`);
  return [...new Set(bad)].slice(0, 10);
}"""

# Inline SVG pictures (graphviz's, in widgets and panes) that are shown: their
# accessible name, the size of their smallest text as drawn, and at full
# size; their width as drawn and the width of the frame that holds them.
INLINE_PICTURES = """() => [...document.querySelectorAll('.bd-article svg:has(g.graph)')]
  .filter(s => s.getBoundingClientRect().width > 0)
  .map(s => {
    const sizes = [...s.querySelectorAll('text')].map(t => parseFloat(t.getAttribute('font-size')));
    const font = Math.min(...sizes.filter(x => x > 0));
    const vb = s.viewBox.baseVal.width, frame = s.closest('.adx-fit') || s.parentElement;
    return {name: s.getAttribute('aria-label') || '', role: s.getAttribute('role'),
            drawn: font * s.getBoundingClientRect().width / vb,
            full: font * s.width.baseVal.value / vb,
            width: s.getBoundingClientRect().width, frame: frame.clientWidth,
            zooms: !!s.closest('.adx-fit.adx-scaled')};
  })"""

IMAGES = """() => [...document.querySelectorAll('.bd-article img')]
  .filter(i => i.getBoundingClientRect().width > 0)
  .map(i => ({src: i.src, alt: i.alt, width: i.getBoundingClientRect().width,
              frame: (i.closest('div.adx-zoom') || i.parentElement).clientWidth,
              framed: !!i.closest('div.adx-zoom'),
              link: (i.closest('a[href]') || {}).href || ''}))"""

# The reading rules a browser can measure, on one page at one width, in the
# state its widgets are in. Each finding names the section it is in.
READING_RULES = r"""width => {
  // Folded code and asides count too: a reader may open them.
  document.querySelectorAll('.bd-article details').forEach(d => { d.open = true; });
  const art = document.querySelector('.bd-article'), col = art.getBoundingClientRect();
  const bad = [];
  const shown = e => e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  const where = e => { const s = e.closest('section'); const h = s && s.querySelector('h1, h2, h3');
    return '"' + (h ? h.textContent.replace(/#$/, '').trim().slice(0, 40) : '?') + '"'; };
  // Code, outputs and listings: never cut on a desktop; outputs short.
  for (const pre of art.querySelectorAll('pre')) {
    if (!shown(pre)) continue;
    const lines = pre.innerText.replace(/\n$/, '').split('\n');
    const longest = Math.max(...lines.map(l => l.length));
    const wraps = getComputedStyle(pre).whiteSpace.startsWith('pre-wrap');
    const output = !!pre.closest('.cell_output');
    if (width >= 1200 && pre.scrollWidth > pre.clientWidth + 1)
      bad.push(`cut at ${width} px in ${where(pre)}: a line of ${longest} characters: ` +
               lines.find(l => l.length == longest).trim().slice(0, 50));
    if (output && !wraps && longest > 120)
      bad.push(`an output line of ${longest} characters in ${where(pre)}`);
    if (output && lines.length > 40 && !pre.closest('details.adx-more'))
      bad.push(`an output of ${lines.length} lines, not folded, in ${where(pre)}`);
  }
  // Comparisons: no pane is cut, and what differs is marked.
  for (const cmp of art.querySelectorAll('.adx-compare')) {
    if (!shown(cmp)) continue;
    const panes = [...cmp.querySelectorAll('figure')].map(p => p.querySelector('pre') ?
      [...p.querySelectorAll('pre')].map(q => q.innerText).join('\n') : '');
    if (cmp.classList.contains('adx-diffed') && panes[0] != panes[1] &&
        !cmp.querySelector('mark.adx-diff'))
      bad.push(`a comparison in ${where(cmp)} marks none of its differences`);
    // Only real differences are marked: at most a quarter of each pane's
    // lines, unless the pair is declared a whole-program difference, with
    // a sentence saying why (outputs.compare(..., whole=...)).
    if (cmp.classList.contains('adx-whole')) {
      const why = cmp.nextElementSibling;
      if (!(why && why.classList.contains('adx-why') && why.innerText.trim().length >= 30))
        bad.push(`a comparison in ${where(cmp)} is declared whole without a sentence why`);
    } else if (cmp.classList.contains('adx-diffed')) {
      for (const fig of cmp.querySelectorAll('figure')) {
        const lines = [...fig.querySelectorAll('span.adx-l')];
        const marked = lines.filter(l => l.querySelector('mark.adx-diff')).length;
        if (marked > 0.25 * lines.length)
          bad.push(`a comparison in ${where(cmp)} marks ${marked} of ${lines.length} lines of ` +
                   `"${fig.querySelector('figcaption').innerText.slice(0, 30)}"`);
      }
    }
    if (cmp.getBoundingClientRect().right > col.right + 1)
      bad.push(`a comparison in ${where(cmp)} is wider than the column`);
  }
  // Tables neither scroll nor stick out: their key column stays in view.
  for (const t of art.querySelectorAll('table')) {
    if (!shown(t)) continue;
    const box = t.parentElement;
    if (t.getBoundingClientRect().right > col.right + 1 || box.scrollWidth > box.clientWidth + 1)
      bad.push(`a table in ${where(t)} is cut or scrolls (${Math.round(t.scrollWidth)} px)`);
  }
  // Tracebacks: at most 14 lines, and a frame shown once on a page.
  const frames = new Set();
  for (const tb of art.querySelectorAll('.output.traceback')) {
    const lines = tb.innerText.replace(/\n$/, '').split('\n');
    if (lines.length > 14) bad.push(`a traceback of ${lines.length} lines in ${where(tb)}`);
    for (const l of lines.filter(l => /^Cell In\[\d+\], line \d+, in \S+/.test(l))) {
      if (frames.has(l)) bad.push(`the frame "${l}" is shown twice`);
      frames.add(l);
    }
  }
  // No object ids, tracer reprs or HLO metadata, in text, tooltips and pictures.
  const seen = [art.innerText,
    ...[...art.querySelectorAll('[title], [aria-label], img[alt]')].map(e =>
      [e.getAttribute('title'), e.getAttribute('aria-label'), e.getAttribute('alt')].join(' ')),
    ...[...art.querySelectorAll('svg title')].map(t => t.textContent)].join('\n');
  for (const [what, re] of [['an object id', /0x[0-9a-f]{6,}|\b[a-z]{1,3}\d{10,}\b| object at /],
                            ['a full tracer repr', /Traced<|with<\w+Trace level/],
                            ['HLO metadata', /metadata=\{/]]) {
    const m = seen.match(re);
    if (m) bad.push(`${what}: "${seen.slice(Math.max(0, m.index - 30), m.index + 40)}"`);
  }
  // Navigation: "Previous" and "Next" fit the page.
  for (const a of document.querySelectorAll('.prev-next-area a')) {
    const r = a.getBoundingClientRect();
    if (a.scrollWidth > a.clientWidth + 1 || r.left < -1 || r.right > window.innerWidth + 1)
      bad.push(`the link "${a.innerText.replace(/\s+/g, ' ')}" is clipped`);
  }
  return bad;
}"""

SVG_FONT = re.compile(r'font-size(?:="|:\s*)([0-9.]+)')   # graphviz's, matplotlib's
PLOT_TICK_PX = 9   # a plot's smallest text (its ticks) on a phone
SVG_SIZE = re.compile(r'<svg[^>]*\bwidth="([0-9.]+)pt"[^>]*viewBox="[-0-9. ]*?([0-9.]+) [0-9.]+"')


def _check_pictures(page, width, fit=True):
  """Alt text that is not a file path; a frame that zooms in place; labels
  at least min_label_px(width) as drawn. With `fit`, each picture fits its
  frame as drawn, labels included: it is laid out for the column, never
  scrolled inside its frame."""
  bad, least = [], min_label_px(width)
  for pic in page.evaluate(IMAGES) + page.evaluate(INLINE_PICTURES):
    if fit and pic["width"] > pic["frame"] + 1:
      what = pic.get("name", "")[:50] or Path(unquote(urlparse(pic["src"]).path)).name
      bad.append(f"picture {what!r}: {pic['width']:.0f} px wide in a frame of "
                 f"{pic['frame']:.0f} px at {width} px")
  for img in page.evaluate(IMAGES):
    name = Path(unquote(urlparse(img["src"]).path)).name
    if not img["alt"].strip() or name in img["alt"] or len(img["alt"]) < 15:
      bad.append(f"{name}: alt text {img['alt']!r}")
    if not img["framed"]:
      bad.append(f"{name}: not in a zoom frame (div.adx-zoom)")
    if img["link"]:
      bad.append(f"{name}: a link takes the reader off the page ({img['link']})")
    if not name.endswith(".svg"):   # a plot's ticks can't be measured, nor stay sharp
      bad.append(f"{name}: a raster picture (draw plots as SVG: outputs.svg_plots)")
      continue
    svg = Path(unquote(urlparse(img["src"]).path)).read_text()
    size, fonts = SVG_SIZE.search(svg), [float(f) for f in SVG_FONT.findall(svg)]
    floor = max(least, PLOT_TICK_PX) if "Matplotlib" in svg else least
    if not (size and fonts):
      if "Matplotlib" in svg:   # a plot whose text became paths
        bad.append(f"{name}: no text size to measure (matplotlib: svg.fonttype 'none')")
    elif (drawn := min(fonts) * img["width"] / float(size.group(2))) < floor - 0.05:
      bad.append(f"{name}: labels {drawn:.1f} px at {width} px (at least {floor})")
  for pic in page.evaluate(INLINE_PICTURES):
    if pic["role"] != "img" or len(pic["name"]) < 15:
      bad.append(f"inline picture without an accessible name: {pic}")
    if pic["drawn"] < least - 0.05 and pic["full"] >= least:
      bad.append(f"inline picture {pic['name'][:50]!r}: labels {pic['drawn']:.1f} px")
  return bad


def _menu_opens(page, width):
  """The visible menu button opens the chapter menu (a phone, a tablet), or
  folds the sidebar away and back (a desktop)."""
  page.evaluate("window.scrollTo(0, 0)")
  toggle = page.locator(".primary-toggle").filter(visible=True).first
  if width < 992:
    toggle.click()
    menu = page.locator("#pst-primary-sidebar-modal")
    menu.wait_for(state="visible", timeout=5_000)
    links = menu.locator("nav a.reference").filter(visible=True)
    assert links.count() >= 9, f"{links.count()} links in the open menu"
    page.keyboard.press("Escape")
    menu.wait_for(state="hidden", timeout=5_000)
  else:
    sidebar = page.locator("#pst-primary-sidebar")
    assert sidebar.is_visible()
    toggle.click()
    sidebar.wait_for(state="hidden", timeout=5_000)
    toggle.click()
    sidebar.wait_for(state="visible", timeout=5_000)


REDRAWN = """() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
    const wait = () => window.adxSettled() ? done(true) : setTimeout(wait, 20); wait(); })))"""


def _redrawn(page):
  """After a widget changed: two frames for the pane to be redrawn, then until
  autodidax.js has marked what scrolls (it does 100 ms after the last change), twice."""
  for _ in range(2):
    page.evaluate(REDRAWN)


def _widget_states(page):
  """Yields once per state of the page's widgets: each choice of each
  dropdown and list, picked in turn."""
  yield "first"
  controls = page.locator(".cell_output .jupyter-widgets select")
  for c in range(controls.count()):
    control = controls.nth(c)
    n = control.evaluate("s => s.options.length")
    for i in list(range(1, n)) + [0]:
      control.select_option(index=i)
      _redrawn(page)
      yield f"widget {c} choice {i}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("rel", _toc_pages())
def test_every_page_at_every_width(build, browser, rel, width):
  """At each width, in every widget state: nothing is wider than its column
  unless it scrolls and says so; pictures have alt text and readable text (or
  open full size); the menu opens; the console has no error or warning."""
  if not WIDGET_JS.is_file():
    _skip_or_fail("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  p = _page(build, browser, rel, width)
  p.settle()
  page = p.page
  has_widgets = "widget-view+json" in (HTML / rel).read_text()
  p.wake_widgets()
  if width == 1280 and rel in CHAPTERS:   # long listings folded, as a reader finds them
    screens = page.evaluate("() => document.querySelector('.bd-article').scrollHeight / 900")
    assert screens <= MAX_SCREENS, f"{rel}: {screens:.1f} screens at 1280 px"
  broken = page.evaluate("""() => [...document.images]
      .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)""")
  assert broken == [], f"images that did not load: {broken}"
  # (A picture laid out twice, for a wide and a narrow column, hides the other.)
  empty = page.evaluate("""() => [...document.querySelectorAll('.cell_output svg')]
      .filter(s => s.closest('.widget-stack, .jupyter-widgets') === null)
      .filter(s => { const alt = s.closest('.adx-wide-only, .adx-narrow-only');
                     return !(alt && getComputedStyle(alt).display == 'none'); })
      .filter(s => { const b = s.getBoundingClientRect(); return !(b.width > 0 && b.height > 0); })
      .length""")
  assert empty == 0, f"{empty} inline SVG pictures have no size"
  if has_widgets:
    page.locator(".cell_output .jupyter-widgets").first.wait_for(state="visible")
    # Keyboard focus on a widget's dropdown or list is plain to see.
    select = page.locator(".cell_output .jupyter-widgets select").first
    select.focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    outline = select.evaluate("s => parseFloat(getComputedStyle(s).outlineWidth)")
    assert outline >= 2, f"focus outline {outline} px"
  page.wait_for_timeout(300)
  for state in _widget_states(page):
    wide = page.evaluate(TOO_WIDE)
    assert wide == [], f"{rel} at {width} px, {state}: too wide: {wide}"
    bad = _check_pictures(page, width, fit=width in (390, 1280))
    if width in (390, 1280):
      bad += page.evaluate(READING_RULES, width)
    assert bad == [], f"{rel} at {width} px, {state}:\n" + "\n".join(bad)
  if rel in CHAPTERS and width in (390, 1280):
    page.evaluate("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    name = Path(rel).stem
    # JPEG: a long page's PNG takes seconds to encode.
    page.screenshot(path=str(SCREENSHOTS / f"{name}_{width}.jpg"), full_page=True,
                    type="jpeg", quality=70)
  _menu_opens(page, width)
  assert p.problems == []
  page.close()


# -- Light pages: measured over HTTP, where the browser's resource timing works ----

@pytest.fixture(scope="module")
def served(build):
  """The built site on a local HTTP server (a file:// page has no resource
  timing): its base URL."""
  import functools
  import http.server
  import threading
  if build.returncode != 0:
    pytest.skip("the build failed")
  class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
      pass
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                           functools.partial(Quiet, directory=str(HTML)))
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{server.server_address[1]}/"
  server.shutdown()


@pytest.fixture(scope="module")
def http_browser(playwright, served):
  b = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
  context = b.new_context()
  context.route(lambda url: not url.startswith(served), lambda route: route.abort())
  yield context
  b.close()


RESOURCE_BYTES = """() => [...performance.getEntriesByType('navigation'),
                           ...performance.getEntriesByType('resource')]
  .map(e => [e.name, e.decodedBodySize])"""


@pytest.mark.parametrize("width", (390, 1280))
@pytest.mark.parametrize("rel", CHAPTERS)
def test_a_chapter_arrives_light(build, http_browser, served, rel, width):
  """Before the reader does anything, a chapter's text and pictures arrive
  in at most MAX_PAGE_BYTES (the browser's resource timing, uncompressed),
  and the widgets' JavaScript has not loaded; it loads when a widget comes
  near, and the widgets are drawn. The footer states the weight measured."""
  if not WIDGET_JS.is_file():
    _skip_or_fail("widget JavaScript not fetched (scripts/fetch_widget_js.sh needs npm)")
  page = http_browser.new_page()
  page.set_viewport_size({"width": width, "height": 900})
  page.goto(served + rel, wait_until="load")
  page.evaluate("document.fonts.ready.then(() => true)")
  page.wait_for_timeout(1000)
  loaded = page.evaluate(RESOURCE_BYTES)
  before = sum(n for _, n in loaded)
  assert before <= MAX_PAGE_BYTES, \
      f"{rel} at {width} px: {before / 1e6:.2f} MB before any interaction"
  assert not [u for u, _ in loaded if "offline-widgets" in u or "_widget_state" in u], \
      f"{rel}: the widgets loaded before one came near"
  stated = page.locator(".adx-page-weight").inner_text()
  m = re.search(r"weighs ([0-9.]+) (MB|kB)", stated)
  assert m, stated
  said = float(m.group(1)) * (1e6 if m.group(2) == "MB" else 1e3)
  assert 0.8 * before <= said <= 1.25 * before, (stated, before)
  if "widget-view+json" in (HTML / rel).read_text():
    assert "load when you come near one" in stated, stated
    page.evaluate(FIRST_WIDGET + ".parentElement.scrollIntoView()")
    page.locator(".cell_output .jupyter-widgets").first.wait_for(state="attached",
                                                                 timeout=60_000)
    assert [u for u, _ in page.evaluate(RESOURCE_BYTES) if u.endswith("embed-amd.js")]
  page.close()


@pytest.fixture(scope="module")
def no_js_browser(playwright):
  b = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                 args=CHROMIUM_ARGS)
  context = b.new_context(java_script_enabled=False, offline=True,
                          viewport={"width": 390, "height": 900})
  yield context
  b.close()


def test_widgets_show_a_static_picture_without_javascript(build, no_js_browser):
  """With JavaScript off, each widget cell shows its first state instead."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  pages = [rel for rel in _toc_pages() if "widget-view+json" in (HTML / rel).read_text()]
  assert pages, "no page has widgets"
  for rel in pages:
    page = no_js_browser.new_page()
    page.goto((HTML / rel).as_uri())
    outputs = page.locator(".cell_output:has(script[type='application/vnd.jupyter.widget-view+json'])")
    assert outputs.count() > 0
    for i in range(outputs.count()):
      static = outputs.nth(i).locator(".adx-widget-static")
      assert static.is_visible(), f"{rel}: widget {i} shows nothing without JavaScript"
      assert static.locator("svg, pre, .adx-code").count() > 0, f"{rel}: widget {i}"
    page.close()


@pytest.mark.parametrize("width", (390, 1280))
def test_pictures_fit_their_frames_without_javascript(build, no_js_browser, width):
  """With JavaScript off (no zooming, no widths set by autodidax.js), every
  picture of every chapter, static widget panes included, fits its frame
  with labels of at least min_label_px(width)."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  bad = []
  for rel in CHAPTERS:
    page = no_js_browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.goto((HTML / rel).as_uri())
    bad += [f"{rel}: {b}" for b in _check_pictures(page, width)]
    page.close()
  assert bad == [], "\n".join(bad)


def test_widget_javascript_only_on_pages_with_widgets(build):
  if build.returncode != 0:
    pytest.skip("the build failed")
  for page in HTML.rglob("*.html"):
    text = page.read_text()
    if "_static" in page.parts or "widget-view+json" in text:
      continue
    assert "embed-amd.js" not in text and "require.js" not in text, page


def test_every_chapter_links_its_exercises_from_the_site(build):
  """Under each chapter's title, a link downloads exercises/<name>.ipynb,
  served by the site itself, and another goes to the page on running it."""
  import yaml
  if build.returncode != 0:
    pytest.skip("the build failed")
  config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
  chapters = config["adx_exercises"]
  assert {f"{c}.html" for c in chapters} == set(CHAPTERS)
  for doc, notebook in chapters.items():
    text = (HTML / f"{doc}.html").read_text()
    m = re.search(r'<p class="adx-download">.*?href="([^"]+\.ipynb)" download.*?href="([^"]+)"',
                  text)
    assert m, f"{doc}: no download link"
    served = (HTML / doc).parent / m.group(1)
    assert served.read_bytes() == (ROOT / "exercises" / f"{notebook}.ipynb").read_bytes()
    assert ((HTML / doc).parent / m.group(2)).resolve() == \
        (HTML / f"{config['adx_exercises_howto']}.html").resolve()
  import zipfile
  with zipfile.ZipFile(HTML / "exercises" / "autodidax-course.zip") as z:
    names = set(z.namelist())
  for f in ["pyproject.toml", "lib/autodidax/core.py", "exercises/coursekit/learner/checks.py",
            "exercises/coursekit/learner/probes/part1.py", "exercises/coursekit/learner/expected/part1.json"]:
    assert f"autodidax-course/{f}" in names


def test_the_sites_zip_installs_the_library_and_the_checks(build, tmp_path):
  """`pip install autodidax-course.zip`, as the page on running the exercises
  says, installs both packages (offline here: no build isolation)."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  pytest.importorskip("setuptools")
  proc = subprocess.run(
    [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
     "--target", str(tmp_path / "site"), str(HTML / "exercises" / "autodidax-course.zip")],
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  assert proc.returncode == 0, proc.stdout
  proc = subprocess.run(
    [sys.executable, "-c", "import autodidax, json, coursekit.learner.checks as c, coursekit.learner.probes.part1; "
     "print(autodidax.__file__, len(json.loads((c.EXPECTED / 'part1.json').read_text())))"],
    cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")),
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  assert proc.returncode == 0 and str(tmp_path) in proc.stdout, proc.stdout
  assert proc.stdout.split()[-1] == "6", proc.stdout   # the check cells' expected records


# -- Citations of JAX's source: no name read twice ------------------------------------

CODE = re.compile(r'<code class="([^"]*)"[^>]*>(.*?)</code>', re.S)


def doubled_citations(page: str) -> list[str]:
  """Where a {jaxsrc} citation, as built, repeats the name the prose has just
  given ("`jit` is `jit` in jax/_src/api.py"): two code spans in a row, one
  of them a citation's name, with the same last dotted name and at most a
  few characters between them."""
  text = lambda h: re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", h)))
  found, prev, end = [], None, 0
  for m in CODE.finditer(page):
    name, cites = text(m.group(2)).strip(), "adx-jaxsrc-name" in m.group(1)
    gap = text(page[end:m.start()])
    last = "" if "/" in name else name.rsplit(".", 1)[-1].removesuffix("()")
    if prev and last and prev[1] == last and (cites or prev[2]) and len(gap) <= 16:
      found.append(f"`{prev[0]}`{gap}`{name}`")
    prev, end = (name, last, cites), m.end()
  return found


def test_the_doubled_citation_rule_can_fail():
  cite = ('<span class="adx-jaxsrc"><code class="adx-jaxsrc-name docutils literal">'
          '<span class="pre">{}</span></code> in <code class="adx-jaxsrc docutils literal">'
          '<span class="pre">jax/_src/{}</span></code></span>')
  code = '<code class="docutils literal"><span class="pre">{}</span></code>'
  page = (f"<p>{code.format('SymbolicZero')} in {cite.format('SymbolicZero', 'ad_util.py')}, "
          f"{code.format('jit')} is {cite.format('jit', 'api.py')}; "
          f"{code.format('jax.lax')} ({cite.format('dot_general', 'lax/lax.py')}); "
          f"{code.format('vmap')}, a name given long before its citation, "
          f"{cite.format('vmap', 'api.py')}</p>")
  assert doubled_citations(page) == ["`SymbolicZero` in `SymbolicZero`", "`jit` is `jit`"]


def test_no_cited_name_reads_twice(build):
  """On every built page, no citation of JAX's source repeats the name just
  before it (book/_ext/jax_source.py shows the file alone there)."""
  if build.returncode != 0:
    pytest.skip("the build failed")
  doubled = [f"{rel}: {d}" for rel in _toc_pages()
             for d in doubled_citations((HTML / rel).read_text())]
  assert doubled == [], doubled


def test_no_page_loads_mathjax(build):
  """Math would load MathJax from a CDN: the configuration enables no math
  syntax, and no built page has a MathJax script."""
  config = (ROOT / "_config.yml").read_text()
  extensions = re.search(r"myst_enable_extensions:\n((?:\s+- \w+\n)+)", config).group(1)
  assert not {"dollarmath", "amsmath"} & set(re.findall(r"- (\w+)", extensions)), extensions
  if build.returncode != 0:
    pytest.skip("the build failed")
  loads = [p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
           if re.search(r"<script[^>]*mathjax", p.read_text(), re.I)]
  assert loads == [], loads


def test_glossary_points_to_the_chapters(build):
  """Every "See <chapter>" of the glossary is a link to that chapter, for
  every chapter name in _config.yml's adx_chapter_names."""
  import yaml
  if build.returncode != 0:
    pytest.skip("the build failed")
  names = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["adx_chapter_names"]
  text = (HTML / "book" / "glossary.html").read_text()
  alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
  plain = re.findall(rf"See [“\"]?(?:[^<.]*? and [“\"]?)?({alternatives})", text)
  assert plain == [], plain
  for name, doc in names.items():
    if f"See {name}" in (ROOT / "book" / "glossary.md").read_text().replace('"', ""):
      assert f'href="{Path(doc).name}.html"><span class="doc">{name}' in text, name
  linked = re.findall(r'<a class="reference internal" href="(part\d_\w+)\.html"><span class="doc">Part', text)
  assert len(linked) >= 20


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
  p.wake_widgets()
  pick = page.locator(".widget-dropdown select").first
  pick.wait_for(state="visible", timeout=30_000)
  pane = """() => document.querySelector('.widget-dropdown').closest('.widget-vbox')
      .querySelector('.widget-box, .widget-container:not(.widget-dropdown)').innerText"""
  before = page.evaluate(pane)
  pick.select_option(index=1)
  page.wait_for_function(f"b => ({pane})() != b", arg=before, timeout=20_000)
  assert p.problems == []
  page.close()
