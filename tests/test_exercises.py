"""The exercise tooling: stub freshness, nbval on the stubs and the solutions, the grader.

Every chapter's stub (`exercises/<part>.ipynb`, one per `exercises/source/<part>.md`)
is tested both ways: nbval fails every check of the stub and passes the
reference solutions, and the grader gives the solutions full marks, the stub
zero, and fails every exercise of a submission with one plausible mistake per
exercise (`MISTAKES`). Part 1 also gets the grader's harder cases (edited and
corrupt submissions).

Notebook runs are slow (a kernel each), so the module runs each one once in
module-scoped fixtures: one reference build (`coursekit.stubs --check
--solutions`), then, at the same time, one nbval run over every stub and its
solutions and one grader run per part over a folder of submissions.
"""
import copy
import csv
import hashlib
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISE_DIR = ROOT / "exercises"
PARTS = {   # part: its exercises, in order
    "part1": ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6"],
    "part2": ["2.1", "2.2", "2.3", "2.4", "2.5", "2.6"],
    "part3": ["3.1", "3.2", "3.3", "3.4", "3.5"],
    "part4": ["4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7"],
    "primitives": ["P.1", "P.2", "P.3", "P.4", "P.5", "P.6"],
    "jaxpr_language": ["C.1", "C.2", "C.3", "C.4", "C.5", "C.6"],
    "jax_today": ["T.1", "T.2", "T.3", "T.4", "T.5"],
}
STUB = EXERCISE_DIR / "part1.ipynb"   # the grader's harder cases use Part 1
EXERCISES = PARTS["part1"]

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
    # Part 2
    "2.1": ("return ShapedArray(shape, x.dtype, x.weak_type)", "return ShapedArray(shape, x.dtype)"),
    "2.2": ("if x not in env:", "if x is None:"),
    "2.3": ("outs = core.bind(eqn.primitive, *vals_in, **eqn.params)",
            "outs = [core.impl_rules[eqn.primitive](*vals_in, **eqn.params)]"),
    "2.4": ("tracer = self.const_tracers.get(id(val))", "tracer = None"),
    "2.5": ("s = letters[n % 26] + s", "s = letters[n % 26 - 1] + s"),
    "2.6": ("Lit(1.)]", "Lit(np.float64(1.))]"),
    # Part 3
    "3.1": ("y = ctx.convert(y, y_aval, out.dtype)", "y = y"),
    "3.2": ("init = -np.inf", "init = np.finfo(dtype).min"),
    "3.3": ("a.shape[:d] + (axis_size,) + a.shape[d:]", "(axis_size,) + a.shape"),
    "3.4": ("avals = tuple(core.raise_to_shaped(core.get_aval(x)) for x in leaves)",
            "avals = tuple((np.shape(x), np.result_type(x)) for x in leaves)"),
    "3.5": ("runtime.device_put(np.asarray(x, aval.dtype), platform)",
            "runtime.device_put(np.asarray(x), platform)"),
    # Part 4
    "4.1": ("[lax.reduce_sum(ct, axes)]", "[lax.reduce_sum(ct, None)]"),
    "4.2": ("return [unbroadcast(lax.mul(ct, y), x), None]", "return [lax.mul(ct, y), None]"),
    "4.3": ("ConstRecipe(tracer.pval.const))", "ConstRecipe(tracer))"),
    "4.4": ("if type(x) is Var and not unknown[x] and x not in residuals:",
            "if type(x) is Var and not unknown[x]:"),
    "4.5": ("ct_env[x] = add_tangents(ct_env[x], ct) if x in ct_env else ct", "ct_env[x] = ct"),
    "4.6": ("return grads[0] if isinstance(argnums, int) else tuple(grads)", "return tuple(grads)"),
    "4.7": ("  env = dict(zip(jaxpr.invars, args))   # every primal value, computed once",
            "  return naive_grad(jaxpr, args)"),
    # Defining a new primitive
    "P.1": ("return m + np.log1p(np.exp(-np.abs(np.subtract(x, y))))",
            "return np.log(np.exp(x) + np.exp(y))"),
    "P.2": ("if x.shape != y.shape:", "if x.ndim != y.ndim:"),
    "P.3": ("stablehlo.log_plus_one {e}", "stablehlo.log {e}"),
    "P.4": ("wy = lax.exp(lax.sub(y, out))", "wy = lax.exp(lax.sub(x, out))"),
    "P.5": ("ct_yt = lax.mul(wy, ct)", "ct_yt = lax.mul(wx, ct)"),
    "P.6": ("return logaddexp(x, y), 0", "return logaddexp(x, y), dims_in[0]"),
    # The jaxpr language: control flow
    "C.1": ("return outs[:n], outs[n:]", "return outs[:n], outs[:n]"),
    "C.2": ("outs.append(select_n(which, *cases))", "outs.append(select_n(which, *cases[::-1]))"),
    "C.3": ("return lax.less(i, hi)", "return lax.less_equal(i, hi)"),
    "C.4": ("[ShapedArray((length, *y.shape), y.dtype)", "[ShapedArray(y.shape, y.dtype)"),
    "C.5": ("return 2 * int(", "return 1 * int("),
    "C.6": ("c_answer = [4.5, 4., 2.]", "c_answer = [2., 4., 4.5]"),
    # JAX today
    "T.1": ("if isinstance(x, sl.JVPTracer) and x._trace is trace:",
            "if isinstance(x, sl.JVPTracer):"),
    "T.2": ("with sl.set_current_trace(self.parent):", "with sl.set_current_trace(sl.eval_trace):"),
    "T.3": ("with sl.set_current_trace(trace):", "with sl.set_current_trace(sl.eval_trace):"),
    "T.4": ("return tuple(instantiate_zeros(c) for c in ad.backward_pass(jaxpr, args, [ct]))",
            "return tuple(ad.backward_pass(jaxpr, args, [ct]))"),
    "T.5": ("names.insert(0, type(trace).__name__)", "names.append(type(trace).__name__)"),
}


