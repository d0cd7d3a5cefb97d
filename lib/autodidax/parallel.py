"""Named axes and collectives: psum, all_gather, ppermute and their friends.

A collective computes across the elements of a *named* axis. Two things bind
a name: `vmap(f, axis_name='i')`, where the elements are the batch, and
`shard_map` over a mesh, where they are devices. The same program means the
same thing under both: `psum(x, 'i')` is the sum of `x` over every element
of axis 'i', given to each of them.

Under vmap, a collective's batching rule turns it into ordinary array code
(psum becomes reduce_sum along the batch axis). Inside shard_map it stays
a primitive and is lowered to one of XLA's collectives (all-reduce,
all-gather, reduce-scatter, collective-permute), which move data between
devices. JAX keeps these in jax/_src/lax/parallel.py.
"""
from __future__ import annotations

import math

import numpy as np

from . import ad, core, lowering
from . import primitives as lax
from . import numpy as anp
from .batching import (AxisFrame, UnboundAxisError, axis_frame, axis_size,  # noqa: F401
                       bound_axes, extend_axis_env, NamedBatchTrace, axis_vmap_rules, move_batch_axis, moveaxis,
                       not_mapped, vmap_rules)
from .core import Primitive, ShapedArray, abstract_eval_rules, impl_rules, raise_to_shaped
from .jaxpr import Jaxpr
from .util import cache_by_jaxpr
from .lowering import mlir_type
from .tree_util import tree_flatten, tree_unflatten


# --- Collective primitives ---------------------------------------------------------------

class CollectivePrimitive(Primitive):
  """A primitive that computes across the named axes in `axes`, its param.

  `bind` usually lets the interpreter of the highest-level operand handle
  a primitive. A collective must also reach the named vmap that binds its
  axis, even when none of its operands is batched there (psum(1., 'i') is
  the size of 'i', and axis_index has no operand at all). So when that
  vmap's interpreter sits higher than every operand's, the operands are
  boxed for it first, and `bind` picks it as usual.
  """

  def bind(self, *args, **params):
    main = None
    for name in params["axes"]:
      frame = axis_frame(name)
      if frame is None:
        raise UnboundAxisError(name, self.name)
      if frame.main is not None and (main is None
                                     or frame.main.level > main.level):
        main = frame.main
    if main is not None and core.current_design() is core.levels:
      if main.level > core.find_top_trace(args).main.level:
        trace = main.trace_type(main)
        args = [core.full_raise(trace, x) for x in args]
        if not args:   # axis_index: no operand to box for it
          outs = trace.process_primitive(self, [], params)
          outs = [core.full_lower(y) for y in outs]
          return outs if self.multiple_results else outs[0]
    return super().bind(*args, **params)


def _used_axis_names(params) -> set:
  """The axis names that collectives in the jaxprs of `params` use."""
  names: set = set()
  for v in params.values():
    for j in (v if isinstance(v, tuple) else (v,)):
      j = getattr(j, "jaxpr", j)   # a ClosedJaxpr's Jaxpr
      if isinstance(j, Jaxpr):
        names |= _jaxpr_axis_names(j)
  return names


@cache_by_jaxpr
def _jaxpr_axis_names(jaxpr) -> set:
  names: set = set()
  for eqn in jaxpr.eqns:
    if isinstance(eqn.primitive, CollectivePrimitive):
      names |= set(eqn.params["axes"])
    names |= _used_axis_names(eqn.params)
  return frozenset(names)


def _named_axis_hook(prim, args, params):
  """A higher-order primitive (it has a named-axis rule) whose jaxprs use a
  named vmap's axis goes to that vmap, even if no operand is batched there:
  its operands are boxed for it, as CollectivePrimitive.bind does."""
  if prim not in axis_vmap_rules or isinstance(prim, CollectivePrimitive):
    return args
  if core.current_design() is not core.levels:
    return args
  mains = [axis_frame(name) for name in _used_axis_names(params)]
  mains = [f.main for f in mains if f is not None and f.main is not None]
  if not mains:
    return args
  main = max(mains, key=lambda m: m.level)
  if main.level <= core.find_top_trace(args).main.level:
    return args
  trace = main.trace_type(main)
  return [core.full_raise(trace, x) for x in args]


core.named_axis_hook = _named_axis_hook


