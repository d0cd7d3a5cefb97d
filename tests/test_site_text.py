"""What a reader sees in the built pages: no path of the machine that built the
site, no traceback longer than a screenful (chapters install
book/_ext/short_tracebacks.py in their hidden setup cell), no object ids
(in the pictures' files too), no full tracer reprs or HLO metadata; and each
chapter reads as a chapter: its reading time computed from the page, a first
picture before much code, long listings folded, a recap with questions to
check yourself at the end."""
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import toc  # tests/toc.py: _toc.yml's pages

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
MAX_TRACEBACK_LINES = 14
# Absolute paths of a build machine, the virtual environment, the kernel's
# temporary cell files. The site's own links are relative, so none is legitimate.
MACHINE_PATH = re.compile(
    r"(/work/|/root/|/home/|/tmp/|/usr/lib/|site-packages|dist-packages|ipykernel_\d+|"
    + re.escape(str(ROOT)) + ")")
TRACEBACK = re.compile(r'<div class="[^"]*\boutput traceback\b[^"]*">(.*?)</div>', re.S)

pytestmark = pytest.mark.timeout(1800)  # a cold build runs every chapter


@pytest.fixture(scope="module")
def pages():
  venv_bin = Path(sys.executable).parent
  env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
  proc = subprocess.run(["bash", "scripts/build_book.sh"], cwd=ROOT, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  if proc.returncode != 0:
    pytest.fail("the book did not build:\n" + proc.stdout[-4000:])
  found = {p.relative_to(HTML).as_posix(): p.read_text() for p in HTML.rglob("*.html")}
  assert "book/primitives.html" in found
  return found


def _text(fragment):
  return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_no_machine_paths(pages):
  bad = {}
  for name, page in pages.items():
    hits = {m.group(0) for m in MACHINE_PATH.finditer(_text(page))}
    hits |= {m.group(0) for m in MACHINE_PATH.finditer(page)}   # in attributes too
    if hits:
      bad[name] = sorted(hits)
  assert not bad, f"machine paths in the site: {bad}"


def test_tracebacks_are_short(pages):
  seen, long_ones = 0, []
  for name, page in pages.items():
    for m in TRACEBACK.finditer(page):
      seen += 1
      lines = _text(m.group(1)).strip("\n").splitlines()
      if len(lines) > MAX_TRACEBACK_LINES:
        long_ones.append(f"{name}: {len(lines)} lines, starting {lines[:3]}")
  assert seen >= 10, "expected the chapters' error demos"
  assert not long_ones, "\n".join(long_ones)


def test_tracebacks_end_with_the_message(pages):
  """The last line of each error demo names the exception, so the useful part
  is never what gets cut off."""
  for name, page in pages.items():
    for m in TRACEBACK.finditer(page):
      lines = _text(m.group(1)).strip("\n").splitlines()
      msg = [i for i, l in enumerate(lines) if re.match(r"[\w.]*(Error|Exception)\b", l)]
      frames = [i for i, l in enumerate(lines) if l.startswith(("Cell In[", "File "))]
      assert msg, f"{name}: a traceback without its message: {lines}"
      assert not frames or msg[-1] > frames[-1], (name, lines)
      assert all(len(l) <= 100 for l in lines), f"{name}: lines too long to read: {lines}"


# -- Object ids, tracer reprs, HLO metadata --------------------------------------------

OBJECT_ID = re.compile(r"0x[0-9a-f]{6,}|\b[a-z]{1,3}\d{10,}\b| object at ")
SVG_NAMES = re.compile(r"<title>(.*?)</title>|<!-- (.*?) -->", re.S)


def test_no_object_ids(pages):
  """Not in the text, not in tooltips, and not in the pictures' <title>s and
  comments, in the pages (widgets' saved pictures included) and SVG files."""
  bad = []
  for name, page in pages.items():
    for m in OBJECT_ID.finditer(_text(page)):
      bad.append(f"{name}: {m.group(0)!r}")
    for m in SVG_NAMES.finditer(page):
      if OBJECT_ID.search(m.group(1) or m.group(2)):
        bad.append(f"{name}: picture name {(m.group(1) or m.group(2))[:60]!r}")
  # Pictures' files, and the widgets' saved state (loaded on demand, book/_ext/page_weight.py).
  for svg in [*(HTML / "_images").glob("*.svg"), *(HTML / "_widget_state").glob("*.js")]:
    for m in SVG_NAMES.finditer(svg.read_text(errors="replace")):
      if OBJECT_ID.search(m.group(1) or m.group(2)):
        bad.append(f"{svg.parent.name}/{svg.name}: {(m.group(1) or m.group(2))[:60]!r}")
  assert not bad, "\n".join(sorted(set(bad))[:30])


def test_no_full_tracer_reprs_or_hlo_metadata(pages):
  """Trace logs show the interpreter, its level and the type, not reprs;
  compiled HLO is shown without its per-instruction metadata."""
  bad = []
  for name, page in pages.items():
    text = _text(page)
    for pattern in (r"Traced<", r"with<\w+Trace level", r"metadata=\{"):
      if re.search(pattern, text):
        bad.append(f"{name}: {pattern}")
  assert not bad, bad


# -- Chapters read as chapters -----------------------------------------------------------

def _chapters():
  sys.path.insert(0, str(ROOT / "tests"))
  from test_registration import course_chapters
  return course_chapters()


def _code_blocks(page: str):
  """(position, lines, folded) of each code block a reader sees: cells' code
  and the library's listings, not outputs."""
  for m in re.finditer(r'<div class="(cell_input[^"]*|highlight-python notranslate)"', page):
    pre = re.search(r"<pre>(.*?)</pre>", page[m.end():], re.S)
    if pre is None:
      continue
    before = page[:m.start()]
    folded = before.count("<details") > before.count("</details>")
    lines = html.unescape(re.sub(r"<[^>]+>", "", pre.group(1))).strip("\n").count("\n") + 1
    yield m.start(), lines, folded


FIRST_PICTURE = re.compile(r'<div class="adx-zoom"|class="adx-fit"|&lt;svg|<svg[^>]*role="img"')
MAX_CODE_BEFORE_PICTURE = 30
MAX_LISTING = 45
MAX_LIBRARY_LISTING = 30   # literalinclude folds longer ones (book/_ext/listings.py)


@pytest.mark.parametrize("doc", _chapters())
def test_chapter_shape(pages, doc):
  """A chapter says what it builds before its code, shows a picture early,
  folds long listings, states its reading time, and ends with a recap and
  questions (with answers folded)."""
  page = pages[f"{doc}.html"]
  source = (ROOT / f"{doc}.md").read_text()
  problems = []
  if re.search(r"^\*Reading time", source, re.M):
    problems.append("a hand-written reading time (book/_ext/reading_time.py computes it)")
  if not re.search(r'class="[^"]*adx-reading-time[^"]*"><em>Reading time: about \d+ minutes', page):
    problems.append("no computed reading time")
  first_pic = FIRST_PICTURE.search(page)
  if first_pic is None:
    problems.append("no picture")
  else:
    code = sum(n for at, n, folded in _code_blocks(page) if at < first_pic.start() and not folded)
    if code > MAX_CODE_BEFORE_PICTURE:
      problems.append(f"{code} lines of code before the first picture")
  for at, n, folded in _code_blocks(page):
    if n > MAX_LISTING and not folded:
      problems.append(f"a listing of {n} lines not folded")
  for m in re.finditer(r'<div class="highlight-python notranslate">', page):   # the library's
    pre = re.search(r"<pre>(.*?)</pre>", page[m.end():], re.S)
    n = html.unescape(re.sub(r"<[^>]+>", "", pre.group(1))).strip("\n").count("\n") + 1
    before = page[:m.start()]
    if n > MAX_LIBRARY_LISTING and not before.rstrip().endswith("</summary>"):
      problems.append(f"a library listing of {n} lines not folded behind a summary")
  body = source.split("\n# ", 1)[-1]
  body = re.sub(r"```\{code-cell\}[^\n]*\n:tags: \[remove-cell\].*?\n```", "", body, flags=re.S)
  opening = body.split("\n", 1)[-1].split("```{code-cell}", 1)[0]
  if len(opening.split()) < 50:
    problems.append("no opening that says what the chapter builds and why, before its code")
  recap = source.rfind("## Recap")
  if recap < 0:
    problems.append("no recap")
  else:
    tail = source[recap:]
    if "Check yourself" not in tail or ":::{dropdown} Answers" not in tail:
      problems.append("the recap has no questions with folded answers")
    if re.search(r"^## ", tail[3:], re.M):
      problems.append("the recap is not the last section")
  assert not problems, f"{doc}: " + "; ".join(problems)


# -- Comparisons mark only real differences (book/_ext/outputs.py) -----------------

def _outputs():
  sys.path.insert(0, str(ROOT / "book" / "_ext"))
  import outputs
  return outputs


def _marked_lines(panes):
  figures = re.findall(r"<figure.*?</figure>", panes._repr_html_(), re.S)
  return [(len(re.findall(r'class="adx-l"', f)),
           len(re.findall(r'<span class="adx-l"[^>]*>(?:(?!<span class="adx-l").)*adx-diff', f,
                          re.S))) for f in figures]


def test_jaxs_let_blocks_are_written_in_place_before_diffing():
  outputs = _outputs()
  jax_text = ("let jaxpr = { lambda ; a:f64[]. let\n    b:f64[] = sin a\n  in (b,) } in\n"
              "{ lambda ; c:f64[]. let\n    _:f64[] = cos c\n    d:f64[] = remat2[\n"
              "      jaxpr=jaxpr\n      policy=None\n    ] c\n  in (d,) }")
  ours = ("{ lambda ; a:f64[]. let\n    e:f64[] = cos a\n    b:f64[] = remat[\n"
          "      jaxpr={ lambda ; c:f64[]. let\n          d:f64[] = sin c\n        in (d,) }\n"
          "      policy=None\n    ] a\n  in (b,) }")
  inlined = outputs.inline_lets(jax_text)
  assert inlined.split("\n")[3:6] == ["      jaxpr={ lambda ; a:f64[]. let",
                                      "          b:f64[] = sin a", "        in (b,) }"]
  pair = outputs.compare(ours, jax_text)
  assert "let blocks written in place" in pair.titles[1]
  html = pair._repr_html_()
  marks = re.findall(r'<mark class="adx-diff">(.*?)</mark>', html)
  assert sorted(marks) == ["_", "e", "remat", "remat2"]   # JAX's unused result, the names
  assert all(m <= 0.25 * n for n, m in _marked_lines(pair))
  assert "adx-whole" not in html
  # Without the inlining, the whole sub-jaxpr would be marked on both sides.
  assert not all(m <= 0.25 * n for n, m in
                 _marked_lines(outputs.compare(ours, jax_text.replace("jaxpr=jaxpr", "jaxpr=x"))))


def test_dtypes_alike_only_when_asked_and_whole_pairs_say_why():
  outputs = _outputs()
  a, b = "x:f64[] = sin y", "x:f32[] = sin y"
  mark = '<mark class="adx-diff">'
  assert mark in outputs.compare(a, b)._repr_html_()
  assert mark not in outputs.compare(a, b, dtypes=False)._repr_html_()
  html = outputs.compare("a", "b", whole="Two designs: a stack and a chain of traces.")._repr_html_()
  assert 'class="adx-compare adx-diffed adx-whole"' in html and 'class="adx-why"' in html


def test_mlir_pairs_mark_only_what_xla_runs_differently():
  """Value names, float literals' spelling, a one-op reduction body and JAX's
  metadata attributes are alike; an extra sharding annotation is not."""
  outputs = _outputs()
  ours = ("func.func public @main(%arg0: tensor<3xf64> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) "
          "-> (tensor<f64>) {\n"
          "  %0 = stablehlo.constant dense<0.0> : tensor<f64>\n"
          "  %1 = stablehlo.reduce(%arg0 init: %0) across dimensions = [0] : "
          "(tensor<3xf64>, tensor<f64>) -> tensor<f64>\n"
          "   reducer(%2: tensor<f64>, %3: tensor<f64>) {\n"
          "    %4 = stablehlo.add %2, %3 : tensor<f64>\n"
          "    stablehlo.return %4 : tensor<f64>\n"
          "  }\n"
          "  return %1 : tensor<f64>\n}")
  jax_text = ("func.func public @main(%arg0: tensor<3xf32>) -> (tensor<f32> "
              "{jax.result_info = \"result\"}) {\n"
              "  %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n"
              "  %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across "
              "dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>\n"
              "  return %0 : tensor<f32>\n}")
  pair = outputs.compare(ours, jax_text, dtypes=False)
  assert "reductions written as MLIR prints them" in pair.titles[0]
  assert "left out" in pair.titles[1]
  marks = re.findall(r'<mark class="adx-diff">(.*?)</mark>', pair._repr_html_())
  assert marks and all("sdy.sharding" in m or m in ("{", "}", "[", "]", "<", ">", "@mesh", ",",
                                                      "#sdy.sharding", "=")
                       for m in map(html.unescape, marks)), marks
  # With dtypes, f64 against f32 is marked.
  assert len(re.findall('<mark class="adx-diff">', outputs.compare(ours, jax_text)._repr_html_())) \
      > len(marks)


def test_arrays_compare_by_value_whatever_their_class():
  import numpy as np
  outputs = _outputs()

  class Boxed:   # an array type whose str is not NumPy's, as ours and JAX's
    def __init__(self, a): self.a, self.shape, self.dtype = a, a.shape, a.dtype
    def __array__(self, dtype=None, copy=None): return self.a
    def __str__(self): return "Boxed!"

  x = np.array([1.5, -0., 6.], np.float32)
  mark = '<mark class="adx-diff">'
  assert mark not in outputs.compare((Boxed(x), x), (x, Boxed(x)))._repr_html_()
  assert mark in outputs.compare(Boxed(x), x + 1)._repr_html_()


# -- An example before each listing --------------------------------------------------

# Every chapter of the course is held to it.
EXAMPLE_FIRST = toc.course_chapters()


def listings_before_an_example(source: str) -> list[str]:
  """The library listings (`literalinclude`) that come before any code cell
  that runs in their section (a `##` heading and what follows it)."""
  bad, heading, example = [], "", False
  lines = source.split("\n")
  for i, line in enumerate(lines):
    if re.match(r"#{1,2} ", line):
      heading, example = line, False
    elif line.startswith("```{code-cell}"):
      meta = "\n".join(lines[i + 1:i + 8])
      example = example or "remove-cell" not in meta.split("```")[0]
    elif line.startswith("```{literalinclude}") and not example:
      obj = next((l.split()[-1] for l in lines[i + 1:i + 6] if l.startswith(":pyobject:")), line)
      bad.append(f"{obj} in {heading!r}")
  return bad


def test_the_listing_rule_can_fail():
  source = ("# A\n\n## One\n\n```{literalinclude} x.py\n:pyobject: f\n```\n\n"
            "```{code-cell} ipython3\nf(1)\n```\n\n## Two\n\n```{code-cell} ipython3\n"
            ":tags: [remove-cell]\nsetup()\n```\n\n```{literalinclude} x.py\n:pyobject: g\n```\n"
            "\n## Three\n\n```{code-cell} ipython3\ng(1)\n```\n\n```{literalinclude} x.py\n"
            ":pyobject: g\n```\n")
  assert listings_before_an_example(source) == ["f in '## One'", "g in '## Two'"]


@pytest.mark.parametrize("doc", EXAMPLE_FIRST)
def test_each_section_shows_an_example_before_its_listing(doc):
  assert listings_before_an_example((ROOT / f"{doc}.md").read_text()) == []