def stub_path(part: str) -> Path:
  return EXERCISE_DIR / f"{part}.ipynb"


def test_every_source_is_tested():
  sources = sorted(p.stem for p in (EXERCISE_DIR / "source").iterdir()
                   if p.suffix in (".md", ".ipynb") and not p.name.startswith("."))
  assert sources == sorted(PARTS)
  assert sorted(p.stem for p in EXERCISE_DIR.glob("*.ipynb")) == sorted(PARTS)
  assert set(MISTAKES) == {ex for exs in PARTS.values() for ex in exs}


def _env():
  env = dict(os.environ)
  env.pop("PYTEST_ADDOPTS", None)
  return env


def run(*args, **kw):
  return subprocess.run([sys.executable, *args], cwd=kw.pop("cwd", ROOT), env=_env(),
                        capture_output=True, text=True, timeout=600, **kw)


def start(*args, cwd=ROOT):
  """Start `python *args` in the background; `finish` waits for it."""
  return subprocess.Popen([sys.executable, *args], cwd=cwd, env=_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc) -> subprocess.CompletedProcess:
  out, err = proc.communicate(timeout=600)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


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
  """Rebuild every stub in memory (`--check`) and write the solutions, the
  parts at the same time: {part: (process, solutions folder)}."""
  out = tmp_path_factory.mktemp("solutions")
  procs = {part: start("-m", "coursekit.stubs", "--check", "--solutions", str(out), part)
           for part in PARTS}
  return {part: (finish(proc), out) for part, proc in procs.items()}


@pytest.fixture(scope="module")
def all_solutions(build):
  """{part: the executed reference notebook}."""
  sols = {}
  for part, (proc, out) in build.items():
    assert (out / f"{part}.ipynb").exists(), proc.stdout + proc.stderr
    sols[part] = nbformat.read(out / f"{part}.ipynb", as_version=4)
  return sols


@pytest.fixture(scope="module")
def solutions(all_solutions):
  return all_solutions["part1"]


@pytest.mark.parametrize("part", PARTS)
def test_stub_is_not_stale(build, part):
  proc, _ = build[part]
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert f"{part}.ipynb: up to date" in proc.stdout


