"""The grader's outputs: grades.csv, grades.html, the tables and the summary line.

Everything here depends only on the rows (sorted first), so the same
submissions always give byte-identical files: no times, no dates, no paths
outside the submissions folder. Every field of the CSV is safe to open in a
spreadsheet (`neutral`); the HTML escapes everything.
"""
from __future__ import annotations

import csv
import html
import io
import re
from collections import defaultdict
from pathlib import Path

FIELDS = ("student", "part", "exercise", "points", "max_points", "status", "reason", "notes",
          "submission")


def sort_rows(rows, stubs) -> list[dict]:
  def key(r):
    order = stubs[r["part"]].exercises if r["part"] in stubs else []
    idx = order.index(r["exercise"]) if r["exercise"] in order else -1
    return (r["student"], r["part"], r["submission"], idx, r["exercise"])
  return sorted(rows, key=key)


def _num(x) -> float:
  return float(x or 0)


def scores(rows) -> dict:
  """{(student, part, submission): (points, max points)} over graded rows."""
  out = defaultdict(lambda: [0.0, 0.0])
  for r in rows:
    k = (r["student"], r["part"], r["submission"])
    out[k][0] += _num(r["points"])
    out[k][1] += _num(r["max_points"])
  return {k: tuple(v) for k, v in out.items()}


def best(rows) -> dict:
  """{(student, part): (points, max, submission)}: a student's best submission per part
  (ties: the first by file name)."""
  out = {}
  for (student, part, sub), (pts, mx) in sorted(scores(rows).items()):
    if (student, part) not in out or pts > out[student, part][0]:
      out[student, part] = (pts, mx, sub)
  return out


def _labels(rows):
  """Row label per (student, part, submission): the student, plus the file if needed."""
  per = defaultdict(set)
  for r in rows:
    per[r["student"], r["part"]].add(r["submission"])
  return {(s, p, sub): s if len(subs) == 1 else f"{s} ({sub})"
          for (s, p), subs in per.items() for sub in subs}


SHOWN_MEMBERS = 4   # a group of near-identical answers with more folds into <details>
MARKS = {"pass": "pass", "not graded": "n/g"}


def tables(rows, stubs) -> str:
  """A text table per chapter: one line per submission, a pass-rate line."""
  labels = _labels(rows)
  sc = scores(rows)
  out = []
  for part in sorted({r["part"] for r in rows}):
    prows = [r for r in rows if r["part"] == part]
    exercises = stubs[part].exercises if part in stubs else sorted({r["exercise"] for r in prows})
    keys = list(dict.fromkeys((r["student"], part, r["submission"]) for r in prows))
    status = {(r["student"], r["submission"], r["exercise"]): r["status"] for r in prows}
    width = max([len("pass rate"), len("student")] + [len(labels[k]) for k in keys])
    cols = [f"{ex:>5}" for ex in exercises]
    lines = [f"{part}:", f"{'student':<{width}}  {' '.join(cols)}  score"]
    for k in keys:
      marks = [f"{MARKS.get(status.get((k[0], k[2], ex)), 'FAIL'):>5}" for ex in exercises]
      pts, mx = sc[k]
      lines.append(f"{labels[k]:<{width}}  {' '.join(marks)}  {pts:g}/{mx:g}")
    rates = []
    for ex in exercises:
      n = sum(status.get((k[0], k[2], ex)) == "pass" for k in keys)
      rates.append(f"{100 * n // max(len(keys), 1):>4}%")
    lines.append(f"{'pass rate':<{width}}  {' '.join(rates)}")
    out.append("\n".join(lines))
  return "\n\n".join(out)


