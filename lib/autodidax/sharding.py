"""Devices, meshes and shardings: where each part of an array lives.

    mesh = make_mesh((4, 2), ("data", "model"))     # 8 devices as a 4 x 2 grid
    s = NamedSharding(mesh, P("data", None))         # rows split over "data"
    x = device_put(np.arange(32.).reshape(8, 4), s)  # each device holds 2 rows

A `Mesh` arranges devices in a grid with named axes. A `PartitionSpec` says,
for each dimension of an array, which mesh axes split it (None: none). A
`NamedSharding` pairs the two; from it follows which slice of the array each
device holds (`devices_indices_map`). Devices along mesh axes that the spec
doesn't mention hold the same slice: the array is replicated along them.
JAX keeps these in jax/_src/mesh.py, sharding_impls.py and array.py.
"""
from __future__ import annotations

import enum
import math
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from . import runtime
from .core import Primitive, ShapedArray, array_types, get_aval, raise_to_shaped
from .tree_util import tree_flatten, tree_unflatten
from .xla import Array


# --- Devices and meshes -----------------------------------------------------------------

class Device:
  """One device of the XLA runtime (a CPU device here)."""
  __slots__ = ("id", "platform", "handle")

  def __init__(self, handle, platform: str):
    self.id, self.platform, self.handle = handle.id, platform, handle

  def __repr__(self):
    return f"{self.platform.capitalize()}Device(id={self.id})"

  def __eq__(self, other):
    return isinstance(other, Device) and (self.id, self.platform) == (other.id, other.platform)

  def __hash__(self):
    return hash((self.id, self.platform))


def devices(backend: str | None = None) -> list[Device]:
  """The devices of the platform (CPU by default). On one machine, CPU has
  one device unless XLA_FLAGS=--xla_force_host_platform_device_count=N was
  set before the runtime started."""
  platform = backend or runtime.default_platform()
  return [Device(d, platform) for d in runtime.devices(platform)]


def device_count(backend: str | None = None) -> int:
  return len(devices(backend))


_all_devices = devices   # make_mesh's `devices` argument hides the function


class AxisType(enum.Enum):
  """Who decides the layouts along a mesh axis. Explicit: the types do (an
  array's type says how the axis splits it, and each operation's sharding
  rule says how its result is split). Auto: XLA's partitioner does, from
  the layouts of the inputs and outputs. Manual: the program does, per
  device (inside shard_map)."""
  Auto = "Auto"
  Explicit = "Explicit"
  Manual = "Manual"

  def __repr__(self):
    return self.name