psum_p = CollectivePrimitive("psum")
pmax_p = CollectivePrimitive("pmax")
pmin_p = CollectivePrimitive("pmin")
all_gather_p = CollectivePrimitive("all_gather")
psum_scatter_p = CollectivePrimitive("psum_scatter")
ppermute_p = CollectivePrimitive("ppermute")
axis_index_p = CollectivePrimitive("axis_index")
collective_primitives = (psum_p, pmax_p, pmin_p, all_gather_p, psum_scatter_p,
                         ppermute_p, axis_index_p)


def _names(axis_name, empty_ok=False) -> tuple:
  names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
  if not names and not empty_ok:
    raise ValueError("a collective needs at least one axis name")
  return names


def _check_axis(prim, axis, rank: int, lowest=None) -> int:
  """`axis` of an array of rank `rank`, counted from 0 (a negative one, down
  to `lowest`, from the end), or a ValueError, as JAX's: no wrapping around."""
  if not (-rank if lowest is None else lowest) <= axis < rank:
    raise ValueError(f"{prim}: axis {axis} is out of bounds for array of "
                     f"dimension {rank}")
  return axis % rank


def _tree_map(f, tree):
  leaves, treedef = tree_flatten(tree)
  return tree_unflatten(treedef, [f(x) for x in leaves])


# --- The wrappers, with JAX's signatures ----------------------------------------------------

def psum(x, axis_name):
  """The sum of `x` over every element of the named axis (or axes), given to
  each element. `x` may be a pytree. `psum(1, 'i')` is the size of 'i'."""
  axes = _names(axis_name, empty_ok=True)
  if not axes:   # a sum over no axes
    return x
  return _tree_map(lambda v: psum_p.bind(_bool_as_int(v), axes=axes), x)


def _bool_as_int(v):   # JAX sums bools as int32
  return lax.convert_element_type(v, np.int32) if _is_bool(v) else v


def _is_bool(v) -> bool:
  return np.dtype(core.get_aval(v).dtype) == np.bool_


def pmean(x, axis_name):
  """The mean over the named axis (or axes): psum divided by the axis size."""
  axes = _names(axis_name)
  return _tree_map(lambda v: anp.true_divide(psum(v, axes), axis_size(axes)), x)


def pmax(x, axis_name):
  axes = _names(axis_name, empty_ok=True)
  if not axes:
    return x
  return _tree_map(lambda v: pmax_p.bind(v, axes=axes), x)


def pmin(x, axis_name):
  axes = _names(axis_name, empty_ok=True)
  if not axes:
    return x
  return _tree_map(lambda v: pmin_p.bind(v, axes=axes), x)


def all_gather(x, axis_name, *, axis: int = 0, tiled: bool = False):
  """Every element's `x`, stacked along a new axis `axis` (in the order of
  the named axis); with `tiled=True`, concatenated along `axis` instead.
  Over a tuple of names the elements are ordered with the first name major."""
  names = _names(axis_name)

  def gather(v):
    ax, tile = _check_axis(all_gather_p, axis, np.ndim(v) + (not tiled)), tiled
    for name in reversed(names):   # the last name varies fastest: gather it first,
      v = all_gather_p.bind(v, axes=(name,), axis=ax, tiled=tile)   # then whole
      tile = True                                                   # blocks of it
    return v
  return _tree_map(gather, x)


def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, tiled: bool = False):
  """psum, but each element keeps only its own block of the sum: block k of
  `scatter_dimension` goes to element k (with `tiled=False` that dimension
  must have the axis's size, and it is removed)."""
  names = _names(axis_name)

  def scatter(v):
    d = _check_axis(psum_scatter_p, scatter_dimension, np.ndim(v))
    _check_scatter(np.shape(v), d, axis_size(names), tiled, names)
    if len(names) > 1 and not tiled:   # split the dimension, then scatter tiled
      return lax.reshape(psum_scatter(v, names, scatter_dimension=d, tiled=True),
                         np.shape(v)[:d] + np.shape(v)[d + 1:])
    for name in names:   # the first name is major: its blocks are the largest
      v = psum_scatter_p.bind(v, axes=(name,), scatter_dimension=d, tiled=tiled)
    return v
  return _tree_map(scatter, x)


