"""Small helpers shared by the interpreters."""
from __future__ import annotations


def unzip2(pairs):
  xs, ys = [], []
  for x, y in pairs:
    xs.append(x)
    ys.append(y)
  return xs, ys


def safe_map(f, *xs):
  """`map` to a list that insists on equal lengths."""
  n = len(xs[0])
  assert all(len(x) == n for x in xs[1:]), [len(x) for x in xs]
  return [f(*args) for args in zip(*xs)]


def safe_zip(*xs):
  n = len(xs[0])
  assert all(len(x) == n for x in xs[1:]), [len(x) for x in xs]
  return list(zip(*xs))


def split_list(xs, n):
  return list(xs[:n]), list(xs[n:])


def canonicalize_axis(axis: int, ndim: int) -> int:
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of bounds for an array of rank {ndim}")
  return axis % ndim
