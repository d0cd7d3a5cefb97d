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
and the partitioner decides alone.

This module holds the hook and the rules' shapes (elementwise, reduce,
reshape, dot_general, ...); each primitive's module registers the one that
fits beside its other rules, as JAX does in jax/_src/lax/lax.py
(`_dot_general_sharding_rule`, ...). It sits just above core.
"""
from __future__ import annotations

from . import core
from .core import sharding_rules
from .named_sharding import NamedSharding, P, PartitionSpec


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


def check_distinct(name: str, dims):
  used = [a for d in dims for a in d]
  if len(set(used)) < len(used):
    raise ShardingTypeError(
        f"{name}: the result would split two dimensions over the same mesh axis "
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
    return check_distinct(prim.name, dims)
  return rule


def same_as_operand(x, *rest, **params):
  return as_spec(spec_of(x))


# --- Reductions: the reduced dimensions' axes go away --------------------------------------

def reduce_rule(x, *, axes, **params):
  return as_spec([a for d, a in enumerate(spec_of(x)) if d not in axes])


# --- Moving dimensions: broadcast, transpose, reshape, concatenate ------------------------------

def broadcast_rule(x, *, shape, axes):
  """New dimensions are whole; the others keep their axes."""
  old = iter(spec_of(x))
  return as_spec([() if d in axes else next(old) for d in range(len(shape))])


def transpose_rule(x, *, permutation):
  return as_spec([spec_of(x)[p] for p in permutation])


def concatenate_rule(*xs, dimension):
  """The operands on the mesh must be laid out alike (JAX's rule), and so is
  the result; host constants fit any layout."""
  layouts = {spec_of(x) for x in xs if x.sharding is not None}
  if len(layouts) > 1:
    raise ShardingTypeError(
        f"concatenate: all operands should have the same sharding, got {_type_text(xs)}. "
        "Reshard them alike first (sharding.reshard).")
  return check_distinct("concatenate", layouts.pop())


def unsplit_dims_rule(name, changed):
  """For slicing and padding: the dimensions they change must be whole."""
  def rule(x, *rest, **params):
    for d in changed(x, **params):
      if spec_of(x)[d]:
        raise ShardingTypeError(
            f"{name} changes dimension {d} of {x.str_short()}, which the mesh "
            "splits: reshard it whole first (sharding.reshard).")
    return as_spec(spec_of(x))
  return rule


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


def reshape_rule(x, *, new_sizes, out_sharding=None):
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



# --- dot_general: batch, free and contracting dimensions -------------------------------------------

def dot_general_rule(x, y, *, dimension_numbers, out_sharding=None):
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
  return check_distinct("dot_general",
                        [xs[d] for d in lb] + [xs[d] for d in lf] + [ys[d] for d in rf])


# --- Control flow, calls and the like: their body's types are the answer ---------------------------

def keep_body_types(*prims):
  """For higher-order primitives: their abstract eval already typed the
  results from the body's jaxpr, shardings included."""
  for p in prims:
    sharding_rules[p] = KEEP


# --- typeof ------------------------------------------------------------------

def typeof(x):
  """The type of `x`: its ShapedArray, with its sharding on an Explicit mesh."""
  return core.raise_to_shaped(core.get_aval(x))

