"""What a learner reads: every exercise statement, and the feedback on every
plausible mistake.

* Each statement (`exercises/source/*.md`) ends with a hint (folded away in
  the stub) and links the section of the book that explains its idea; the
  link names a chapter of _toc.yml and a section that chapter has, and the
  stub points it at the site (`coursekit.learner.stubs.book_links`).
* Each mistake of tests/fixtures/mistakes/ is made alone, in a notebook-like
  namespace in which the chapter's reference ran (a subprocess per chapter),
  and its check's message must help: it names the case, never shows an
  internal error (an AttributeError, a bare assertion), prints numbers in
  one style, and gives NumPy advice only for code that calls NumPy, saying
  where. tests/test_exercises.py checks the verdicts under nbval and the grader.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import toc  # tests/toc.py: _toc.yml's pages

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for p in (ROOT / "exercises" / "source").glob("*.md"))
MISTAKES = ROOT / "tests" / "fixtures" / "mistakes"

pytestmark = pytest.mark.timeout(2400)   # generous: on 2 busy cores the 50-seed runs wait


def _statements():
  from coursekit.learner import stubs
  for path in SOURCES:
    for ex, entry in stubs.exercises(stubs.read_source(path), path.name).items():
      yield pytest.param(path.stem, ex, entry["statement"].source, id=ex)


def _headings(markdown: str) -> set:
  """The section ids Sphinx gives a chapter's headings (and its explicit targets)."""
  from docutils import nodes
  ids, fenced = set(), False
  for line in markdown.splitlines():
    if line.startswith(("```", "~~~")):
      fenced = not fenced
    elif not fenced and (m := re.match(r"^#{1,6} (.+)$", line)):
      text = re.sub(r"\{[\w:-]+\}`([^`]*)`", r"\1", m.group(1))   # {term}`x`
      text = re.sub(r"`([^`]*)`|\*\*?([^*]*)\*\*?", lambda g: g.group(1) or g.group(2), text)
      ids.add(nodes.make_id(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)))
    elif not fenced and (m := re.match(r"^\(([\w-]+)\)=$", line)):
      ids.add(nodes.make_id(m.group(1)))
  return ids


def _chapters() -> set:
  return set(toc.toc_files())


@pytest.mark.parametrize("part, exercise, statement", list(_statements()))
def test_every_statement_has_a_hint_and_links_its_section(part, exercise, statement):
  from coursekit.learner import stubs
  assert stubs._HINT.search(statement), f"{exercise}: no *Hint:* paragraph"
  links = re.findall(r"\]\(\.\./book/([\w-]+)\.md#([\w-]+)\)", statement)
  assert links, f"{exercise}: no link to its section, like [Part 1, ...](../book/x.md#section)"
  for chapter, anchor in links:
    assert f"book/{chapter}" in _chapters(), f"{exercise}: book/{chapter} is not in _toc.yml"
    text = (ROOT / "book" / f"{chapter}.md").read_text()
    assert anchor in _headings(text), f"{exercise}: book/{chapter}.md has no section #{anchor}"
  hint = stubs._HINT.search(statement).start()
  assert statement.rfind("](../book/") < hint, f"{exercise}: the link must come before the hint"


@pytest.mark.parametrize("part", [p.stem for p in SOURCES])
def test_stubs_link_the_site_and_fold_the_hints(part):
  from coursekit.learner import stubs
  nb = nbformat.read(ROOT / "exercises" / f"{part}.ipynb", as_version=4)
  site = stubs.site_url()
  for cell in nb.cells:
    if cell.metadata.get("role") == "statement":
      assert f"]({site}book/" in cell.source and ".md#" not in cell.source, cell.source
      assert "<details><summary><b>Hint" in cell.source, cell.source