def one_line(rows, n_subs, elapsed, csv_path, html_path) -> str:
  students = {r["student"] for r in rows}
  graded = [r for r in rows if r["exercise"] != "*"]
  passed = sum(r["status"] == "pass" for r in graded)
  bad = len({r["submission"] for r in rows if r["exercise"] == "*"})
  flagged = len({r["submission"] for r in rows if "review:" in r["notes"]})
  parts = ", ".join(sorted({r["part"] for r in graded})) or "none"
  return (f"graded {n_subs} submission{'s' * (n_subs != 1)} from {len(students)} "
          f"student{'s' * (len(students) != 1)} ({parts}) in {elapsed:.0f} s: "
          f"{passed}/{len(graded)} exercises passed "
          f"({100 * passed / max(len(graded), 1):.0f}%), {bad} not gradable, {flagged} flagged "
          f"for review; wrote {csv_path} and {html_path}")


# What makes a spreadsheet read a cell as a formula (OWASP's list, with the full-width
# forms some spreadsheets accept too). Numbers are left as they are.
_FORMULA = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


def neutral(value) -> str:
  """A CSV field that no spreadsheet runs: one that a spreadsheet would take for a
  formula gets a leading apostrophe (OWASP's advice for CSV injection)."""
  text = str(value)
  if text.lstrip().startswith(_FORMULA) and not _NUMBER.fullmatch(text):
    return "'" + text
  return text


