"""Programs for many devices: one jaxpr, compiled for all the devices of a mesh.

`jit(f, in_shardings=..., out_shardings=...)` and `shard_map` lower a jaxpr
to one StableHLO module annotated with layouts, in the notation of Shardy
(XLA's partitioner, the `sdy` dialect): the mesh at the top, a sharding on
each argument and result that has one.

    sdy.mesh @mesh = <["data"=4, "model"=2]>
    func.func public @main(%arg0: tensor<8x4xf32>
        {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> ...

XLA's SPMD partitioner propagates the layouts to every operation and
rewrites the program into the one each device runs, on its own slices,
inserting the communication the layouts call for (all-reduce, all-gather,
...). `jit(f).lower(x).compile().as_text()` shows that partitioned program.
JAX does this in jax/_src/interpreters/pxla.py.
"""
from __future__ import annotations

import itertools
import re
import sys
import weakref

import numpy as np

from . import core, lowering, runtime, xla
from .core import raise_to_shaped
from .effects import effect_rules
from .jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Lit
from .sharding import NamedSharding, P, ShardedArray, get_mesh, reshard_p, shards_for
from .tree_util import broadcast_prefix, tree_flatten, tree_unflatten


# --- Layouts in Shardy's notation ----------------------------------------------------------

def sdy_mesh(mesh) -> str:
  axes = ", ".join(f'"{n}"={s}' for n, s in mesh.shape.items())
  return f"sdy.mesh @mesh = <[{axes}]>"


def sdy_sharding(sharding: NamedSharding, ndim: int) -> str:
  """`#sdy.sharding<@mesh, [{"data"}, {}]>`: per dimension, the mesh axes
  that split it ({} : none, so it is whole on every device)."""
  dims = ", ".join("{" + ", ".join(f'"{a}"' for a in sharding.spec.axes_of(d)) + "}"
                   for d in range(ndim))
  return f"#sdy.sharding<@mesh, [{dims}]>"


def lower_spmd(jaxpr: Jaxpr, name: str, mesh, in_shardings,
               out_shardings) -> str:
  """The module for `jaxpr` on `mesh`: each argument and result with a
  sharding (None: the partitioner chooses) gets it as an attribute."""
  module = lowering.Module(name)
  module.mesh = mesh   # for shard_map and the collectives inside it
  module.attributes = [f"mhlo.num_partitions = {mesh.size} : i32",
                       "mhlo.num_replicas = 1 : i32"]
  module.header = [sdy_mesh(mesh)]

  def attrs(shardings, avals):
    return ["" if s is None else
            f"{{sdy.sharding = {sdy_sharding(s, a.ndim)}}}"
            for s, a in zip(shardings, avals)]
  module.functions.append(lowering.lower_function(
      module, jaxpr, "main", True, attrs(in_shardings, jaxpr.in_avals),
      attrs(out_shardings, jaxpr.out_avals)))
  return module.text()


# --- Compiling and running ------------------------------------------------------------------

class SpmdProgram:
  """`jaxpr` compiled for the devices of `mesh`, with the input layouts given
  (one NamedSharding per input) and output layouts given or left to XLA."""

  def __init__(self, jaxpr, name, mesh, in_shardings, out_shardings, platform):
    self.jaxpr, self.mesh, self.platform = jaxpr, mesh, platform
    self.in_shardings = list(in_shardings)
    self.text = lower_spmd(jaxpr, name, mesh, in_shardings, out_shardings)
    self.exe = runtime.compile_spmd(self.text, [d.handle for d in mesh.device_list], platform)
    self.in_avals = jaxpr.in_avals
    self.out_avals = [raise_to_shaped(a) for a in jaxpr.out_avals]
    tiles = self.exe.output_tiles() or [((), [0], False)] * len(self.out_avals)  # 1 device
    self.out_shardings = [s if s is not None else layout_from_tiles(mesh, t, a.ndim)
                          for s, t, a in zip(out_shardings, tiles, self.out_avals)]

  def __call__(self, args) -> list:
    bufs = [shards_for(x, s, a) for x, s, a in zip(args, self.in_shardings, self.in_avals)]
    outs = self.exe.execute(bufs, self.in_avals)
    return [ShardedArray(o, a, s, self.platform)
            for o, a, s in zip(outs, self.out_avals, self.out_shardings)]

  def hlo_text(self) -> str:
    return self.exe.hlo_text()

  def cost_analysis(self) -> dict:
    return self.exe.cost_analysis()


