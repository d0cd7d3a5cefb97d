"""The gradebook (coursekit.grader.gradebook) and the LMS exports (coursekit.grader.exports).

Unit tests on rows made here, and two real grading runs at once on one gradebook
(tiny: one Part 1 notebook each). The whole class, graded once, is in
tests/test_instructor_loop.py.
"""
import csv
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "grading"))
import grading_fixtures as F  # noqa: E402

from coursekit.grader import exports, gradebook, sandbox  # noqa: E402
from coursekit.grader.gradebook import Gradebook, GradebookError  # noqa: E402

WHY_NOT = sandbox.unavailable()
needs_bwrap = pytest.mark.skipif(WHY_NOT is not None and
                                 os.environ.get("AUTODIDAX_REQUIRE_SANDBOX") != "1",
                                 reason=f"no sandbox here: {WHY_NOT}")


def rows_of(student, part, file, points, exercises=("1.1", "1.2", "1.3")):
  return [dict(student=student, part=part, exercise=ex, points=f"{p:g}", max_points="1",
               status="pass" if p else "fail", reason="" if p else f"{ex}: expected 1, got 2",
               notes="", submission=file, detail="" if p else f"{ex}: expected 1, got 2",
               left_out=["cell 9 of your notebook did not run when graded"])
          for ex, p in zip(exercises, points)]


def test_records_reuses_and_keeps_history(tmp_path):
  book = Gradebook(tmp_path / "gb.sqlite")
  book.record(rows_of("ana", "part1", "ana/part1.ipynb", [1, 0, 1]), "h1", 5, "g")
  book.record(rows_of("ana", "part1", "ana/part1.ipynb", [1, 0, 1]), "h1", 5, "g")  # no twin
  assert book.count() == (1, 3)
  again = book.seen("ana/part1.ipynb", "h1", 5, "g")
  assert [r["points"] for r in again] == ["1", "0", "1"]
  assert again[1]["detail"] == "1.2: expected 1, got 2" and again[0]["left_out"]
  assert book.seen("ana/part1.ipynb", "h1", 6, "g") is None     # another seed
  assert book.seen("ana/part1.ipynb", "h2", 5, "g") is None     # another content
  assert book.seen("ana/part1.ipynb", "h1", 5, "g2") is None    # another grader
  # a resubmission: worse than the first; the latest counts by default, or the best
  book.record(rows_of("ana", "part1", "ana/part1.ipynb", [0, 0, 1]), "h2", 7, "g")
  book.record(rows_of("ben", "part2", "ben/p2.ipynb", [1, 1, 1]), "h3", 7, "g")
  assert [h[4] for h in book.history("ana", "part1")] == [2, 1]
  assert book.course("latest") == (["part1", "part2"], {"ana": {"part1": (1, 3)},
                                                        "ben": {"part2": (3, 3)}})
  assert book.course("best")[1]["ana"] == {"part1": (2, 3)}
  text = gradebook.text_table(*book.course())
  assert "ana" in text and "1/3" in text and "3/3" in text
  book.close()


def test_a_corrupt_gradebook_is_refused_and_left_as_it_is(tmp_path):
  path = tmp_path / "gb.sqlite"
  path.write_bytes(b"this is not a database at all" * 100)
  before = path.read_bytes()
  with pytest.raises(GradebookError, match="not a gradebook this grader can read"):
    Gradebook(path)
  assert path.read_bytes() == before
  other = tmp_path / "other.sqlite"
  with sqlite3.connect(other) as db:
    db.execute("CREATE TABLE mine(x)")
  with pytest.raises(GradebookError, match="not a gradebook .*mine"):
    Gradebook(other)
  newer = tmp_path / "newer.sqlite"
  with sqlite3.connect(newer) as db:
    db.execute(f"PRAGMA user_version = {gradebook.VERSION + 1}")
  with pytest.raises(GradebookError, match="newer grader"):
    Gradebook(newer)


