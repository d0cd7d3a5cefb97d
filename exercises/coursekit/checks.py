"""The exercise notebooks' check cells, and helpers for the probes.

A check cell is one line, `checks.check("1.2", globals())`. It runs the
exercise's probe (`coursekit/probes/<part>.py`, where you can read exactly
what it tests) on your answers at seed 0, and compares its records with the
reference solution's, stored beside the stubs by `make exercises`. It prints
one summary line when everything matches (the stub stores that line as the
expected output, which nbval compares), and otherwise raises an error that
says which case differs and how.

The grader runs the same probe in a sandbox at a seed of its own, against a
library without the exercise's answers, and compares outside (`coursekit.grade`).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import pkgutil
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from . import probe as probes

EXPECTED = Path(__file__).resolve().parent / "expected"


def setup():
  """Configure the notebook: NumPy prints compactly."""
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  np.set_printoptions(precision=6, suppress=True)


# --- The check cells ------------------------------------------------------------------------

def part_of(exercise: str) -> str:
  """The chapter whose probes define `exercise`."""
  from . import probes as pkg
  for info in pkgutil.iter_modules(pkg.__path__):
    importlib.import_module(f"{pkg.__name__}.{info.name}")
    for ex, spec in probes.REGISTRY.items():
      if ex == exercise and spec.fn.__module__.endswith(f".{info.name}"):
        return info.name
  raise KeyError(f"no probe for exercise {exercise!r}")


def _refuse(exercise, target):
  def refuse(*args, **kwargs):
    raise AssertionError(f"Exercise {exercise}: write this yourself rather than calling "
                         f"the library's own `{target}`")
  return refuse


@contextmanager
def installed(spec, namespace):
  """While the probe runs in a notebook, each library function the exercise asks for is
  the learner's answer (or refuses to run), wherever the library holds it (module
  attributes, re-exports, rule tables): as in the grader's learner edition."""
  from autodidax.core import RuleTable
  with ExitStack() as stack:
    for target, name in spec.removes.items():
      module, _, qualname = target.partition(":")
      owner = importlib.import_module(module)
      *path, attr = qualname.split(".")
      for p in path:
        owner = getattr(owner, p)
      old = getattr(owner, attr)
      value = namespace.get(name) if name else None
      if value is None or value is old:   # missing, or the library's own: as in the grader
        value = _refuse(spec.exercise, qualname)
      stack.enter_context(patched(owner, attr, value))
      for mod in [m for n, m in list(sys.modules.items()) if n.startswith("autodidax")]:
        for alias, v in list(vars(mod).items()):
          if v is old:   # re-exports too
            stack.enter_context(patched(mod, alias, value))
          elif isinstance(v, RuleTable):   # and a rule table's entries
            for prim in [p for p, rule in v.items() if rule is old]:
              stack.enter_context(v.override(prim, value))
    yield


def summary(exercise: str, count: int) -> str:
  return f"Exercise {exercise}: all {count} checks passed"


def hide(record: dict) -> dict:
  """A record whose value is only a hash (answers to questions stay secret in the stub)."""
  return dict(record, value={"k": "hash", "sha": digest(record["value"])})


def digest(value) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def check(exercise: str, namespace: dict):
  """Run `exercise`'s probe on the answers in `namespace` and compare with the reference."""
  part = part_of(exercise)
  spec = probes.spec(part, exercise)
  with installed(spec, namespace):
    records = probes.run(spec, namespace, seed=0)
  record_to = os.environ.get("COURSEKIT_RECORD")
  if record_to:   # `make exercises`, running the reference solution: store, don't compare
    broken = [r for r in records if r["value"].get("k") in ("error", "todo")]
    if broken:   # a reference that raises would make its own error the expected answer
      raise RuntimeError(f"Exercise {exercise}: the reference solution's probe failed at "
                         f"{broken[0]['label']!r}: {broken[0]['value'].get('message')}")
    path = Path(record_to) / f"{part}.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    stored[exercise] = [hide(r) if r.get("secret") else r for r in records]
    path.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(summary(exercise, len(records)))
    return
  expected = json.loads((EXPECTED / f"{part}.json").read_text())[exercise]
  v = probes.compare(records, expected)
  if v.passed:
    print(summary(exercise, v.count))
  elif v.todo:   # the stub's own message already names the exercise
    raise NotImplementedError(v.message if v.message.startswith(f"Exercise {exercise}")
                              else f"Exercise {exercise} is not done yet: {v.message}")
  else:
    raise AssertionError(f"Exercise {exercise}: {v.label}: {v.message}")


# --- Helpers for the probes --------------------------------------------------------------------

def fd_jvp(f, x, t, eps=1e-6):
  """Central finite difference of `f` at `x` along `t` (error ~eps**2)."""
  x, t = np.asarray(x, np.float64), np.asarray(t, np.float64)
  return (f(x + eps * t) - f(x - eps * t)) / (2 * eps)


@contextmanager
def patched(obj, name: str, value):
  """Set `obj.name = value` inside the block; restore the old value after."""
  old = getattr(obj, name)
  setattr(obj, name, value)
  try:
    yield value
  finally:
    setattr(obj, name, old)


@contextmanager
def recorded_binds():
  """Collect the names of the primitives bound inside the block."""
  from autodidax import core
  names: list[str] = []
  with core.observe_binds(lambda event: names.append(event.prim.name)):
    yield names