_programs = weakref.WeakKeyDictionary()   # jaxpr -> {(layouts, platform): SpmdProgram}


def program(jaxpr, name, mesh, in_shardings, out_shardings, platform) -> SpmdProgram:
  """Compile once per jaxpr, layouts and platform; later calls hit the cache."""
  per_jaxpr = _programs.setdefault(jaxpr, {})
  key = (mesh, tuple(_key(s, a) for s, a in zip(in_shardings, jaxpr.in_avals)),
         tuple(_key(s, a) for s, a in zip(out_shardings, jaxpr.out_avals)), platform)
  if key not in per_jaxpr:
    per_jaxpr[key] = SpmdProgram(jaxpr, name, mesh, in_shardings, out_shardings, platform)
  return per_jaxpr[key]


def _key(sharding, aval):
  return None if sharding is None else sharding.spec.normalized(aval.ndim)


def resolve_in_shardings(mesh, declared, args) -> list:
  """Each input's layout: the one declared, else the argument's own if it
  lives on `mesh` already, else whole on every device (replicated)."""
  out = []
  for i, (s, x) in enumerate(zip(declared, args)):
    if s is None:
      own = x.sharding if isinstance(x, ShardedArray) else None
      if own is not None and _device_ids(own.mesh) != _device_ids(mesh):
        raise ValueError(
            f"Received incompatible devices for jitted computation: the program runs on "
            f"the devices {_device_ids(mesh)}, and argument {i} is on "
            f"{_device_ids(own.mesh)}. Put it on the same devices first (device_put "
            "with a NamedSharding on the program's mesh).")
      s = own if own is not None and own.mesh == mesh else NamedSharding(mesh, P())
    elif s.mesh != mesh:
      raise ValueError(f"jit: input {i} has a sharding on {s.mesh}, but the program runs "
                       f"on {mesh}: all shardings of one jit must use the same mesh")
    out.append(s)
  return out


def execute_jaxpr(jaxpr, args, *, mesh, platform, name="jit_fun", in_shardings=None,
                  out_shardings=None) -> list:
  """Run `jaxpr` on `mesh`'s devices: the implementation of a jit whose
  program spans a mesh (it has shardings, or contains a shard_map)."""
  n_in, n_out = len(jaxpr.invars), len(jaxpr.outvars)
  ins = resolve_in_shardings(mesh, in_shardings or [None] * n_in, args)
  prog = program(jaxpr, name, mesh, ins, list(out_shardings or [None] * n_out), platform)
  return prog(args)


# --- Arrays on many devices, outside any sharded jit ---------------------------------------------

def mesh_of(args):
  """The mesh that the arrays on many devices among `args` live on (None if
  none): a plain jit or an eager op on them runs on those devices, as in JAX.
  Arrays on two different sets of devices are an error, as in JAX."""
  mesh = None
  for i, x in enumerate(args):
    if isinstance(x, ShardedArray):
      if mesh is None:
        mesh, first = x.sharding.mesh, i
      elif _device_ids(x.sharding.mesh) != _device_ids(mesh):
        raise ValueError(
            f"Received incompatible devices for jitted computation: argument {first} is "
            f"on the devices {_device_ids(mesh)} and argument {i} on "
            f"{_device_ids(x.sharding.mesh)}. Put them on the same devices first "
            "(device_put with a NamedSharding on one mesh).")
  return mesh


def _device_ids(mesh) -> list:
  return [d.id for d in mesh.device_list]


def execute_on_args_mesh(jaxpr, args, *, mesh, num_consts, platform, name) -> list:
  """A jit without shardings whose arguments live on `mesh`: one program for
  its devices. Each argument keeps its layout; a closed-over array (the first
  `num_consts`) is whole on every device, as the constant JAX writes into its
  program is; XLA's partitioner lays out the rest."""
  replicated = NamedSharding(mesh, P())
  ins = [replicated] * num_consts + [None] * (len(args) - num_consts)
  return execute_jaxpr(jaxpr, args, mesh=mesh, platform=platform, name=name,
                       in_shardings=ins)


_one_primitive: dict = {}   # (primitive, params) -> a jit of it alone
own_dispatch: set = {xla.xla_call_p, reshard_p}   # their impl rules place their results