def write_csv(rows, path: Path) -> None:
  buf = io.StringIO()
  w = csv.DictWriter(buf, FIELDS, lineterminator="\n")
  w.writeheader()
  w.writerows({k: neutral(r.get(k, "")) for k in FIELDS} for r in rows)
  path.write_text(buf.getvalue(), encoding="utf-8", errors="backslashreplace")


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{background:#e6f4e6}.fail{background:#fbe7e7}.bar{display:inline-block;height:.8em;
background:#4a8;vertical-align:middle;margin-right:.4em}
code,.mono{font-family:ui-monospace,monospace;font-size:.92em}.notes{color:#765}
.warn{background:#fde2c8;border:2px solid #c60;padding:.6em 1em}.meta{color:#444}
table{display:block;overflow-x:auto;max-width:100%}
"""


def _e(x) -> str:
  return html.escape(str(x), quote=True)


def write_html(rows, stubs, path: Path, meta=None, similar=()) -> None:
  graded = [r for r in rows if r["exercise"] != "*"]
  parts = sorted({r["part"] for r in graded})
  b = best(graded)
  students = sorted({r["student"] for r in rows})
  h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
       '<meta name="viewport" content="width=device-width, initial-scale=1">',
       "<title>Grades</title>", f"<style>{CSS}</style></head><body>", "<h1>Grades</h1>"]
  meta = meta or {}
  if meta.get("unsafe"):
    h.append(f'<p class="warn"><b>Not sandboxed.</b> {_e(meta.get("sandbox", ""))}</p>')
  if meta:
    h.append("<p class='meta'>" + "<br>".join(
        f"<b>{_e(k)}</b>: {_e(v)}" for k, v in (
            ("how", meta.get("sandbox")), ("limits", meta.get("limits")),
            ("seed", f"{meta.get('seed')} (grade again with --seed {meta.get('seed')} to "
                     "reproduce these inputs)")) if v is not None) + "</p>")
  n_subs = len({r["submission"] for r in rows})
  h.append(f"<p>{n_subs} submissions from {len(students)} students. A student's score in a "
           "chapter is their best submission's. Columns of <code>grades.csv</code>: "
           + ", ".join(f"<code>{f}</code>" for f in FIELDS) + ".</p>")

  h.append("<h2>Scores per student</h2><table><tr><th>student</th>")
  h += [f"<th>{_e(p)}</th>" for p in parts] + ["<th>total</th></tr>"]
  for s in students:
    cells, tot, mx_tot = [], 0.0, 0.0
    for p in parts:
      if (s, p) in b:
        pts, mx, sub = b[s, p]
        tot, mx_tot = tot + pts, mx_tot + mx
        cls = "pass" if pts == mx else "fail" if pts == 0 else ""
        cells.append(f'<td class="n {cls}" title="{_e(sub)}">{pts:g}/{mx:g}</td>')
      else:
        cells.append("<td></td>")
    h.append(f"<tr><td>{_e(s)}</td>{''.join(cells)}<td class='n'>{tot:g}/{mx_tot:g}</td></tr>")
  h.append("</table>")

  for p in parts:
    prows = [r for r in graded if r["part"] == p]
    exercises = stubs[p].exercises if p in stubs else sorted({r["exercise"] for r in prows})
    h.append(f"<h2>{_e(p)}: pass rate per exercise</h2>"
             "<table><tr><th>exercise</th><th>title</th><th>passed</th><th>rate</th></tr>")
    for ex in exercises:
      exr = [r for r in prows if r["exercise"] == ex]
      n = sum(r["status"] == "pass" for r in exr)
      rate = 100 * n / max(len(exr), 1)
      title = stubs[p].titles.get(ex, "") if p in stubs else ""
      h.append(f"<tr><td>{_e(ex)}</td><td>{_e(title)}</td><td class='n'>{n}/{len(exr)}</td>"
               f"<td><span class='bar' style='width:{rate:.0f}px'></span>{rate:.0f}%</td></tr>")
    h.append("</table>")

  fails = [r for r in rows if r["status"] != "pass"]
  h.append(f"<h2>Failures ({len(fails)})</h2>")
  if fails:
    h.append("<table><tr><th>student</th><th>submission</th><th>part</th><th>exercise</th>"
             "<th>reason</th></tr>")
    for r in fails:
      h.append(f"<tr><td>{_e(r['student'])}</td><td class='mono'>{_e(r['submission'])}</td>"
               f"<td>{_e(r['part'])}</td><td>{_e(r['exercise'])}</td>"
               f"<td class='mono'>{_e(r['reason'])}</td></tr>")
    h.append("</table>")
  noted = sorted({(r["submission"], r["student"], n) for r in rows
                  for n in r["notes"].split("; ") if n})
  h.append(f"<h2>Notes and review flags ({len(noted)})</h2>")
  h.append("<p>Submissions graded as another chapter, output cut short, and code flagged for "
           "a human to review: values can't tell whether an answer calls JAX where the "
           "exercise asks you to write the rule yourself (see the instructor guide).</p>")
  if noted:
    h.append("<table><tr><th>submission</th><th>student</th><th>note</th></tr>")
    for sub, s, n in noted:
      h.append(f"<tr><td class='mono'>{_e(sub)}</td><td>{_e(s)}</td><td class='notes'>{_e(n)}</td></tr>")
    h.append("</table>")
  h.append(f"<h2>Near-identical answers ({len(similar)} groups)</h2>")
  h.append("<p>Students whose answers to one exercise are the same once names, comments and "
           "formatting are normalized: the one kind of copying a sandbox can't see. Answers "
           "near one another form a group; its similarity is the lowest of the pairs that "
           "joined it. Short answers are left out; a group is a reason to look, not a "
           "verdict.</p>")
  if similar:
    h.append("<table><tr><th>part</th><th>exercise</th><th>students</th><th>similarity</th>"
             "<th>who (submission)</th></tr>")
    for g in similar:
      who = "<br>".join(_e(m) for m in g["members"])
      if len(g["members"]) > SHOWN_MEMBERS:   # a large group folds: the page stays short
        who = (f"<details><summary>{_e(g['members'][0])} and {len(g['members']) - 1} "
               f"more</summary>{who}</details>")
      h.append(f"<tr><td>{_e(g['part'])}</td><td>{_e(g['exercise'])}</td>"
               f"<td class='n'>{g['students']}</td>"
               f"<td class='n'>{100 * g['similarity']:.0f}%</td><td class='mono'>{who}</td></tr>")
    h.append("</table>")
  h.append("</body></html>")
  path.write_text("\n".join(h) + "\n", encoding="utf-8", errors="backslashreplace")


def write(rows, stubs, out: Path, meta=None, similar=()) -> tuple[Path, Path]:
  csv_path, html_path = out / "grades.csv", out / "grades.html"
  write_csv(rows, csv_path)
  write_html(rows, stubs, html_path, meta, similar)
  return csv_path, html_path
