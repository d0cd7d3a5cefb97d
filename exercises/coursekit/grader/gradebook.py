"""The course's gradebook: every grading run, kept in one SQLite file.

    python -m coursekit.gradebook [--db grades/gradebook.sqlite] [--policy latest|best]
                                  [--out DIR] [--roster CSV]
    make gradebook

`make grade` records each graded notebook here (`--gradebook`, by default
`grades/gradebook.sqlite`): its student, chapter, file, content hash, the seed, the
grader's version, and each exercise's points and reasons. A notebook graded before
with the same content, seed and grader is not graded again (`--regrade` forces it).
Every submission stays, so a resubmission keeps its history; which one counts for a
chapter is a policy, the latest (default) or the best.

This command prints the course table (one row per student, one column per chapter,
and totals) and writes it as `course.csv`, with the exports for Canvas and Moodle
when a roster is given (`coursekit.exports`).

Schema versions are SQLite's `user_version`; `MIGRATIONS` upgrades an older file in
one transaction, after copying it aside. A file of a newer grader, or one that isn't a
gradebook, is refused with a message, never rewritten. Each submission is written in
a transaction of its own, with a busy timeout, so runs at once on one file queue. The
file must be on a local disk (SQLite's write-ahead log needs shared memory).
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from . import exports
from .submissions import printable

DEFAULT = Path("grades") / "gradebook.sqlite"
POLICIES = ("latest", "best")
BUSY_TIMEOUT = 120   # seconds a writer waits for another run's transaction

# Version N's statements take a version N-1 file to version N.
MIGRATIONS = {
    1: ["""CREATE TABLE submissions(
             id INTEGER PRIMARY KEY, student TEXT NOT NULL, part TEXT NOT NULL,
             file TEXT NOT NULL, hash TEXT NOT NULL, seed INTEGER NOT NULL,
             grader TEXT NOT NULL, graded_at TEXT NOT NULL)""",
        """CREATE TABLE results(
             submission INTEGER NOT NULL REFERENCES submissions(id), exercise TEXT NOT NULL,
             points REAL NOT NULL, max_points REAL NOT NULL, status TEXT NOT NULL,
             reason TEXT NOT NULL, notes TEXT NOT NULL, PRIMARY KEY(submission, exercise))""",
        "CREATE INDEX submissions_seen ON submissions(hash, seed, grader, file)"],
    2: ["ALTER TABLE results ADD COLUMN detail TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE submissions ADD COLUMN left_out TEXT NOT NULL DEFAULT ''"],
}
VERSION = max(MIGRATIONS)
OURS = {"submissions", "results"}


class GradebookError(Exception):
  """A gradebook that can't be used as it is; the message says what to do."""


