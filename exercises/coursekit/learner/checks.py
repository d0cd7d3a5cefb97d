"""The exercise notebooks' check cells, and helpers for the probes.

A check cell is one line, `checks.check("1.2", globals())`. It runs the
exercise's probe (`coursekit/learner/probes/<part>.py`, where you can read exactly
what it tests) on your answers at seed 0, and compares its records with the
reference solution's, stored beside the stubs by `make exercises`. It prints
one summary line when everything matches (the stub stores that line as the
expected output, which nbval compares), and otherwise raises an error that
says which case differs and how.

The grader runs the same probe in a sandbox at a seed of its own, against a
library without the exercise's answers, and compares outside (`coursekit.grader`).
Here as there, the library functions that the exercise asks you to write are
slots (`coursekit.learner.answers`): they run your answer, and say so when your answer
calls the library's own instead. So the notebook and the grader agree.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import probe as probes

EXPECTED = Path(__file__).resolve().parent / "expected"


def setup():
  """Configure the notebook: NumPy prints compactly."""
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  np.set_printoptions(precision=6, suppress=True)


def expect_devices(n: int = 8):
  """The many-devices setup: print how many devices XLA came up with, and say what to do
  when they are fewer than `n` (XLA read XLA_FLAGS before the setup cell set it)."""
  from autodidax import devices
  have = len(devices())
  print(have, "devices")
  if have < n:
    print(f"Warning: the exercises need {n} devices and XLA started with {have}: something "
          "started XLA before this cell set XLA_FLAGS. Restart the kernel (Kernel > Restart "
          "Kernel) and run this cell first.")
  return have


def show_probe(exercise: str):
  """Print the probe of `exercise`: exactly what its check runs and records."""
  import inspect
  print(inspect.getsource(probes.spec(part_of(exercise), exercise).fn))


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


def _owner(target: str):
  """(the object holding the target's function, its attribute name)."""
  module, _, qualname = target.partition(":")
  owner = importlib.import_module(module)
  *path, attr = qualname.split(".")
  for p in path:
    owner = getattr(owner, p)
  return owner, attr


@contextmanager
def installed(spec, namespace):
  """While the probe runs in a notebook, each library function the exercise removes is a
  slot (`answers`), as in the grader's learner edition: the function object
  itself gets a slot's code, so every alias, closure, `functools.partial` and rule
  table that holds it forwards to the learner's answer or refuses, just as there."""
  from . import answers
  swapped = []
  old_namespace = answers.NAMESPACE
  try:
    for target, name in spec.removes.items():
      owner, attr = _owner(target)
      fn = inspect.getattr_static(owner, attr)
      fn = getattr(fn, "__func__", fn)   # a staticmethod's function
      if not isinstance(fn, types.FunctionType):
        raise TypeError(f"{target} is not a Python function, so no exercise can remove it")
      swapped.append((fn, fn.__code__, fn.__kwdefaults__))
      fn.__code__ = answers.slot_code(fn, (spec.exercise, target, name, spec.answers))
      fn.__kwdefaults__ = answers.slot_defaults()
    answers.NAMESPACE = namespace
    yield
  finally:
    answers.NAMESPACE = old_namespace
    for fn, code, kwdefaults in reversed(swapped):
      fn.__code__, fn.__kwdefaults__ = code, kwdefaults


def summary(exercise: str, count: int, withheld: int = 0) -> str:
  more = (f" ({withheld} more {'is' if withheld == 1 else 'are'} judged only when graded)"
          if withheld else "")
  return f"Exercise {exercise}: all {count} checks passed{more}"


def withhold(record: dict) -> dict:
  """A secret record as it ships with the stub: its label only."""
  return dict(record, value={"k": "withheld"})


SEEDS = 4   # `make exercises` compares each record at this many seeds


def constant(spec, namespace, records) -> list[bool]:
  """For each record (at the shipped seed), whether it is the same at `SEEDS` seeds: one
  that doesn't depend on the seed would answer its case at the grader's seed too, so it
  ships withheld (only the grader judges it), unless the probe draws it from the seed."""
  same = [True] * len(records)
  for k in range(1, SEEDS):
    with installed(spec, namespace):
      other = probes.run(spec, namespace, seed=probes.SHIPPED_SEED + k)
    if [r["label"] for r in other] != [r["label"] for r in records]:
      return [False] * len(records)   # a probe whose path depends on the seed
    same = [s and a["value"] == b["value"] for s, a, b in zip(same, records, other)]
  return same


def _record(part, exercise, spec, namespace, records, path):
  """`make exercises`: store the reference's records at the shipped seed, after checking
  that the probe's records change with the seed (else they'd be an answer key)."""
  broken = [r for r in records if r["value"].get("k") in ("error", "todo")]
  if broken:   # a reference that raises would make its own error the expected answer
    raise RuntimeError(f"Exercise {exercise}: the reference solution's probe failed at "
                       f"{broken[0]['label']!r}: {broken[0]['value'].get('message')}")
  same = constant(spec, namespace, records)
  if all(same):
    raise RuntimeError(
        f"Exercise {exercise}: its probe's records are the same at seeds "
        f"{probes.SHIPPED_SEED} to {probes.SHIPPED_SEED + SEEDS - 1}, so the records shipped with the "
        "stub would answer it at any seed: draw its inputs from `p.rng`, so that they change")
  stored = json.loads(path.read_text()) if path.exists() else {}
  stored[exercise] = [withhold(r) if r.get("secret") or c else r for r, c in zip(records, same)]
  path.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")


def check(exercise: str, namespace: dict):
  """Run `exercise`'s probe on the answers in `namespace` and compare with the reference."""
  part = part_of(exercise)
  spec = probes.spec(part, exercise)
  with installed(spec, namespace):
    records = probes.run(spec, namespace, seed=probes.SHIPPED_SEED)
  record_to = os.environ.get("COURSEKIT_RECORD")
  if record_to:   # `make exercises`, running the reference solution: store, don't compare
    _record(part, exercise, spec, namespace, records, Path(record_to) / f"{part}.json")
    stored = json.loads((Path(record_to) / f"{part}.json").read_text())[exercise]
    withheld = sum(r["value"].get("k") == "withheld" for r in stored)
    print(summary(exercise, len(records) - withheld, withheld))
    return
  expected = json.loads((EXPECTED / f"{part}.json").read_text())[exercise]
  v = probes.compare(records, expected)
  if v.passed:
    print(summary(exercise, v.count, v.withheld))
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