def test_an_older_gradebook_is_migrated_without_losing_a_row(tmp_path):
  path = tmp_path / "gb.sqlite"
  with sqlite3.connect(path) as db:   # as version 1 of the grader wrote it
    for statement in gradebook.MIGRATIONS[1]:
      db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO submissions VALUES (1, 'ana', 'part1', 'a.ipynb', 'h', 3, 'g', 't')")
    db.execute("INSERT INTO results VALUES (1, '1.1', 1, 1, 'pass', '', '')")
  book = Gradebook(path)
  assert book.count() == (1, 1)
  assert book.seen("a.ipynb", "h", 3, "g")[0]["detail"] == ""
  assert book.course()[1] == {"ana": {"part1": (1, 1)}}
  assert (tmp_path / "gb.sqlite.v1.bak").exists()
  assert book.db.execute("PRAGMA user_version").fetchone()[0] == gradebook.VERSION
  book.close()


_WRITER = """
import sys
from coursekit.grader.gradebook import Gradebook
book = Gradebook(sys.argv[1])
for i in range(120):
  rows = [dict(student=f"{sys.argv[2]}{i}", part="part1", exercise=ex, points="1",
               max_points="1", status="pass", reason="", notes="", submission=f"{sys.argv[2]}{i}.ipynb")
          for ex in ("1.1", "1.2")]
  book.record(rows, f"h{i}", 5, "g")
"""


def test_two_writers_at_once_lose_nothing(tmp_path):
  path = tmp_path / "gb.sqlite"
  procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), who])
           for who in ("a", "b")]
  assert [p.wait(timeout=300) for p in procs] == [0, 0]
  book = Gradebook(path)
  assert book.count() == (240, 480)
  assert book.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
  book.close()


@needs_bwrap
@pytest.mark.timeout(900)
def test_two_grading_runs_at_once_on_one_gradebook(tmp_path):
  book = tmp_path / "gradebook.sqlite"
  procs = []
  for who, nb in (("ana", F.solutions()), ("bob", F.solutions())):
    if who == "bob":
      F.wrong(nb, "1.2")
    (tmp_path / who).mkdir()
    nbformat.write(nb, tmp_path / who / f"{who}.ipynb")
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "coursekit.grade", str(tmp_path / who), "--out",
         str(tmp_path / f"out-{who}"), "--seed", "5", "--jobs", "1", "--gradebook", str(book),
         "--feedback", "none"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE))
  outs = [p.communicate(timeout=800) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], outs
  gb = Gradebook(book)
  assert gb.count() == (2, 12)
  assert gb.course()[1] == {"ana": {"part1": (6, 6)}, "bob": {"part1": (5, 6)}}
  gb.close()


def test_roster_errors_are_clear(tmp_path):
  dup = tmp_path / "dup.csv"
  dup.write_text("student,name,email,lms_id\nana,Ana,a@x.org,1\nana,Ana B,b@x.org,2\n")
  with pytest.raises(exports.RosterError, match="'ana' is there twice"):
    exports.read_roster(dup)
  lms = tmp_path / "lms.csv"
  lms.write_text("student,name,email,lms_id\nana,Ana,a@x.org,1\nben,Ben,b@x.org,1\n")
  with pytest.raises(exports.RosterError, match="LMS id '1' belongs to both"):
    exports.read_roster(lms)
  cols = tmp_path / "cols.csv"
  cols.write_text("id,name\n1,Ana\n")
  with pytest.raises(exports.RosterError, match="lacks the column"):
    exports.read_roster(cols)
  latin = tmp_path / "latin.csv"
  latin.write_bytes("student,name,email,lms_id\nzoé,Zoé,z@x.org,1\n".encode("latin-1"))
  with pytest.raises(exports.RosterError, match="can't read the roster"):
    exports.read_roster(latin)