class Gradebook:
  def __init__(self, path: Path):
    self.path = Path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)
    try:
      self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
    except sqlite3.Error as e:
      raise GradebookError(f"can't open the gradebook {self.path}: {e}") from None
    try:
      self.db.execute("PRAGMA foreign_keys = ON")
      self._migrate()
      # A write-ahead log (set once the file is known to be ours): a commit costs no fsync
      # (about 30 times faster here), a crash loses at most the last commits and never
      # corrupts, and the log goes when the last connection closes, leaving one file.
      self.db.execute("PRAGMA journal_mode = WAL")
      self.db.execute("PRAGMA synchronous = NORMAL")
    except GradebookError:
      self.db.close()
      raise
    except sqlite3.DatabaseError as e:
      self.db.close()
      raise GradebookError(f"{self.path} is not a gradebook this grader can read ({e}); it "
                           "was left as it is: move it aside to start a new one, or restore "
                           "a copy") from None

  def _migrate(self):
    db = self.db
    db.execute("BEGIN")   # one snapshot: a run creating the file at once can't come between
    try:
      version = db.execute("PRAGMA user_version").fetchone()[0]
      tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
      db.execute("COMMIT")
    if version > VERSION:
      raise GradebookError(f"{self.path} was written by a newer grader (schema {version}; "
                           f"this one knows up to {VERSION}): grade with that version")
    if version == 0 and tables:
      raise GradebookError(f"{self.path} is an SQLite file but not a gradebook (tables: "
                           f"{', '.join(sorted(tables))}); it was left as it is")
    if version == VERSION:
      return
    if version > 0:   # an older gradebook: keep a copy of it as it was
      shutil.copy2(self.path, self.path.with_name(f"{self.path.name}.v{version}.bak"))
    db.execute("BEGIN EXCLUSIVE")
    try:
      now = db.execute("PRAGMA user_version").fetchone()[0]   # another run may have done it
      for v in range(now + 1, VERSION + 1):
        for statement in MIGRATIONS[v]:
          db.execute(statement)
      db.execute(f"PRAGMA user_version = {VERSION}")
      db.execute("COMMIT")
    except BaseException:
      db.execute("ROLLBACK")
      raise

  def close(self):
    self.db.close()

  # --- Writing -------------------------------------------------------------------------------

  def seen(self, file: str, digest: str, seed: int, grader: str) -> list[dict] | None:
    """The rows of the last grading of this file with this content, seed and grader."""
    row = self.db.execute("SELECT id, student, part, left_out FROM submissions WHERE hash=? "
                          "AND seed=? AND grader=? AND file=? ORDER BY id DESC LIMIT 1",
                          (digest, seed, grader, file)).fetchone()
    if row is None:
      return None
    sid, student, part, left_out = row
    return [dict(student=student, part=part, exercise=ex, points=f"{pts:g}",
                 max_points=f"{mx:g}", status=status, reason=reason, notes=notes,
                 submission=file, detail=detail,
                 left_out=[n for n in left_out.split("\n") if n])
            for ex, pts, mx, status, reason, notes, detail in self.db.execute(
                "SELECT exercise, points, max_points, status, reason, notes, detail FROM "
                "results WHERE submission=? ORDER BY rowid", (sid,))]

  def record(self, rows: list[dict], digest: str, seed: int, grader: str) -> None:
    """One submission's rows (one file), in a transaction of its own; a submission
    recorded before with the same content, seed and grader is not recorded twice."""
    if not rows:
      return
    first = rows[0]
    db = self.db
    db.execute("BEGIN IMMEDIATE")
    try:
      if db.execute("SELECT 1 FROM submissions WHERE hash=? AND seed=? AND grader=? AND "
                    "file=? AND student=?", (digest, seed, grader, first["submission"],
                                             first["student"])).fetchone():
        db.execute("COMMIT")
        return
      cur = db.execute(
          "INSERT INTO submissions(student, part, file, hash, seed, grader, graded_at, "
          "left_out) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
          (first["student"], first["part"], first["submission"], digest, seed, grader,
           datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "\n".join(first.get("left_out", ()))))
      db.executemany(
          "INSERT INTO results(submission, exercise, points, max_points, status, reason, "
          "notes, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
          [(cur.lastrowid, r["exercise"], float(r["points"] or 0), float(r["max_points"] or 0),
            r["status"], r["reason"], r["notes"], r.get("detail", "")) for r in rows])
      db.execute("COMMIT")
    except BaseException:
      db.execute("ROLLBACK")
      raise

  # --- Reading -------------------------------------------------------------------------------

  def count(self) -> tuple[int, int]:
    """(submissions, result rows)."""
    return (self.db.execute("SELECT count(*) FROM submissions").fetchone()[0],
            self.db.execute("SELECT count(*) FROM results").fetchone()[0])

  def history(self, student: str, part: str) -> list[tuple]:
    """[(id, file, seed, graded_at, points, max_points)] of a student's submissions."""
    return self.db.execute(
        "SELECT s.id, s.file, s.seed, s.graded_at, total(r.points), total(r.max_points) "
        "FROM submissions s JOIN results r ON r.submission = s.id WHERE s.student=? AND "
        "s.part=? GROUP BY s.id ORDER BY s.id", (student, part)).fetchall()

  def course(self, policy: str = "latest") -> tuple[list[str], dict]:
    """(chapters, {student: {chapter: (points, max points)}}): for each student and
    chapter, the submission the policy picks: the latest graded (by the order runs
    recorded them), or the best (ties: the latest)."""
    if policy not in POLICIES:
      raise ValueError(f"policy {policy!r}: pick one of {POLICIES}")
    table = defaultdict(dict)
    for student, part, _sid, pts, mx in self.db.execute(
        "SELECT s.student, s.part, s.id, total(r.points), total(r.max_points) FROM "
        "submissions s JOIN results r ON r.submission = s.id WHERE s.part != '?' "
        "GROUP BY s.id ORDER BY s.id"):
      old = table[student].get(part)
      if old is None or policy == "latest" or pts >= old[0]:
        table[student][part] = (pts, mx)
    chapters = sorted({p for row in table.values() for p in row})
    return chapters, dict(sorted(table.items()))


def text_table(chapters, table) -> str:
  width = max([len("student")] + [len(s) for s in table])
  cols = [max(len(c), 7) for c in chapters]
  lines = [f"{'student':<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(chapters, cols))
           + "    total"]
  for student, row in table.items():
    cells = [f"{row[c][0]:g}/{row[c][1]:g}" if c in row else "" for c in chapters]
    tot = sum(v[0] for v in row.values())
    mx = sum(v[1] for v in row.values())
    lines.append(f"{student:<{width}}  " + "  ".join(f"{x:>{w}}" for x, w in zip(cells, cols))
                 + f"  {f'{tot:g}/{mx:g}':>7}")
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m coursekit.gradebook",
                               description="Print and export the course's gradebook.")
  ap.add_argument("--db", type=Path, default=DEFAULT, help=f"the gradebook (default {DEFAULT})")
  ap.add_argument("--policy", choices=POLICIES, default="latest",
                  help="which submission counts for a chapter (default: latest)")
  ap.add_argument("--out", type=Path, default=None,
                  help="folder for course.csv and the exports (default: the gradebook's)")
  ap.add_argument("--roster", type=Path, help="CSV with columns student, name, email, lms_id: "
                  "writes canvas.csv and moodle.csv too")
  args = ap.parse_args(argv)
  if not args.db.exists():
    print(f"error: no gradebook at {printable(args.db)} (make grade writes one)", file=sys.stderr)
    return 1
  try:
    book = Gradebook(args.db)
    roster = exports.read_roster(args.roster) if args.roster else None
  except (GradebookError, exports.RosterError) as e:
    print(f"error: {printable(e)}", file=sys.stderr)
    return 1
  chapters, table = book.course(args.policy)
  book.close()
  out = args.out or args.db.parent
  out.mkdir(parents=True, exist_ok=True)
  print(text_table(chapters, table))
  written = [exports.plain(chapters, table, roster, out / "course.csv")]
  if roster is not None:
    written += [exports.canvas(chapters, table, roster, out / "canvas.csv"),
                exports.moodle(chapters, table, roster, out / "moodle.csv")]
    missing, absent = exports.unmatched(table, roster)
    for name in missing:
      print(f"not in the roster (left out of canvas.csv and moodle.csv): {printable(name)}")
    for entry in absent:
      print(f"in the roster, no submission (exported without grades): {printable(entry)}")
  print(f"{len(table)} students, {len(chapters)} chapters ({args.policy} submission counts); "
        f"wrote {', '.join(map(str, written))}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