class Mesh:
  """Devices arranged as an n-dimensional grid whose axes have names, each
  with a type (AxisType.Auto unless given, as in jax.sharding.Mesh)."""

  def __init__(self, devices, axis_names, axis_types=None):
    self.devices = np.asarray(devices, dtype=object)
    self.axis_names = tuple(axis_names)
    if self.devices.ndim != len(self.axis_names):
      raise ValueError(f"Mesh: {len(self.axis_names)} axis names {self.axis_names} for a "
                       f"{self.devices.ndim}-dimensional grid of devices")
    if len(set(self.axis_names)) != len(self.axis_names):
      raise ValueError(f"Mesh: repeated axis names {self.axis_names}")
    if axis_types is None:
      axis_types = (AxisType.Auto,) * len(self.axis_names)
    self.axis_types = tuple(axis_types)
    if len(self.axis_types) != len(self.axis_names):
      raise ValueError(f"Mesh: {len(self.axis_types)} axis types for the axes "
                       f"{self.axis_names}")
    if AxisType.Explicit in self.axis_types and AxisType.Auto in self.axis_types:
      raise NotImplementedError(
          f"Mesh: axes {self.axis_names} mix Explicit and Auto types "
          f"{self.axis_types}. JAX allows it; autodidax doesn't build it: make "
          "every axis Explicit (the default of make_mesh) or every axis Auto.")

  explicit_axes = property(lambda self: tuple(
      n for n, t in zip(self.axis_names, self.axis_types) if t is AxisType.Explicit))

  shape = property(lambda self: dict(zip(self.axis_names, self.devices.shape)))
  axis_sizes = property(lambda self: tuple(self.devices.shape))
  size = property(lambda self: self.devices.size)
  device_list = property(lambda self: list(self.devices.flat))   # in mesh order

  def _key(self):
    return (self.axis_names, tuple(d.id for d in self.devices.flat), self.devices.shape,
            self.axis_types)

  def __eq__(self, other):
    return isinstance(other, Mesh) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    axes = ", ".join(f"{n!r}: {s}" for n, s in self.shape.items())
    return f"Mesh({axes}, axis_types={self.axis_types})"


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None) -> Mesh:
  """A mesh of the first prod(axis_shapes) devices, in order: device k sits
  at the grid position of k in row-major order. Its axes are Explicit unless
  `axis_types` says otherwise, as in JAX 0.10."""
  axis_shapes, n = tuple(axis_shapes), math.prod(axis_shapes)
  devs = list(devices) if devices is not None else _all_devices()
  if len(devs) < n:
    raise ValueError(
        f"make_mesh: a {' x '.join(map(str, axis_shapes))} mesh needs {n} devices, but "
        f"there are {len(devs)}. On CPU, set XLA_FLAGS=--xla_force_host_platform_"
        f"device_count={n} before anything starts the XLA runtime (at the top of a "
        "notebook, or in the environment).")
  if axis_types is None:
    axis_types = (AxisType.Explicit,) * len(axis_shapes)
  return Mesh(np.array(devs[:n], dtype=object).reshape(axis_shapes), axis_names,
              axis_types)


_context_mesh: list = []   # set_mesh's stack


class set_mesh:
  """`with set_mesh(mesh):` makes `mesh` the context mesh, which lets a bare
  PartitionSpec stand for a NamedSharding on it (reshard, out_sharding=).
  Called without `with`, it sets the mesh for good (as JAX's does)."""

  def __init__(self, mesh: Mesh):
    self.mesh, self.prev = mesh, list(_context_mesh)
    _context_mesh[:] = [mesh]

  def __enter__(self):
    return self.mesh

  def __exit__(self, *exc):
    _context_mesh[:] = self.prev


def get_mesh():
  """The context mesh (set_mesh's), or None."""
  return _context_mesh[-1] if _context_mesh else None


# --- Partition specs and shardings -------------------------------------------------------------

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


class Shard(NamedTuple):
  """One device's part of an array: `data` is an Array on that device."""
  device: Device
  index: tuple
  replica_id: int
  data: object


# --- Arrays on many devices -----------------------------------------------------------------

class ShardedArray(Array):
  """A device Array spread over the devices of a mesh: one buffer per device
  (in mesh order), each holding the slice its sharding assigns it."""
  __slots__ = ("_shards", "sharding")

  def __init__(self, shards: list, aval: ShapedArray, sharding: NamedSharding,
               platform: str):
    super().__init__(None, aval.update(sharding=type_sharding(sharding)), platform)
    self._shards, self.sharding = list(shards), sharding

  def __array__(self, dtype=None, copy=None):
    if self._npy is None:   # each slice fetched once, from the first device holding it
      out, done = np.empty(self.shape, self.dtype), set()
      for buf, (dev, index) in zip(self._shards, self._indices()):
        key = _index_key(index)
        if key not in done:
          out[index] = runtime.to_numpy(buf)
          done.add(key)
      self._npy = out
    return self._npy if dtype is None else self._npy.astype(dtype)

  def _indices(self):
    return list(self.sharding.devices_indices_map(self.shape).items())

  @property
  def addressable_shards(self) -> list[Shard]:
    shard_aval = self.aval.update(shape=self.sharding.shard_shape(self.shape), sharding=None)
    seen: dict = {}
    out = []
    for buf, (dev, index) in zip(self._shards, self._indices()):
      key = _index_key(index)
      replica = seen[key] = seen.get(key, -1) + 1
      out.append(Shard(dev, index, replica, Array(buf, shard_aval, self.platform)))
    return out

  def block_until_ready(self) -> "ShardedArray":
    for buf in self._shards:
      buf.block_until_ready()
    return self

  def __repr__(self):
    return super().__repr__()[:-1] + f", sharding={self.sharding.spec!r})"


