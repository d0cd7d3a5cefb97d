"""The exercise tooling: stub freshness, nbval on the stub and the solutions, the grader.

Notebook runs are slow (a kernel each), so the module runs each one once in
module-scoped fixtures: one reference build (`coursekit.stubs --check
--solutions`), one nbval run over the stub and the solutions, and one grader
run over a folder of varied submissions.
"""
import copy
import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "exercises" / "part1.ipynb"
EXERCISES = ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6"]

# A plausible mistake per exercise: (text in the solution, replacement).
# Each must fail its check with an AssertionError, not a crash.
MISTAKES = {
    "1.1": ("if val._trace.main is trace.main:", "if val._trace is trace:"),
    "1.2": ("lax.sub(1., lax.mul(y, y))", "lax.add(1., lax.mul(y, y))"),
    "1.3": ("keys = tuple(sorted(x))", "keys = tuple(x)"),
    "1.4": ("perm.insert(dst, src)", "perm = list(range(np.ndim(x))); "
            "perm[src], perm[dst] = perm[dst], perm[src]"),
    "1.5": ("return lax.reduce_sum(x, x_axes), out_bdim", "return lax.reduce_sum(x, axes), x_bdim"),
    "1.6": ("adx.vmap(pushfwd, out_axes=-1)", "adx.vmap(pushfwd, out_axes=0)"),
}


def run(*args, **kw):
  env = dict(os.environ)
  env.pop("PYTEST_ADDOPTS", None)
  return subprocess.run([sys.executable, *args], cwd=kw.pop("cwd", ROOT), env=env,
                        capture_output=True, text=True, timeout=600, **kw)


def with_mistakes(nb, exercises):
  """A copy of the solutions notebook with the MISTAKES of `exercises` made."""
  nb = copy.deepcopy(nb)
  for cell in nb.cells:
    ex = cell.metadata.get("exercise")
    if cell.metadata.get("role") == "solution" and ex in exercises:
      old, new = MISTAKES[ex]
      assert old in cell.source, f"MISTAKES[{ex!r}] no longer matches the solution"
      cell.source = cell.source.replace(old, new)
  return nb


def digest(folder: Path) -> dict:
  return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


# --- The stub and the reference solutions -----------------------------------------------

@pytest.fixture(scope="module")
def build(tmp_path_factory):
  """Rebuild every stub in memory (`--check`) and write the solutions."""
  out = tmp_path_factory.mktemp("solutions")
  proc = run("-m", "coursekit.stubs", "--check", "--solutions", str(out))
  return proc, out


@pytest.fixture(scope="module")
def solutions(build):
  proc, out = build
  assert (out / "part1.ipynb").exists(), proc.stdout + proc.stderr
  return nbformat.read(out / "part1.ipynb", as_version=4)


def test_stub_is_not_stale(build):
  proc, _ = build
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "part1.ipynb: up to date" in proc.stdout


def test_stub_has_no_solutions_and_stored_check_outputs():
  nb = nbformat.read(STUB, as_version=4)
  text = STUB.read_text()
  assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
  roles = {}
  for cell in nb.cells:
    roles.setdefault(cell.metadata.get("role"), []).append(cell)
    if cell.cell_type == "code" and cell.metadata.get("role") != "check":
      assert cell.outputs == [] and cell.execution_count is None
  assert [c.metadata["exercise"] for c in roles["check"]] == EXERCISES
  for cell in roles["check"]:
    assert "# NBVAL_CHECK_OUTPUT" in cell.source
    [out] = cell.outputs
    assert out.text.startswith(f"Exercise {cell.metadata['exercise']} (")
  for cell in roles["solution"]:
    assert f'raise NotImplementedError("Exercise {cell.metadata["exercise"]}: ' in cell.source


@pytest.fixture(scope="module")
def nbval_outcomes(solutions, tmp_path_factory):
  """{(folder, cell number): outcome} of one nbval run over the stub and the solutions."""
  tmp = tmp_path_factory.mktemp("nbval")
  for name, nb in [("stub", nbformat.read(STUB, as_version=4)), ("solutions", solutions)]:
    (tmp / name).mkdir()
    nbformat.write(nb, tmp / name / "part1.ipynb")
  (tmp / "pytest.ini").write_text("[pytest]\n")
  proc = run("-m", "coursekit.nbval_run", "-q", "-c", "pytest.ini", "--rootdir", ".",
             "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=120",
             "--junitxml=junit.xml", "stub", "solutions", cwd=tmp)
  import xml.etree.ElementTree as ET
  outcomes = {}
  for case in ET.parse(tmp / "junit.xml").iter("testcase"):
    folder = Path(case.get("classname").replace(".", "/")).parts[0]
    failed = any(child.tag in ("failure", "error") for child in case)
    outcomes[folder, int(case.get("name").split()[-1])] = "failed" if failed else "passed"
  assert outcomes, proc.stdout + proc.stderr
  return outcomes


def check_cell_numbers(nb) -> dict:
  code = [c for c in nb.cells if c.cell_type == "code"]
  return {c.metadata["exercise"]: i for i, c in enumerate(code) if c.metadata.get("role") == "check"}


def test_nbval_fails_every_check_of_the_stub(nbval_outcomes):
  checks = check_cell_numbers(nbformat.read(STUB, as_version=4))
  assert list(checks) == EXERCISES
  assert {ex: nbval_outcomes["stub", i] for ex, i in checks.items()} == dict.fromkeys(EXERCISES, "failed")
  assert nbval_outcomes["stub", 0] == "passed"   # the setup cell