def ppermute(x, axis_name, perm):
  """Send each element's `x` along the named axis: `perm` is a list of
  (source, destination) index pairs. An element no one sends to gets zeros."""
  names = _names(axis_name)
  if len(names) != 1:
    raise NotImplementedError(
        f"ppermute over several axes {names} is not in autodidax; permute "
        "along one axis at a time.")
  perm = tuple((int(s), int(d)) for s, d in perm)
  _check_perm(perm, names[0])
  return _tree_map(lambda v: ppermute_p.bind(v, axes=names, perm=perm), x)


def axis_index(axis_name):
  """This element's index along the named axis (int32). Over a tuple of names,
  the index in the flattened axes, the first name major."""
  names = _names(axis_name)
  index = axis_index_p.bind(axes=names[-1:])
  stride = axis_size(names[-1])
  for name in reversed(names[:-1]):
    index = lax.add(index, lax.mul(axis_index_p.bind(axes=(name,)), np.int32(stride)))
    stride *= axis_size(name)
  return index


# --- Evaluation and abstract evaluation ---------------------------------------------------

def _no_impl(prim):
  def impl(*args, **params):
    raise UnboundAxisError(params["axes"][0], prim.name)
  return impl


for _p in collective_primitives:
  impl_rules[_p] = _no_impl(_p)


def _check_bound(prim, axes):
  for name in axes:
    if axis_frame(name) is None:
      raise UnboundAxisError(name, prim.name)


def _same_aval(prim):
  def rule(aval, *, axes, **params):
    _check_bound(prim, axes)
    return raise_to_shaped(aval)
  return rule


for _p in (psum_p, pmax_p, pmin_p):
  abstract_eval_rules[_p] = _same_aval(_p)


def _all_gather_abstract_eval(aval, *, axes, axis, tiled):
  _check_bound(all_gather_p, axes)
  _check_axis(all_gather_p, axis, aval.ndim + (not tiled), lowest=0)
  n, shape = axis_size(axes), list(aval.shape)
  if tiled:
    shape[axis] *= n
  else:
    shape.insert(axis, n)
  return aval.update(shape=tuple(shape))


def _check_scatter(shape, d, n, tiled, axes):
  if shape[d] % n if tiled else shape[d] != n:
    raise ValueError(f"psum_scatter: dimension {d} of an array of shape {tuple(shape)} must "
                     f"be {'a multiple of' if tiled else 'equal to'} the size {n} of {axes}")


def _psum_scatter_abstract_eval(aval, *, axes, scatter_dimension, tiled):
  _check_bound(psum_scatter_p, axes)
  _check_axis(psum_scatter_p, scatter_dimension, aval.ndim, lowest=0)
  n, shape, d = axis_size(axes), list(aval.shape), scatter_dimension
  _check_scatter(shape, d, n, tiled, axes)
  if tiled:
    shape[d] //= n
  else:
    del shape[d]
  return aval.update(shape=tuple(shape))


def _check_perm(perm, name):
  n = axis_size(name)
  sources, dests = [s for s, _ in perm], [d for _, d in perm]
  if len(set(sources)) < len(sources) or len(set(dests)) < len(dests) or not all(
      0 <= i < n for i in sources + dests):
    raise ValueError(f"ppermute: {list(perm)} is not a permutation of some of the "
                     f"{n} indices of axis {name!r}: each index may send and "
                     "receive at most once")


def _ppermute_abstract_eval(aval, *, axes, perm):
  _check_bound(ppermute_p, axes)
  _check_perm(perm, axes[0])
  return raise_to_shaped(aval)


def _axis_index_abstract_eval(*, axes):
  _check_bound(axis_index_p, axes)
  return ShapedArray((), np.int32)


abstract_eval_rules[all_gather_p] = _all_gather_abstract_eval
abstract_eval_rules[psum_scatter_p] = _psum_scatter_abstract_eval
abstract_eval_rules[ppermute_p] = _ppermute_abstract_eval
abstract_eval_rules[axis_index_p] = _axis_index_abstract_eval


# --- Derivatives: JVP and transposition ----------------------------------------------------

for _p in (psum_p, all_gather_p, psum_scatter_p, ppermute_p):
  ad.jvp_rules[_p] = ad.linear_jvp(_p)


# pmax and pmin are not linear, and JAX 0.10 gives them no derivative: like
# JAX, autodidax has no JVP rule for them (grad raises, naming the primitive).


def _psum_transpose(ct, x, *, axes):
  """psum is linear, and its matrix (every element gets the sum of all) is
  symmetric: it is its own transpose. Each element's cotangent is the sum of
  the cotangents of every element's output."""
  return [psum_p.bind(ct, axes=axes)]


