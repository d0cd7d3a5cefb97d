"""Vectorization: the batching interpreter behind `vmap`, and its rules.

A BatchTracer carries a value with one extra axis, `batch_dim`, holding the
batch; or `not_mapped` when the value is the same for every batch element.
Batching rules take `(axis_size, vals_in, dims_in, **params)` and return
`(out, out_dim)` (lists of them for multiple-result primitives).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Hashable, NamedTuple

import numpy as np

from . import core
from . import primitives as lax
from .core import (RuleTable, ShapedArray, Trace, Tracer, check_live, current_design,
                   full_lower, full_raise, get_aval, levels, new_main, raise_to_shaped)
from .primitives import (binary_primitives, broadcast_p, convert_element_type_p,
                  reduce_max_p, reduce_sum_p, reshape_p, transpose_p,
                  unary_primitives)
from .jaxpr import Jaxpr, eval_jaxpr
from .named_sharding import NamedSharding, P
from .partial_eval import closed_to_call_jaxpr, trace_to_jaxpr
from .util import cache_by_jaxpr, unzip2


class NotMapped:
  def __repr__(self):
    return "not_mapped"


not_mapped = NotMapped()


def mapped_aval(batch_dim: int, aval) -> ShapedArray:
  """The type of one element of the batch: `aval` without its batch axis
  (in its shape, and in its sharding on a mesh of Explicit axes)."""
  shape = aval.shape[:batch_dim] + aval.shape[batch_dim + 1:]
  if not isinstance(aval, ShapedArray):
    return ShapedArray(shape, aval.dtype, aval.weak_type)
  sharding = aval.sharding
  if sharding is not None:
    spec = list(sharding.spec.padded(aval.ndim))
    del spec[batch_dim]
    sharding = type(sharding)(sharding.mesh, type(sharding.spec)(*spec))
  return raise_to_shaped(aval).update(shape=shape, sharding=sharding)


def moveaxis(x, src: int, dst: int):
  """Move axis `src` of `x` to position `dst`, with a transpose primitive."""
  order = list(range(np.ndim(x)))
  order.insert(dst, order.pop(src))
  return lax.transpose(x, order)


def move_batch_axis(axis_size: int, src, dst: int, x):
  """Put the batch axis of `x` at `dst`, materializing it if `x` is unmapped."""
  if src is not_mapped:
    shape = np.shape(x)
    return lax.broadcast(x, (*shape[:dst], axis_size, *shape[dst:]), [dst])
  return x if src == dst else moveaxis(x, src, dst)


class BatchTracer(Tracer):
  """A batch of values stacked along `batch_dim`, or, when that is
  `not_mapped`, one value that every element of the batch shares."""
  __slots__ = ["val", "batch_dim"]

  def __init__(self, trace, val, batch_dim):
    self._trace, self.val, self.batch_dim = trace, val, batch_dim

  @property
  def aval(self):
    aval = get_aval(self.val)
    return aval if self.batch_dim is not_mapped else mapped_aval(self.batch_dim, aval)

  def full_lower(self):   # a value shared by the whole batch needs no box
    return full_lower(self.val) if self.batch_dim is not_mapped else self


class BatchTrace(Trace):
  def pure(self, val):
    return BatchTracer(self, val, not_mapped)
  lift = pure

  @property
  def axis_size(self) -> int:
    return self.main.global_data

  def process_primitive(self, primitive, tracers, params):
    check_live(self.main)   # a tracer that escaped its vmap is used on its own
    vals_in, bdims_in = unzip2((t.val, t.batch_dim) for t in tracers)
    if all(d is not_mapped for d in bdims_in) and primitive not in vmap_even_if_unmapped:
      outs = primitive.bind(*vals_in, **params)
      outs = outs if primitive.multiple_results else [outs]
      return [BatchTracer(self, x, not_mapped) for x in outs]
    vmap_rule = vmap_rules[primitive]
    outs, bdims_out = vmap_rule(self.axis_size, vals_in, bdims_in, **params)
    if not primitive.multiple_results:
      outs, bdims_out = [outs], [bdims_out]
    return [BatchTracer(self, x, bd) for x, bd in zip(outs, bdims_out)]


# Primitives whose batching rule runs even when no operand is batched: new_ref,
# whose Ref may later be written with a batched value (autodidax.state).
vmap_even_if_unmapped: set = set()

vmap_rules = RuleTable(
    "Batching", "Register one with `batching.vmap_rules[prim] = rule`.")


# --- Named axes (the chapter "Many devices") ---------------------------------------------------

class AxisData(NamedTuple):
  """The batch axis of a vmap: its size, and its name (None if unnamed)."""
  size: int
  name: Hashable = None


class NamedBatchTrace(BatchTrace):
  """The interpreter of `vmap(f, axis_name=...)`: a BatchTrace whose axis
  has a name that collectives (`autodidax.parallel`) refer to. A primitive
  whose batching depends on the name has a rule in `axis_vmap_rules`, which
  takes the AxisData instead of the size: a collective over this axis
  becomes a reduction along the batch axis, and xla_call batches its jaxpr
  under the same name. Such a rule runs even when no operand is batched:
  psum(1., 'i') is the size of 'i'."""

  @property
  def axis_size(self) -> int:
    return self.main.global_data.size

  def process_primitive(self, primitive, tracers, params):
    rule = axis_vmap_rules.get(primitive)
    if rule is None:
      return super().process_primitive(primitive, tracers, params)
    check_live(self.main)
    vals_in, bdims_in = unzip2((t.val, t.batch_dim) for t in tracers)
    axis_data = self.main.global_data
    outs, bdims_out = rule(axis_data, vals_in, bdims_in, **params)
    if not primitive.multiple_results:
      outs, bdims_out = [outs], [bdims_out]
    return [BatchTracer(self, x, bd) for x, bd in zip(outs, bdims_out)]


axis_vmap_rules = RuleTable(
    "Named-axis batching", "Register one with `batching.axis_vmap_rules[prim] = rule`.")


def vmap_flat(f, in_axes, *args, axis_name=None, axis_size=None):
  """vmap of `f` over flat lists; `in_axes[i]` is an int or `not_mapped`.
  Returns the outputs, the batch axis of each, and the batch size. With an
  `axis_name`, collectives inside `f` can refer to the batch axis by name;
  `axis_size` gives the size when no argument is mapped."""
  sizes = {np.shape(x)[ax] for x, ax in zip(args, in_axes) if ax is not not_mapped}
  sizes |= set() if axis_size is None else {axis_size}
  if len(sizes) != 1:   # api.vmap checks its users' arguments; this is for rules
    shapes = [np.shape(x) for x in args]
    raise ValueError(f"vmap_flat: the batch axes {list(in_axes)} of arguments of shapes "
                     f"{shapes} need one size, not {sorted(sizes) or 'none'}")
  axis_size, = sizes
  trace_type, data = ((BatchTrace, axis_size) if axis_name is None else
                      (NamedBatchTrace, AxisData(axis_size, axis_name)))
  with new_main(trace_type, data) as main:
    trace = trace_type(main)
    boxed = [x if ax is not_mapped else BatchTracer(trace, x, ax) for x, ax in zip(args, in_axes)]
    outs = [full_raise(trace, y) for y in f(*boxed)]
  return [t.val for t in outs], [t.batch_dim for t in outs], axis_size


levels.vmap = vmap_flat   # see core.Design


# --- Where names are bound: the axis environment ----------------------------------------

class UnboundAxisError(NameError):
  def __init__(self, name, what: str):
    super().__init__(
        f"unbound axis name: {name}. {what} refers to an axis named {name!r}, but "
        f"no enclosing transformation binds it: call it inside "
        f"vmap(f, axis_name={name!r}) or inside shard_map over a mesh with an "
        f"axis {name!r}.")


class AxisFrame(NamedTuple):
  """Where a name is bound: its size, and the named vmap's main trace (None
  for a shard_map's mesh axis)."""
  size: int
  main: object


