"""Section `exercises`: how long each exercise's check cell takes, as a learner
first runs it.

For each exercise, a fresh kernel runs what a learner has run before its check
(the notebook's setup, given code and reference answers, but no other check),
then its check cell, the kernel's first. We
time the check cell: wall-clock and the kernel's CPU time (all its threads, XLA's
compiler too), which a busy machine doesn't inflate as much.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import nbformat
from harness import Column, Table, section

ROOT = Path(__file__).resolve().parents[1]
GOAL = 3.0   # seconds from a fresh kernel, the slowest check included
TIMER = ("import resource as _rs, time as _tm\n"
         "_ru, _t0 = _rs.getrusage(_rs.RUSAGE_SELF), _tm.perf_counter()")
REPORT = ("_ru2 = _rs.getrusage(_rs.RUSAGE_SELF)\n"
          "print(_tm.perf_counter() - _t0, _ru2.ru_utime + _ru2.ru_stime "
          "- _ru.ru_utime - _ru.ru_stime)")


def _runs(source: Path) -> dict:
  """{exercise: the cells a fresh kernel runs for it}: every code cell before its check
  (setup, given code, reference answers) but the other checks, then its check between
  two timers."""
  from coursekit.learner import stubs
  before, runs = [], {}
  for cell in stubs.read_source(source).cells:
    if cell.cell_type != "code":
      continue
    if cell.metadata.get("role") == "check":
      runs[cell.metadata["exercise"]] = [*before, nbformat.v4.new_code_cell(TIMER), cell,
                                         nbformat.v4.new_code_cell(REPORT)]
    else:
      before.append(cell)
  return runs


def _time_check(cells) -> tuple[float, float]:
  """(wall s, CPU s) of the check cell, in a fresh kernel started in exercises/."""
  from nbclient import NotebookClient
  nb = nbformat.v4.new_notebook(cells=cells)
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  NotebookClient(nb, timeout=600, kernel_name="python3").execute(cwd=str(ROOT / "exercises"))
  wall, cpu = nb.cells[-1].outputs[0]["text"].split()
  return float(wall), float(cpu)


@section("exercises", "Exercises: each check cell, from a fresh kernel")
def exercises(ctx) -> Table:
  sys.path.insert(0, str(ROOT / "exercises"))
  from coursekit.learner import stubs
  cases = [(source.stem, exercise, cells) for source in stubs.sources()
           for exercise, cells in _runs(source).items()]
  if ctx.quick:
    cases = cases[::8]
  rows = []
  for part, exercise, cells in ctx.progress(cases, "check cells"):
    wall, cpu = _time_check(cells)
    rows.append({"notebook": part, "exercise": exercise, "wall_s": wall, "cpu_s": cpu,
                 "met": wall <= GOAL})
  met = sum(r["met"] for r in rows)
  worst = max(rows, key=lambda r: r["wall_s"])
  return Table(
      intro=("Each exercise's check cell with the reference answer, the first check a "
             "fresh kernel runs, after the notebook's code cells before it (no other check), "
             "as a learner runs it: the wall-clock time, and the kernel's CPU time "
             f"(all threads, XLA's compiler too). One run each. **Goal:** ≤ {GOAL:g} s each."),
      columns=[Column("notebook", "notebook"), Column("exercise", "exercise"),
               Column("wall_s", "wall s", "s"), Column("cpu_s", "CPU s", "s"),
               Column("met", "met?", "met")],
      rows=rows,
      summary={"rows_met": met, "rows": len(rows), "met": met == len(rows),
               "worst": worst["exercise"], "worst_wall_s": worst["wall_s"],
               "median_wall_s": statistics.median(r["wall_s"] for r in rows)},
      summary_text=(f"**Overall:** {met} of {len(rows)} check cells ≤ {GOAL:g} s from a "
                    f"fresh kernel; slowest {worst['exercise']} ({worst['wall_s']:.2f} s wall, "
                    f"{worst['cpu_s']:.2f} s CPU), median "
                    f"{statistics.median(r['wall_s'] for r in rows):.2f} s."),
      notes=["One run each: a kernel start takes seconds, and the harness's repeats are "
             "for microbenchmarks. A busy machine raises wall times more than CPU times."])
