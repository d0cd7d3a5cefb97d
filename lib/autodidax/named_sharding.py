"""Partition specs and shardings: which part of an array each device holds.

    s = NamedSharding(mesh, P("data", None))         # rows split over "data"

A `PartitionSpec` says, for each dimension of an array, which mesh axes
split it (None: none). A `NamedSharding` pairs it with a mesh; from the two
follows which slice of the array each device holds (`devices_indices_map`).
Devices along mesh axes that the spec doesn't mention hold the same slice:
the array is replicated along them. An array's type carries its sharding
(`ShapedArray.sharding`), so these sit below core, like jax/_src/
partition_spec.py and named_sharding.py.
"""
from __future__ import annotations

import math

import numpy as np

from .mesh import Device, Mesh, get_mesh


class PartitionSpec(tuple):
  """For each dimension of an array, the mesh axis (or tuple of axes, the
  first major) that splits it, or None. Missing trailing entries are None."""

  def __new__(cls, *parts):
    return super().__new__(cls, parts)

  def __repr__(self):
    return "P(" + ", ".join(map(repr, self)) + ")"

  def axes_of(self, dim: int) -> tuple:
    """The mesh axes splitting dimension `dim`, as a tuple."""
    part = self[dim] if dim < len(self) else None
    return () if part is None else tuple(part) if isinstance(part, tuple) else (part,)

  def padded(self, ndim: int) -> "PartitionSpec":
    if len(self) > ndim:
      raise ValueError(f"{self!r} has {len(self)} entries, for an array of rank {ndim}")
    return PartitionSpec(*self, *[None] * (ndim - len(self)))

  def normalized(self, ndim: int) -> tuple:
    """A canonical form, to compare specs: a tuple of axis tuples per dimension."""
    return tuple(self.axes_of(d) for d in range(ndim))


P = PartitionSpec


class NamedSharding:
  """An array's layout on a mesh: `spec` says which mesh axes split each of
  its dimensions."""

  def __init__(self, mesh: Mesh, spec: PartitionSpec):
    self.mesh = mesh
    self.spec = spec if isinstance(spec, PartitionSpec) else PartitionSpec(*spec)
    used = [a for d in range(len(self.spec)) for a in self.spec.axes_of(d)]
    for a in used:
      if a not in mesh.axis_names:
        raise ValueError(f"{self.spec!r} names the axis {a!r}, but the mesh's axes are "
                         f"{mesh.axis_names}")
    if len(set(used)) < len(used):
      raise ValueError(f"{self.spec!r} uses a mesh axis for two dimensions")

  device_set = property(lambda self: set(self.mesh.devices.flat))
  num_devices = property(lambda self: self.mesh.size)

  def tiles(self, ndim: int) -> tuple:
    """How many pieces each dimension is cut into."""
    return tuple(math.prod(self.mesh.shape[a] for a in self.spec.axes_of(d))
                 for d in range(ndim))

  def shard_shape(self, global_shape) -> tuple:
    """The shape of the slice each device holds."""
    tiles = self.tiles(len(global_shape))
    for d, (n, t) in enumerate(zip(global_shape, tiles)):
      if n % t:
        raise ValueError(f"{self!r} splits dimension {d} (of size {n}) into {t} pieces, "
                         f"which doesn't divide it: choose sizes divisible by {t}")
    return tuple(n // t for n, t in zip(global_shape, tiles))

  def devices_indices_map(self, global_shape) -> dict:
    """{device: the index (a tuple of slices) of its part of the array}."""
    shard = self.shard_shape(global_shape)
    names, out = self.mesh.axis_names, {}
    for pos in np.ndindex(*self.mesh.axis_sizes):
      coord = dict(zip(names, pos))
      index = []
      for d, size in enumerate(shard):
        if not self.spec.axes_of(d):   # whole: slice(None), as in JAX
          index.append(slice(None))
          continue
        tile = 0
        for a in self.spec.axes_of(d):   # the first axis is major
          tile = tile * self.mesh.shape[a] + coord[a]
        index.append(slice(tile * size, (tile + 1) * size))
      out[self.mesh.devices[pos]] = tuple(index)
    return out

  @property
  def is_fully_replicated(self) -> bool:
    return all(not self.spec.axes_of(d) for d in range(len(self.spec)))

  def same_layout(self, other, ndim: int) -> bool:
    return (isinstance(other, NamedSharding) and self.mesh == other.mesh
            and self.spec.normalized(ndim) == other.spec.normalized(ndim))

  def _key(self):   # the spec without its trailing Nones
    parts = [self.spec.axes_of(d) for d in range(len(self.spec))]
    while parts and not parts[-1]:
      parts.pop()
    return self.mesh, tuple(parts)

  def __eq__(self, other):
    return type(other) is type(self) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


def type_sharding(sharding):
  """The part of a layout that an array's type carries: its Explicit axes
  (None on a mesh without any, where the partitioner decides)."""
  if not isinstance(sharding, NamedSharding) or not sharding.mesh.explicit_axes:
    return None
  explicit = sharding.mesh.explicit_axes
  parts = [tuple(a for a in sharding.spec.axes_of(d) if a in explicit)
           for d in range(len(sharding.spec))]
  return NamedSharding(sharding.mesh, P(*[None if not p else p[0] if len(p) == 1 else p
                                          for p in parts]))


class SingleDeviceSharding:
  """The layout of an ordinary device `Array`: all of it on one device."""

  def __init__(self, device: Device):
    self.device = device

  device_set = property(lambda self: {self.device})
  num_devices = 1
  is_fully_replicated = True

  def shard_shape(self, global_shape) -> tuple:
    return tuple(global_shape)

  def devices_indices_map(self, global_shape) -> dict:
    return {self.device: tuple(slice(None) for _ in global_shape)}

  def __repr__(self):
    return f"SingleDeviceSharding(device={self.device!r})"



def canonicalize_sharding(s, what: str):
  """A NamedSharding from `s`: a PartitionSpec needs the context mesh."""
  if s is None or isinstance(s, NamedSharding):
    return s
  mesh = get_mesh()
  if mesh is None:
    raise ValueError(
        f"{what}: a bare PartitionSpec {s!r} needs a mesh to name: call it inside "
        "`with set_mesh(mesh):`, or pass NamedSharding(mesh, spec).")
  return NamedSharding(mesh, s if isinstance(s, PartitionSpec) else P(*s))
