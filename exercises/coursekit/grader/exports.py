"""The course table in the CSV formats that learning platforms import.

* `plain`: one row per student: the roster's columns, one column per chapter, the total;
* `canvas`: Canvas's gradebook CSV, `Student, ID, SIS User ID, SIS Login ID, Section`,
  then one column per chapter, and the `Points Possible` row that Canvas exports;
* `moodle`: a grade import CSV for Moodle (map `Email address` to the user's e-mail
  when importing), then one column per chapter.

A roster (CSV with the columns `student, name, email, lms_id`; `student` is the name
the grader gives, as in grades.csv) maps the grader's names to the platform's people.
A learner the roster lacks can't be uploaded and is listed (`unmatched`); a roster
entry without a submission is exported with empty grades and listed too. Every field
goes through `report.neutral`, as in grades.csv.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from .report import neutral

ROSTER = ("student", "name", "email", "lms_id")


class RosterError(Exception):
  """A roster that can't be used; the message says which line and why."""


def read_roster(path: Path) -> dict[str, dict]:
  """{student: {student, name, email, lms_id}}, in the roster's order."""
  try:
    text = Path(path).read_text(encoding="utf-8-sig")
  except (OSError, UnicodeDecodeError) as e:
    raise RosterError(f"can't read the roster {path}: {e}") from None
  reader = csv.DictReader(io.StringIO(text))
  header = [h.strip().lower() for h in reader.fieldnames or []]
  missing = [c for c in ROSTER if c not in header]
  if missing:
    raise RosterError(f"the roster {path} lacks the column(s) {', '.join(missing)}: its first "
                      f"line must name {', '.join(ROSTER)}")
  out, problems = {}, []
  for line, raw in enumerate(reader, start=2):
    entry = {k.strip().lower(): (v or "").strip() for k, v in raw.items() if k}
    sid = entry["student"]
    if not sid:
      problems.append(f"line {line}: no student")
    elif sid in out:
      problems.append(f"line {line}: the student {sid!r} is there twice")
    else:
      out[sid] = {k: entry[k] for k in ROSTER}
  seen = {}
  for sid, e in out.items():
    if e["lms_id"] and seen.setdefault(e["lms_id"], sid) != sid:
      problems.append(f"the LMS id {e['lms_id']!r} belongs to both {seen[e['lms_id']]!r} "
                      f"and {sid!r}")
  if problems:
    raise RosterError(f"the roster {path} can't be used, nothing was exported: "
                      + "; ".join(problems[:10]))
  return out


def unmatched(table: dict, roster: dict) -> tuple[list[str], list[str]]:
  """(graded students the roster lacks, roster entries with no submission)."""
  return ([s for s in table if s not in roster], [s for s in roster if s not in table])


def _write(path: Path, header, rows) -> Path:
  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow([neutral(x) for x in header])
  w.writerows([[neutral(x) for x in r] for r in rows])
  path.write_text(buf.getvalue(), encoding="utf-8", errors="backslashreplace")
  return path


def _points(table, student, chapters) -> list[str]:
  row = table.get(student, {})
  return [f"{row[c][0]:g}" if c in row else "" for c in chapters]


def _people(table, roster):
  """The students to export: the roster's, in its order, or every graded one."""
  return list(roster) if roster is not None else list(table)


def plain(chapters, table, roster, path: Path) -> Path:
  rows = []
  for s in _people(table, roster) + [s for s in table if roster is not None and s not in roster]:
    e = (roster or {}).get(s, {"name": "", "email": "", "lms_id": ""})
    row = table.get(s, {})
    total = f"{sum(v[0] for v in row.values()):g}" if row else ""
    rows.append([s, e["name"], e["email"], e["lms_id"]] + _points(table, s, chapters) + [total])
  return _write(path, ["student", "name", "email", "lms_id"] + chapters + ["total"], rows)


def _max(table, chapter) -> str:
  return next((f"{row[chapter][1]:g}" for row in table.values() if chapter in row), "")


def canvas(chapters, table, roster, path: Path) -> Path:
  header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + chapters
  rows = [["    Points Possible", "", "", "", ""] + [_max(table, c) for c in chapters]]
  for s in roster:
    e = roster[s]
    rows.append([e["name"] or s, e["lms_id"], s, e["email"], ""] + _points(table, s, chapters))
  return _write(path, header, rows)


def moodle(chapters, table, roster, path: Path) -> Path:
  header = ["Email address", "ID number", "Full name"] + chapters
  rows = [[roster[s]["email"], s, roster[s]["name"]] + _points(table, s, chapters)
          for s in roster]
  return _write(path, header, rows)
