"""Shardings in the types: each primitive's sharding rule (Explicit mode).

On a mesh whose axes are Explicit (make_mesh's default, as in JAX 0.10), an
array's type says how the mesh splits it: `f32[16@data,4]` is split along
its first dimension over the axis "data". Staging an operation computes its
result's type, sharding included. The abstract eval rule gives the shape and
dtype; the primitive's *sharding rule*, registered beside its other rules,

    core.sharding_rules[prim] = rule     # rule(*avals, **params) -> spec

gives the result's PartitionSpec from the operands' (`aval.sharding.spec`).
Where the answer would be a guess (a contraction over a dimension both
operands split; a reshape that scatters a split dimension), the rule raises
ShardingTypeError and asks for `out_sharding=`, as JAX does. Lowering puts
each result's sharding into the program (`sdy.sharding_constraint`), so
XLA's partitioner follows the types. On Auto axes types carry no sharding
and the partitioner decides alone. JAX keeps its rules beside each
primitive in jax/_src/lax/lax.py (`_dot_general_sharding_rule`, ...).
"""
from __future__ import annotations

import numpy as np

from . import ad, batching, core, lax, lowering
from .core import abstract_eval_rules, impl_rules, sharding_rules
from .sharding import NamedSharding, P, PartitionSpec, device_put, get_mesh, reshard_p


class ShardingTypeError(TypeError):
  """An operation whose result's sharding the types don't determine, or
  operands whose shardings don't fit together (JAX's ShardingTypeError)."""


def spec_of(aval) -> tuple:
  """An operand's layout as a tuple of axis tuples, one per dimension (all
  empty for an operand without a sharding: a constant, whole everywhere)."""
  if aval.sharding is None:
    return ((),) * aval.ndim
  return aval.sharding.spec.normalized(aval.ndim)


def as_spec(dims) -> PartitionSpec:
  """The PartitionSpec of a tuple of axis tuples."""
  return P(*[None if not a else a[0] if len(a) == 1 else tuple(a) for a in dims])


def _type_text(avals) -> str:
  return ", ".join(a.str_short() for a in avals)


# --- The hook: every staged operation's output type --------------------------------------------

KEEP = "keep"   # the abstract eval rule already gave the shardings (higher-order primitives)


def _with_types(prim, avals, params, out):
  """`out` (the abstract eval's types) with the shardings and the vma that
  the primitive's rules give."""
  if any(a.sharding is not None for a in avals):
    out = _with_shardings(prim, avals, params, out)
  vmas = [a.vma for a in avals]
  if prim in core.vma_rules:
    vma = core.vma_rules[prim](vmas, **params)
  elif prim.multiple_results and sharding_rules.get(prim) is KEEP:
    return out   # a body's types (control flow, calls) are the answer
  else:   # the union: an invariant operand meets a varying one as if pvary'd
    vma = frozenset().union(*vmas)
  if prim.multiple_results:
    return [o.update(vma=vma) for o in out]
  return out.update(vma=vma)


def _with_shardings(prim, avals, params, out):
  """`out` (the abstract eval's types) with the shardings the rule gives."""
  meshes = {a.sharding.mesh for a in avals if a.sharding is not None}
  if len(meshes) > 1:
    raise ShardingTypeError(
        f"{prim.name}: operands on different meshes ({', '.join(map(repr, meshes))}); "
        "put them on one mesh first (device_put).")
  mesh, = meshes
  outs = out if prim.multiple_results else [out]
  split = any(any(spec_of(a)) for a in avals)
  rule = sharding_rules.get(prim) if not split else sharding_rules[prim]
  if rule is KEEP:
    return out
  specs = rule(*avals, **params) if rule is not None else [P()] * len(outs)
  specs = specs if prim.multiple_results else [specs]
  outs = [o.update(sharding=NamedSharding(mesh, s)) for o, s in zip(outs, specs)]
  for o in outs:
    o.sharding.shard_shape(o.shape)   # the split must divide the dimensions
  return outs if prim.multiple_results else outs[0]


core.types_hook = _with_types


def _check_distinct(prim, dims):
  used = [a for d in dims for a in d]
  if len(set(used)) < len(used):
    raise ShardingTypeError(
        f"{prim.name}: the result would split two dimensions over the same mesh axis "
        f"({as_spec(dims)!r}); reshard an operand first, or pass out_sharding=.")
  return as_spec(dims)


# --- Elementwise: the operands' layouts agree, dimension by dimension --------------------------

def elementwise_rule(prim):
  def rule(*avals, **params):
    nd = max(a.ndim for a in avals)
    dims = []
    for d in range(nd):
      got = {spec_of(a)[d] for a in avals if a.ndim == nd and spec_of(a)[d]}
      if len(got) > 1:
        raise ShardingTypeError(
            f"{prim.name} got incompatible shardings for broadcasting: "
            f"{_type_text(avals)} split dimension {d} differently. Reshard one "
            "operand to the other's layout (sharding.reshard).")
      dims.append(got.pop() if got else ())
    return _check_distinct(prim, dims)
  return rule


