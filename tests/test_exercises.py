"""The exercise tooling: stub freshness, and every chapter's exercises both ways.

Every chapter's stub (`exercises/<part>.ipynb`, one per `exercises/source/<part>.md`)
is run both ways over the same notebooks: the stub, the reference solutions,
and one notebook per mistake number k, with the k-th plausible mistake of each
exercise that has one (`MISTAKES`). nbval (the instructors' quick contract)
and the grader (sandboxed, at another seed) must agree, exercise by exercise:
the stub fails everything, the solutions pass everything, a mistake notebook
fails exactly the exercises it has a mistake in. The grader's abuse cases are
in test_grade.py.

The reference build runs with XLA's CPU code limited to SSE4.2
(`--xla_cpu_max_isa`), so that its transcendental functions round differently
in the last bits than the machine that wrote the committed records: they must
still be up to date, since records are compared with tolerances.

One verdict: for every exercise whose answer the library has a function for
(`tests/fixtures/delegations.py`), notebooks that delegate to it (by import,
alias, closure, getattr, functools.partial: one of them per exercise, in turn,
each way met by many exercises across the course) fail in their check cells and
under the grader, both saying which library function was called and that the
exercise asks you to write it. (That no public function or rule of the library
passes any exercise as its answer is test_candidates.py.)

Notebook runs are slow, so the module runs each one once in module-scoped
fixtures: one reference build (`coursekit.stubs --check --solutions`), then,
at the same time, one nbval run over every notebook, one grader run per part,
and one run of the delegation notebooks' check cells.
"""
import copy
import csv
import json
import hashlib
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from coursekit.grader import sandbox

ROOT = Path(__file__).resolve().parents[1]
EXERCISE_DIR = ROOT / "exercises"
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import delegations  # noqa: E402


def _exercises(stub: Path) -> list:
  nb = json.loads(stub.read_text())
  return [c["metadata"]["exercise"] for c in nb["cells"] if c["metadata"].get("role") == "check"]


# part: its exercises, in order (from the committed stubs; a stale stub fails below)
PARTS = {p.stem: _exercises(p) for p in sorted(EXERCISE_DIR.glob("*.ipynb"))}

# Plausible mistakes per exercise, one JSON file per chapter:
# {exercise: [[text in the solution, replacement], ...]}. Each must fail its
# check (in the notebook and under the grader), never crash the tooling.
MISTAKES = {ex: pairs for path in sorted((ROOT / "tests" / "fixtures" / "mistakes").glob("*.json"))
            for ex, pairs in json.loads(path.read_text()).items()}


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


def start(*args, cwd=ROOT, env=None):
  """Start `python *args` in the background; `finish` waits for it."""
  return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env or _env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# XLA's CPU code without AVX: its exp, tanh, log1p round differently in the last bits.
OTHER_CPU = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "")
                                        + " --xla_cpu_max_isa=SSE4_2").strip())
OTHER_CPU.pop("PYTEST_ADDOPTS", None)


