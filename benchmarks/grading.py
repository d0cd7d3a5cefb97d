"""Section `grading`: the grader's throughput on a class of submissions.

We generate N copies of Part 1's reference solutions (the source with its
solutions, `exercises/source/part1.md`, as a learner would hand it in), and
grade them the way `python -m coursekit.grade DIR --jobs 2` does (the same
functions, in this process, so that we can also time the cells): a kernel per
submission, two at a time. N is 100 (10 with --quick).

Reported: the total wall time (goal: at most 180 s for 100 submissions on 2
cores), the wall time per submission (in its worker), the part of it spent
running the notebook's cells, and the rest, the grader's per-submission
overhead: starting and stopping a sandboxed kernel, the guard's snapshot and
its calls before each check, rebuilding the notebook, cleaning up.
"""
from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import Column, Table, section

ROOT = Path(__file__).resolve().parents[1]
N, N_QUICK = 100, 10
JOBS = 2
GOAL_S = 180.0     # for N = 100 on 2 cores


def _submissions(folder: Path, n: int) -> None:
  sys.path.insert(0, str(ROOT / "exercises"))
  import nbformat
  from coursekit.stubs import read_source
  nb = read_source(ROOT / "exercises" / "source" / "part1.md")
  text = nbformat.writes(nb)
  for i in range(n):
    (folder / f"student{i:03d}.ipynb").write_text(text)


def _cpu() -> float:
  """CPU seconds used by this process and its finished children."""
  me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@section("grading", "Grading: 100 submissions of Part 1 on 2 cores")
def grading(ctx) -> Table:
  from coursekit import grade, kernel, report
  n = N_QUICK if ctx.quick else N
  in_cells: dict[str, float] = {}
  real_run = kernel.Kernel.run

  def timed_run(self, *args, **kwargs):   # time spent running cells, per kernel
    t = time.perf_counter()
    try:
      return real_run(self, *args, **kwargs)
    finally:
      me = threading.get_ident()
      in_cells[me] = in_cells.get(me, 0.0) + time.perf_counter() - t

  walls, cells, rows = [], [], []

  def one(sub, stubs, opts):
    me = threading.get_ident()   # cells run in the thread that grades them
    t, before = time.perf_counter(), in_cells.get(me, 0.0)
    out = grade.grade_submission(sub, stubs, opts)
    walls.append(time.perf_counter() - t)
    cells.append(in_cells.get(me, 0.0) - before)
    return out

  kernel.Kernel.run = timed_run
  try:
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
      folder = Path(tmp) / "subs"
      folder.mkdir()
      _submissions(folder, n)
      stubs = grade.load_stubs()
      subs = grade.collect(folder)
      opts = grade.Options()
      t0 = time.perf_counter()
      cpu0 = _cpu()
      with ThreadPoolExecutor(JOBS) as pool:
        futures = [pool.submit(one, s, stubs, opts) for s in subs]
        for f in ctx.progress(futures, "grading"):
          rows.extend(f.result())
      rows = report.sort_rows(rows, stubs)
      report.write(rows, stubs, Path(tmp))
      total = time.perf_counter() - t0
      cpu = _cpu() - cpu0   # the kernels are our children: their CPU time counts
  finally:
    kernel.Kernel.run = real_run

  passed = sum(r["status"] == "pass" for r in rows)
  assert passed == len(rows) == 6 * n, [r for r in rows if r["status"] != "pass"][:3]
  wall, cell = statistics.mean(walls), statistics.mean(cells)
  goal = GOAL_S * n / N
  met = total <= goal
  row = {"case": f"{n} × Part 1 solutions", "n": n, "jobs": JOBS, "total_s": total,
         "goal": f"≤ {goal:g} s", "met": met, "per_sub_s": wall, "cells_s": cell,
         "overhead_s": wall - cell, "throughput": n / total * 60,
         "cpu_per_sub_s": cpu / n, "idle_estimate_s": cpu / JOBS * N / n,
         "load_avg": os.getloadavg()[0]}
  return Table(
      intro=(
          f"`grade_submission` (what `python -m coursekit.grade DIR --jobs {JOBS}` runs per "
          f"notebook) over {n} copies of Part 1's reference solutions, {JOBS} at a time, "
          "each in its own sandboxed kernel and temporary folder; then grades.csv and "
          "grades.html are written. *Per submission* is the mean wall time of one "
          "submission in its worker; *in cells* is the part spent executing its cells "
          "(the setup cell imports JAX; the checks run); *overhead* is the rest: kernel "
          "start and stop, the guard, rebuilding the notebook, cleanup. "
          f"**Goal:** 100 submissions in at most {GOAL_S:g} s on 2 cores "
          f"(scaled to {goal:g} s for {n})."),
      columns=[Column("case", "submissions"), Column("jobs", "jobs"),
               Column("total_s", "total s", "ratio"), Column("goal", "goal"),
               Column("met", "met?", "met"), Column("per_sub_s", "s per submission", "ratio"),
               Column("cells_s", "in cells s", "ratio"),
               Column("overhead_s", "overhead s", "ratio"),
               Column("throughput", "submissions/min", "ratio"),
               Column("cpu_per_sub_s", "CPU s per submission", "ratio"),
               Column("idle_estimate_s", "100 on 2 idle cores, s (est.)", "ratio")],
      rows=[row],
      summary={"total_s": total, "n": n, "goal_s": goal, "met": met, "overhead_s": wall - cell,
               "per_submission_s": wall},
      summary_text=(
          f"**Overall:** {n} submissions in {total:.0f} s (goal ≤ {goal:g} s: "
          f"{'met' if met else 'not met'}); {wall:.1f} s per submission, of which "
          f"{wall - cell:.1f} s is the grader's overhead; {cpu / n:.2f} CPU s per submission, "
          f"so about {cpu / JOBS * N / n:.0f} s for 100 on 2 otherwise idle cores."),
      notes=["Every submission's 6 exercises pass (checked), so the checks run in full.",
             "*CPU s per submission* is the CPU time of the grader and its kernels "
             "(getrusage of this process and its children) over the run, divided by the "
             "number of submissions; *100 on 2 idle cores* is that times 100 / 2: what the "
             "total would be with both cores to ourselves. It is less sensitive to other "
             "load on the machine than the wall time. The overhead includes the guard's "
             "import of numpy and JAX before the learner's code runs, which the setup "
             f"cell would otherwise pay. Load average at the end: {os.getloadavg()[0]:.1f}.",
             "Timings depend on the machine's load: other work on the 2 cores slows "
             "every kernel alike."])
