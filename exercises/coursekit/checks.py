"""Helpers for the exercise notebooks' check cells.

A check cell builds a `Checker`, runs its cases through it (each one raises
AssertionError at the first wrong answer, so the cell fails), and ends with
`done()`, which prints one deterministic summary line. The stub notebooks
store that line as the expected output, and nbval compares it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np


def setup():
  """Configure the kernel for checking: JAX on CPU in float64, quiet.

  JAX initializes its backend here, so any log line it prints lands in the
  setup cell rather than in a check cell whose output is compared.
  """
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import jax
  jax.config.update("jax_enable_x64", True)
  jax.config.update("jax_pprint_use_color", False)   # plain text, to compare jaxprs
  jax.numpy.zeros(()).block_until_ready()
  np.set_printoptions(precision=6, suppress=True)


class Checker:
  """Counts passed checks for one exercise; fails loudly on the first wrong one."""

  def __init__(self, exercise: str, title: str):
    self.exercise, self.title, self.count = exercise, title, 0

  def fail(self, msg: str):
    raise AssertionError(f"Exercise {self.exercise} ({self.title}): {msg}")

  def __call__(self, ok, msg: str):
    """Check that `ok` is true; `msg` says what was expected."""
    if not ok:
      self.fail(msg)
    self.count += 1

  def close(self, got, want, what: str, rtol=1e-10, atol=1e-12):
    """Check that the array `got` has `want`'s shape and (nearly) its values."""
    if type(got).__name__.endswith("Tracer"):
      self.fail(f"{what}: got a tracer {got!r}, expected a concrete array")
    if hasattr(got, "aval") and not hasattr(got, "__array__"):   # e.g. a Zero
      self.fail(f"{what}: got {got!r}, expected an array")
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
      self.fail(f"{what}: expected shape {want.shape}, got shape {got.shape}")
    if not np.allclose(got, want, rtol=rtol, atol=atol):
      err = np.max(np.abs(got - want))
      self.fail(f"{what}: values differ (max abs error {err:.3g})\n"
                f"expected:\n{want}\ngot:\n{got}")
    self.count += 1

  def raises(self, exc_type, fn, what: str):
    """Check that `fn()` raises `exc_type`."""
    try:
      fn()
    except exc_type:
      self.count += 1
      return
    except Exception as e:  # noqa: BLE001 (the learner's code may raise anything)
      self.fail(f"{what}: expected {exc_type.__name__}, got "
                f"{type(e).__name__}: {e}")
    self.fail(f"{what}: expected {exc_type.__name__}, but nothing was raised")

  def call(self, what: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, failing with `what` if it raises (except
    NotImplementedError, which says the exercise isn't done yet)."""
    try:
      return fn(*args, **kwargs)
    except NotImplementedError:
      raise
    except Exception as e:  # noqa: BLE001
      self.fail(f"{what} raised {type(e).__name__}: {e}")

  def done(self):
    print(f"Exercise {self.exercise} ({self.title}): all {self.count} checks passed")


# --- Numerical references ------------------------------------------------------------

def fd_jvp(f, x, t, eps=1e-6):
  """Central finite difference of `f` at `x` along `t` (error ~eps**2)."""
  x, t = np.asarray(x, np.float64), np.asarray(t, np.float64)
  return (f(x + eps * t) - f(x - eps * t)) / (2 * eps)


def same_tree(a, b) -> bool:
  """Are `a` and `b` the same nest of tuples/lists/dicts/None with equal leaves?"""
  if type(a) is not type(b):
    return False
  if type(a) in (tuple, list):
    return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b))
  if type(a) is dict:
    return set(a) == set(b) and all(same_tree(a[k], b[k]) for k in a)
  if a is None:
    return True
  return a is b or bool(np.all(np.asarray(a) == np.asarray(b)))


# --- Installing and forbidding functions ------------------------------------------------

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
def forbidden(exercise: str, *targets):
  """Make each `(obj, name)` in `targets` raise if called inside the block.

  Used so that an exercise can't be solved by calling the reference library's
  own version of what it asks for.
  """
  def make(name):
    def refuse(*args, **kwargs):
      raise AssertionError(
          f"Exercise {exercise}: write this yourself rather than calling "
          f"autodidax's own `{name}`")
    return refuse

  olds = [getattr(obj, name) for obj, name in targets]
  for obj, name in targets:
    setattr(obj, name, make(name))
  try:
    yield
  finally:
    for (obj, name), old in zip(targets, olds):
      setattr(obj, name, old)


@contextmanager
def recorded_binds():
  """Collect the names of the primitives bound inside the block."""
  from autodidax import core
  names: list[str] = []
  with core.observe_binds(lambda event: names.append(event.prim.name)):
    yield names
