"""Arrays on many devices, with `jax.sharding`'s names: where each part of an array lives.

    mesh = make_mesh((4, 2), ("data", "model"))     # 8 devices as a 4 x 2 grid
    s = NamedSharding(mesh, P("data", None))         # rows split over "data"
    x = device_put(np.arange(32.).reshape(8, 4), s)  # each device holds 2 rows

A `Mesh` arranges devices in a grid with named axes. A `PartitionSpec` says,
for each dimension of an array, which mesh axes split it (None: none). A
`NamedSharding` pairs the two; from it follows which slice of the array each
device holds (`devices_indices_map`). Devices along mesh axes that the spec
doesn't mention hold the same slice: the array is replicated along them.
JAX keeps these in jax/_src/mesh.py, sharding_impls.py and array.py.

The data types (meshes, specs, shardings) sit low, in `mesh.py` and
`named_sharding.py`, since an array's type carries its sharding; `reshard`
is a primitive (`primitives.py`). This module holds the device arrays built
from them (ShardedArray, device_put) and hands all the names on, as
`jax.sharding` does.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import runtime
from .core import ShapedArray, array_types, get_aval, impl_rules, raise_to_shaped
from .mesh import (AxisType, Device, Mesh, device_count, devices, get_mesh,  # noqa: F401
                   make_mesh, set_mesh)
from .named_sharding import (NamedSharding, P, PartitionSpec,  # noqa: F401
                             SingleDeviceSharding, canonicalize_sharding, type_sharding)
from .primitives import reshard_p
from .tree_util import tree_flatten, tree_unflatten
from .xla import Array


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
# reshard_p is a primitive (autodidax.primitives); eagerly, it is device_put.

impl_rules[reshard_p] = lambda x, *, sharding: device_put(x, sharding)


def reshard(x, out_shardings):
  """`x` laid out anew: `out_shardings` is a NamedSharding, or a PartitionSpec
  on the context mesh (set_mesh). On Explicit axes, the new layout is part
  of the result's type; XLA moves the data (all-gather, all-to-all, ...)."""
  leaves, tree = tree_flatten(x)
  if tree.node_type is not None:
    return tree_unflatten(tree, [reshard(v, out_shardings) for v in leaves])
  sharding = canonicalize_sharding(out_shardings, "reshard")
  sharding.spec.padded(np.ndim(x))   # checks the rank
  return reshard_p.bind(x, sharding=sharding)