for _p in (*lax.binary_primitives, *lax.unary_primitives, lax.pow_p, lax.integer_pow_p,
           lax.round_p, lax.convert_element_type_p, lax.cumsum_p):
  sharding_rules[_p] = elementwise_rule(_p)


def same_as_operand(x, *rest, **params):
  return as_spec(spec_of(x))


# --- Reductions: the reduced dimensions' axes go away --------------------------------------

def _reduce_rule(x, *, axes, **params):
  return as_spec([a for d, a in enumerate(spec_of(x)) if d not in axes])


for _p in (lax.reduce_sum_p, lax.reduce_max_p, lax.reduce_min_p, lax.reduce_prod_p,
           lax.argmax_p, lax.argmin_p):
  sharding_rules[_p] = _reduce_rule


# --- Moving dimensions: broadcast, transpose, reshape, concatenate ------------------------------

def _broadcast_rule(x, *, shape, axes):
  """New dimensions are whole; the others keep their axes."""
  old = iter(spec_of(x))
  return as_spec([() if d in axes else next(old) for d in range(len(shape))])


def _transpose_rule(x, *, permutation):
  return as_spec([spec_of(x)[p] for p in permutation])


def _concatenate_rule(*xs, dimension):
  """The operands on the mesh must be laid out alike (JAX's rule), and so is
  the result; host constants fit any layout."""
  layouts = {spec_of(x) for x in xs if x.sharding is not None}
  if len(layouts) > 1:
    raise ShardingTypeError(
        f"concatenate: all operands should have the same sharding, got {_type_text(xs)}. "
        "Reshard them alike first (sharding.reshard).")
  return _check_distinct(lax.concatenate_p, layouts.pop())


def _unsplit_dims_rule(prim, changed):
  """For slicing and padding: the dimensions they change must be whole."""
  def rule(x, *rest, **params):
    for d in changed(x, **params):
      if spec_of(x)[d]:
        raise ShardingTypeError(
            f"{prim.name} changes dimension {d} of {x.str_short()}, which the mesh "
            "splits: reshard it whole first (sharding.reshard).")
    return as_spec(spec_of(x))
  return rule


sharding_rules[lax.broadcast_p] = _broadcast_rule
sharding_rules[lax.transpose_p] = _transpose_rule
sharding_rules[lax.concatenate_p] = _concatenate_rule
sharding_rules[lax.rev_p] = same_as_operand
sharding_rules[lax.pad_p] = _unsplit_dims_rule(
    lax.pad_p, lambda x, *, padding_config: [d for d, c in enumerate(padding_config)
                                             if tuple(c) != (0, 0, 0)])
sharding_rules[lax.slice_p] = _unsplit_dims_rule(
    lax.slice_p, lambda x, *, start_indices, limit_indices, strides: [
        d for d, n in enumerate(x.shape)
        if (start_indices[d], limit_indices[d], strides[d]) != (0, n, 1)])
sharding_rules[lax.dynamic_slice_p] = _unsplit_dims_rule(
    lax.dynamic_slice_p, lambda x, *, slice_sizes: [
        d for d, (n, m) in enumerate(zip(x.shape, slice_sizes)) if n != m])
sharding_rules[lax.dynamic_update_slice_p] = _unsplit_dims_rule(
    lax.dynamic_update_slice_p, lambda x: range(x.ndim))


class _Unsupported(Exception):
  pass


def _groups(old, new):
  """Pair up runs of dimensions of equal product: [(old dims, new dims)],
  ignoring dimensions of size 1."""
  old_dims = [d for d, n in enumerate(old) if n != 1]
  new_dims = [d for d, n in enumerate(new) if n != 1]
  out, i, j = [], 0, 0
  while i < len(old_dims) or j < len(new_dims):
    gi, gj = [old_dims[i]], [new_dims[j]]
    a, b = old[old_dims[i]], new[new_dims[j]]
    i, j = i + 1, j + 1
    while a != b:
      if a < b:
        gi.append(old_dims[i])
        a, i = a * old[old_dims[i]], i + 1
      else:
        gj.append(new_dims[j])
        b, j = b * new[new_dims[j]], j + 1
    out.append((gi, gj))
  return out