def test_book_links_rewrite_sources_to_pages():
  from coursekit.learner.stubs import book_links
  text = "See [Part 1, *x*](../book/part1_interpreters.md#jvp) and [it](../book/glossary.md)."
  assert book_links(text, "../") == \
      "See [Part 1, *x*](../book/part1_interpreters.html#jvp) and [it](../book/glossary.html)."
  assert "(https://example.org/c/book/glossary.html)" in book_links(text, "https://example.org/c/")


# --- The comparison's messages --------------------------------------------------------------

def _verdict(want_fn, got_fn):
  from coursekit.learner import probe
  want, got = probe.Probe("x", 0), probe.Probe("x", 0)
  want_fn(want)
  got_fn(got)
  return probe.compare(got.records, want.records)


def test_a_failing_case_shows_its_inputs_and_numbers_in_one_style():
  import numpy as np

  def case(p, y):
    p.given(x=np.float64(0.123456), t=np.array([1., -2.5]))
    p.value("the tangent", y)
  v = _verdict(lambda p: case(p, -0.12751534341856727), lambda p: case(p, np.float64(-0.1274)))
  assert v.label == "the tangent (x = 0.1235, t = [ 1. -2.5])"
  assert v.message == "expected -0.127515, got -0.1274"
  v = _verdict(lambda p: case(p, 1.0000001), lambda p: case(p, 1.0000003))
  assert v.message == "expected 1.0000001, got 1.0000003"   # digits enough to differ


def test_likely_causes_of_a_wrong_array():
  import numpy as np
  w = np.arange(1., 7.).reshape(2, 3) ** 1.5
  for got, cause in [(w.T, "axes in another order (np.transpose(got, (1, 0)) is right)"),
                     (-w, "the sign is flipped"), (2 * w, "times 2"), (w + 1, "plus 1"),
                     (0 * w, "zeros everywhere"), (w[::-1], "in another order")]:
    v = _verdict(lambda p: p.value("a", w), lambda p: p.value("a", got))
    assert cause in v.message, (cause, v.message)
  v = _verdict(lambda p: p.value("a", w), lambda p: p.value("a", w + [[0, 0, 0], [0, 5, 0]]))
  assert v.message.startswith("values differ in 1 of 6 entries (at index (1, 1): ")
  assert "likely" not in v.message


def test_an_error_or_a_zero_instead_of_a_value_says_so():
  import numpy as np
  from autodidax.ad import Zero
  from coursekit.learner import probe
  v = _verdict(lambda p: p.value("a", np.ones(3)), lambda p: p.value("a", Zero.from_value(np.ones(3))))
  assert "got a symbolic Zero (ad.instantiate_zeros" in v.message

  def raising(p):
    try:
      p.call("a", lambda: 1 / 0)
    except probe.Stop:
      pass
  v = _verdict(lambda p: p.value("a", np.ones(3)), raising)
  assert v.message == ("expected an array of shape (3,) and dtype float64, "
                       "but it raised ZeroDivisionError: division by zero")


def test_an_error_is_shown_under_the_step_it_broke_with_its_inputs():
  from coursekit.learner import probe

  def case(p, fn):
    p.given(x=0.5)
    try:
      p.value("the sum of the pieces", p.call("calling the answer", fn))
    except probe.Stop:
      pass
  v = _verdict(lambda p: case(p, lambda: 1.), lambda p: case(p, lambda: 1 / 0))
  assert v.label == "the sum of the pieces (x = 0.5)"
  assert v.message == "calling the answer raised ZeroDivisionError: division by zero"


def test_a_length_mismatch_shows_both_lists():
  v = _verdict(lambda p: p.value("the collectives", []), lambda p: p.value("the collectives",
                                                                            ["all-reduce"]))
  assert v.message == ("expected a list of length 0, got one of length 1: "
                       "expected [], got ['all-reduce']")
  v = _verdict(lambda p: p.value("a", list(range(40))), lambda p: p.value("a", [0]))
  assert "expected [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, …], got [0]" in v.message


