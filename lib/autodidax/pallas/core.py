"""What a kernel's launch is made of: a grid, and for each operand a
`BlockSpec` saying which block of it each point of the grid sees.

`pallas_call` turns each BlockSpec into a `BlockMapping`: the block's shape,
the operand's type, and the index map traced to a jaxpr from the grid's
indices to the block's indices (JAX's jax/_src/pallas/core.py does the same).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import ShapedArray
from ..jaxpr import Jaxpr
from ..partial_eval import trace_to_jaxpr_dynamic
from ..tree_util import tree_flatten

INDEX = ShapedArray((), np.dtype("int32"))   # a grid index, and a block index


@dataclasses.dataclass(frozen=True)
class BlockSpec:
  """`block_shape`: the shape of the block each kernel run sees (None for a
  dimension of size 1 that the kernel's Ref drops). `index_map(*grid_indices)`
  returns which block: one block index per dimension, not an element offset.
  The defaults are JAX's: no block shape is the whole operand, no index map
  is block (0, 0, ...)."""
  block_shape: tuple | None = None
  index_map: object = None


@dataclasses.dataclass(frozen=True, eq=False)
class BlockMapping:
  """A BlockSpec made concrete for one operand of one pallas_call."""
  block_shape: tuple      # ints, None where the kernel's Ref drops the dimension
  index_map: Jaxpr        # grid indices -> block indices
  array_aval: ShapedArray
  origin: str             # which operand: "inputs[0]", "outputs[1]"

  @property
  def block_aval(self) -> ShapedArray:
    """The type of the block the kernel's Ref holds."""
    shape = tuple(b for b in self.block_shape if b is not None)
    return ShapedArray(shape, self.array_aval.dtype)

  @property
  def sizes(self) -> tuple:
    return tuple(1 if b is None else b for b in self.block_shape)

  @property
  def padded_shape(self) -> tuple:
    """The operand's shape rounded up to whole blocks (interpret mode pads)."""
    return tuple(-(-d // b) * b for d, b in zip(self.array_aval.shape, self.sizes))

  def __repr__(self):
    return f"BlockMapping({self.origin}: {self.array_aval.str_short()}, block={self.block_shape})"


def block_mapping(spec, aval: ShapedArray, grid: tuple, origin: str) -> BlockMapping:
  """Check `spec` against the operand's type `aval` and trace its index map."""
  shape = tuple(aval.shape)
  block_shape = shape if spec.block_shape is None else tuple(spec.block_shape)
  if len(block_shape) != len(shape):   # JAX's words, and then what to do
    raise ValueError(
        f"Block shape for {origin} (= {block_shape}) must have the same number of "
        f"dimensions as the array shape {shape}. Give one block size per dimension "
        "(None for a dimension the kernel should not see).")
  for b in block_shape:
    if b is not None and (not isinstance(b, (int, np.integer)) or b <= 0):
      raise ValueError(f"Block shape for {origin} (= {block_shape}): each entry must be "
                       "a positive int or None")
  block_shape = tuple(None if b is None else int(b) for b in block_shape)
  index_map = spec.index_map or (lambda *ids: (0,) * len(shape))
  return BlockMapping(block_shape, trace_index_map(index_map, grid, block_shape, origin),
                      aval, origin)


def trace_index_map(index_map, grid: tuple, block_shape: tuple, origin: str) -> Jaxpr:
  """`index_map` as a jaxpr from the grid's indices (int32 scalars) to block indices."""
  n_out = []

  def flat(*ids):
    out = index_map(*ids)
    leaves, _ = tree_flatten(out if isinstance(out, tuple) else (out,))
    n_out.append(len(leaves))
    return leaves

  jaxpr, consts = trace_to_jaxpr_dynamic(flat, [INDEX] * len(grid))
  name = getattr(index_map, "__qualname__", "index_map")
  if n_out[0] != len(block_shape):   # JAX's words, and then what to do
    raise ValueError(
        f"Index map function {name} for {origin} must return {len(block_shape)} values "
        f"to match block_shape={block_shape}. Currently returning {n_out[0]} values. "
        "An index map returns one block index per dimension of the operand.")
  for i, x in enumerate(jaxpr.outvars):
    a = x.aval
    if a.shape or not np.issubdtype(a.dtype, np.integer):
      raise ValueError(f"Index map function {name} for {origin} must return integer "
                       f"scalars. Output[{i}] has type {a.str_short()}.")
  if consts:
    raise ValueError(f"Index map function {name} for {origin} must not capture "
                     f"constants: {consts}. Compute the index from the grid indices.")
  return jaxpr


def grid_tuple(grid) -> tuple:
  """`grid` as a tuple of ints: an int is a 1-D grid, None or () one point."""
  if grid is None:
    return ()
  grid = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
  if not all(isinstance(g, (int, np.integer)) and g >= 0 for g in grid):
    raise ValueError(f"Grid must be a tuple of integers, got {grid}: one int per grid "
                     "axis, the number of kernel runs along it (e.g. grid=(4, 2))")
  return tuple(int(g) for g in grid)