# shard_map pushes its mesh's axes here while it traces (or re-traces) its body:
# ({name: size}, the height of the interpreter stack when it was pushed).
_mesh_frames: list = []


@contextmanager
def extend_axis_env(sizes: dict):
  """Bind the axis names in `sizes` (name -> size) inside the block."""
  _mesh_frames.append((dict(sizes), len(core.trace_stack)))
  try:
    yield
  finally:
    _mesh_frames.pop()


def axis_frame(name) -> AxisFrame | None:
  """The innermost binding of `name`: a named vmap on the interpreter stack, or
  a mesh axis of a shard_map being traced, whichever was entered last."""
  best, where = None, -1.
  for main in core.trace_stack:
    if issubclass(main.trace_type, NamedBatchTrace) and main.global_data.name == name:
      if main.level > where:
        best, where = AxisFrame(main.global_data.size, main), main.level
  for sizes, height in _mesh_frames:   # pushed above level height - 1
    if name in sizes and height - .5 > where:
      best, where = AxisFrame(sizes[name], None), height - .5
  return best


def axis_size(axis_name) -> int:
  """The size of a bound axis, or the product of sizes for a tuple of names."""
  names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
  sizes = []
  for name in names:
    frame = axis_frame(name)
    if frame is None:
      raise UnboundAxisError(name, "axis_size")
    sizes.append(frame.size)
  return math.prod(sizes)


