"""Grade submitted exercise notebooks.

    python -m coursekit.grade SUBMISSIONS [--out DIR] [--jobs N] [--part NAME] [--seed N]
                              [--timeout S] [--memory MIB] [--no-sandbox] [--cluster ADDRESS]
    make grade SUBMISSIONS=dir-or-zip [GRADES=outdir]

SUBMISSIONS is a folder or a .zip of notebooks (`.ipynb`, any case), any number per student,
for any chapter. Writes `grades.csv` and `grades.html` into `--out` (default `grades/`), the
learners' pages `feedback/<student>/<chapter>.html` and `feedback.zip` (`feedback`),
and records the run in the gradebook, `gradebook.sqlite` (`gradebook`), which
also spares a notebook graded before at the same seed.

How a notebook is graded (the instructor guide has the threat model):

1. Its chapter comes from its cells (ids, exercise metadata, the names it
   defines) and its metadata; `--part` forces one. Its student comes from its
   subfolder, else its file name; its `coursekit.student` metadata only gets a
   note when it disagrees (`submissions`, `chapters`). Reading, rebuilding, the
   review flags and the similarity fingerprints run in a worker process under a
   time and memory budget (`reading.Reader`): a notebook that breaks or stalls them
   gets a row that says so, and the batch goes on.
2. Its code is rebuilt around the stub: the stub's setup and given cells are
   the grader's own; check cells are dropped (they are the learner's feedback,
   not the grade) (`rebuild`).
3. For each exercise (one after another: never two sandboxes of one
   submission at once), only the learner's definitions that the exercise's answers
   need, above its check cell, run (`definitions`), with the stub's cells, in a fresh
   bubblewrap sandbox (`sandbox`, `scheduling`), against the learner edition of the
   library, in which that exercise's answers are absent (`edition`);
   then the exercise's probe (`coursekit.learner.probe`) runs the learner's answers on
   inputs drawn from this run's seed (`sandboxed/runner.py`). The records come out of
   the sandbox (`outcome`).
4. Outside, they are compared with the reference solution's records for the
   same seed, computed the same way in a sandbox of their own and cached
   (`verdicts`); this module writes the results.

So whatever the notebook does inside its sandbox, it can only change its own
records, at a seed it doesn't know in advance (never the seed whose records
ship with the stubs). An exercise's grade depends on its answers alone: not on
the notebook's other cells, nor on how the runs are scheduled. Submissions are
only read, never written, and nothing the sandboxes run can see them, the
output folder or the course.
"""
from __future__ import annotations

import argparse
import hashlib
import resource
import secrets
import sys
import time
import warnings
import zipfile
from pathlib import Path

from ..learner import probe as probes
from ..learner.stubs import EXERCISES
from . import feedback, gradebook, report, similarity
from .chapters import load_stubs
from .options import (REASON_LIMIT, WALL_FACTOR, Options, clean, default_jobs, grader_version,
                      seed_arg)
from .sandbox import SandboxUnavailable, mode_text
from .scheduling import Grader
from .submissions import Submission, collect, printable


def peak_memory_mb() -> float:
  """This process's peak resident memory (the grader's, not its sandboxes'). VmHWM, where
  there is one: `ru_maxrss` keeps the high-water mark of the process that started us."""
  try:
    for line in Path("/proc/self/status").read_text().splitlines():
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) / 1024
  except (OSError, ValueError, IndexError):
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def content_hash(sub: Submission) -> str:
  try:
    return hashlib.sha256(sub.load()).hexdigest()
  except Exception:  # noqa: BLE001 (an unreadable file: parse says why)
    return ""


def by_submission(rows) -> dict[str, list[dict]]:
  out: dict[str, list[dict]] = {}
  for r in rows:
    out.setdefault(r["submission"], []).append(r)
  return out


