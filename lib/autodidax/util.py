"""Small helpers shared by the interpreters."""
from __future__ import annotations

import weakref


def unzip2(pairs):
  xs, ys = [], []
  for x, y in pairs:
    xs.append(x)
    ys.append(y)
  return xs, ys


def canonicalize_axis(axis: int, ndim: int) -> int:
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of bounds for an array of rank {ndim}")
  return axis % ndim


def cache_by_jaxpr(fn):
  """Memoize a jaxpr -> jaxpr transformation on the jaxpr object (and args)."""
  store = weakref.WeakKeyDictionary()

  def cached(jaxpr, *args):
    per_jaxpr = store.setdefault(jaxpr, {})
    if args not in per_jaxpr:
      per_jaxpr[args] = fn(jaxpr, *args)
    return per_jaxpr[args]
  return cached


def not_in_autodidax(module: str, name: str) -> AttributeError:
  """The error for a JAX function that autodidax leaves out."""
  if name.startswith("__"):
    return AttributeError(f"module {module!r} has no attribute {name!r}")
  return AttributeError(
      f"{module}.{name} is not in autodidax: it implements only the part of "
      f"{module} that the course needs. Write it from the primitives that are "
      "here, or use JAX itself.")
