"""coursekit's layout holds: two packages, `coursekit.learner` (what a learner's kernel
runs) and `coursekit.grader` (the instructor's grader), whose imports run one way.

Read from the source with book/_ext/import_graph.py, counting imports deferred into a
function body as well: no cycle anywhere in coursekit (the failure names the edge
that closes it); the learner's side imports nothing of the grader; what runs inside
the sandbox (`grader/sandboxed/`) needs nothing beyond the files the sandbox's zip
gets; no grader module is over `MAX_LINES`; `__init__.py` files only hand names on.
"""
import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
KIT = ROOT / "exercises" / "coursekit"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import import_graph  # noqa: E402

MAX_LINES = 500
SOURCES = import_graph.read_package(KIT)
EDGES = import_graph.imports(SOURCES, "coursekit")
GRAPH = import_graph.graph(EDGES, SOURCES, "coursekit")


def closing_edge(edges, cycle) -> str:
  """The import statement that closes `cycle` ([a, ..., a]): its last step, with where
  it is written (and every other step of the cycle, for the whole picture)."""
  steps = list(zip(cycle, cycle[1:]))
  where = {(e.source, e.target): e for e in reversed(edges)}
  last = where[steps[-1]]
  return (f"{last} closes the cycle {' -> '.join(cycle)}; its steps: "
          + "; ".join(str(where[s]) for s in steps))


def under(package: str):
  return sorted(m for m in GRAPH if m == package or m.startswith(package + "."))


def test_found_both_packages():
  assert {"coursekit.learner.checks", "coursekit.learner.probe", "coursekit.learner.stubs",
          "coursekit.grader.cli", "coursekit.grader.scheduling", "coursekit.grader.cluster",
          "coursekit.grader.sandboxed.runner"} <= set(GRAPH)


def test_no_import_cycle_in_coursekit():
  cycle = import_graph.find_cycle(GRAPH)
  assert cycle is None, closing_edge(EDGES, cycle)


def test_the_cycle_report_names_the_closing_edge():
  """A deferred import that closes a cycle is found and named (the test above can fail)."""
  sources = {"__init__.py": "", "grade.py": "from . import report\n",
             "report.py": "def f():\n  from .grade import main\n"}
  edges = import_graph.imports(sources, "kit")
  cycle = import_graph.find_cycle(import_graph.graph(edges, sources, "kit"))
  assert cycle == ["kit.grade", "kit.report", "kit.grade"]
  assert closing_edge(edges, cycle).startswith(
      "kit.report -> kit.grade (report.py:2, inside a function) closes the cycle")


def test_the_learners_side_imports_nothing_of_the_grader():
  bad = [str(e) for e in EDGES if e.source.startswith("coursekit.learner")
         and e.target.startswith("coursekit.grader")]
  assert not bad, "a learner's kernel must not need the grader: " + "; ".join(bad)


def test_a_check_cell_loads_nothing_of_the_grader():
  """As a stub's setup cell does it, in a fresh process: no grader module is loaded."""
  code = ("import sys; from coursekit import checks; import coursekit.learner.probes.part1; "
          "print(sorted(m for m in sys.modules if m.startswith('coursekit.grader')))")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), str(ROOT / "exercises")]))
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "[]", out.stdout


def test_the_sandbox_gets_all_that_runs_inside_it():
  """What the sandbox's program imports of coursekit, followed through every import,
  is in the zip it gets (`edition.kit_files`), and none of it is the grader's outside."""
  from coursekit.grader import edition
  shipped = {import_graph.module_name(p.relative_to(KIT).as_posix(), "coursekit")
             for p in edition.kit_files()}
  todo = ["coursekit.runner", *under("coursekit.learner.probes")]
  seen = set()
  while todo:
    m = todo.pop()
    if m not in seen:
      seen.add(m)
      todo += GRAPH[m]
  missing = sorted(seen - shipped)
  assert not missing, f"the sandbox would import {missing}, which its zip lacks"
  outside = sorted(m for m in seen if m.startswith("coursekit.grader.")
                   and not m.startswith("coursekit.grader.sandboxed"))
  assert not outside, f"the sandbox's program imports the grader's outside: {outside}"


@pytest.mark.parametrize("module", under("coursekit.grader"))
def test_no_grader_module_is_over_the_limit(module):
  path = next(KIT / p for p in SOURCES if import_graph.module_name(p, "coursekit") == module)
  n = len(path.read_text().splitlines())
  assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines (at most {MAX_LINES}): split it"


@pytest.mark.parametrize("path", sorted(p for p in SOURCES if p.endswith("__init__.py")))
def test_init_files_only_hand_names_on(path):
  tree = ast.parse(SOURCES[path])
  for i, node in enumerate(tree.body):
    ok = (isinstance(node, (ast.Import, ast.ImportFrom))
          or (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
          or (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets]
              == ["__all__"])
          or (isinstance(node, ast.FunctionDef) and node.name == "__getattr__"))
    assert ok, f"coursekit/{path}:{node.lineno} does more than hand names on"


def test_old_names_are_the_same_modules():
  """The names from before the split (the stubs' `from coursekit import checks`, old
  notebooks' `import coursekit.probe`, instructors' `python -m coursekit.grade`) work."""
  code = ("import coursekit.checks as c, coursekit.probe as p, coursekit.answers as a\n"
          "from coursekit import checks\n"
          "from coursekit.learner import answers, checks as lc, probe\n"
          "assert c is checks is lc and p is probe and a is answers\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), str(ROOT / "exercises")]))
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  for cmd in ("grade", "gradebook", "gradescope", "stubs"):
    out = subprocess.run([sys.executable, "-m", f"coursekit.{cmd}", "--help"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "usage:" in out.stdout, (cmd, out.stderr)
