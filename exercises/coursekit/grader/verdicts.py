"""Verdicts, decided outside any sandbox: one exercise's records against the reference
solution's at the same seed (`verdict`), and the row of `grades.csv` that says so,
with a reason a learner can act on (where a run stopped, what was expected).
"""
from __future__ import annotations

from ..learner import probe as probes
from .chapters import Stub
from .options import DETAIL_LIMIT, HEX, REASON_LIMIT, clean
from .outcome import Outcome
from .reading import Parsed
from .submissions import printable


def row(sub, student, part, exercise, status, reason="", notes=(), max_points=0.0) -> dict:
  points = max_points if status == "pass" else 0.0
  return dict(student=clean(student, 80), part=clean(part, 40), exercise=clean(exercise, 20),
              points=f"{points:g}", max_points=f"{max_points:g}", status=status,
              reason=clean(reason), notes=clean("; ".join(n for n in notes if n), 2 * REASON_LIMIT),
              submission=clean(sub.label, 2 * REASON_LIMIT), detail=detail(reason))


def detail(reason) -> str:
  """The reason in full, its lines kept, as the check cell prints it (for the feedback;
  not a column of grades.csv)."""
  lines = [HEX.sub("0x…", printable(line.rstrip())) for line in str(reason).splitlines()]
  return "\n".join(lines)[:DETAIL_LIMIT]


def left_out(p) -> list[str]:
  """A note naming the learner's cells with code that no answer needs (they didn't run)."""
  used = {c["cell"] for cells in p.runs.values() for c in cells}
  idle = [i + 1 for i, c in enumerate(p.cells)
          if c["kind"] == "learner" and c["source"].strip() and i not in used]
  if not idle:
    return []
  which = ", ".join(map(str, idle[:20])) + (", ..." if len(idle) > 20 else "")
  return [f"cell{'s' * (len(idle) > 1)} {which} of your notebook did not run when graded: "
          "no answer needs what they define"]


def where(got: Outcome, ran: list[dict]) -> str:
  """Where a run that gave no result stopped: in which cell, or in the check."""
  done = len(got.cells)
  if done < len(ran):
    cell = ran[done]
    return f" in cell {cell['cell'] + 1} (your code)" if cell["kind"] == "learner" \
        else f" in the grader's cell {cell['cell'] + 1}"
  return " while the check ran"


def verdict(p: Parsed, ex: str, got: Outcome, want: list, stub: Stub) -> tuple[str, str, list]:
  """(status, reason, notes) of one exercise, decided here, outside any sandbox."""
  notes = []
  if got.output_note:
    notes.append(got.output_note)
  if got.imports:
    notes.append(f"review: its code imported {', '.join(got.imports)} while it ran")
  ran = p.runs.get(ex, [])
  kinds = {c["cell"]: c["kind"] for c in ran}
  failed = [(c.get("cell"), c.get("error")) for c in got.cells
            if isinstance(c, dict) and c.get("status") != "ok"]
  stub_fail = next((f"the grader's setup cell {i + 1} failed ({e})" for i, e in failed
                    if kinds.get(i) == "stub"), "")
  own = next((f"your cell {i + 1} raised {e}" for i, e in failed
              if isinstance(i, int) and kinds.get(i) == "learner"), "")
  if got.records is None:
    return "fail", (got.why or "the sandbox gave no result") + where(got, ran), notes
  v = probes.compare(got.records, want)
  if v.passed:
    return "pass", "", notes
  syntax = "; ".join(t for i, t in p.syntax if i not in kinds)   # why a name may be missing
  prefix = "; ".join(x for x in (stub_fail, own, syntax) if x)
  prefix = prefix + "; " if prefix else ""
  if v.todo:   # the stub's own `raise` is no news: say what is missing, and what failed
    why = "; ".join(x for x in (own, syntax) if x and "NotImplementedError" not in x)
    return "fail", f"{why + '; ' if why else ''}not done yet: {v.message}", notes
  return "fail", f"{prefix}{v.label}: {v.message}", notes


def not_graded(p: Parsed, ex: str, why: str, max_points: float) -> dict:
  """A row for an exercise the grader failed to grade: no points, either way."""
  r = row(p.sub, p.student, p.part, ex, "not graded", f"not graded: {why}", p.notes, max_points)
  return dict(r, points="")
