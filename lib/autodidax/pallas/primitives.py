"""`program_id` and `num_programs`: where in the grid the kernel runs.

While `pallas_call` traces a kernel it keeps a *grid environment*: the
kernel's own `program_id` variables, one per grid axis, bound as the first
equations of the kernel's jaxpr. `program_id(axis)` returns that variable
(a body nested in the kernel, as `when`'s, closes over it), and interpret
mode feeds it the loop's index. `num_programs(axis)` is the grid's size, a
Python int, as JAX returns it for a static grid.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..core import Primitive, ShapedArray, abstract_eval_rules, impl_rules

program_id_p = Primitive("program_id")


class GridEnv:
  def __init__(self, grid: tuple):
    self.grid = grid
    self.ids = [program_id_p.bind(axis=a) for a in range(len(grid))]


_grid_envs: list[GridEnv] = []


@contextlib.contextmanager
def grid_env(grid: tuple):
  """Trace a kernel for `grid`: program_id and num_programs refer to it."""
  _grid_envs.append(GridEnv(grid))
  try:
    yield _grid_envs[-1]
  finally:
    _grid_envs.pop()


def _current(name: str, axis: int) -> GridEnv:
  if not _grid_envs:
    raise ValueError(f"{name}({axis}) was called outside a kernel: it is only defined "
                     "while pallas_call runs the kernel over its grid")
  env = _grid_envs[-1]
  if not isinstance(axis, (int, np.integer)) or not 0 <= axis < len(env.grid):
    raise ValueError(f"{name}({axis}): the grid {env.grid} has {len(env.grid)} axes, "
                     f"so the axis must be an int in 0..{len(env.grid) - 1}")
  return env


def program_id(axis: int):
  """This kernel run's index along grid axis `axis` (an int32 scalar)."""
  return _current("program_id", axis).ids[axis]


def num_programs(axis: int) -> int:
  """The grid's size along `axis`."""
  return _current("num_programs", axis).grid[axis]


abstract_eval_rules[program_id_p] = lambda *, axis: ShapedArray((), np.dtype("int32"))


def _program_id_impl(*, axis):
  raise ValueError("program_id ran outside a kernel: it only has a value while "
                   "pallas_call runs the kernel over its grid")


impl_rules[program_id_p] = _program_id_impl
