"""Devices and meshes: the machine's devices, arranged in a grid with named axes.

    mesh = make_mesh((4, 2), ("data", "model"))     # 8 devices as a 4 x 2 grid

A `Mesh` is plain data (devices, axis names, each axis's type): every layer
may use it, so it sits below core. `set_mesh` makes one the context mesh.
JAX keeps these in jax/_src/mesh.py.
"""
from __future__ import annotations

import enum
import math

import numpy as np

from . import runtime


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