def test_nbval_passes_the_solutions(nbval_outcomes, solutions):
  cells = [k for k in nbval_outcomes if k[0] == "solutions"]
  assert len(cells) == len([c for c in solutions.cells if c.cell_type == "code"])
  assert all(nbval_outcomes[k] == "passed" for k in cells), nbval_outcomes


# --- The grader --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graded(solutions, tmp_path_factory):
  """Grade a folder of submissions; return (process, {(student, exercise): row}, folder digests)."""
  subs = tmp_path_factory.mktemp("submissions")
  stub = nbformat.read(STUB, as_version=4)
  nbformat.write(solutions, subs / "full.ipynb")
  nbformat.write(stub, subs / "stub.ipynb")
  nbformat.write(with_mistakes(solutions, ["1.4"]), subs / "one_wrong.ipynb")
  nbformat.write(with_mistakes(solutions, EXERCISES), subs / "all_wrong.ipynb")
  # Edited: 1.1's check deleted, 1.2's wrong answer behind a check that just
  # prints the expected line, 1.3's check moved to the top, and 1.5's
  # solution cell broken.
  nb = with_mistakes(solutions, ["1.2"])
  [sol] = [c for c in nb.cells if c.metadata.get("exercise") == "1.5"
           and c.metadata.get("role") == "solution"]
  sol.source = sol.source.replace("### END SOLUTION", "return (\n  ### END SOLUTION")
  checks = {c.metadata["exercise"]: c for c in nb.cells if c.metadata.get("role") == "check"}
  nb.cells.remove(checks["1.1"])
  checks["1.2"].source = f"# NBVAL_CHECK_OUTPUT\nprint({checks['1.2'].outputs[0].text.strip()!r})"
  nb.cells.remove(checks["1.3"])
  nb.cells.insert(0, checks["1.3"])
  nbformat.write(nb, subs / "edited.ipynb")
  (subs / "corrupt.ipynb").write_text('{"cells": [')
  before = digest(subs)
  out = tmp_path_factory.mktemp("grades")
  proc = run("-m", "coursekit.grade", str(subs), "--out", str(out), "--jobs", "2")
  with open(out / "grades.csv", newline="") as f:
    rows = {(r["student"], r["exercise"]): r for r in csv.DictReader(f)}
  return proc, rows, before, digest(subs)


def statuses(rows, student):
  return {ex: rows[student, ex]["status"] for ex in EXERCISES}


def test_grader_runs_and_summarizes(graded):
  proc, rows, *_ = graded
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert len(rows) == 6 * len(EXERCISES)
  lines = proc.stdout.splitlines()
  assert any(line.split()[:1] == ["full"] and line.endswith("6/6") for line in lines), proc.stdout
  assert any(line.startswith("pass rate") for line in lines), proc.stdout
  assert "grading part1" in proc.stderr   # the progress bar


def test_grader_full_marks_for_the_solutions(graded):
  _, rows, *_ = graded
  assert statuses(rows, "full") == dict.fromkeys(EXERCISES, "pass")
  assert all(rows["full", ex]["reason"] == "" for ex in EXERCISES)


def test_grader_zero_for_the_stub(graded):
  _, rows, *_ = graded
  assert statuses(rows, "stub") == dict.fromkeys(EXERCISES, "fail")
  for ex in EXERCISES:
    assert f"NotImplementedError: Exercise {ex}" in rows["stub", ex]["reason"]


def test_grader_partial_marks(graded):
  _, rows, *_ = graded
  assert statuses(rows, "one_wrong") == {**dict.fromkeys(EXERCISES, "pass"), "1.4": "fail"}
  assert rows["one_wrong", "1.4"]["reason"].startswith("check failed: AssertionError: Exercise 1.4")


def test_checks_catch_plausible_mistakes(graded):
  _, rows, *_ = graded
  for ex in EXERCISES:
    row = rows["all_wrong", ex]
    assert row["status"] == "fail", row
    assert row["reason"].startswith(f"check failed: AssertionError: Exercise {ex}"), row


def test_grader_uses_its_own_check_cells(graded):
  _, rows, *_ = graded
  assert statuses(rows, "edited") == {**dict.fromkeys(EXERCISES, "pass"),
                                      "1.2": "fail", "1.5": "fail"}
  assert "AssertionError: Exercise 1.2" in rows["edited", "1.2"]["reason"]
  assert rows["edited", "1.5"]["reason"].startswith("solution cell raised SyntaxError")


def test_grader_survives_a_corrupt_notebook(graded):
  _, rows, *_ = graded
  assert statuses(rows, "corrupt") == dict.fromkeys(EXERCISES, "fail")
  assert all(rows["corrupt", ex]["reason"].startswith("unreadable notebook") for ex in EXERCISES)


def test_grader_does_not_modify_submissions(graded):
  _, _, before, after = graded
  assert before == after


def test_graft_puts_checks_back_in_place(solutions):
  from coursekit.grade import graft
  stub = nbformat.read(STUB, as_version=4)
  nb = copy.deepcopy(solutions)
  nb.cells = [c for c in nb.cells if c.metadata.get("role") != "check"]
  extra = nbformat.v4.new_code_cell("helper = 1")   # a learner's own cell after 1.6
  nb.cells.append(extra)
  grafted = graft(nb, stub)
  assert [c.id for c in grafted.cells] == [c.id for c in stub.cells] + [extra.id]
  for got, want in zip(grafted.cells, stub.cells):
    if want.metadata.get("role") == "check":
      assert got.source == want.source and got.outputs == want.outputs