def bound_axes() -> tuple:
  """Every bound (name, size), outermost first: part of jit's cache key, since
  a traced jaxpr depends on them (pmean divides by a size)."""
  named = [(m.global_data.name, m.global_data.size) for m in core.trace_stack
           if issubclass(m.trace_type, NamedBatchTrace)]
  return tuple(named) + tuple(kv for sizes, _ in _mesh_frames for kv in sizes.items())


# --- Batching a jaxpr (jit, control flow, custom rules) ----------------------------------------

def batch_jaxpr(jaxpr: Jaxpr, axis_size: int, in_batched: tuple, force: tuple):
  """`batch_jaxpr_axes` for inputs batched at axis 0 (where `in_batched`),
  under the name of the named vmap whose rule is running (see `named_axis_rule`)."""
  in_dims = tuple(0 if b else not_mapped for b in in_batched)
  return batch_jaxpr_axes(jaxpr, axis_size, in_dims, force, _rule_axis_name)


@cache_by_jaxpr
def batch_jaxpr_axes(jaxpr: Jaxpr, axis_size: int, in_dims: tuple, force: tuple,
                     axis_name=None):
  """A jaxpr over inputs batched along `in_dims` (an axis or `not_mapped`
  each). Outputs that are batched, or `force`d, come out batched at axis 0.
  Returns (jaxpr, consts, out_batched); the jaxpr takes `consts` first.
  `axis_name` names the batch axis for collectives inside `jaxpr`."""
  out_b: list = []

  def fun(*args):
    if all(d is not_mapped for d in in_dims) and axis_name is None:
      outs = eval_jaxpr(jaxpr, [], *args)
      dims_out = [not_mapped] * len(outs)
    else:   # vmap_flat; inside a stackless transformation, its own (unnamed only)
      body = lambda *xs: eval_jaxpr(jaxpr, [], *xs)   # noqa: E731
      with rule_axis(None):   # the rules inside run under their own vmaps
        outs, dims_out, _ = (
            current_design().vmap(body, in_dims, *args) if axis_name is None else
            vmap_flat(body, in_dims, *args, axis_name=axis_name, axis_size=axis_size))
    out_b[:] = [d is not not_mapped or bool(f) for d, f in zip(dims_out, force)]
    return [move_batch_axis(axis_size, d, 0, o) if b else o
            for o, d, b in zip(outs, dims_out, out_b)]

  avals = [a if d is not_mapped else a.update(shape=a.shape[:d] + (axis_size,) + a.shape[d:])
           for a, d in zip(jaxpr.in_avals, in_dims)]
  j, consts = closed_to_call_jaxpr(*trace_to_jaxpr(fun, avals))
  return j, consts, list(out_b)


