"""The grader under abuse: each fixture in tests/fixtures/grading/ (generated
from Part 1's source) is a submission that misbehaves in one way, and the
grader must give it the right grade and a clear reason, without stopping the
batch, modifying a submission, or growing its outputs with the submission's.

Kernels are slow to start, so the module runs the grader three times, at
once, in module-scoped fixtures: once over a folder of all the fixtures, and
twice (with 2 jobs and with 1) over a zip of a small class, whose outputs
must be byte-identical. The rest are quick unit tests.
"""
import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "grading"))
import grading_fixtures as F  # noqa: E402

from coursekit import grade, report  # noqa: E402


def _env():
  env = dict(os.environ)
  env.pop("PYTEST_ADDOPTS", None)
  return env


def start(*args):
  return subprocess.Popen([sys.executable, "-m", "coursekit.grade", *map(str, args)], cwd=ROOT,
                          env=_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc):
  out, err = proc.communicate(timeout=600)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def digest(folder: Path) -> dict:
  return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def read_rows(out: Path):
  with open(out / "grades.csv", newline="") as f:
    return list(csv.DictReader(f))


CELL_TIMEOUT = 15
TOTAL_TIMEOUT = 25
SLEEPER = "import time\ntime.sleep(3600)\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  folder = tmp_path_factory.mktemp("abuse")
  F.write(folder)
  cases = F.cases()
  sleeper = nbformat.reads(cases["full.ipynb"], as_version=4)
  F.cell(sleeper, "1.2", "solution").source = SLEEPER + F.cell(sleeper, "1.2", "solution").source
  klass = {"class/alice_part1.ipynb": cases["full.ipynb"],
           "class/alice-v2.ipynb": cases["stub.ipynb"],
           "class/bob/work.ipynb": cases["wrong_chapter.ipynb"],
           "class/carol_part1_final.ipynb": nbformat.writes(sleeper),
           "class/.ipynb_checkpoints/alice-checkpoint.ipynb": cases["corrupt.ipynb"],
           "__MACOSX/class/._alice_part1.ipynb": "junk"}
  zdir = tmp_path_factory.mktemp("zip")
  zpath = F.zipped(zdir / "class.zip", klass)
  before = digest(folder), digest(zdir)
  outs = {k: tmp_path_factory.mktemp(f"grades-{k}") for k in ("abuse", "zip2", "zip1")}
  procs = {
      "abuse": start(folder, "--out", outs["abuse"], "--jobs", 2, "--timeout", CELL_TIMEOUT,
                     "--total-timeout", 180),
      "zip2": start(zpath, "--out", outs["zip2"], "--jobs", 2, "--timeout", 60,
                    "--total-timeout", TOTAL_TIMEOUT),
      "zip1": start(zpath, "--out", outs["zip1"], "--jobs", 1, "--timeout", 60,
                    "--total-timeout", TOTAL_TIMEOUT)}
  done = {k: finish(p) for k, p in procs.items()}
  for k, proc in done.items():
    assert proc.returncode == 0, proc.stdout + proc.stderr
  return {"procs": done, "outs": outs, "before": before, "after": (digest(folder), digest(zdir))}


@pytest.fixture(scope="module")
def abuse(runs):
  return {(r["submission"], r["exercise"]): r for r in read_rows(runs["outs"]["abuse"])}


@pytest.mark.parametrize("name", sorted(F.EXPECTED))
def test_abuse_case(abuse, name):
  got = {ex: (r["status"], r["reason"]) for (sub, ex), r in abuse.items() if sub == name}
  want = F.EXPECTED[name]
  assert set(got) == set(want), got
  for ex, (status, text) in want.items():
    assert got[ex][0] == status, (ex, got[ex])
    assert text in got[ex][1], (ex, got[ex])
    if status == "pass":
      assert got[ex][1] == ""


def test_tampering_is_undone_and_reported(abuse):
  notes = abuse["tamper.ipynb", "1.1"]["notes"]
  for what in ("coursekit.checks.Checker was replaced", "numpy.allclose was replaced",
               "numpy.testing.assert_allclose was replaced", "builtins.print was replaced",
               "builtins.AssertionError was replaced"):
    assert what in notes, notes
  # The learner's code ran before the setup cell; `checks` was rebound after it.
  assert "global `checks`" in abuse["tamper_correct.ipynb", "1.1"]["notes"]
  assert "run_cell_async was replaced" in abuse["tamper_ipython.ipynb", "1.1"]["notes"]
  for sub in ("tamper.ipynb", "tamper_correct.ipynb"):
    assert "review: " in abuse[sub, "1.3"]["notes"] and "numpy.allclose" in abuse[sub, "1.3"]["notes"]
  assert abuse["full.ipynb", "1.1"]["notes"] == ""   # no false alarms


def test_notes_for_other_chapters_and_old_versions(abuse):
  assert "metadata says part2" in abuse["wrong_chapter.ipynb", "1.1"]["notes"]
  assert abuse["wrong_chapter.ipynb", "1.1"]["part"] == "part1"
  assert "no solution cell for 1.3" in abuse["old_version.ipynb", "1.3"]["notes"]


def test_points(abuse):
  assert abuse["full.ipynb", "1.1"]["points"] == "1" == abuse["full.ipynb", "1.1"]["max_points"]
  assert abuse["stub.ipynb", "1.1"]["points"] == "0"