@pytest.mark.parametrize("part", PARTS)
def test_stub_has_no_solutions_and_stored_check_outputs(part):
  stub = stub_path(part)
  nb = nbformat.read(stub, as_version=4)
  text = stub.read_text()
  assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
  roles = {}
  for cell in nb.cells:
    roles.setdefault(cell.metadata.get("role"), []).append(cell)
    if cell.cell_type == "code" and cell.metadata.get("role") != "check":
      assert cell.outputs == [] and cell.execution_count is None
  assert [c.metadata["exercise"] for c in roles["check"]] == PARTS[part]
  for cell in roles["check"]:
    assert "# NBVAL_CHECK_OUTPUT" in cell.source
    [out] = cell.outputs
    assert out.text.startswith(f"Exercise {cell.metadata['exercise']} (")
  for cell in roles["solution"]:
    assert f'raise NotImplementedError("Exercise {cell.metadata["exercise"]}: ' in cell.source


# --- The notebook runs: nbval and the grader, all at once ----------------------------------

def grade_folder(tmp_path_factory, part, submissions: dict):
  """Write {student: notebook} (or str, written as is) into a new folder; return it."""
  subs = tmp_path_factory.mktemp(f"submissions-{part}")
  for student, nb in submissions.items():
    if isinstance(nb, str):
      (subs / f"{student}.ipynb").write_text(nb)
    else:
      nbformat.write(nb, subs / f"{student}.ipynb")
  return subs


def part1_submissions(solutions):
  stub = nbformat.read(STUB, as_version=4)
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
  return {"full": solutions, "stub": stub, "one_wrong": with_mistakes(solutions, ["1.4"]),
          "all_wrong": with_mistakes(solutions, EXERCISES), "edited": nb,
          "corrupt": '{"cells": ['}


@pytest.fixture(scope="module")
def runs(all_solutions, tmp_path_factory):
  """Start one nbval run over every stub and its solutions, and one grader
  run per part, at once; wait for all of them.

  Returns {"nbval": {(folder, part, cell number): outcome},
           "graded": {part: (process, {(student, exercise): row}, digests before, after)}}.
  """
  tmp = tmp_path_factory.mktemp("nbval")
  for folder in ("stub", "solutions"):
    (tmp / folder).mkdir()
    for part in PARTS:
      nb = (nbformat.read(stub_path(part), as_version=4) if folder == "stub"
            else all_solutions[part])
      nbformat.write(nb, tmp / folder / f"{part}.ipynb")
  (tmp / "pytest.ini").write_text("[pytest]\n")
  nbval = start("-m", "coursekit.nbval_run", "-q", "-c", "pytest.ini", "--rootdir", ".",
                "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=120",
                "--junitxml=junit.xml", "stub", "solutions", cwd=tmp)

  graders = {}
  for part, exercises in PARTS.items():
    sols = all_solutions[part]
    subs = (part1_submissions(sols) if part == "part1" else
            {"full": sols, "stub": nbformat.read(stub_path(part), as_version=4),
             "all_wrong": with_mistakes(sols, exercises)})
    folder = grade_folder(tmp_path_factory, part, subs)
    out = tmp_path_factory.mktemp(f"grades-{part}")
    proc = start("-m", "coursekit.grade", str(folder), "--out", str(out), "--part", part,
                 "--jobs", "2")
    graders[part] = (proc, folder, out, digest(folder))

  proc = finish(nbval)
  outcomes = {}
  for case in ET.parse(tmp / "junit.xml").iter("testcase"):
    folder, part = Path(case.get("classname").replace(".", "/")).parts[:2]
    failed = any(child.tag in ("failure", "error") for child in case)
    outcomes[folder, part, int(case.get("name").split()[-1])] = "failed" if failed else "passed"
  assert outcomes, proc.stdout + proc.stderr

  graded = {}
  for part, (proc, folder, out, before) in graders.items():
    proc = finish(proc)
    assert (out / "grades.csv").exists(), proc.stdout + proc.stderr
    with open(out / "grades.csv", newline="") as f:
      rows = {(r["student"], r["exercise"]): r for r in csv.DictReader(f)}
    graded[part] = (proc, rows, before, digest(folder))
  return {"nbval": outcomes, "graded": graded}