def test_a_yes_or_no_shows_what_was_measured():
  v = _verdict(lambda p: p.value("small enough", True, detail="yours 1 byte"),
               lambda p: p.value("small enough", False, detail="yours 9 bytes, the limit 4"))
  assert v.message == "expected True, got False (yours 9 bytes, the limit 4)"


def test_a_jaxpr_run_on_too_few_inputs_says_so():
  import autodidax as adx
  from autodidax.jaxpr import eval_jaxpr
  from coursekit.learner import probe
  closed = adx.make_jaxpr(lambda x, y: x * y)(1., 2.)

  def run(p, args):
    try:
      p.value("the product", p.call("running the jaxpr", eval_jaxpr, closed.jaxpr, [], *args))
    except probe.Stop:
      pass
  v = _verdict(lambda p: run(p, (1., 2.)), lambda p: run(p, (1.,)))
  assert "fewer inputs than it takes" in v.message and "Var(" in v.message, v.message


def test_a_learner_can_read_a_probe_wherever_the_course_is_installed(capsys):
  from coursekit.learner import checks
  checks.show_probe("1.2")
  assert "def probe_1_2(p, tanh_jvp):" in capsys.readouterr().out


def test_the_many_devices_setup_warns_when_xla_came_up_with_too_few(monkeypatch, capsys):
  import autodidax
  from coursekit.learner import checks
  for have, warned in ((1, True), (8, False)):
    monkeypatch.setattr(autodidax, "devices", lambda have=have: ["cpu"] * have)
    assert checks.expect_devices(8) == have
    out = capsys.readouterr().out
    assert out.startswith(f"{have} devices") and ("Restart the kernel" in out) == warned, out


# --- Feedback on every mistake ---------------------------------------------------------------

SEEDS = range(1, 51)   # every mistake must fail at each (the grader's seeds are random)


def _mistake_feedback(part: str) -> list[dict]:
  """Runs in a subprocess: the chapter's reference cells in one namespace, the
  reference's records at every seed of `SEEDS`, then each mistake alone (its
  answer cells rerun with the mistake, the check, the probe at every seed, the
  right answer back). [{exercise, k, new, message, passed, passes_at}]"""
  from coursekit.learner import checks, stubs
  from coursekit.learner import probe as probes
  sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
  import compile_once   # a probe at 50 seeds compiles the same programs over and over
  compile_once.install()
  nb = stubs.read_source(ROOT / "exercises" / "source" / f"{part}.md")
  os.chdir(ROOT / "exercises")
  ns = {"__name__": "__main__"}

  def run(cell, source):   # a cell of "your" notebook: no file of its own
    exec(compile(source, f"<cell {cell.id}>", "exec"), ns)

  answers = {}
  for cell in nb.cells:
    if cell.cell_type == "code" and cell.metadata.get("role") != "check":
      run(cell, cell.source)
    if cell.metadata.get("role") == "solution":
      answers.setdefault(cell.metadata["exercise"], []).append(cell)
  mistakes = json.loads((MISTAKES / f"{part}.json").read_text())
  specs = {ex: probes.spec(part, ex) for ex in mistakes}
  want = {}
  for ex, spec in specs.items():
    with checks.installed(spec, ns):
      want[ex] = [probes.run(spec, ns, seed) for seed in SEEDS]
  out = []
  for ex, pairs in mistakes.items():
    for k, (old, new) in enumerate(pairs):
      cells = answers[ex]
      assert any(old in c.source for c in cells), f"{ex}: mistake {k} no longer matches"
      passed, message = False, ""
      try:
        for cell in cells:
          run(cell, cell.source.replace(old, new))
        checks.check(ex, ns)
        passed = True
      except BaseException as e:  # noqa: BLE001 (what the learner would see)
        message = f"{type(e).__name__}: {e}"
      passes_at = []
      with checks.installed(specs[ex], ns):   # each run stops at its first wrong record
        for seed, w in zip(SEEDS, want[ex]):
          if probes.compare(probes.run(specs[ex], ns, seed, want=w), w).passed:
            passes_at.append(seed)
      out.append({"exercise": ex, "k": k, "new": new, "message": message, "passed": passed,
                  "passes_at": passes_at})
      for cell in cells:
        run(cell, cell.source)
  return out


