"""Feedback for each learner: `feedback/<student>/<chapter>.html`, and a zip of them all.

One self-contained page per learner and chapter (no script, no external asset, safe to
e-mail or upload): each exercise's points and, for a failure, its first failing case in
the words of the check cell (`probe.compare`'s verdict, as the grader's row keeps it:
the case, its seeded inputs, expected against got, the likely cause), the exercise's
hint and its link to the book, and the notes about that learner's own notebook. A page
is built from that learner's rows alone, and leaves out review flags, similarity groups
and anything of the reference solution but the values it computed at this run's seed.
"""
from __future__ import annotations

import html
import re
import shutil
import zipfile
from collections import defaultdict
from pathlib import Path

from .report import CSS
from ..learner.stubs import site_url

LEVELS = ("none", "failures", "all")
_LINK = re.compile(r"In the book: \[(.+?)\]\(([^)\s]+)\)")
_HINT = re.compile(r"<details><summary><b>(Hints?)</b>[^<]*</summary>(.*?)</details>", re.S)
_CODE = re.compile(r"`([^`]+)`")
_SAFE_NAME = re.compile(r"[^\w.-]+")
PRIVATE = ("review:",)   # notes for the instructor only


def _e(x) -> str:
  return html.escape(str(x), quote=True)


def _inline(text: str) -> str:
  """Escaped text, with `code` spans and *emphasis* (the statements' markdown)."""
  out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", _e(text))
  return re.sub(r"\*(\S[^*]*?)\*", r"<i>\1</i>", out)


def file_name(name: str) -> str:
  """A learner's name as one safe path component (the page says the name in full)."""
  safe = _SAFE_NAME.sub("_", name).strip("._") or "student"
  return safe[:80]


def statements(stub, site: str | None = None) -> dict:
  """{exercise: (title, book link text, its url or None, hint)} from the stub notebook.
  The url is absolute when the site has one (`html.baseurl`), else None (a relative
  link would break in an e-mail)."""
  site = site if site is not None else site_url()
  out = {}
  for cell in stub.nb.cells:
    if cell.metadata.get("role") != "statement":
      continue
    ex = str(cell.metadata.get("exercise"))
    link = _LINK.search(cell.source)
    text, url = (link.group(1), link.group(2)) if link else ("", "")
    if url.startswith("../"):
      url = site + url[3:] if site.startswith(("http://", "https://")) else None
    elif not url.startswith(("http://", "https://")):
      url = None
    hint = _HINT.search(cell.source)
    out[ex] = (stub.titles.get(ex, ""), text, url, hint.group(2).strip() if hint else "")
  return out


def _items(hint: str) -> list[str]:
  """A hint's paragraphs and bullets, each on one line."""
  items = []
  for block in re.split(r"\n\s*\n|\n(?=\s*[*-] )", hint):
    if block.strip():
      items.append(" ".join(block.split()))
  return items


def failure_text(r: dict, info: tuple) -> str:
  """A failed exercise as text (Gradescope's test output): the failing case as the
  check cell words it, the hint, and the book's section."""
  _title, text, url, hint = info
  out = [r.get("detail") or r["reason"]]
  if hint:
    out += ["", "Hint:"] + _items(hint)
  if text:
    out += ["", f"In the book: {text}" + (f" ({url})" if url else "")]
  return "\n".join(out)


def _hint_html(hint: str) -> str:
  items = _items(hint)
  bullets = [i[2:] for i in items if i.startswith(("* ", "- "))]
  if len(bullets) == len(items):
    return "<p><b>Hints:</b></p><ul>" + "".join(f"<li>{_inline(b)}</li>" for b in bullets) \
        + "</ul>"
  return "<p><b>Hint:</b> " + "</p><p>".join(_inline(i) for i in items) + "</p>"


def learner_notes(r: dict) -> list[str]:
  """The row's notes that are about the learner's notebook, without review flags."""
  notes = [n for n in r.get("notes", "").split("; ") if n and not n.startswith(PRIVATE)]
  return notes + list(r.get("left_out", ()))