def mesh_bind(prim, args, params) -> list:
  """An eager op with an operand on many devices: a jit of the primitive
  alone, which runs on the operands' devices (JAX's `apply_primitive`)."""
  if prim in own_dispatch or prim in effect_rules:
    out = core.impl_rules[prim](*args, **params)
    return out if prim.multiple_results else [out]
  try:
    key = (prim, tuple(sorted(params.items())))
    fun = _one_primitive.get(key)
  except TypeError:   # a parameter that can't be a key: a jit of its own
    key, fun = None, None
  if fun is None:
    def one(*xs):
      return prim.bind(*xs, **params)
    one.__name__ = prim.name
    fun = xla.jit(one)
    if key is not None:
      if len(_one_primitive) > 512:   # params holding jaxprs differ on each call
        _one_primitive.clear()
      _one_primitive[key] = fun
  out = fun(*args)
  return list(out) if prim.multiple_results else [out]


core.mesh_array_types.add(ShardedArray)
core.mesh_bind = mesh_bind


# --- Reading back the layout XLA chose ---------------------------------------------------------

def layout_from_tiles(mesh, tiles, ndim: int):
  """The NamedSharding whose slices are the ones XLA's tiling gives each
  device: `tiles` is (tile counts per dimension, device positions in tile
  order, whether the last tile dimension stands for replication)."""
  dims, order, replicated_last = tiles
  if not dims:
    return NamedSharding(mesh, P())
  grid = np.array(order).reshape(dims)
  coords = {int(k): tuple(int(c) for c in np.argwhere(grid == k)[0][:ndim])
            for k in order}
  counts = tuple(dims[:ndim])
  for spec in _candidate_specs(mesh, ndim):
    s = NamedSharding(mesh, spec)
    if s.tiles(ndim) == counts and _tile_coords(s, ndim) == coords:
      return s
  return OpaqueSharding(mesh, counts, coords)


def _tile_coords(sharding, ndim) -> dict:
  mesh, out = sharding.mesh, {}
  for k, pos in enumerate(np.ndindex(*mesh.axis_sizes)):
    coord = dict(zip(mesh.axis_names, pos))
    tile = []
    for d in range(ndim):
      t = 0
      for a in sharding.spec.axes_of(d):
        t = t * mesh.shape[a] + coord[a]
      tile.append(t)
    out[k] = tuple(tile)
  return out


def _candidate_specs(mesh, ndim):
  """Every PartitionSpec of rank `ndim` on `mesh` (each axis on one dimension
  or none, in every order): few, for the meshes of a course."""
  names = mesh.axis_names
  for where in itertools.product([None, *range(ndim)], repeat=len(names)):
    per_dim = [[a for a, w in zip(names, where) if w == d] for d in range(ndim)]
    for orders in itertools.product(*[itertools.permutations(p) for p in per_dim]):
      yield P(*[None if not o else o[0] if len(o) == 1 else tuple(o) for o in orders])


class OpaqueSharding(NamedSharding):
  """A layout XLA chose that no PartitionSpec describes: kept as its tiles."""

  def __init__(self, mesh, counts, coords):
    self.mesh, self.spec, self._counts, self._coords = mesh, P(), counts, coords

  def tiles(self, ndim):
    return self._counts

  def devices_indices_map(self, global_shape) -> dict:
    shard = self.shard_shape(global_shape)
    return {dev: tuple(slice(c * n, (c + 1) * n) for c, n in zip(self._coords[k], shard))
            for k, dev in enumerate(self.mesh.device_list)}

  def same_layout(self, other, ndim):
    return other is self

  def __repr__(self):
    return f"OpaqueSharding(mesh={self.mesh!r}, tiles={self._counts})"


# --- Which mesh a jaxpr runs on -------------------------------------------------------------

def find_mesh(jaxpr: Jaxpr):
  """The mesh of the first shard_map in `jaxpr` (or in a jaxpr inside it)."""
  for eqn in jaxpr.eqns:
    if "mesh" in eqn.params and eqn.params["mesh"] is not None:
      return eqn.params["mesh"]
    for v in eqn.params.values():
      for sub in (v if isinstance(v, tuple) else (v,)):
        if isinstance(sub, (Jaxpr, ClosedJaxpr)):
          mesh = find_mesh(sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub)
          if mesh is not None:
            return mesh
  return None


