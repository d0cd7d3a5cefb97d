"""No public function or rule of the library passes any exercise as its answer.

`tests/fixtures/candidates.py` puts each public function, method and rule of the
library in the place of each answer of each exercise and runs the probe: none may
pass (a library function that computes an answer belongs in the exercise's
`removes`). A file of its own, so that the search runs beside test_exercises.py's
notebook runs rather than after them.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "fixtures" / "candidates.py"
PARTS = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))


def run(*args):
  env = dict(os.environ)
  env.pop("PYTEST_ADDOPTS", None)
  return subprocess.run([sys.executable, str(CANDIDATES), *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=1200)


@pytest.mark.parametrize("part", PARTS)
def test_no_library_function_answers_an_exercise(part):
  """Each public function, method and rule of the library, as each answer of each
  exercise: none passes."""
  proc = run(part)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.splitlines()[-1])
  assert got["tried"] > 300 and got["passed"] == [], got["passed"]


def test_candidates_find_a_function_missing_from_removes():
  """The search can fail: with the library's own jacfwd left in, it answers 1.6.
  (jacrev no longer does: 1.6's probe counts the operations of the one trace
  and wants jacfwd's method, a vmap of jvps.)"""
  proc = run("part1", "--only", "1.6", "--keep", "autodidax.api:jacfwd")
  got = json.loads(proc.stdout.splitlines()[-1])
  assert ["1.6", "jacfwd", "autodidax.api.jacfwd"] in got["passed"], (got, proc.stderr[-2000:])
