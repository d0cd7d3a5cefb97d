"""FLOPS: a jaxpr interpreter that counts floating-point operations. It
evaluates a jaxpr like eval_jaxpr, adding each primitive's cost, and recurses
into the sub-jaxprs of cond, while and scan."""
from __future__ import annotations

import numpy as np

from . import lax
from .control_flow import clamp_p, cond_p, scan_p, select_n_p, while_p
from .core import impl_rules
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


def _dot_general_flops(avals_in, avals_out, *, dimension_numbers):
  (lc, _), _ = dimension_numbers
  x = avals_in[0]
  contract = int(np.prod([x.shape[i] for i in lc], dtype=int))
  return 2 * _size(avals_out[0]) * contract   # a multiply and an add per term


# Per-primitive cost rules, in the mini-JAX style: `rule(avals_in, avals_out,
# **params) -> int`. Data movement (broadcast, reshape, ...) costs nothing.
flops_rules: dict = {}
for _p in list(lax.binary_primitives) + list(lax.unary_primitives):
  flops_rules[_p] = _elementwise_flops
for _p in (lax.integer_pow_p, lax.round_p, lax.cumsum_p):
  flops_rules[_p] = _elementwise_flops
for _p in (lax.reduce_sum_p, lax.reduce_max_p, lax.reduce_min_p, lax.reduce_prod_p,
           lax.argmax_p, lax.argmin_p):
  flops_rules[_p] = _reduce_flops
flops_rules[lax.dot_general_p] = _dot_general_flops
for _p in (lax.broadcast_p, lax.reshape_p, lax.transpose_p, lax.convert_element_type_p,
           select_n_p, clamp_p, lax.stop_gradient_p, lax.concatenate_p, lax.pad_p,
           lax.slice_p, lax.rev_p, lax.dynamic_slice_p, lax.dynamic_update_slice_p):
  flops_rules[_p] = lambda avals_in, avals_out, **_: 0


# Higher-order primitives defined in other modules (custom_derivatives) that
# run one sub-jaxpr on their operands: `rule(**params) -> that ClosedJaxpr`.
flops_call_rules: dict = {}


def _eval_flops(jaxpr: Jaxpr, args, counts: FlopCount) -> list:
  """Evaluate `jaxpr` on concrete `args`, adding every equation's cost. A
  higher-order primitive's cost is its sub-jaxprs' costs, counted by running
  them: the taken branch of a cond, each iteration of a scan or a while (whose
  trip count may depend on the data)."""
  env: dict = {}
  read = lambda x: x.val if type(x) is Lit else env[x]
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  for eqn in jaxpr.eqns:
    ins = [read(x) for x in eqn.inputs]
    outs = _flops_eqn(eqn, ins, counts)
    for v, o in zip(eqn.out_binders, outs):
      env[v] = o
  return [read(x) for x in jaxpr.outvars]


def _flops_eqn(eqn, ins, counts) -> list:
  p, params = eqn.primitive, eqn.params
  if p is cond_p:
    br = params["branches"][int(np.clip(np.asarray(ins[0]), 0, len(params["branches"]) - 1))]
    return _eval_flops(br.jaxpr, ins[1:], counts)
  if p is while_p:
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cc, bc, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    while bool(np.asarray(_eval_flops(params["cond_jaxpr"].jaxpr, [*cc, *carry], counts)[0])):
      carry = _eval_flops(params["body_jaxpr"].jaxpr, [*bc, *carry], counts)
    return carry
  if p is scan_p:
    nc, ncar, length = params["num_consts"], params["num_carry"], params["length"]
    consts, carry, xs = ins[:nc], ins[nc:nc + ncar], [np.asarray(x) for x in ins[nc + ncar:]]
    ys = [None] * length
    order = reversed(range(length)) if params["reverse"] else range(length)
    for i in order:
      outs = _eval_flops(params["jaxpr"].jaxpr, [*consts, *carry, *[x[i] for x in xs]], counts)
      carry, ys[i] = outs[:ncar], outs[ncar:]
    y_avals = params["jaxpr"].out_avals[ncar:]
    return [*carry, *[np.stack([np.asarray(y[k]) for y in ys]) if length else
                      np.zeros((0, *a.shape), a.dtype) for k, a in enumerate(y_avals)]]
  if "jaxpr" in params and isinstance(params["jaxpr"], Jaxpr) and p not in flops_rules:
    # xla_call (jit); a shard_map has a rule of its own (autodidax.shard_map)
    return _eval_flops(params["jaxpr"], ins, counts)
  if p in flops_call_rules:   # a call defined elsewhere: count the jaxpr it runs
    return _eval_flops(flops_call_rules[p](**params).jaxpr, ins, counts)
  rule = flops_rules.get(p)
  if rule is None:
    raise NotImplementedError(f"FLOPS rule for '{p.name}' not implemented: add one to "
                              "flop_count.flops_rules")
  counts.add(p.name, rule([x.aval for x in eqn.inputs], [v.aval for v in eqn.out_binders],
                          **params))
  out = impl_rules[p](*ins, **params)
  return out if p.multiple_results else [out]


def flops(f):
  """`flops(f)(*args)`: the floating-point operations `f(*args)` performs.

  `f` is traced to a jaxpr, which a FLOPS interpreter then evaluates, adding
  each primitive's cost (one per output element for elementwise ops, 2·m·n·k
  for a matmul, ...). Sub-jaxprs are counted by running them, so a while loop
  with a data-dependent trip count is counted exactly. Returns a FlopCount.
  """
  from .api import make_jaxpr

  def counted(*args):
    closed = make_jaxpr(f)(*args)
    counts = FlopCount()
    args_flat, _ = tree_flatten(args)
    _eval_flops(Jaxpr([], closed.jaxpr.constvars + closed.jaxpr.invars, closed.jaxpr.eqns,
                      closed.jaxpr.outvars), [*closed.consts, *args_flat], counts)
    return counts
  return counted