def _reshape_rule(x, *, new_sizes, out_sharding=None):
  """A reshape keeps the layout where it only splits one dimension into
  several (its axes go to the leading ones) or merges several into one
  (their axes, major first, split the merged one). Otherwise, or if the
  sizes don't divide, the layout is a guess: JAX asks for out_sharding=."""
  if out_sharding is not None:
    return out_sharding.spec
  spec, mesh = spec_of(x), x.sharding.mesh
  out = [()] * len(new_sizes)
  try:
    for olds, news in _groups(x.shape, new_sizes):
      axes = [a for d in olds for a in spec[d]]
      if len(olds) > 1 and len(news) > 1 and axes:
        raise _Unsupported
      split = [bool(spec[d]) for d in olds]
      if False in split and any(split[split.index(False):]):
        raise _Unsupported   # a merge: only whole minor dimensions may follow split ones
      axes = iter(axes)
      for d in news:   # the axes go to the leading new dimensions that they divide
        rest, mine = new_sizes[d], []
        for a in axes:
          if rest % mesh.shape[a]:
            raise _Unsupported
          rest //= mesh.shape[a]
          mine.append(a)
          if rest == 1:
            break
        out[d] = tuple(mine)
      if next(axes, None) is not None:
        raise _Unsupported
  except _Unsupported:
    raise ShardingTypeError(
        f"reshape can't carry the layout of {x.str_short()} to {tuple(new_sizes)}: it "
        "would scatter a split dimension. Give the result's sharding: "
        "reshape(x, shape, out_sharding=P(...)).") from None
  return as_spec(out)


sharding_rules[lax.reshape_p] = _reshape_rule


# --- dot_general: batch, free and contracting dimensions -------------------------------------------

def _dot_general_rule(x, y, *, dimension_numbers, out_sharding=None):
  """Batch dimensions keep `x`'s axes and free ones their own. A
  contracting dimension that one operand cuts is gathered by the
  partitioner; one that both cut leaves each device a partial sum: whether
  to add them up everywhere (all-reduce) or scatter the sums (reduce-scatter)
  is a choice the types can't make, so it needs `out_sharding`."""
  if out_sharding is not None:
    return out_sharding.spec
  (lc, rc), (lb, rb) = dimension_numbers
  xs, ys = spec_of(x), spec_of(y)
  for what, pairs in (("batch", zip(lb, rb)), ("contracting", zip(lc, rc))):
    for l, r in pairs:
      if xs[l] and ys[r] and xs[l] != ys[r]:
        raise ShardingTypeError(
            f"dot_general: {what} dimensions {l} of {x.str_short()} and {r} of "
            f"{y.str_short()} are cut differently ({as_spec([xs[l]])!r} vs "
            f"{as_spec([ys[r]])!r}); reshard one like the other.")
  for l, r in zip(lc, rc):
    if xs[l] and ys[r]:
      raise ShardingTypeError(
          "dot_general: contracting dimensions are split on both sides "
          f"({x.str_short()} and {y.str_short()}): each device holds a partial sum, "
          "and how to lay out the result is ambiguous. Pass out_sharding= "
          "(e.g. P(...) inside `with set_mesh(mesh):`).")
  lf = [d for d in range(x.ndim) if d not in lc and d not in lb]
  rf = [d for d in range(y.ndim) if d not in rc and d not in rb]
  return _check_distinct(lax.dot_general_p,
                         [xs[d] for d in lb] + [xs[d] for d in lf] + [ys[d] for d in rf])


sharding_rules[lax.dot_general_p] = _dot_general_rule


# --- reshard: change the layout --------------------------------------------------------------

def _reshard_abstract_eval(x, *, sharding):
  return x.update(sharding=sharding)


abstract_eval_rules[reshard_p] = _reshard_abstract_eval
sharding_rules[reshard_p] = lambda x, *, sharding: sharding.spec
impl_rules[reshard_p] = lambda x, *, sharding: device_put(x, sharding)
ad.jvp_rules[reshard_p] = lambda primals, tangents, *, sharding: (
    [reshard_p.bind(primals[0], sharding=sharding)],
    [ad.Zero(ad.get_aval(tangents[0])) if isinstance(tangents[0], ad.Zero) else
     reshard_p.bind(tangents[0], sharding=sharding)])


def _reshard_transpose(ct, x, *, sharding):
  """Back to the operand's layout."""
  old = x.aval.sharding or NamedSharding(sharding.mesh, P())
  return [reshard_p.bind(ct, sharding=old)]


ad.transpose_rules[reshard_p] = _reshard_transpose


def _reshard_vmap(axis_size, vals_in, dims_in, *, sharding):
  x, d = vals_in[0], dims_in[0]
  spec = list(sharding.spec.padded(np.ndim(x) - 1))
  spec.insert(d, None)
  return reshard_p.bind(x, sharding=NamedSharding(sharding.mesh, P(*spec))), d


batching.vmap_rules[reshard_p] = _reshard_vmap


lowering.lowering_rules[reshard_p] = lambda ctx, x, *, sharding: x   # (the constraint: below)


# --- Control flow, calls and the like: their body's types are the answer ---------------------------

def keep_body_types(*prims):
  for p in prims:
    sharding_rules[p] = KEEP


# --- typeof and out_sharding= ------------------------------------------------------------------

def typeof(x):
  """The type of `x`: its ShapedArray, with its sharding on an Explicit mesh."""
  return core.raise_to_shaped(core.get_aval(x))


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