# The name of the vmap whose rule is batching a sub-jaxpr (None: unnamed). A
# named vmap calls the rules of higher-order primitives (cond, while, scan,
# remat, custom_jvp_call, custom_vjp_call) through `named_axis_rule`, which
# sets it, so that collectives over the name inside find their vmap.
_rule_axis_name = None


def rule_axis_name():
  """The name `batch_jaxpr` batches under now. A rule that batches a jaxpr
  later (a custom rule's, when a derivative asks for it) keeps it, and
  batches under `rule_axis(name)`."""
  return _rule_axis_name


@contextmanager
def rule_axis(name):
  global _rule_axis_name
  prev, _rule_axis_name = _rule_axis_name, name
  try:
    yield
  finally:
    _rule_axis_name = prev



def named_axis_rule(rule):
  """`rule(axis_size, ...)`, which calls `batch_jaxpr`, as a rule of
  `axis_vmap_rules`: the one way every higher-order primitive whose rule
  batches its jaxprs with `batch_jaxpr` gets its named-axis rule."""
  def named(axis_data, vals_in, dims_in, **params):
    with rule_axis(axis_data.name):
      return rule(axis_data.size, vals_in, dims_in, **params)
  return named


# --- Rules ---------------------------------------------------------------------------------

def _vectorized_unop_rule(prim, axis_size, vals_in, dims_in, **params):
  (x,), (x_bdim,) = vals_in, dims_in
  return prim.bind(x, **params), x_bdim


def _broadcasting_binop_rule(prim, axis_size, vals_in, dims_in):
  # Bring both operands to the same batched layout, batch axis first. An
  # unmapped rank-0 operand may stay as it is: it broadcasts by itself.
  (x, y), (x_bdim, y_bdim) = vals_in, dims_in
  x_rank = np.ndim(x) - (x_bdim is not not_mapped)
  y_rank = np.ndim(y) - (y_bdim is not not_mapped)
  out_rank = max(x_rank, y_rank)

  def prepare(v, bdim, rank, other_shape):
    if bdim is not_mapped and rank == 0:
      return v
    v = move_batch_axis(axis_size, bdim, 0, v)
    if rank < out_rank:   # a per-element scalar against a larger operand
      v = lax.broadcast(v, (axis_size, *other_shape), range(1, out_rank + 1))
    return v

  x_shape = _unbatched_shape(x, x_bdim)
  y_shape = _unbatched_shape(y, y_bdim)
  x = prepare(x, x_bdim, x_rank, y_shape)
  y = prepare(y, y_bdim, y_rank, x_shape)
  return prim.bind(x, y), 0



def _unbatched_shape(x, bdim):
  shape = list(np.shape(x))
  if bdim is not not_mapped:
    del shape[bdim]
  return tuple(shape)


for _p in unary_primitives:
  vmap_rules[_p] = lambda *a, _p=_p, **kw: _vectorized_unop_rule(_p, *a, **kw)
for _p in binary_primitives:
  vmap_rules[_p] = lambda *a, _p=_p: _broadcasting_binop_rule(_p, *a)
vmap_rules[convert_element_type_p] = (
    lambda *a, **kw: _vectorized_unop_rule(convert_element_type_p, *a, **kw))


def _reduce_rule(prim, axis_size, vals_in, dims_in, *, axes):
  (x,), (x_bdim,) = vals_in, dims_in
  # Per-element axis a is axis a (or a + 1, past the batch axis) of the batch.
  new_axes = tuple(a + (x_bdim <= a) for a in axes)
  out_bdim = x_bdim - sum(a < x_bdim for a in new_axes)
  return prim.bind(x, axes=new_axes), out_bdim


vmap_rules[reduce_sum_p] = lambda *a, **kw: _reduce_rule(reduce_sum_p, *a, **kw)
vmap_rules[reduce_max_p] = lambda *a, **kw: _reduce_rule(reduce_max_p, *a, **kw)


