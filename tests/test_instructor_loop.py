"""The instructor's whole loop on one class, graded once: every chapter's reference
solution, wrong answers, a student named with HTML, one named with a formula whose
notebook isn't UTF-8, and a resubmission. It checks the feedback pages (one per learner
and chapter, each with only its learner's rows and nothing of the solutions), the
gradebook (every row; a regrade at the same seed reuses the unchanged notebooks; the
latest and best policies), the Canvas and Moodle exports against a roster, and the
Gradescope autograder (its results.json against Gradescope's schema and against
`make grade`, and failing closed without a sandbox). The instructor guide's worked
examples are these commands."""
import csv
import html
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "grading"))

from coursekit.grader import feedback, gradebook, gradescope, sandbox  # noqa: E402
from coursekit.learner.stubs import BEGIN, END, read_source  # noqa: E402

SEED = 5   # as tests/test_exercises.py: the reference runs at it are cached and shared
SOURCES = sorted((ROOT / "exercises" / "source").glob("*.md"))
NAMES = ["ana", "ben", "cleo", "dev", "emil", "fay", "gus", "hana", "ivo", "jun", "kai", "lea"]
CLASS = len(NAMES) + 4   # one notebook per chapter, and bob, carol, HTML_NAME, FORMULA_NAME
HTML_NAME = "<img src=x onerror=alert(1)>"
FORMULA_NAME = "=2+5"
MISTAKES = ROOT / "tests" / "fixtures" / "mistakes"
WHY_NOT = sandbox.unavailable()
pytestmark = [pytest.mark.timeout(1800),
              pytest.mark.skipif(WHY_NOT is not None and
                                 os.environ.get("AUTODIDAX_REQUIRE_SANDBOX") != "1",
                                 reason=f"no sandbox here: {WHY_NOT}")]


def reference(part: str):
  nb = read_source(ROOT / "exercises" / "source" / f"{part}.md")
  nb.metadata["coursekit"] = {"part": part}
  return nb


def wrong(part: str, exercises):
  """The reference with the first listed mistake of each of `exercises` made."""
  nb = reference(part)
  mistakes = json.loads((MISTAKES / f"{part}.json").read_text())
  for ex in exercises:
    old, new = mistakes[ex][0]
    [c] = [c for c in nb.cells if c.metadata.get("exercise") == ex
           and c.metadata.get("role") == "solution"]
    assert old in c.source
    c.source = c.source.replace(old, new)
  return nb


def grade(subs, out, *more):
  p = subprocess.run([sys.executable, "-m", "coursekit.grade", str(subs), "--out", str(out),
                      "--seed", str(SEED), "--jobs", "2", *map(str, more)],
                     cwd=ROOT, capture_output=True, text=True, timeout=1700)
  assert p.returncode == 0, p.stderr[-3000:]
  return p