def finish(proc) -> subprocess.CompletedProcess:
  out, err = proc.communicate(timeout=1500)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def with_mistakes(nb, exercises, which=0):
  """A copy of the solutions notebook with mistake number `which` of each of
  `exercises` made (exercises with fewer mistakes are left right)."""
  nb = copy.deepcopy(nb)
  for cell in nb.cells:
    ex = cell.metadata.get("exercise")
    if cell.metadata.get("role") == "solution" and ex in exercises and which < len(MISTAKES[ex]):
      old, new = MISTAKES[ex][which]
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
  procs = {part: start("-m", "coursekit.stubs", "--check", "--solutions", str(out), part,
                       env=OTHER_CPU)
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
  assert f"expected/{part}.json: up to date" in proc.stdout


@pytest.mark.parametrize("part", PARTS)
def test_every_probe_draws_seeded_inputs(build, part):
  """The build runs each probe at two seeds and refuses one whose records don't change:
  its seed-0 records, which ship with the stub, would answer it at any seed."""
  proc, _ = build[part]
  assert "are the same at seeds" not in proc.stdout + proc.stderr
  assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_probe_without_seeded_inputs_is_refused(tmp_path):
  from coursekit.learner import checks, probe
  spec = probe.Spec("9.9", lambda p, f: p.value("f(2)", f(2.)), ("f",), {})
  records = probe.run(spec, {"f": abs}, seed=0)
  with pytest.raises(RuntimeError, match="the same at seeds 0 to 3"):
    checks._record("part9", "9.9", spec, {"f": abs}, records, tmp_path / "part9.json")
  seeded = probe.Spec("9.9", lambda p, f: p.value("f(x)", f(p.rng.normal())), ("f",), {})
  records = probe.run(seeded, {"f": abs}, seed=0)
  checks._record("part9", "9.9", seeded, {"f": abs}, records, tmp_path / "part9.json")
  assert json.loads((tmp_path / "part9.json").read_text())["9.9"] == records
  # A record that is the same at every seed ships withheld: it would answer its case anywhere.
  mixed = probe.Spec("9.9", lambda p, f: (p.value("f(2)", f(2.)), p.value("f(x)", f(p.rng.normal()))),
                     ("f",), {})
  records = probe.run(mixed, {"f": abs}, seed=0)
  checks._record("part9", "9.9", mixed, {"f": abs}, records, tmp_path / "part9.json")
  shipped = json.loads((tmp_path / "part9.json").read_text())["9.9"]
  assert [r["value"].get("k") for r in shipped] == ["withheld", "py"]


def test_records_compare_with_tolerances_not_bytes():
  from coursekit.learner.stubs import same_records
  rec = lambda v, dtype="float64": {"9.9": [{"label": "y", "rtol": 1e-7, "atol": 1e-9,
                                             "dtype": True, "value": {
      "k": "array", "dtype": dtype, "shape": [1], "data": [v]}}]}
  assert same_records(json.dumps(rec(-0.09291139646141891)), json.dumps(rec(-0.092911396461419)))
  assert same_records(json.dumps(rec(1.0000001, "float32")), json.dumps(rec(1.0, "float32")))
  assert not same_records(json.dumps(rec(1.001)), json.dumps(rec(1.0)))
  assert not same_records(json.dumps(rec(1.0)), json.dumps({"9.8": rec(1.0)["9.9"]}))


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
    assert out.text.startswith(f"Exercise {cell.metadata['exercise']}: all ")
    assert cell.source.strip().endswith(f'checks.check("{cell.metadata["exercise"]}", globals())')
  for cell in roles["solution"]:
    assert f'raise NotImplementedError("Exercise {cell.metadata["exercise"]}: ' in cell.source


# --- The notebook runs: nbval and the grader, all at once ----------------------------------

SEED = 5
# Without bwrap (and unless CI requires it), the grader runs unsandboxed here: these
# tests are about verdicts; tests/test_grade.py is about the sandbox.
UNSANDBOXED = [] if (sandbox.unavailable() is None
                     or os.environ.get("AUTODIDAX_REQUIRE_SANDBOX") == "1") else ["--no-sandbox"]


def notebooks(part, solutions) -> dict:
  """{name: notebook} run both ways for `part`: the stub, the solutions, the mistakes."""
  exercises = PARTS[part]
  nbs = {"stub": nbformat.read(stub_path(part), as_version=4), "solutions": solutions}
  for k in range(max(len(MISTAKES.get(ex, [])) for ex in exercises)):
    nbs[f"mistakes-{k}"] = with_mistakes(solutions, exercises, k)
  return nbs


def delegating(part, solutions) -> dict:
  """{name: notebook}: the solutions, with every answer the library has a function for
  delegated to it, the ways in turn (delegations.mixed)."""
  return {"delegate-mixed": delegations.notebook(solutions, part, "mixed")}


# Exercises whose answers the library has no function for (nothing to delegate to): the
# primitive that the chapter defines, a jaxpr built by hand, a count, a backward scan built
# from the library's scan, a chain of traces, a jaxpr read by hand, and functions that use
# custom_jvp/custom_vjp (D.4–D.6), checkpoints on a memory budget and a count of barriers
# (R.4, R.5), a ring of ppermutes, layouts, and a rule on specs (M.3–M.5), and the lines
# that callbacks print under vmap and scan, and a Ref program written as a scan (S.3, S.4),
# and a kernel's BlockSpecs, the kernel itself, a masked kernel and its runs by hand (K.1,
# K.2, K.4, K.5).
NOTHING_TO_DELEGATE = {"2.6", "4.7", "4.9", "T.5", "C.6", "P.1", "P.2", "P.3", "P.4", "P.5", "P.6",
                       "D.4", "D.5", "D.6", "R.4", "R.5", "M.3", "M.4", "M.5",
                       "M.7", "S.3", "S.4", "K.1", "K.2", "K.4", "K.5"}


def expected(part, name) -> dict:
  """{exercise: "passed" | "failed"} that both ways must give."""
  exercises = PARTS[part]
  if name.startswith("delegate-"):
    return {ex: "passed" if ex in NOTHING_TO_DELEGATE else "failed" for ex in exercises}
  if name == "stub":
    return dict.fromkeys(exercises, "failed")
  if name == "solutions":
    return dict.fromkeys(exercises, "passed")
  k = int(name.split("-")[1])
  return {ex: "failed" if k < len(MISTAKES.get(ex, [])) else "passed" for ex in exercises}


# Every part's grader runs at once, beside nbval, on as few as 2 busy cores: a sandbox
# may wait far longer than it computes, so the time limit has a wide margin (the
# verdicts here are about answers, never about how busy the machine is).
GRADE_TIMEOUT = 900


@pytest.fixture(scope="module")
def runs(all_solutions, tmp_path_factory):
  """Every part's notebooks, written once, run by nbval and by the grader at once.

  Returns {"nbval": {(part, name): {exercise: outcome}},
           "graded": {part: (process, {(name, exercise): row}, digest before, after)}}."""
  root = tmp_path_factory.mktemp("both-ways")
  (root / "pytest.ini").write_text("[pytest]\n")
  folders, plain, delegated = {}, [], []
  for part in PARTS:
    folders[part] = root / part
    folders[part].mkdir()
    for name, nb in notebooks(part, all_solutions[part]).items():
      nbformat.write(nb, folders[part] / f"{name}.ipynb")
      plain.append(f"{part}/{name}.ipynb")
    for name, nb in delegating(part, all_solutions[part]).items():
      nbformat.write(nb, folders[part] / f"{name}.ipynb")
      delegated.append(str(folders[part] / f"{name}.ipynb"))
  nbval = start("-m", "coursekit.learner.nbval_run", "-q", "-c", "pytest.ini", "--rootdir", ".",
                "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=600",
                "--junitxml=junit.xml", *plain, cwd=root)
  checks = start(str(ROOT / "tests" / "fixtures" / "delegations.py"), *delegated)
  graders = {}
  for part in PARTS:
    out = tmp_path_factory.mktemp(f"grades-{part}")
    before = digest(folders[part])
    graders[part] = (start("-m", "coursekit.grade", str(folders[part]), "--out", str(out),
                           "--part", part, "--jobs", "2", "--seed", str(SEED),
                           "--timeout", str(GRADE_TIMEOUT), *UNSANDBOXED),
                     out, before)

  proc = finish(nbval)
  cells = {}
  for case in ET.parse(root / "junit.xml").iter("testcase"):
    part, name = case.get("classname").split(".")[:2]
    failed = any(child.tag in ("failure", "error") for child in case)
    cells[part, name, int(case.get("name").split()[-1])] = "failed" if failed else "passed"
  assert cells, proc.stdout + proc.stderr
  outcomes = {}
  for part in PARTS:
    numbers = check_cell_numbers(nbformat.read(stub_path(part), as_version=4))
    for name in notebooks(part, all_solutions[part]):
      outcomes[part, name] = {ex: cells[part, name, i] for ex, i in numbers.items()}

  graded = {}
  for part, (proc, out, before) in graders.items():
    proc = finish(proc)
    assert (out / "grades.csv").exists(), proc.stdout + proc.stderr
    with open(out / "grades.csv", newline="") as f:
      rows = {(r["submission"].removesuffix(".ipynb"), r["exercise"]): r
              for r in csv.DictReader(f)}
    graded[part] = (proc, rows, before, digest(folders[part]))
  proc = finish(checks)
  assert proc.returncode == 0, proc.stderr[-3000:]
  said = {(Path(path).parent.name, Path(path).stem): by_ex
          for path, by_ex in json.loads(proc.stdout.splitlines()[-1]).items()}
  return {"nbval": outcomes, "graded": graded, "delegations": said}


def check_cell_numbers(nb) -> dict:
  code = [c for c in nb.cells if c.cell_type == "code"]
  return {c.metadata["exercise"]: i for i, c in enumerate(code) if c.metadata.get("role") == "check"}


@pytest.mark.parametrize("part", PARTS)
def test_nbval_gives_each_notebook_its_verdicts(runs, all_solutions, part):
  for name in notebooks(part, all_solutions[part]):
    assert runs["nbval"][part, name] == expected(part, name), name


@pytest.mark.parametrize("part", PARTS)
def test_grader_agrees_with_nbval(runs, all_solutions, part):
  proc, rows, *_ = runs["graded"][part]
  assert proc.returncode == 0, proc.stdout + proc.stderr
  for name in notebooks(part, all_solutions[part]):
    got = {ex: rows[name, ex]["status"] + "ed" if rows[name, ex]["status"] == "pass" else "failed"
           for ex in PARTS[part]}
    assert got == runs["nbval"][part, name] == expected(part, name), (name, {
        ex: rows[name, ex]["reason"] for ex in PARTS[part]})


@pytest.mark.parametrize("part", PARTS)
def test_grader_reasons(runs, part):
  _, rows, *_ = runs["graded"][part]
  for ex in PARTS[part]:
    assert rows["stub", ex]["reason"].startswith("not done yet"), rows["stub", ex]
    assert rows["solutions", ex]["reason"] == ""
    fails = [r for (name, e), r in rows.items() if e == ex and r["status"] == "fail"
             and name.startswith("mistakes")]
    for r in fails:   # a mistake names the case that differs, not a crash of the tooling
      assert r["reason"] and "grader error" not in r["reason"], r


@pytest.mark.parametrize("part", PARTS)
def test_one_verdict_on_answers_that_delegate_to_the_library(runs, all_solutions, part):
  """The check cells and the grader fail every delegated answer, both naming the library
  function called and saying that the exercise asks you to write it."""
  _, rows, *_ = runs["graded"][part]
  todo = delegations.plan(part, all_solutions[part])
  assert set(PARTS[part]) - set(todo) <= NOTHING_TO_DELEGATE
  way = delegations.mixed(part, all_solutions[part])
  for name in delegating(part, all_solutions[part]):
    said = runs["delegations"][part, name]
    for ex in PARTS[part]:
      got = rows[name, ex]
      if ex not in todo:
        assert got["status"] == "pass" and said[ex].startswith("passed"), (name, ex, said[ex])
        continue
      lib = "`" + todo[ex][2].replace(":", ".") + "`"
      if way[ex] == "getattr" and "asks you to write" not in got["reason"]:
        # Looked up when called: a probe that swaps the very function (3.4's jit._specialize)
        # hands over its own, so the answer fails on that, the same way both ways.
        assert got["reason"].split(" raised ")[-1] in said[ex], (ex, got["reason"], said[ex])
        continue
      for where, text in (("grader", got["reason"]), ("notebook", said[ex])):
        assert "asks you to write" in text and lib in text, (name, ex, where, text)
      assert got["status"] == "fail" and said[ex].startswith("NotImplementedError"), (name, ex)


def test_every_way_of_delegating_is_tried(all_solutions):
  ways = [w for part in PARTS for w in delegations.mixed(part, all_solutions[part]).values()]
  assert {w: ways.count(w) >= 5 for w in delegations.VARIANTS} == dict.fromkeys(
      delegations.VARIANTS, True)


@pytest.mark.parametrize("part", PARTS)
def test_grader_does_not_modify_submissions(runs, part):
  _, _, before, after = runs["graded"][part]
  assert before == after


def test_graft_puts_checks_back_in_place(solutions):
  from coursekit.grader.rebuild import graft
  stub = nbformat.read(stub_path("part1"), as_version=4)
  nb = copy.deepcopy(solutions)
  nb.cells = [c for c in nb.cells if c.metadata.get("role") != "check"]
  extra = nbformat.v4.new_code_cell("helper = 1")   # a learner's own cell after 1.6
  nb.cells.append(extra)
  grafted = graft(nb, stub)
  assert [c.id for c in grafted.cells] == [c.id for c in stub.cells] + [extra.id]
  for got, want in zip(grafted.cells, stub.cells):
    if want.metadata.get("role") == "check":
      assert got.source == want.source and got.outputs == want.outputs