def test_outputs_stay_small_and_summarized(runs):
  out = runs["outs"]["abuse"]
  for name in ("grades.csv", "grades.html"):
    assert (out / name).stat().st_size < 100_000
  proc = runs["procs"]["abuse"]
  assert "grading part1" in proc.stderr   # the progress bar
  last = proc.stdout.strip().splitlines()[-1]
  assert last.startswith(f"graded {len(F.EXPECTED)} submissions from ") and "grades.html" in last
  html = (out / "grades.html").read_text()
  assert "<script" not in html and "http" not in html.replace("http-equiv", "")
  assert "Scores per student" in html and "Failures" in html and "pass rate per exercise" in html


def test_submissions_are_never_modified(runs):
  assert runs["before"] == runs["after"]


def test_zip_students_and_reproducibility(runs):
  o2, o1 = runs["outs"]["zip2"], runs["outs"]["zip1"]
  for name in ("grades.csv", "grades.html"):
    assert (o2 / name).read_bytes() == (o1 / name).read_bytes(), name
  rows = read_rows(o2)
  assert rows == sorted(rows, key=lambda r: (r["student"], r["part"], r["submission"]))
  subs = {r["submission"]: r["student"] for r in rows}
  assert subs == {"class/alice_part1.ipynb": "alice", "class/alice-v2.ipynb": "alice",
                  "class/bob/work.ipynb": "bob", "class/carol_part1_final.ipynb": "carol"}
  carol = {r["exercise"]: r for r in rows if r["student"] == "carol"}
  assert carol["1.1"]["status"] == "pass"
  assert f"time limit ({TOTAL_TIMEOUT} s) was reached" in carol["1.2"]["reason"]
  assert "not run: the submission's time limit was reached" in carol["1.6"]["reason"]
  html = (o2 / "grades.html").read_text()
  assert "6/6" in html   # alice's best submission


# --- Quick unit tests -------------------------------------------------------------------

@pytest.mark.parametrize("file, student", [
    ("alice.ipynb", "alice"), ("alice_part2.ipynb", "alice"), ("alice-v2.ipynb", "alice"),
    ("alice_part1_final.ipynb", "alice"), ("Bob Smith-3.ipynb", "Bob Smith"),
    ("mary-jane.ipynb", "mary-jane"), ("part1.ipynb", "part1"), ("x_copy.ipynb", "x")])
def test_student_from_file_name(file, student):
  assert grade.student_of(grade.Submission(file, b""), {"metadata": {}}) == student


def test_student_from_metadata_and_folder():
  sub = grade.Submission("a/b.ipynb", b"", folder="carol")
  assert grade.student_of(sub, {"metadata": {"coursekit": {"student": "dave"}}}) == "dave"
  assert grade.student_of(sub, {"metadata": {}}) == "carol"


def test_scan_flags_tampering_not_solutions():
  assert grade.scan("def f(x):\n  return np.sin(x) * 2\n") == []
  flags = grade.scan("import gc\nnp.testing.assert_allclose = None\nsetattr(checks, 'x', 1)\n"
                     "sys.modules['numpy'] = 3\n!rm -rf /\n")
  assert flags == ["assigns np.testing.assert_allclose", "assigns sys.modules['numpy']",
                   "calls setattr on checks", "imports gc", "runs a shell command",
                   "uses sys.modules"]


def test_graft_puts_the_setup_before_the_learners_cells():
  stubs = grade.load_stubs()
  nb = F.solutions()
  F.after_setup(nb, "x = 1")
  nb.cells = [c for c in nb.cells if c.get("id") != "setup"]   # deleted
  g = grade.graft(nb, stubs["part1"].nb)
  ids = [c.id for c in g.cells]
  assert ids.index("setup") < ids.index("learner-own") < ids.index("ex1-1-check")


def test_match_part_by_cells():
  stubs = grade.load_stubs()
  nb = F.solutions()
  assert grade.match_part(nb, stubs, None) == ("part1", "")
  nb.metadata["coursekit"]["part"] = "part2"
  assert grade.match_part(nb, stubs, None)[0] == "part1"
  assert grade.match_part(nbformat.v4.new_notebook(), stubs, None)[0] is None
  assert grade.match_part(nb, stubs, "part3") == ("part3", "")


def test_sandbox_limits_memory():
  env = dict(_env(), COURSEKIT_RLIMITS=json.dumps({"AS": 1 << 30, "CORE": 0}))
  code = ("import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0])\n"
          "try:\n  bytearray(2 << 30)\nexcept MemoryError:\n  print('MemoryError')\n")
  proc = subprocess.run([sys.executable, "-m", "coursekit.sandbox", sys.executable, "-c", code],
                        env=env, capture_output=True, text=True, timeout=60)
  assert proc.stdout.split() == [str(1 << 30), "MemoryError"], proc.stderr


def test_report_is_sorted_and_deterministic(tmp_path):
  stubs = grade.load_stubs()
  sub = grade.Submission("b.ipynb", b"")
  rows = [grade.row(sub, "b", "part1", ex, "pass", max_points=1.0) for ex in reversed(stubs["part1"].exercises)]
  rows += [grade.row(grade.Submission("a.ipynb", b""), "a", "?", "*", "fail", "x" * 1000)]
  a = report.sort_rows(rows, stubs)
  assert [r["student"] for r in a][:1] == ["a"] and a[1]["exercise"] == "1.1"
  assert len(a[0]["reason"]) <= grade.REASON_LIMIT
  (tmp_path / "1").mkdir(); (tmp_path / "2").mkdir()
  report.write(a, stubs, tmp_path / "1")
  report.write(report.sort_rows(list(reversed(rows)), stubs), stubs, tmp_path / "2")
  for name in ("grades.csv", "grades.html"):
    assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes()
