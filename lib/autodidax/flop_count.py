"""FLOPS: a jaxpr interpreter that counts floating-point operations. It
evaluates a jaxpr like eval_jaxpr, adding each primitive's cost from
`flops_rules`; a primitive that runs sub-jaxprs (jit, cond, while, scan, ...)
has a rule in `flops_call_rules` instead, registered beside the primitive."""
from __future__ import annotations

import numpy as np

from . import primitives as lax
from .api import make_jaxpr
from .core import RuleTable, impl_rules
from .jaxpr import Jaxpr, Lit
from .tree_util import tree_flatten


# --- FLOPS: a jaxpr interpreter that counts floating-point operations -----------------------------

class FlopCount:
  """The result of `flops(f)(*args)`: a total, and the counts per primitive."""

  def __init__(self):
    self.by_primitive: dict = {}

  def add(self, name: str, n: int):
    if n:
      self.by_primitive[name] = self.by_primitive.get(name, 0) + int(n)

  @property
  def total(self) -> int:
    return sum(self.by_primitive.values())

  def __int__(self):
    return self.total

  def __eq__(self, other):
    return self.total == (other.total if isinstance(other, FlopCount) else other)

  __hash__ = None

  def __repr__(self):
    parts = ", ".join(f"{k}={v}" for k, v in sorted(self.by_primitive.items()))
    return f"FlopCount(total={self.total}: {parts})"


def _size(aval) -> int:
  return int(np.prod(aval.shape, dtype=int))


def _elementwise_flops(avals_in, avals_out, **_):
  if not any(np.dtype(a.dtype).kind in "fc" for a in avals_in):
    return 0   # integer arithmetic (a loop counter) is not floating point
  return _size(avals_out[0])


def _reduce_flops(avals_in, avals_out, **_):
  return _size(avals_in[0]) - _size(avals_out[0])


def _dot_general_flops(avals_in, avals_out, *, dimension_numbers, out_sharding=None):
  (lc, _), _ = dimension_numbers
  x = avals_in[0]
  contract = int(np.prod([x.shape[i] for i in lc], dtype=int))
  return 2 * _size(avals_out[0]) * contract   # a multiply and an add per term


# Cost rules, for first-order primitives: `rule(avals_in, avals_out, **params)
# -> int`. Data movement (broadcast, reshape, ...) costs nothing.
flops_rules = RuleTable(
    "FLOPS", "Register its cost with `flop_count.flops_rules[prim] = rule(avals_in, "
    "avals_out, **params) -> int`; a primitive that runs sub-jaxprs registers "
    "`flop_count.flops_call_rules[prim] = rule(*args, run, **params) -> outputs`.")
for _p in list(lax.binary_primitives) + list(lax.unary_primitives):
  flops_rules[_p] = _elementwise_flops
for _p in (lax.integer_pow_p, lax.round_p, lax.cumsum_p):
  flops_rules[_p] = _elementwise_flops
for _p in (lax.reduce_sum_p, lax.reduce_max_p, lax.reduce_min_p, lax.reduce_prod_p,
           lax.argmax_p, lax.argmin_p):
  flops_rules[_p] = _reduce_flops
flops_rules[lax.dot_general_p] = _dot_general_flops
for _p in (lax.broadcast_p, lax.reshape_p, lax.transpose_p, lax.convert_element_type_p,
           lax.stop_gradient_p, lax.concatenate_p, lax.pad_p, lax.slice_p, lax.rev_p,
           lax.dynamic_slice_p, lax.dynamic_update_slice_p, lax.select_n_p, lax.clamp_p,
           lax.reshard_p):
  flops_rules[_p] = lambda avals_in, avals_out, **_: 0

# Call rules, for higher-order primitives: `rule(*args, run, **params) ->
# outputs` evaluates the primitive with `run(jaxpr, consts, *args)` (eval_jaxpr's
# signature) for its sub-jaxprs, and `run` counts them. Most are the
# primitive's impl rule, which takes `run=eval_jaxpr` by default.
flops_call_rules = RuleTable("FLOPS call")


def _eval_flops(jaxpr: Jaxpr, consts, args, counts: FlopCount) -> list:
  """Evaluate `jaxpr` on concrete `args`, adding every equation's cost."""
  env: dict = {}
  read = lambda x: x.val if type(x) is Lit else env[x]
  for v, a in zip([*jaxpr.constvars, *jaxpr.invars], [*consts, *args]):
    env[v] = a
  for eqn in jaxpr.eqns:
    outs = _flops_eqn(eqn, [read(x) for x in eqn.inputs], counts)
    for v, o in zip(eqn.out_binders, outs):
      env[v] = o
  return [read(x) for x in jaxpr.outvars]


def _flops_eqn(eqn, ins, counts) -> list:
  """A higher-order primitive costs what its sub-jaxprs cost, counted by
  running them: the taken branch of a cond, each iteration of a scan or a
  while (whose trip count may depend on the data). Any other primitive adds
  its cost rule's count, then runs its impl."""
  p, params = eqn.primitive, eqn.params
  if p in flops_call_rules:
    run = lambda jaxpr, consts, *args: _eval_flops(jaxpr, consts, args, counts)
    return flops_call_rules[p](*ins, run=run, **params)
  counts.add(p.name, flops_rules[p]([x.aval for x in eqn.inputs],
                                    [v.aval for v in eqn.out_binders], **params))
  out = impl_rules[p](*ins, **params)
  return out if p.multiple_results else [out]


def flops(f):
  """`flops(f)(*args)`: the floating-point operations `f(*args)` performs.

  `f` is traced to a jaxpr, which a FLOPS interpreter then evaluates, adding
  each primitive's cost (one per output element for elementwise ops, 2·m·n·k
  for a matmul, ...). Sub-jaxprs are counted by running them, so a while loop
  with a data-dependent trip count is counted exactly. Returns a FlopCount.
  """

  def counted(*args):
    closed = make_jaxpr(f)(*args)
    counts = FlopCount()
    args_flat, _ = tree_flatten(args)
    _eval_flops(closed.jaxpr, closed.consts, args_flat, counts)
    return counts
  return counted