def _all_gather_transpose(ct, x, *, axes, axis, tiled):
  return [psum_scatter_p.bind(ct, axes=axes, scatter_dimension=axis,
                              tiled=tiled)]


def _psum_scatter_transpose(ct, x, *, axes, scatter_dimension, tiled):
  return [all_gather_p.bind(ct, axes=axes, axis=scatter_dimension,
                            tiled=tiled)]


def _ppermute_transpose(ct, x, *, axes, perm):
  inverse = tuple((dst, src) for src, dst in perm)
  return [ppermute_p.bind(ct, axes=axes, perm=inverse)]


ad.transpose_rules[psum_p] = _psum_transpose
ad.transpose_rules[all_gather_p] = _all_gather_transpose
ad.transpose_rules[psum_scatter_p] = _psum_scatter_transpose
ad.transpose_rules[ppermute_p] = _ppermute_transpose


# --- Batching: under the vmap that binds its name, a collective is array code -----------------

def _psum_vmap(axis_data, vals_in, dims_in, *, axes):
  """A psum over this vmap's axis sums along the batch axis: the result is
  the same for every element (not mapped). Other names stay a psum."""
  (x,), (d,) = vals_in, dims_in
  if axis_data.name not in axes:
    return _other_axis(psum_p, vals_in, dims_in, axes=axes)
  if d is not_mapped:
    y = lax.mul(x, axis_data.size)
  else:
    y = lax.reduce_sum(x, (d,))
  rest = tuple(n for n in axes if n != axis_data.name)
  return (psum_p.bind(y, axes=rest) if rest else y), not_mapped


def _pmax_vmap(prim, reduce):
  def rule(axis_data, vals_in, dims_in, *, axes):
    (x,), (d,) = vals_in, dims_in
    if axis_data.name not in axes:
      return _other_axis(prim, vals_in, dims_in, axes=axes)
    y = x if d is not_mapped else reduce(x, (d,))
    rest = tuple(n for n in axes if n != axis_data.name)
    return (prim.bind(y, axes=rest) if rest else y), not_mapped
  return rule


def _all_gather_vmap(axis_data, vals_in, dims_in, *, axes, axis, tiled):
  """The batch is the stack of every element's x: move it where the stack
  goes (copies of x if it isn't batched). The result is the same for all."""
  (x,), (d,) = vals_in, dims_in
  n = axis_data.size
  if d is not_mapped:
    x, d = move_batch_axis(n, d, axis, x), axis
  out = moveaxis(x, d, axis) if d != axis else x
  if tiled:   # (..., n, k, ...) -> (..., n * k, ...)
    shape = np.shape(out)
    out = lax.reshape(out, (*shape[:axis], n * shape[axis + 1],
                            *shape[axis + 2:]))
  return out, not_mapped


def _psum_scatter_vmap(axis_data, vals_in, dims_in, *, axes, scatter_dimension, tiled):
  """Sum along the batch axis, then element k takes block k: the blocks of
  `scatter_dimension` become the batch axis, with no data moved."""
  (x,), (d,) = vals_in, dims_in
  n = axis_data.size
  total = lax.mul(x, n) if d is not_mapped else lax.reduce_sum(x, (d,))
  sd, shape = scatter_dimension, np.shape(total)
  if tiled:
    total = lax.reshape(total, (*shape[:sd], n, shape[sd] // n,
                                *shape[sd + 1:]))
  return total, sd


def _ppermute_vmap(axis_data, vals_in, dims_in, *, axes, perm):
  """Element k receives element j's x for each pair (j, k) of `perm`, and
  zeros if no one sends to it: slices of the batch, put in a new order."""
  (x,), (d,) = vals_in, dims_in
  n = axis_data.size
  x = move_batch_axis(n, d, 0, x)
  rest, source = np.shape(x)[1:], {dst: src for src, dst in perm}
  zero = np.zeros((1, *rest), np.result_type(core.get_aval(x).dtype))
  parts = [lax.slice(x, (source[k], *[0] * len(rest)),
                     (source[k] + 1, *rest)) if k in source else zero
           for k in range(n)]
  return lax.concatenate(parts, 0), 0


def _axis_index_vmap(axis_data, vals_in, dims_in, *, axes):
  """Under its own vmap, the index is the batch itself: 0, 1, ..., size - 1."""
  return np.arange(axis_data.size, dtype=np.int32), 0


