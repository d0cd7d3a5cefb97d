"""The learners' feedback pages (coursekit.grader.feedback), from rows made here: what a page
shows at each level, what it never shows, and how it reads in headless chromium at
390 and 1280 px with learner-controlled text built to run scripts. The pages of a
whole graded class are checked in tests/test_instructor_loop.py."""
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coursekit.grader import chapters, feedback

ROOT = Path(__file__).resolve().parents[1]
EVIL = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="module")
def stubs():
  return chapters.load_stubs()


def rows(student=f"mallory {EVIL}", sub="mallory/part1.ipynb"):
  base = dict(student=student, part="part1", max_points="1", submission=sub, left_out=[])
  detail = ("jvp of tanh, shape (7,): tangent output (x = [0.1 0.2]): values differ in 7 of 7 "
            "entries (at index 0: expected 0.5, got -0.5); likely, the sign is flipped\n"
            f"expected:\n[0.5 0.4]\ngot:\n[-0.5 -0.4] {EVIL}")
  return [
      dict(base, exercise="1.1", points="1", status="pass", reason="", detail="",
           notes=f"printed 30.0 MB (kept the first 64 kB); review: imports jax (cell 8) {EVIL}"),
      dict(base, exercise="1.2", points="0", status="fail", reason=" ".join(detail.split()),
           detail=detail, notes="its metadata names the student 'alice'",
           left_out=["cell 9 of your notebook did not run when graded: no answer needs what "
                     "they define"]),
  ] + [dict(base, exercise=ex, points="1", status="pass", reason="", detail="", notes="")
       for ex in ("1.3", "1.4", "1.5", "1.6")]


def test_a_page_shows_the_failure_as_the_check_cell_words_it(stubs):
  html = feedback.page("mallory", "part1", rows(), stubs["part1"], "all")
  assert "values differ in 7 of 7 entries" in html and "likely, the sign is flipped" in html
  assert "expected:\n[0.5 0.4]\ngot:" in html          # the check cell's lines, kept
  assert "ad.instantiate_zeros" in html                 # 1.2's hint, from the stub
  assert "Forward-mode differentiation" in html         # its section of the book
  assert "1.1: full_raise" in html and "5/6 points" in html
  assert "printed 30.0 MB" in html and "cell 9 of your notebook" in html
  assert "review:" not in html and "imports jax" not in html   # flags are the instructor's
  assert "<script>" not in html and "&lt;script&gt;" in html
  failures = feedback.page("mallory", "part1", rows(), stubs["part1"], "failures")
  assert "1.2: a JVP rule" in failures and "1.1: full_raise" not in failures


def test_book_links_are_absolute_only_with_a_site(stubs):
  info = feedback.statements(stubs["part1"], site="https://course.example.org/")
  assert info["1.2"][2] == ("https://course.example.org/book/part1_interpreters.html"
                            "#forward-mode-differentiation-jvp")
  assert feedback.statements(stubs["part1"], site="../")["1.2"][2] is None
  text = feedback.failure_text(rows()[1], info["1.2"])
  assert text.startswith(rows()[1]["detail"]) and "Hint" in text
  assert "(https://course.example.org/book/part1_interpreters.html#" in text


def test_write_makes_one_page_per_learner_and_chapter_and_a_zip(tmp_path, stubs):
  both = rows() + rows("=1+2", "=1+2.ipynb") + [dict(r, part="part2") for r in rows("ana", "ana/p2.ipynb")]
  paths = feedback.write(both, stubs, tmp_path / "feedback", "all")
  names = sorted(str(p.relative_to(tmp_path / "feedback")) for p in paths)
  assert len(names) == 3 and "ana/part2.html" in names and "1_2/part1.html" in names
  assert all("/" in n and "<" not in n and "=" not in n for n in names)
  with zipfile.ZipFile(tmp_path / "feedback.zip") as z:
    assert sorted(z.namelist()) == sorted(f"feedback/{n}" for n in names)
  assert feedback.write(both, stubs, tmp_path / "none", "none") == []
  assert not (tmp_path / "none").exists()


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.parametrize("width", [390, 1280])
def test_a_feedback_page_reads_well_and_runs_no_script(tmp_path, stubs, width):
  if not CHROMIUM.exists():
    pytest.skip(f"no chromium at {CHROMIUM}")
  [path] = feedback.write(rows(), stubs, tmp_path / "feedback", "all")
  # Playwright's sync API in a thread of its own: an earlier test in this worker may have
  # left an asyncio loop running in the main thread (tests/test_install.py does the same)
  with ThreadPoolExecutor(1) as pool:
    pool.submit(_look, path, width, tmp_path / f"feedback-{width}.png").result()


def _look(path: Path, width: int, shot: Path):
  from playwright.sync_api import sync_playwright
  with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems, requests = [], []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    assert requests == [path.as_uri()]          # nothing fetched: one self-contained file
    assert problems == []
    body = page.inner_text("body")
    assert "<script>window.__pwned = 1</script>" in body      # shown as text
    assert "values differ in 7 of 7 entries" in body
    # readable: no sideways scrolling of the page, body text at least 12 px
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    size = page.evaluate("parseFloat(getComputedStyle(document.querySelector('pre')).fontSize)")
    assert size >= 12
    page.screenshot(path=str(shot), full_page=True)
    browser.close()


def test_names_that_collide_as_files_get_their_own_folders(tmp_path, stubs):
  everyone = rows("Ana", "Ana/p1.ipynb") + rows("ana", "ana/p1.ipynb") + rows("a/na", "x.ipynb")
  paths = feedback.write(everyone, stubs, tmp_path / "feedback", "all")
  assert len({p.parent.name.lower() for p in paths}) == 3
  stale = tmp_path / "feedback" / "gone" / "part1.html"
  stale.parent.mkdir()
  stale.write_text("an earlier run's page")
  feedback.write(everyone, stubs, tmp_path / "feedback", "all")
  assert not stale.exists()