def main(argv=None) -> int:
  from tqdm import tqdm
  ap = argparse.ArgumentParser(prog="python -m coursekit.grade",
                               description="Grade submitted exercise notebooks.",
                               epilog="Rules and details: book/instructors.md and this module's docstring.")
  ap.add_argument("submissions", type=Path, help="a folder or .zip of .ipynb files")
  ap.add_argument("--out", type=Path, default=Path("grades"),
                  help="folder for grades.csv and grades.html (default: grades/)")
  ap.add_argument("--part", help="grade every submission as exercises/<part>.ipynb "
                  "(default: each notebook's chapter, from its cells and metadata)")
  ap.add_argument("--jobs", type=int, default=default_jobs(),
                  help="sandboxes run at once (default: the number of cores)")
  ap.add_argument("--seed", type=seed_arg, help="seed of the check inputs (default: a random "
                  "one, recorded in the report: pass it again to reproduce a run; never "
                  f"{probes.SHIPPED_SEED}, the learners' own)")
  ap.add_argument("--timeout", type=float, default=60,
                  help="seconds for one exercise of one notebook (default 60)")
  ap.add_argument("--memory", type=int, default=2048,
                  help="memory limit of each sandbox, MiB (default 2048)")
  ap.add_argument("--no-sandbox", action="store_true",
                  help="run notebooks without bubblewrap: ONLY for trusted notebooks "
                  "(the report says so at its top)")
  ap.add_argument("--cluster", metavar="ADDRESS",
                  help="grade on a Dask cluster: a scheduler's address (tcp://head:8786) or "
                  "local:N, N worker processes here (coursekit.cluster)")
  ap.add_argument("--exercises", type=Path, default=EXERCISES,
                  help="folder of the stub notebooks (default: this repo's exercises/)")
  ap.add_argument("--feedback", choices=feedback.LEVELS, default="all",
                  help="feedback pages for the learners, OUT/feedback/<student>/<chapter>.html "
                  "and OUT/feedback.zip: every exercise (all, default), the failed ones "
                  "(failures), or none")
  ap.add_argument("--gradebook", type=Path, help="the SQLite gradebook that keeps every run "
                  "(default: OUT/gradebook.sqlite); 'none' keeps nothing")
  ap.add_argument("--regrade", action="store_true", help="grade every notebook again, even "
                  "one the gradebook holds with the same content, seed and grader")
  args = ap.parse_args(argv)
  warnings.filterwarnings("ignore", module="nbformat")   # old notebooks: no cell ids, ...

  stubs = load_stubs(args.exercises)
  if args.part and args.part not in stubs:
    ap.error(f"no {args.part}.ipynb in {args.exercises}; pick one of {sorted(stubs)}")
  try:
    subs = collect(args.submissions)
  except (OSError, ValueError, zipfile.BadZipFile) as e:
    print(f"error: {printable(e)}", file=sys.stderr)
    return 1
  if not subs:
    print(f"no .ipynb files in {printable(args.submissions)}", file=sys.stderr)
    return 1
  seed = args.seed if args.seed is not None else probes.SHIPPED_SEED + 1 + secrets.randbelow(2**31 - 2)
  opts = Options(timeout=args.timeout, memory_mib=args.memory, part=args.part, seed=seed,
                 sandbox=not args.no_sandbox)
  try:   # before the gradebook: a run that can't grade leaves no output folder
    if args.cluster:   # the only import of Dask: deferred, and down the layers (cluster needs none of this)
      from .cluster import ClusterGrader
      grader = ClusterGrader(stubs, opts, args.cluster, args.exercises,
                             log=lambda text: print(text, file=sys.stderr))
    else:
      grader = Grader(stubs, opts, folder=args.exercises)
  except SandboxUnavailable as e:
    print(f"error: can't grade in a sandbox: {e}", file=sys.stderr)
    return 2
  except (OSError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  book_path = args.gradebook or args.out / "gradebook.sqlite"
  try:
    book = None if str(book_path) == "none" else gradebook.Gradebook(book_path)
  except gradebook.GradebookError as e:
    print(f"error: {printable(e)}", file=sys.stderr)
    grader.close()
    return 1
  version, digests, reused, fresh = grader_version(), {}, [], []
  for sub in subs:   # what the gradebook holds at this seed is not graded again
    label = clean(sub.label, 2 * REASON_LIMIT)
    digests[label] = content_hash(sub)
    old = book and not args.regrade and book.seen(label, digests[label], seed, version)
    reused += old or []
    fresh += [] if old else [sub]
  subs = fresh
  mode = grader.mode if args.cluster else lambda: mode_text(grader.ws.sandbox.mode)
  t0 = time.monotonic()
  bar = tqdm(total=0, unit="check", file=sys.stderr,
             desc=f"grading {len(subs)} notebook{'s' * (len(subs) != 1)}")

  def parsed(p):   # the bar grows as the notebooks are read
    if not p.failure:
      bar.total += len(stubs[p.part].exercises)
      bar.refresh()
  grader.progress = lambda: bar.update(1)

  def record(p, group):   # each submission as soon as it is done: Ctrl-C loses none of them
    if book and group and all(r["status"] != "not graded" for r in group):   # a rerun grades those
      book.record(group, digests.get(group[0]["submission"], ""), seed, version)
  try:
    rows = grader.grade(subs, args.jobs, on_parsed=parsed, on_rows=record)
  except SandboxUnavailable as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  finally:
    bar.close()
    grader.close()
    if book:
      book.close()
  elapsed = time.monotonic() - t0

  return write_results(args, rows, reused, stubs, opts, grader, mode, len(digests), elapsed,
                       book_path)


def write_results(args, rows, reused, stubs, opts, grader, mode, notebooks: int, elapsed: float,
                  book_path) -> int:
  """grades.csv and grades.html, the learners' feedback pages, what the command prints,
  and its exit status (3 where something was not graded)."""
  seed = opts.seed
  rows = report.sort_rows(rows + reused, stubs)
  similar = similarity.groups(grader.signatures)
  meta = {"seed": seed, "sandbox": mode(),
          "limits": f"{opts.timeout:g} s of CPU time ({WALL_FACTOR * opts.timeout:g} s of "
                    f"wall-clock time), {opts.memory_mib} MiB and {opts.pids} processes per "
                    "exercise of each notebook, one exercise of a notebook at a time",
          "unsafe": not opts.sandbox}
  args.out.mkdir(parents=True, exist_ok=True)
  csv_path, html_path = report.write(rows, stubs, args.out, meta, similar)
  pages = feedback.write(rows, stubs, args.out / "feedback", args.feedback)
  print(report.tables(rows, stubs))
  print(report.one_line(rows, notebooks, elapsed, csv_path, html_path))
  if reused:
    print(f"{len(by_submission(reused))} notebooks unchanged since {book_path} graded them at "
          "this seed: not graded again (--regrade forces it)")
  shared = getattr(grader, "shared_runs", 0)
  if shared:
    print(f"{shared} exercise run{'s' * (shared != 1)} the same as another (the same cells "
          "at this seed): each such job ran once")
  if pages:
    print(f"feedback: {len(pages)} pages in {args.out / 'feedback'}, all in "
          f"{args.out / 'feedback.zip'}")
  print(f"seed {seed} ({mode()}); the grader's peak memory {peak_memory_mb():.0f} MB")
  if getattr(grader, "broken", None):   # fail closed: rows that say "not graded", and exit 3
    print(f"error: grading stopped, the rest is not graded: {grader.broken}", file=sys.stderr)
    return 3
  missing = getattr(grader, "count_not_graded", 0)
  if missing:
    print(f"error: {missing} exercise{'s' * (missing != 1)} not graded (the cluster failed, "
          "see their reasons): rerun to grade them", file=sys.stderr)
    return 3
  return 0


if __name__ == "__main__":
  sys.exit(main())