def specialize(jitted, traced, dyn_args) -> None:
  """Settle the mesh and layouts of one specialization of a jitted function,
  taken from its shardings, or (with none given) from a shard_map inside it."""
  declared = [s for s in (jitted.in_shardings, jitted.out_shardings) if s is not None]
  leaves = [x for tree in declared for x in _leaves(tree)]
  typed = [a.sharding for a in (*traced.jaxpr.in_avals, *traced.jaxpr.out_avals)
           if a.sharding is not None]   # Explicit axes: the types say where
  mesh = (leaves[0].mesh if leaves else typed[0].mesh if typed
          else find_mesh(traced.jaxpr))
  if mesh is None:
    return
  n_consts = len(traced.jaxpr.invars) - len(_flat(dyn_args))
  ins = [None] * len(_flat(dyn_args))
  if jitted.in_shardings is not None:
    tree = jitted.in_shardings
    if isinstance(tree, (tuple, list)) and len(tree) < len(dyn_args):   # kwargs: a dict at the end
      tree = (*tree, *[None] * (len(dyn_args) - len(tree)))
    ins = broadcast_prefix(tree if isinstance(tree, (tuple, list)) or isinstance(
        tree, NamedSharding) else tree, tuple(dyn_args), "jit in_shardings")
  outs = [a.sharding for a in traced.jaxpr.out_avals]   # None unless Explicit
  if jitted.out_shardings is not None:
    skeleton = tree_unflatten(traced.out_tree, [0] * len(outs))
    outs = broadcast_prefix(jitted.out_shardings, skeleton, "jit out_shardings")
  for s in [*ins, *outs]:
    if s is not None and not isinstance(s, NamedSharding):
      raise TypeError(f"jit: shardings must be NamedShardings (or None), got {s!r}")
    if s is not None and s.mesh != mesh:
      raise ValueError(f"jit: every sharding must be on one mesh; got {s.mesh} and {mesh}")
  avals = [*traced.jaxpr.in_avals[n_consts:], *traced.jaxpr.out_avals]
  for k, (s, aval) in enumerate(zip([*ins, *outs], avals)):
    if s is not None and len(s.spec) > aval.ndim:
      what = f"argument {k}" if k < len(ins) else f"output {k - len(ins)}"
      raise ValueError(f"jit: the sharding {s.spec} of {what} ({aval.str_short()}) has "
                       f"{len(s.spec)} entries, more than its rank {aval.ndim}: give at "
                       "most one per dimension")
  traced.mesh = mesh
  # A closed-over array is written into the program as a constant, as JAX does:
  # XLA's partitioner may cut it as it likes (a replicated argument it could not).
  traced.jaxpr, traced.consts = inline_consts(traced.jaxpr, traced.consts)
  n_consts = len(traced.consts)
  traced.in_shardings = (NamedSharding(mesh, P()),) * n_consts + tuple(ins)
  traced.out_shardings = tuple(outs)


def inline_consts(jaxpr, consts):
  """`jaxpr` (its first inputs: `consts`) with each const that is an array, not a
  tracer, as a literal; returns it and the consts left."""
  keep = [isinstance(c, core.Tracer) for c in consts]
  lits = {v: Lit(np.asarray(c), v.aval) for v, c, k in zip(jaxpr.invars, consts, keep) if not k}
  if not lits:
    return jaxpr, consts
  read = lambda x: lits.get(x, x) if not isinstance(x, Lit) else x   # noqa: E731
  eqns = [JaxprEqn(e.primitive, [read(x) for x in e.inputs], e.params, e.out_binders)
          for e in jaxpr.eqns]
  invars = [v for v in jaxpr.invars if v not in lits]
  return (Jaxpr(jaxpr.constvars, invars, eqns, [read(x) for x in jaxpr.outvars]),
          [c for c, k in zip(consts, keep) if k])


def _flat(tree) -> list:
  return tree_flatten(tree)[0]


def _leaves(tree) -> list:
  """The NamedShardings in a pytree of them (None leaves dropped)."""
  if isinstance(tree, NamedSharding):
    return [tree]
  return [x for x in _flat(tree) if isinstance(x, NamedSharding)]


# --- Reading the partitioned program -----------------------------------------------------------

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute",
               "all-to-all")


def collectives_in(hlo_text: str) -> list[str]:
  """The kinds of collective in a partitioned HLO program, each once, sorted:
  the communication XLA's partitioner inserted (or shard_map asked for)."""
  found = re.findall(r"\b(" + "|".join(COLLECTIVES) + r")(?:-start)?\(", hlo_text)
  return sorted(set(found))


xla.spmd = sys.modules[__name__]   # jit hands programs for a mesh to this module