array_types.add(ShardedArray)


def _index_key(index) -> tuple:
  return tuple((s.start, s.stop) for s in index)


def single_device_sharding(x: Array) -> SingleDeviceSharding:
  """An ordinary Array's sharding: the device its buffer is on."""
  dev = runtime.buffer_device(x._buf)
  return SingleDeviceSharding(Device(dev, x.platform))


def _whole(x: Array) -> list[Shard]:
  return [Shard(x.sharding.device, tuple(slice(None) for _ in x.shape), 0, x)]


# Every device Array has a sharding; an ordinary one lives on one device.
# (ShardedArray's own attributes take precedence.)
Array.sharding = property(single_device_sharding)
Array.addressable_shards = property(_whole)


def shards_for(x, sharding: NamedSharding, aval: ShapedArray) -> list:
  """Buffers holding `x` laid out by `sharding`, one per device in mesh order:
  `x`'s own when it already has that layout, else copies from the host."""
  if isinstance(x, ShardedArray) and sharding.same_layout(x.sharding, aval.ndim):
    return x._shards
  host = np.asarray(x, aval.dtype)
  return [runtime.device_put_on(np.array(host[index], order="C"), dev.handle)   # 0-d stays 0-d
          for dev, index in sharding.devices_indices_map(aval.shape).items()]


def device_put(x, device=None):
  """Put `x` on a device, or lay it out over a mesh with a NamedSharding.

  `device_put(x)` is an ordinary device Array (on the default device);
  `device_put(x, NamedSharding(mesh, P(...)))` is an array whose slices
  live on the mesh's devices. `x` may be a pytree of arrays."""
  leaves, tree = tree_flatten(x)
  if tree.node_type is not None:   # a container: each leaf alike
    return tree_unflatten(tree, [device_put(v, device) for v in leaves])
  if device is None:
    if isinstance(x, Array):
      return x
    aval = raise_to_shaped(get_aval(x))
    platform = runtime.default_platform()
    return Array(runtime.device_put(np.asarray(x, aval.dtype), platform), aval, platform)
  if isinstance(device, Device):   # one device: a mesh of one
    device = NamedSharding(Mesh(np.array([device], dtype=object), ("_",)), P())
  if not isinstance(device, NamedSharding):
    raise TypeError(f"device_put: expected a Device or a NamedSharding, got {device!r}")
  aval = raise_to_shaped(get_aval(x))   # a Python scalar stays weakly typed, as in JAX
  device.spec.padded(aval.ndim)   # checks the rank
  return ShardedArray(shards_for(x, device, aval), aval, device,
                      device.mesh.devices.flat[0].platform)


# --- Changing an array's layout ---------------------------------------------------------------

reshard_p = Primitive("reshard")   # its rules: autodidax.sharding_rules


def reshard(x, out_shardings):
  """`x` laid out anew: `out_shardings` is a NamedSharding, or a PartitionSpec
  on the context mesh (set_mesh). On Explicit axes, the new layout is part
  of the result's type; XLA moves the data (all-gather, all-to-all, ...)."""
  from .sharding_rules import canonicalize_sharding
  leaves, tree = tree_flatten(x)
  if tree.node_type is not None:
    return tree_unflatten(tree, [reshard(v, out_shardings) for v in leaves])
  sharding = canonicalize_sharding(out_shardings, "reshard")
  sharding.spec.padded(np.ndim(x))   # checks the rank
  return reshard_p.bind(x, sharding=sharding)