def _named_rule(prim, rule):
  """`rule` for this vmap's own axis; the other-axis rule for other names."""
  def named(axis_data, vals_in, dims_in, **params):
    if axis_data.name not in params["axes"]:
      return _other_axis(prim, vals_in, dims_in, **params)
    return rule(axis_data, vals_in, dims_in, **params)
  return named


def _other_axis(prim, vals_in, dims_in, **params):
  """A collective over names this vmap doesn't bind: apply it to the whole
  batch at once (the batch axis first; an operand's `axis` shifts past it)."""
  (x,), (d,) = vals_in, dims_in
  if d is not_mapped:
    return prim.bind(x, **params), not_mapped
  if prim in (psum_p, pmax_p, pmin_p, ppermute_p):   # elementwise across the axis
    return prim.bind(x, **params), d
  x = moveaxis(x, d, 0) if d != 0 else x
  key = "axis" if prim is all_gather_p else "scatter_dimension"
  return prim.bind(x, **dict(params, **{key: params[key] + 1})), 0


axis_vmap_rules[psum_p] = _psum_vmap
axis_vmap_rules[pmax_p] = _pmax_vmap(pmax_p, lax.reduce_max)
axis_vmap_rules[pmin_p] = _pmax_vmap(pmin_p, lax.reduce_min)
# (Each rule is looked up when called, so that an exercise can replace it.)
axis_vmap_rules[all_gather_p] = _named_rule(all_gather_p, lambda *a, **k: _all_gather_vmap(*a, **k))
axis_vmap_rules[psum_scatter_p] = _named_rule(psum_scatter_p,
                                              lambda *a, **k: _psum_scatter_vmap(*a, **k))
axis_vmap_rules[ppermute_p] = _named_rule(ppermute_p, lambda *a, **k: _ppermute_vmap(*a, **k))
axis_vmap_rules[axis_index_p] = _axis_index_vmap
for _p in collective_primitives[:-1]:   # an unnamed vmap binds no name
  vmap_rules[_p] = (lambda axis_size, vals_in, dims_in, _p=_p, **params:
                    _other_axis(_p, vals_in, dims_in, **params))


# --- Lowering: inside shard_map, to XLA's collectives ------------------------------------------

def device_groups(mesh, axes) -> list[list[int]]:
  """The devices that compute one collective together: those whose mesh
  coordinates differ only along `axes`. Devices are numbered in the mesh's
  order (their partition ids in the compiled program)."""
  ids = np.arange(mesh.size).reshape(mesh.axis_sizes)
  along = [mesh.axis_names.index(a) for a in axes]
  others = [i for i in range(ids.ndim) if i not in along]
  size = math.prod(mesh.shape[a] for a in axes)
  return ids.transpose(others + along).reshape(-1, size).tolist()


def _groups_attr(groups) -> str:
  rows = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups)
  return f"dense<[{rows}]> : tensor<{len(groups)}x{len(groups[0])}xi64>"


def _channel(ctx) -> str:
  module = ctx.module
  module.channels = getattr(module, "channels", 0) + 1
  return f"#stablehlo.channel_handle<handle = {module.channels}, type = 1>"


def _manual_mesh(ctx, name):
  mesh = getattr(ctx.module, "mesh", None)
  if mesh is None:
    raise UnboundAxisError(
        name, "a collective being compiled outside shard_map (under jit, collectives "
        "need shard_map's devices; under vmap they become array code)")
  return mesh


def _scalar_region(ctx, op, dtype) -> str:
  """A region combining two scalars with `op` (as stablehlo.reduce's)."""
  t = mlir_type(ShapedArray((), dtype))
  a, b, c = ctx.fresh(), ctx.fresh(), ctx.fresh()
  return (f"({{\n    ^bb0({a}: {t}, {b}: {t}):\n      {c} = stablehlo.{op} {a}, {b} : {t}\n"
          f"      stablehlo.return {c} : {t}\n    }})")