def read_rows(out: Path):
  """grades.csv's rows, with the apostrophe that neutralizes a formula taken off."""
  with open(out / "grades.csv", newline="") as f:
    return [{k: v[1:] if v.startswith("'=") else v for k, v in r.items()}
            for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("course")
  subs = tmp / "subs"
  assert len(NAMES) == len(SOURCES), "a name per chapter"
  for name, src in zip(NAMES, SOURCES):
    (subs / name).mkdir(parents=True)
    nbformat.write(reference(src.stem), subs / name / f"{src.stem}.ipynb")
  for name, nb in (("bob", wrong("part1", ["1.2"])), ("carol", wrong("part2", ["2.1"])),
                   (HTML_NAME, wrong("part1", ["1.5"]))):
    (subs / name).mkdir()
    nbformat.write(nb, subs / name / "part1.ipynb" if name != "carol" else subs / name / "part2.ipynb")
  (subs / FORMULA_NAME).mkdir()
  raw = nbformat.writes(reference("part3")).replace("Exercise", "Exerc\u00edse")
  (subs / FORMULA_NAME / "part3.ipynb").write_bytes(raw.encode("latin-1", "replace"))
  first = grade(subs, tmp / "out1")
  return {"tmp": tmp, "subs": subs, "out": tmp / "out1", "first": first,
          "rows": read_rows(tmp / "out1")}


def test_the_class_is_graded(course):
  rows = course["rows"]
  students = {r["student"] for r in rows}
  assert students == set(NAMES) | {"bob", "carol", HTML_NAME, FORMULA_NAME}
  assert len({r["submission"] for r in rows}) == CLASS
  assert {r["part"] for r in rows} >= {s.stem for s in SOURCES}
  for name in NAMES:
    assert all(r["status"] == "pass" for r in rows if r["student"] == name), name
  bob = {r["exercise"]: r["status"] for r in rows if r["student"] == "bob"}
  assert [ex for ex, s in bob.items() if s == "fail"] == ["1.2"]
  [bad] = [r for r in rows if r["student"] == FORMULA_NAME]
  assert "unreadable notebook" in bad["reason"] and bad["exercise"] == "*"


def pages(out: Path) -> dict:
  return {p: p.read_text() for p in sorted((out / "feedback").rglob("*.html"))}


def test_one_feedback_page_per_learner_and_chapter_with_only_their_rows(course):
  rows, out = course["rows"], course["out"]
  got = pages(out)
  assert len(got) == len({(r["student"], r["part"]) for r in rows})
  labels = {r["submission"]: r["student"] for r in rows}
  for path, text in got.items():
    [student] = re.findall(r"<p>For <b>(.*?)</b>", text)
    mine = {s for s, who in labels.items() if html.escape(who) == student}
    assert mine, path
    for label, who in labels.items():
      if label not in mine:
        assert html.escape(label) not in text, f"{path} shows {label}"
    assert "review:" not in text and "Near-identical" not in text
    assert "<img" not in text and "<script" not in text
  with zipfile.ZipFile(out / "feedback.zip") as z:
    assert len(z.namelist()) == len(got)
  bob = (out / "feedback" / "bob" / "part1.html").read_text()
  [r] = [r for r in rows if r["student"] == "bob" and r["status"] == "fail"]
  assert html.escape(r["reason"].split(";")[0]) in " ".join(bob.split())


def solution_lines():
  """Lines of the reference solutions' answers that the stubs don't hold."""
  out = set()
  for src in SOURCES:
    stub = (ROOT / "exercises" / f"{src.stem}.ipynb").read_text()
    for c in read_source(src).cells:
      if c.metadata.get("role") == "solution" and BEGIN in c.source:
        body = c.source.split(BEGIN, 1)[1].split(END, 1)[0]
        out |= {x.strip() for x in body.splitlines()
                if len(x.strip()) >= 24 and json.dumps(x.strip())[1:-1] not in stub}
  return out


def test_feedback_holds_no_solution_text(course):
  lines = solution_lines()
  assert len(lines) > 20
  for path, text in pages(course["out"]).items():
    text = html.unescape(text)
    leaked = [x for x in lines if x in text]
    assert not leaked, f"{path}: {leaked[:3]}"


def test_the_gradebook_holds_every_row_and_a_regrade_reuses_the_unchanged(course):
  tmp, subs, out = course["tmp"], course["subs"], course["out"]
  book = gradebook.Gradebook(out / "gradebook.sqlite")
  assert book.count() == (CLASS, len(course["rows"]))
  book.close()
  # bob resubmits, worse (two mistakes); everything else is unchanged
  nbformat.write(wrong("part1", ["1.2", "1.3"]), subs / "bob" / "part1.ipynb")
  again = grade(subs, tmp / "out2", "--gradebook", out / "gradebook.sqlite")
  assert f"{CLASS - 1} notebooks unchanged" in again.stdout, again.stdout
  assert f"graded {CLASS} submissions" in again.stdout
  rows2 = read_rows(tmp / "out2")
  assert [r for r in rows2 if r["student"] != "bob"] == \
      [r for r in course["rows"] if r["student"] != "bob"]
  book = gradebook.Gradebook(out / "gradebook.sqlite")
  assert book.count() == (CLASS + 1, len(course["rows"]) + 6)
  assert [h[4] for h in book.history("bob", "part1")] == [5, 4]
  assert book.course("latest")[1]["bob"]["part1"] == (4, 6)
  assert book.course("best")[1]["bob"]["part1"] == (5, 6)
  book.close()
  assert len(pages(tmp / "out2")) == len(pages(out))   # reused rows get their pages too


def test_canvas_and_moodle_exports_match_the_roster(course):
  tmp, out = course["tmp"], course["out"]
  roster = tmp / "roster.csv"
  people = NAMES + ["bob", "carol", FORMULA_NAME, "dora"]   # no HTML_NAME; dora: nothing
  with open(roster, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["student", "name", "email", "lms_id"])
    for i, s in enumerate(people):
      w.writerow([s, f"Name {i}", f"p{i}@uni.example", 1000 + i])
  p = subprocess.run([sys.executable, "-m", "coursekit.gradebook", "--db",
                      str(out / "gradebook.sqlite"), "--roster", str(roster), "--out",
                      str(tmp / "exports")], cwd=ROOT, capture_output=True, text=True)
  assert p.returncode == 0, p.stderr
  assert f"not in the roster (left out of canvas.csv and moodle.csv): {HTML_NAME}" in p.stdout
  assert "in the roster, no submission (exported without grades): dora" in p.stdout
  canvas = list(csv.DictReader(open(tmp / "exports" / "canvas.csv", newline="")))
  assert canvas[0]["Student"].strip() == "Points Possible"
  assert [r["SIS User ID"] for r in canvas[1:]] == NAMES + ["bob", "carol", "'=2+5", "dora"]
  assert [r["ID"] for r in canvas[1:]] == [str(1000 + i) for i in range(len(people))]
  table = gradebook.Gradebook(out / "gradebook.sqlite").course()[1]
  for r in canvas[1:]:
    s = r["SIS User ID"].lstrip("'")
    for part, (pts, _) in table.get(s, {}).items():
      assert r[part] == f"{pts:g}"
  moodle = list(csv.DictReader(open(tmp / "exports" / "moodle.csv", newline="")))
  assert [r["Email address"] for r in moodle] == [f"p{i}@uni.example" for i in range(len(people))]
  plain = list(csv.DictReader(open(tmp / "exports" / "course.csv", newline="")))
  assert HTML_NAME in {r["student"] for r in plain}   # listed, never dropped


def check_results_schema(data):
  """Gradescope's autograder results.json, as its specification documents it."""
  vis = {"hidden", "after_due_date", "after_published", "visible"}
  top = {"score", "execution_time", "output", "output_format", "test_output_format",
         "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests",
         "leaderboard"}
  assert isinstance(data, dict) and set(data) <= top, set(data) - top
  assert "score" in data or all("score" in t for t in data.get("tests", []))
  if "score" in data:
    assert isinstance(data["score"], (int, float))
  for k in ("visibility", "stdout_visibility"):
    assert data.get(k, "visible") in vis
  assert isinstance(data.get("output", ""), str)
  test_keys = {"score", "max_score", "status", "name", "name_format", "number", "output",
               "output_format", "tags", "visibility", "extra_data"}
  for t in data.get("tests", []):
    assert set(t) <= test_keys, set(t) - test_keys
    assert isinstance(t.get("score", 0), (int, float))
    assert isinstance(t.get("max_score", 0), (int, float))
    assert t.get("status", "passed") in ("passed", "failed")
    assert t.get("visibility", "visible") in vis
    assert isinstance(t.get("name", ""), str) and isinstance(t.get("output", ""), str)


def autograder(tmp: Path, notebook: Path, env=None):
  """Lay out `tmp` as Gradescope lays out /autograder, with `notebook` submitted, and run
  run_autograder there."""
  zipped = gradescope.build(tmp / "autograder.zip", visibility="visible")
  root = tmp / "autograder"
  with zipfile.ZipFile(zipped) as z:
    z.extractall(root / "source")
  (root / "submission").mkdir()
  (root / "submission" / notebook.name).write_bytes(notebook.read_bytes())
  run = root / "run_autograder"   # Gradescope copies it there
  run.write_bytes((root / "source" / "run_autograder").read_bytes())
  p = subprocess.run(["/bin/bash", str(run), "--seed", str(SEED)],
                     env={**os.environ, "AUTOGRADER_ROOT": str(root),
                          "AUTOGRADER_PYTHON": sys.executable, **(env or {})},
                     capture_output=True, text=True, timeout=900)
  assert p.returncode == 0, p.stderr[-3000:]
  return json.loads((root / "results" / "results.json").read_text())


def test_gradescope_results_agree_with_make_grade(course, tmp_path):
  sub = tmp_path / "part1.ipynb"
  nbformat.write(wrong("part1", ["1.2"]), sub)   # bob's first notebook
  data = autograder(tmp_path, sub)
  check_results_schema(data)
  want = [r for r in course["rows"] if r["submission"] == "bob/part1.ipynb"]
  assert [(t["name"].split(":")[0], t["score"], t["max_score"]) for t in data["tests"]] == \
      [(f"part1 {r['exercise']}", float(r["points"]), float(r["max_points"])) for r in want]
  assert data["score"] == sum(float(r["points"]) for r in want) == 5
  [failed] = [t for t in data["tests"] if t["status"] == "failed"]
  assert failed["output"].startswith(" ".join(want[1]["reason"].split())[:60])
  assert "Hint" in failed["output"] and all(t["visibility"] == "visible" for t in data["tests"])


def test_gradescope_fails_closed_without_a_sandbox(tmp_path):
  bare = tmp_path / "bin"   # a PATH without bubblewrap
  bare.mkdir()
  sub = tmp_path / "part1.ipynb"
  nbformat.write(reference("part1"), sub)
  data = autograder(tmp_path, sub, env={"PATH": str(bare)})
  check_results_schema(data)
  assert data["score"] == 0 and "instructor" in data["output"]
  [t] = data["tests"]
  assert t["visibility"] == "hidden" and "bubblewrap" in t["output"]