def page(student: str, part: str, rows: list[dict], stub, level: str, site=None,
         info=None) -> str:
  """The feedback page of one learner for one chapter, from their rows only (`info`:
  the chapter's `statements`, when the caller has them)."""
  info = info if info is not None else statements(stub, site) if stub else {}
  exercises = stub.exercises if stub else sorted({r["exercise"] for r in rows})
  subs = sorted({r["submission"] for r in rows})
  h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
       '<meta name="viewport" content="width=device-width, initial-scale=1">',
       "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
       "style-src 'unsafe-inline'\">",
       f"<title>Feedback: {_e(part)}</title>", f"<style>{CSS}pre{{white-space:pre-wrap;"
       "overflow-wrap:anywhere}</style></head><body>",
       f"<h1>Feedback on {_e(part)}</h1>", f"<p>For <b>{_e(student)}</b>.</p>"]
  for sub in subs:
    srows = [r for r in rows if r["submission"] == sub]
    by_ex = {r["exercise"]: r for r in srows}
    pts = sum(float(r["points"] or 0) for r in srows)
    mx = sum(float(r["max_points"] or 0) for r in srows)
    h.append(f"<h2>{_e(sub)}: {pts:g}/{mx:g} points</h2>")
    notes = sorted({n for r in srows for n in learner_notes(r)})
    if notes:
      h.append("<p>About your notebook:</p><ul>" + "".join(
          f"<li class='notes'>{_e(n)}</li>" for n in notes) + "</ul>")
    if "*" in by_ex:
      h.append(f"<p class='fail'>It could not be graded: {_e(by_ex['*']['reason'])}</p>")
    h.append("<table><tr><th>exercise</th><th>points</th><th>result</th></tr>")
    for ex in exercises:
      r = by_ex.get(ex)
      if r is None or (level == "failures" and r["status"] == "pass"):
        continue
      title = info.get(ex, ("",))[0]
      h.append(f"<tr class='{_e(r['status'])}'><td>{_e(ex)}: {_inline(title)}</td>"
               f"<td class='n'>{_e(r['points'])}/{_e(r['max_points'])}</td>"
               f"<td>{'passed' if r['status'] == 'pass' else 'failed'}</td></tr>")
    h.append("</table>")
    for ex in exercises:
      r = by_ex.get(ex)
      if r is None or r["status"] == "pass":
        continue
      title, text, url, hint = info.get(ex, ("", "", None, ""))
      h.append(f"<h3>Exercise {_e(ex)}: {_inline(title)}</h3>")
      h.append(f"<pre class='mono'>{_e(r.get('detail') or r['reason'])}</pre>")
      if hint:
        h.append(_hint_html(hint))
      if text:
        link = f"<a href='{_e(url)}'>{_inline(text)}</a>" if url else _inline(text)
        h.append(f"<p>In the book: {link}.</p>")
  h.append("<p class='meta'>The inputs shown were drawn for this grading; the check cells in "
           "your notebook use others.</p></body></html>")
  return "\n".join(h) + "\n"


def write(rows: list[dict], stubs: dict, out: Path, level: str = "all",
          site: str | None = None) -> list[Path]:
  """`out/<student>/<part>.html` for each learner and chapter, and `out.zip`: the paths."""
  if level == "none":
    return []
  groups = defaultdict(list)
  for r in rows:
    groups[r["student"], r["part"]].append(r)
  site = site if site is not None else site_url()
  info = {part: statements(stubs[part], site) for _, part in groups if part in stubs}
  shutil.rmtree(out, ignore_errors=True)   # no page of an earlier run stays behind
  folders, taken, paths = {}, set(), []
  for (student, part), prows in sorted(groups.items()):
    if student not in folders:
      folders[student] = _unique(file_name(student), taken)
      taken.add(folders[student].lower())
    path = out / folders[student] / f"{file_name(part)}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(student, part, prows, stubs.get(part), level, site, info.get(part, {})),
                    encoding="utf-8", errors="backslashreplace")
    paths.append(path)
  with zipfile.ZipFile(out.with_name(out.name + ".zip"), "w", zipfile.ZIP_DEFLATED) as z:
    for p in paths:
      entry = zipfile.ZipInfo(str(p.relative_to(out.parent)), date_time=(1980, 1, 1, 0, 0, 0))
      z.writestr(entry, p.read_bytes(), zipfile.ZIP_DEFLATED)
  return paths


def _unique(name: str, taken: set) -> str:
  """Two learners whose names give the same file name (`taken`: lowercased, for file
  systems that ignore case) get their own folders."""
  if name.lower() not in taken:
    return name
  return next(f"{name}-{n}" for n in range(2, len(taken) + 3)
              if f"{name}-{n}".lower() not in taken)