def _broadcast_rule(axis_size, vals_in, dims_in, *, shape, axes):
  # Move the batch axis to the front, then shift every new axis past it.
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return (lax.broadcast(x, (axis_size, *shape), [a + 1 for a in axes]), 0)


def _transpose_rule(axis_size, vals_in, dims_in, *, permutation):
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return lax.transpose(x, (0, *(p + 1 for p in permutation))), 0


def _reshape_rule(axis_size, vals_in, dims_in, *, new_sizes, out_sharding=None):
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return lax.reshape(x, (axis_size, *new_sizes), _batched(out_sharding, 0, len(new_sizes))), 0


def _batched(sharding, dim, ndim):
  """An out_sharding with a whole batch dimension inserted at `dim`."""
  if sharding is None:
    return None
  spec = list(sharding.spec.padded(ndim))
  spec.insert(dim, None)
  return type(sharding)(sharding.mesh, type(sharding.spec)(*spec))


vmap_rules[broadcast_p] = _broadcast_rule
vmap_rules[transpose_p] = _transpose_rule
vmap_rules[reshape_p] = _reshape_rule


def _dot_general_rule(axis_size, vals_in, dims_in, *, dimension_numbers, out_sharding=None):
  # Both mapped: the batch axis becomes a new leading batch dimension. One
  # mapped: it is just one more free axis of that operand, no copies needed.
  (x, y), (xb, yb) = vals_in, dims_in
  (lc, rc), (lb, rb) = dimension_numbers
  shift = lambda axes, b: tuple(a + (a >= b) for a in axes)
  if xb is not not_mapped and yb is not not_mapped:
    x, y = moveaxis(x, xb, 0), moveaxis(y, yb, 0)
    dn = ((shift(lc, 0), shift(rc, 0)), ((0, *shift(lb, 0)), (0, *shift(rb, 0))))
    out_dim = 0
  elif xb is not not_mapped:
    lc, lb = shift(lc, xb), shift(lb, xb)
    free = [i for i in range(np.ndim(x)) if i not in lc and i not in lb]
    dn, out_dim = ((lc, rc), (lb, rb)), len(lb) + free.index(xb)
  else:
    rc, rb = shift(rc, yb), shift(rb, yb)
    free = [i for i in range(np.ndim(y)) if i not in rc and i not in rb]
    n_lhs_free = np.ndim(x) - len(lc) - len(lb)
    dn, out_dim = ((lc, rc), (lb, rb)), len(lb) + n_lhs_free + free.index(yb)
  nd = np.ndim(x) + np.ndim(y) - len(lb) - len(rb) - len(lc) - len(rc) - 1
  return lax.dot_general(x, y, dn, _batched(out_sharding, out_dim, nd)), out_dim


vmap_rules[lax.dot_general_p] = _dot_general_rule


# --- Rules of the NumPy-subset primitives ---------------------------------------------------

for _p in (lax.integer_pow_p, lax.round_p):
  vmap_rules[_p] = lambda *a, _p=_p, **kw: _vectorized_unop_rule(_p, *a, **kw)
vmap_rules[lax.reduce_min_p] = lambda *a, **kw: _reduce_rule(lax.reduce_min_p, *a, **kw)
vmap_rules[lax.reduce_prod_p] = lambda *a, **kw: _reduce_rule(lax.reduce_prod_p, *a, **kw)


def _arg_reduce_rule(prim, axis_size, vals_in, dims_in, *, axes, index_dtype):
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return prim.bind(x, axes=(axes[0] + 1,), index_dtype=index_dtype), 0


def _cumsum_rule(axis_size, vals_in, dims_in, *, axis, reverse):
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return lax.cumsum(x, axis + 1, reverse), 0


def _concatenate_rule(axis_size, vals_in, dims_in, *, dimension):
  xs = [move_batch_axis(axis_size, d, 0, x) for x, d in zip(vals_in, dims_in)]
  return lax.concatenate(xs, dimension + 1), 0