@pytest.fixture(scope="module")
def feedback():
  """{part: the feedback records}; each chapter in its own process, two at a time."""
  env = {k: v for k, v in os.environ.items() if k not in ("COURSEKIT_RECORD", "PYTEST_ADDOPTS")}
  parts = [p.stem for p in SOURCES if (MISTAKES / f"{p.stem}.json").exists()]
  results, running = {}, []
  for part in parts + [None, None]:
    if part is not None:
      running.append((part, subprocess.Popen(
          [sys.executable, __file__, part], env=env, text=True,
          stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    if len(running) == 2 or part is None and running:
      name, proc = running.pop(0)
      out, err = proc.communicate(timeout=2000)
      results[name] = (proc.returncode, out, err)
  return results


INTERNAL = [
    (re.compile(r"AttributeError|has no attribute"), "an internal AttributeError"),
    (re.compile(r"AssertionError:\s*$", re.M), "an assertion without a message"),
    (re.compile(r"(expected|got) (np\.\w+\(|np\.True_|np\.False_)"),
     "a value shown in NumPy's repr"),
    (re.compile(r"KeyError: Var\("), "the library's bare KeyError (a jaxpr short of inputs)"),
    (re.compile(r"of length \d+, got one of length \d+\s*$", re.M),
     "a length mismatch without the two lists"),
]
NUMPY_ADVICE = "instead of numpy"
CALLS_NUMPY = re.compile(r"\bnp\.\w+\(")


@pytest.mark.parametrize("part", [p.stem for p in SOURCES if (MISTAKES / f"{p.stem}.json").exists()])
def test_every_mistake_gets_feedback_that_helps(feedback, part):
  code, out, err = feedback[part]
  assert code == 0, err[-3000:]
  records = json.loads(out.splitlines()[-1])
  assert records
  for r in records:
    what, msg = f"{r['exercise']} mistake {r['k']} ({r['new'].strip()[:60]!r})", r["message"]
    assert not r["passed"], f"{what}: the check passed"
    assert re.match(rf"\w+Error: Exercise {re.escape(r['exercise'])}\b", msg), f"{what}: {msg}"
    for pattern, problem in INTERNAL:
      assert not pattern.search(msg), f"{what} shows {problem}:\n{msg}"
    if msg.startswith("AssertionError"):   # a wrong value: both values, or the error raised
      assert re.search(r"\bexpected\b.*\bgot\b|\braised\b|not the right answer", msg, re.S), \
          f"{what} doesn't show what was expected and what came:\n{msg}"
    if NUMPY_ADVICE in msg:
      assert CALLS_NUMPY.search(r["new"]), f"{what}: NumPy advice, but it calls no NumPy:\n{msg}"
      assert "your cell, line" in msg, f"{what}: the NumPy advice doesn't say where:\n{msg}"


@pytest.mark.parametrize("part", [p.stem for p in SOURCES if (MISTAKES / f"{p.stem}.json").exists()])
def test_every_mistake_fails_at_every_seed(feedback, part):
  """The grader draws a seed at random: a mistake that passes at some seeds would pass
  for some classes. Each fails at all of `SEEDS` (the probe must draw the cases that
  expose it)."""
  code, out, err = feedback[part]
  assert code == 0, err[-3000:]
  for r in json.loads(out.splitlines()[-1]):
    assert not r["passes_at"], (f"{r['exercise']} mistake {r['k']} ({r['new'].strip()[:60]!r}) "
                                f"passes at seeds {r['passes_at']} of {SEEDS}")


if __name__ == "__main__":   # the subprocess of `feedback`: one chapter, JSON on the last line
  print(json.dumps(_mistake_feedback(sys.argv[1])))
