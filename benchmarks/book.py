"""Section `book`: how long the website takes to build.

In a scratch copy of the repository (so the real _build/ is left alone), we
time `scripts/build_book.sh` twice: cold (no _build/: every chapter executes)
and warm (nothing changed: Sphinx and the execution cache skip everything).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Column, Table, section

ROOT = Path(__file__).resolve().parents[1]
COLD_GOAL, WARM_GOAL = 180.0, 20.0   # seconds, on the 2-core machine
SKIP = {".git", ".venv", "_build", ".jupyter_cache", "__pycache__", ".hypothesis"}


def _build(where: Path) -> float:
  env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
  t0 = time.perf_counter()
  proc = subprocess.run(["bash", "scripts/build_book.sh"], cwd=where, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  seconds = time.perf_counter() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"the book build failed:\n{proc.stdout[-3000:]}")
  return seconds


@section("book", "Building the book: cold and warm")
def book(ctx) -> Table:
  with tempfile.TemporaryDirectory(prefix="autodidax-book-") as tmp:
    copy = Path(tmp) / "repo"
    shutil.copytree(ROOT, copy, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in SKIP])
    cases = ctx.progress(["cold", "warm"], "book build")
    times = {case: _build(copy) for case in cases}
  rows = [
      {"case": "cold (every chapter executes)", "s": times["cold"],
       "goal": f"≤ {COLD_GOAL:g} s", "met": times["cold"] <= COLD_GOAL},
      {"case": "warm (nothing changed)", "s": times["warm"],
       "goal": f"≤ {WARM_GOAL:g} s", "met": times["warm"] <= WARM_GOAL}]
  met = sum(r["met"] for r in rows)
  return Table(
      intro=("`scripts/build_book.sh` (what `make book` runs: warnings are errors) in a "
             "scratch copy of the repository, timed once cold, with no `_build/`, so "
             "every chapter runs, and once warm, right after, with nothing changed. "
             f"**Goal:** cold ≤ {COLD_GOAL:g} s, warm ≤ {WARM_GOAL:g} s."),
      columns=[Column("case", "build"), Column("s", "seconds", "s"),
               Column("goal", "goal"), Column("met", "met?", "met")],
      rows=rows,
      summary={"rows_met": met, "rows": len(rows), "met": met == len(rows),
               "cold_s": times["cold"], "warm_s": times["warm"]},
      summary_text=(f"**Overall:** cold {times['cold']:.0f} s (goal ≤ {COLD_GOAL:g} s), "
                    f"warm {times['warm']:.1f} s (goal ≤ {WARM_GOAL:g} s)."),
      notes=["One build each: a build takes minutes, and the harness's repeats are "
             "for microbenchmarks."])