def _pad_rule(axis_size, vals_in, dims_in, *, padding_config):
  (x, value), (x_bdim, v_bdim) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  config = [(0, 0, 0), *padding_config]
  if v_bdim is not_mapped:
    return lax.pad(x, value, config), 0
  # One padding value per element: pad, then select each padding's value.
  dtype = np.result_type(get_aval(x).dtype)
  padded = lax.pad(x, np.zeros((), dtype), config)
  where_pad = lax.pad(np.zeros(np.shape(x), bool), np.True_, config)
  value = move_batch_axis(axis_size, v_bdim, 0, value)
  value = lax.broadcast(value, np.shape(padded), range(1, len(config)))
  return lax.select_n(where_pad, padded, value), 0


def _slice_rule(axis_size, vals_in, dims_in, *, start_indices, limit_indices, strides):
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return lax.slice(x, (0, *start_indices), (axis_size, *limit_indices), (1, *strides)), 0


def _rev_rule(axis_size, vals_in, dims_in, *, dimensions):
  (x,), (x_bdim,) = vals_in, dims_in
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return lax.rev(x, [d + 1 for d in dimensions]), 0


vmap_rules[lax.argmax_p] = lambda *a, **kw: _arg_reduce_rule(lax.argmax_p, *a, **kw)
vmap_rules[lax.argmin_p] = lambda *a, **kw: _arg_reduce_rule(lax.argmin_p, *a, **kw)
vmap_rules[lax.cumsum_p] = _cumsum_rule
vmap_rules[lax.concatenate_p] = _concatenate_rule
vmap_rules[lax.pad_p] = _pad_rule
vmap_rules[lax.slice_p] = _slice_rule
vmap_rules[lax.rev_p] = _rev_rule


# --- Rules of select_n and clamp ---------------------------------------------------------------

def _select_n_vmap(axis_size, vals_in, dims_in):
  which, *cases = vals_in
  wdim, *cdims = dims_in
  case_shape = _unbatched_shape(cases[0], cdims[0])
  shape = (axis_size, *case_shape)
  cases = [move_batch_axis(axis_size, d, 0, c) for c, d in zip(cases, cdims)]
  if wdim is not_mapped and np.ndim(which) == 0:
    return lax.select_n(which, *cases), 0
  which = move_batch_axis(axis_size, wdim, 0, which)
  if np.ndim(which) == 1 and case_shape:   # one selector per batch element
    which = lax.broadcast(which, shape, range(1, len(shape)))
  return lax.select_n(which, *cases), 0


def _unbatched_shape(x, bdim):
  shape = list(np.shape(x))
  if bdim is not not_mapped:
    del shape[bdim]
  return tuple(shape)


def _clamp_vmap(axis_size, vals_in, dims_in):
  lo, x, hi = vals_in
  dlo, dx, dhi = dims_in
  if dlo is not_mapped and dhi is not_mapped and np.ndim(lo) == 0 and np.ndim(hi) == 0:
    return lax.clamp(lo, x, hi), dx
  shape = (axis_size, *_unbatched_shape(x, dx))
  def full(v, d):
    v = move_batch_axis(axis_size, d, 0, v)
    return v if np.shape(v) == shape else lax.broadcast(v, shape, range(1, len(shape)))
  return lax.clamp(full(lo, dlo), full(x, dx), full(hi, dhi)), 0


vmap_rules[lax.select_n_p] = _select_n_vmap
vmap_rules[lax.clamp_p] = _clamp_vmap


# --- The rule of reshard (the chapter Many devices) ---------------------------------------------

def _reshard_vmap(axis_size, vals_in, dims_in, *, sharding):
  x, d = vals_in[0], dims_in[0]
  spec = list(sharding.spec.padded(np.ndim(x) - 1))
  spec.insert(d, None)
  return lax.reshard_p.bind(x, sharding=NamedSharding(sharding.mesh, P(*spec))), d


vmap_rules[lax.reshard_p] = _reshard_vmap