def test_gradebook_command_refuses_a_bad_roster_and_exports_nothing(tmp_path):
  book = Gradebook(tmp_path / "gb.sqlite")
  book.record(rows_of("ana", "part1", "ana/part1.ipynb", [1, 1, 1]), "h", 5, "g")
  book.close()
  dup = tmp_path / "dup.csv"
  dup.write_text("student,name,email,lms_id\nana,Ana,a@x.org,1\nana,Ana,a@x.org,1\n")
  p = subprocess.run([sys.executable, "-m", "coursekit.gradebook", "--db",
                      str(tmp_path / "gb.sqlite"), "--roster", str(dup)],
                     capture_output=True, text=True, cwd=ROOT)
  assert p.returncode == 1 and "there twice" in p.stderr
  assert not (tmp_path / "canvas.csv").exists() and not (tmp_path / "course.csv").exists()


def test_exports_match_the_roster_and_neutralise_formulas(tmp_path):
  table = {"ana": {"part1": (3, 3)}, "=2+5": {"part1": (1, 3), "part2": (2, 2)},
           "ghost": {"part2": (1, 2)}}
  roster_file = tmp_path / "roster.csv"
  roster_file.write_text('student,name,email,lms_id\nana,"=HYPERLINK(""http://x"")",a@x.org,11\n'
                         "=2+5,Eve,e@x.org,12\ndora,Dora,d@x.org,13\n")
  roster = exports.read_roster(roster_file)
  chapters = ["part1", "part2"]
  assert exports.unmatched(table, roster) == (["ghost"], ["dora"])
  canvas = list(csv.reader(exports.canvas(chapters, table, roster, tmp_path / "c.csv").open()))
  assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "part1", "part2"]
  assert canvas[1][0].strip() == "Points Possible" and canvas[1][5:] == ["3", "2"]
  assert canvas[2] == ["'=HYPERLINK(\"http://x\")", "11", "ana", "a@x.org", "", "3", ""]
  assert canvas[3] == ["Eve", "12", "'=2+5", "e@x.org", "", "1", "2"]
  assert canvas[4] == ["Dora", "13", "dora", "d@x.org", "", "", ""]
  moodle = list(csv.reader(exports.moodle(chapters, table, roster, tmp_path / "m.csv").open()))
  assert moodle[0][:2] == ["Email address", "ID number"]
  assert [r[0] for r in moodle[1:]] == ["a@x.org", "e@x.org", "d@x.org"]
  plain = list(csv.reader(exports.plain(chapters, table, roster, tmp_path / "p.csv").open()))
  assert [r[0] for r in plain[1:]] == ["ana", "'=2+5", "dora", "ghost"]   # nobody dropped
  assert plain[2][-1] == "3" and plain[3][-3:] == ["", "", ""]


def test_grading_with_a_corrupt_gradebook_stops_before_grading(tmp_path):
  (tmp_path / "subs").mkdir()
  nbformat.write(F.solutions(), tmp_path / "subs" / "ana.ipynb")
  book = tmp_path / "gradebook.sqlite"
  book.write_bytes(b"\x00garbage" * 512)
  p = subprocess.run([sys.executable, "-m", "coursekit.grade", str(tmp_path / "subs"), "--out",
                      str(tmp_path / "out"), "--seed", "3", "--gradebook", str(book)],
                     cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert p.returncode == 1 and "not a gradebook this grader can read" in p.stderr
  assert book.read_bytes() == b"\x00garbage" * 512
  assert not (tmp_path / "out" / "grades.csv").exists()


def test_a_refused_file_keeps_its_bytes(tmp_path):
  for name, setup in (("other", "CREATE TABLE mine(x)"),
                      ("newer", f"PRAGMA user_version = {gradebook.VERSION + 1}")):
    path = tmp_path / f"{name}.sqlite"
    with sqlite3.connect(path) as db:
      db.execute(setup)
    before = path.read_bytes()
    with pytest.raises(GradebookError):
      Gradebook(path)
    assert path.read_bytes() == before, name