def _all_reduce_lowering(op):
  def rule(ctx, x, *, axes):
    mesh = _manual_mesh(ctx, axes[0])
    (aval,), (out,) = ctx.avals_in, ctx.avals_out
    kind = op if aval.dtype != np.bool_ else {"add": "or", "maximum": "or",
                                              "minimum": "and"}[op]
    result = ctx.fresh()
    ctx.emit(f'{result} = "stablehlo.all_reduce"({x}) <{{channel_handle = {_channel(ctx)}, '
             f"replica_groups = {_groups_attr(device_groups(mesh, axes))}, "
             f"use_global_device_ids}}> {_scalar_region(ctx, kind, aval.dtype)} : "
             f"({mlir_type(aval)}) -> {mlir_type(out)}", result=False)
    return result
  return rule


def _all_gather_lowering(ctx, x, *, axes, axis, tiled):
  mesh = _manual_mesh(ctx, axes[0])
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  if not tiled:   # gather along a new axis of size 1
    shape = (*aval.shape[:axis], 1, *aval.shape[axis:])
    x = ctx.emit(f"stablehlo.reshape {x} : ({mlir_type(aval)}) -> "
                 f"{mlir_type(aval.update(shape=shape))}")
    aval = aval.update(shape=shape)
  return ctx.emit(f'"stablehlo.all_gather"({x}) <{{all_gather_dim = {axis} : i64, '
                  f"channel_handle = {_channel(ctx)}, replica_groups = "
                  f"{_groups_attr(device_groups(mesh, axes))}, use_global_device_ids}}> : "
                  f"({mlir_type(aval)}) -> {mlir_type(out)}")


def _psum_scatter_lowering(ctx, x, *, axes, scatter_dimension, tiled):
  mesh = _manual_mesh(ctx, axes[0])
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  d = scatter_dimension
  block = out if tiled else out.update(shape=(*out.shape[:d], 1, *out.shape[d:]))
  result = ctx.fresh()
  ctx.emit(f'{result} = "stablehlo.reduce_scatter"({x}) <{{channel_handle = {_channel(ctx)}, '
           f"replica_groups = {_groups_attr(device_groups(mesh, axes))}, "
           f"scatter_dimension = {d} : i64, use_global_device_ids}}> "
           f"{_scalar_region(ctx, 'add', aval.dtype)} : ({mlir_type(aval)}) -> "
           f"{mlir_type(block)}", result=False)
  if tiled:
    return result
  return ctx.emit(f"stablehlo.reshape {result} : ({mlir_type(block)}) -> {mlir_type(out)}")


def _ppermute_lowering(ctx, x, *, axes, perm):
  """Each group of devices along the axis permutes among itself."""
  mesh = _manual_mesh(ctx, axes[0])
  pairs = [(g[s], g[d]) for g in device_groups(mesh, axes) for s, d in perm]
  rows = ", ".join(f"[{s}, {d}]" for s, d in pairs)
  attr = f"dense<[{rows}]> : tensor<{len(pairs)}x2xi64>" if pairs else \
      "dense<> : tensor<0x2xi64>"
  t = mlir_type(ctx.avals_out[0])
  return ctx.emit(f'"stablehlo.collective_permute"({x}) <{{channel_handle = {_channel(ctx)}, '
                  f"source_target_pairs = {attr}}}> : ({t}) -> {t}")


def _axis_index_lowering(ctx, *, axes):
  """The partition id numbers the devices in mesh order: this axis's
  coordinate is (id // the sizes of the axes after it) % its size."""
  mesh = _manual_mesh(ctx, axes[0])
  k = mesh.axis_names.index(axes[0])
  stride = math.prod(mesh.axis_sizes[k + 1:])
  u32 = "tensor<ui32>"
  pid = ctx.emit(f"stablehlo.partition_id : {u32}")
  div = ctx.emit(f"stablehlo.divide {pid}, {ctx.constant(stride, np.uint32)} : {u32}")
  rem = ctx.emit(f"stablehlo.remainder {div}, {ctx.constant(mesh.axis_sizes[k], np.uint32)}"
                 f" : {u32}")
  return ctx.emit(f"stablehlo.convert {rem} : ({u32}) -> tensor<i32>")


lowering.lowering_rules[psum_p] = _all_reduce_lowering("add")
lowering.lowering_rules[pmax_p] = _all_reduce_lowering("maximum")
lowering.lowering_rules[pmin_p] = _all_reduce_lowering("minimum")
lowering.lowering_rules[all_gather_p] = _all_gather_lowering
lowering.lowering_rules[psum_scatter_p] = _psum_scatter_lowering
lowering.lowering_rules[ppermute_p] = _ppermute_lowering
lowering.lowering_rules[axis_index_p] = _axis_index_lowering
