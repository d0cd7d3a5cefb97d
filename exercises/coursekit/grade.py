"""Grade a folder of submitted notebooks.

    python -m coursekit.grade SUBMISSIONS_DIR [--out DIR] [--part NAME]
                              [--timeout SECONDS] [--jobs N]

Each `SUBMISSIONS_DIR/<student>.ipynb` is graded against the committed stub
`exercises/<part>.ipynb`:

1. a copy of the submission gets the canonical check cells: the learner's
   check cells (matched by id or by `role: check` metadata) are dropped, and
   the stub's are put back where the stub has them (before the first stub cell
   that follows them, else after the last one before them, else at the end);
2. nbval runs the copy in a fresh kernel (`--nbval-lax`: cells must not raise,
   and check cells must print the stub's output), recording each cell's outcome;
3. an exercise passes when its check cell passes. Otherwise the reason names
   the first error: the exercise's own solution cell, or the check's.

The submissions are only read. Results go to `DIR/grades.csv` (student,
exercise, status, reason), and a summary table is printed. A submission that
can't be read or run fails every exercise, with the reason, and the batch
goes on.
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from tqdm import tqdm

from .stubs import EXERCISES

FIELDS = ("student", "part", "exercise", "status", "reason")


# --- Grafting the canonical check cells ---------------------------------------------------

def is_check(cell) -> bool:
  return cell.get("metadata", {}).get("role") == "check"


def graft(submission, canonical):
  """A copy of `submission` whose check cells are exactly the canonical ones."""
  nb = copy.deepcopy(submission)
  canon_checks = [c for c in canonical.cells if is_check(c)]
  check_ids = {c.id for c in canon_checks}
  cells = [c for c in nb.cells if not (is_check(c) or c.get("id") in check_ids)]
  canon_ids = [c.id for c in canonical.cells]
  last = -1   # where the previous check went: keep the checks in canonical order
  for check in canon_checks:
    i = canon_ids.index(check.id)
    ids = [c.get("id") for c in cells]
    after = [ids.index(cid) for cid in canon_ids[i + 1:] if cid in ids and cid not in check_ids]
    before = [ids.index(cid) + 1 for cid in reversed(canon_ids[:i]) if cid in ids]
    pos = after[0] if after else before[0] if before else len(cells)
    pos = max(pos, last + 1)
    cells.insert(pos, copy.deepcopy(check))
    last = pos
  # Cells from an older notebook (format 4.4) have no ids: give them some.
  taken = {c.get("id") for c in cells}
  for i, cell in enumerate(cells):
    if not cell.get("id"):
      cell["id"] = next(f"cell-{i}-{n}" for n in range(len(cells) + 1)
                        if f"cell-{i}-{n}" not in taken)
  nb.cells, nb.nbformat, nb.nbformat_minor = cells, 4, 5
  nb.metadata["kernelspec"] = canonical.metadata["kernelspec"]
  return nb


# --- Running nbval ---------------------------------------------------------------------------

def run_nbval(nb_path: Path, timeout: float) -> tuple[dict | None, str]:
  """({code cell number: result}, pytest's output) for one notebook, in its folder."""
  folder = nb_path.parent
  report = folder / "report.json"
  ini = folder / "pytest.ini"
  ini.write_text("[pytest]\n")   # keep the repo's pytest settings out of this run
  env = dict(os.environ, COURSEKIT_REPORT=str(report))
  env.pop("PYTEST_ADDOPTS", None)
  cmd = [sys.executable, "-m", "coursekit.nbval_run", "-q", "-c", str(ini),
         "--rootdir", str(folder), "--nbval-lax", "--nbval-current-env",
         f"--nbval-cell-timeout={timeout}", nb_path.name]
  proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
  output = proc.stdout + proc.stderr
  if not report.exists():
    return None, output
  return {int(k): v for k, v in json.loads(report.read_text()).items()}, output


def one_line(text: str, limit: int = 200) -> str:
  text = " ".join(str(text).split())
  return text if len(text) <= limit else text[:limit - 3] + "..."


def grade_notebook(path: Path, canonical, timeout: float) -> list[dict]:
  """The rows of `grades.csv` for one submission."""
  student = path.stem
  exercises = [c.metadata["exercise"] for c in canonical.cells if is_check(c)]

  def all_fail(reason):
    return [dict(student=student, exercise=ex, status="fail", reason=one_line(reason))
            for ex in exercises]

  try:
    submission = nbformat.read(path, as_version=4)
    if not isinstance(submission.get("cells"), list):
      raise ValueError("no list of cells")
    nb = graft(submission, canonical)
  except Exception as e:  # noqa: BLE001 (anything a broken file may raise)
    return all_fail(f"unreadable notebook: {type(e).__name__}: {e}")

  with tempfile.TemporaryDirectory(prefix="coursekit-grade-") as tmp:
    nb_path = Path(tmp) / "submission.ipynb"
    try:
      nbformat.write(nb, nb_path)
    except Exception as e:  # noqa: BLE001
      return all_fail(f"invalid notebook: {type(e).__name__}: {e}")
    results, output = run_nbval(nb_path, timeout)
  if results is None:
    tail = output.strip().splitlines()[-1:] or ["no output"]
    return all_fail(f"the notebook could not be run: {tail[0]}")

  # Code cell number -> (exercise, role), as nbval numbers the code cells.
  code_cells = [c for c in nb.cells if c.cell_type == "code"]
  rows = []
  for ex in exercises:
    check_num = next(i for i, c in enumerate(code_cells)
                     if is_check(c) and c.metadata.get("exercise") == ex)
    result = results.get(check_num)
    if result is None:
      status, reason = "fail", "the check cell did not run"
    elif result["outcome"] == "passed":
      status, reason = "pass", ""
    else:
      status, reason = "fail", failure_reason(ex, result, results, code_cells)
    rows.append(dict(student=student, exercise=ex, status=status, reason=one_line(reason)))
  return rows


def failure_reason(ex, result, results, code_cells) -> str:
  for i, cell in enumerate(code_cells):   # the exercise's own cells first
    r = results.get(i)
    if (cell.metadata.get("exercise") == ex and cell.metadata.get("role") == "solution"
        and r and r["outcome"] != "passed"):
      return f"solution cell raised {r['error'] or r['message']}"
  if (result["error"] or "").startswith("NotImplementedError"):
    return f"not done yet ({result['error']})"
  if result["error"]:
    return f"check failed: {result['error']}"
  if result["message"].startswith("Cell outputs differ"):
    return "check output differs from the expected output"
  return f"check failed: {result['message'] or result['outcome']}"


# --- Reporting ----------------------------------------------------------------------------------

def summary(rows: list[dict], exercises: list[str]) -> str:
  students = list(dict.fromkeys(r["student"] for r in rows))
  status = {(r["student"], r["exercise"]): r["status"] for r in rows}
  width = max([len("student")] + [len(s) for s in students])
  cols = [f"{ex:>5}" for ex in exercises]
  lines = [f"{'student':<{width}}  {' '.join(cols)}  score"]
  for s in students:
    marks = [f"{'pass' if status.get((s, ex)) == 'pass' else 'FAIL':>5}" for ex in exercises]
    score = sum(status.get((s, ex)) == "pass" for ex in exercises)
    lines.append(f"{s:<{width}}  {' '.join(marks)}  {score}/{len(exercises)}")
  rates = []
  for ex in exercises:
    n = sum(status.get((s, ex)) == "pass" for s in students)
    rates.append(f"{100 * n // max(len(students), 1):>4}%")
  lines.append(f"{'pass rate':<{width}}  {' '.join(rates)}")
  return "\n".join(lines)


def part_of(path: Path) -> str | None:
  """The part a submission answers, from the stub's metadata it carries."""
  try:
    with open(path) as f:
      return json.load(f)["metadata"]["coursekit"]["part"]
  except Exception:  # noqa: BLE001 (unreadable or foreign notebooks: unknown)
    return None


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m coursekit.grade",
                               description="Grade a folder of submitted notebooks.")
  ap.add_argument("submissions", type=Path, help="folder of <student>.ipynb files")
  ap.add_argument("--out", type=Path, default=Path("."), help="folder for grades.csv (default: .)")
  ap.add_argument("--part", help="grade every submission against exercises/<part>.ipynb "
                  "(default: each notebook's own part, from its metadata)")
  ap.add_argument("--timeout", type=float, default=120, help="seconds per cell (default 120)")
  ap.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
  args = ap.parse_args(argv)

  stubs = {p.stem: p for p in sorted(EXERCISES.glob("*.ipynb"))}
  if args.part and args.part not in stubs:
    ap.error(f"no exercises/{args.part}.ipynb; pick one of {sorted(stubs)}")
  paths = sorted(args.submissions.glob("*.ipynb"))
  if not paths:
    print(f"no .ipynb files in {args.submissions}", file=sys.stderr)
    return 1

  # Which part each submission answers: --part, else the notebook's own metadata.
  groups: dict = {}
  for path in paths:
    groups.setdefault(args.part or part_of(path), []).append(path)
  rows, tables = [], []
  for part, group in groups.items():
    if part not in stubs:
      for path in group:
        rows.append(dict(student=path.stem, part=part or "?", exercise="*", status="fail",
                         reason=f"can't tell which part this is ({part or 'no coursekit.part metadata'}); "
                                f"grade it with --part, one of {sorted(stubs)}"))
      continue
    canonical = nbformat.read(stubs[part], as_version=4)
    exercises = [c.metadata["exercise"] for c in canonical.cells if is_check(c)]
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
      futures = [pool.submit(grade_notebook, p, canonical, args.timeout) for p in group]
      part_rows = []
      for f in tqdm(futures, desc=f"grading {part}", unit="notebook", file=sys.stderr):
        part_rows.extend(dict(r, part=part) for r in f.result())
    rows.extend(part_rows)
    tables.append(f"{part}:\n{summary(part_rows, exercises)}")

  args.out.mkdir(parents=True, exist_ok=True)
  out = args.out / "grades.csv"
  with open(out, "w", newline="") as f:
    writer = csv.DictWriter(f, FIELDS)
    writer.writeheader()
    writer.writerows(rows)
  print("\n\n".join(tables))
  print(f"wrote {out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