@pytest.fixture(scope="module")
def nbval_outcomes(runs):
  return runs["nbval"]


def check_cell_numbers(nb) -> dict:
  code = [c for c in nb.cells if c.cell_type == "code"]
  return {c.metadata["exercise"]: i for i, c in enumerate(code) if c.metadata.get("role") == "check"}


@pytest.mark.parametrize("part", PARTS)
def test_nbval_fails_every_check_of_the_stub(nbval_outcomes, part):
  exercises = PARTS[part]
  checks = check_cell_numbers(nbformat.read(stub_path(part), as_version=4))
  assert list(checks) == exercises
  assert ({ex: nbval_outcomes["stub", part, i] for ex, i in checks.items()}
          == dict.fromkeys(exercises, "failed"))
  assert nbval_outcomes["stub", part, 0] == "passed"   # the setup cell


@pytest.mark.parametrize("part", PARTS)
def test_nbval_passes_the_solutions(nbval_outcomes, all_solutions, part):
  cells = [k for k in nbval_outcomes if k[:2] == ("solutions", part)]
  assert len(cells) == len([c for c in all_solutions[part].cells if c.cell_type == "code"])
  assert all(nbval_outcomes[k] == "passed" for k in cells), nbval_outcomes


# --- The grader --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def all_graded(runs):
  return runs["graded"]


@pytest.fixture(scope="module")
def graded(all_graded):
  """Part 1's run: (process, {(student, exercise): row}, folder digests before, after)."""
  return all_graded["part1"]


def statuses(rows, student, exercises=EXERCISES):
  return {ex: rows[student, ex]["status"] for ex in exercises}


@pytest.mark.parametrize("part", PARTS)
def test_grader_runs_and_summarizes(all_graded, part):
  proc, rows, *_ = all_graded[part]
  n = len(PARTS[part])
  students = {s for s, _ in rows}
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert len(rows) == len(students) * n
  lines = proc.stdout.splitlines()
  assert any(line.split()[:1] == ["full"] and line.endswith(f"{n}/{n}") for line in lines), proc.stdout
  assert any(line.split()[:1] == ["stub"] and line.endswith(f"0/{n}") for line in lines), proc.stdout
  assert any(line.startswith("pass rate") for line in lines), proc.stdout
  assert f"grading {part}" in proc.stderr   # the progress bar


@pytest.mark.parametrize("part", PARTS)
def test_grader_full_marks_for_the_solutions(all_graded, part):
  _, rows, *_ = all_graded[part]
  exercises = PARTS[part]
  assert statuses(rows, "full", exercises) == dict.fromkeys(exercises, "pass")
  assert all(rows["full", ex]["reason"] == "" for ex in exercises)


@pytest.mark.parametrize("part", PARTS)
def test_grader_zero_for_the_stub(all_graded, part):
  _, rows, *_ = all_graded[part]
  exercises = PARTS[part]
  assert statuses(rows, "stub", exercises) == dict.fromkeys(exercises, "fail")
  for ex in exercises:
    assert f"NotImplementedError: Exercise {ex}" in rows["stub", ex]["reason"]


@pytest.mark.parametrize("part", PARTS)
def test_checks_catch_plausible_mistakes(all_graded, part):
  _, rows, *_ = all_graded[part]
  for ex in PARTS[part]:
    row = rows["all_wrong", ex]
    assert row["status"] == "fail", row
    assert row["reason"].startswith(f"check failed: AssertionError: Exercise {ex}"), row


def test_grader_partial_marks(graded):
  _, rows, *_ = graded
  assert statuses(rows, "one_wrong") == {**dict.fromkeys(EXERCISES, "pass"), "1.4": "fail"}
  assert rows["one_wrong", "1.4"]["reason"].startswith("check failed: AssertionError: Exercise 1.4")


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


@pytest.mark.parametrize("part", PARTS)
def test_grader_does_not_modify_submissions(all_graded, part):
  _, _, before, after = all_graded[part]
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
