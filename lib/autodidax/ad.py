"""Forward-mode automatic differentiation: the JVP interpreter and its rules.

A JVPTracer carries a primal value and a tangent. The tangent may be a
symbolic `Zero`, which costs nothing to carry and lets rules skip work.
"""
from __future__ import annotations

import numpy as np

from . import lax
from .core import (MainTrace, RuleTable, Trace, Tracer, check_live, full_lower,
                   full_raise, get_aval, new_main, raise_to_shaped)
from .lax import (add_p, broadcast_p, convert_element_type_p, cos_p, div_p,
                  exp_p, log_p, max_p, mul_p, neg_p, reduce_max_p, reduce_sum_p,
                  reshape_p, sin_p, sub_p, tanh_p, transpose_p)
from .util import unzip2


# --- Symbolic zeros --------------------------------------------------------------------

class Zero:
  """A tangent known to be zero, of a given abstract value."""
  __slots__ = ["aval"]

  def __init__(self, aval):
    self.aval = raise_to_shaped(aval)

  @staticmethod
  def from_value(x) -> "Zero":
    return Zero(get_aval(x))

  def __repr__(self):
    return f"Zero({self.aval.str_short()})"


def zeros_like_aval(aval):
  return np.zeros(aval.shape, aval.dtype)


def instantiate_zeros(t):
  """Turn a symbolic Zero into an array of zeros; leave other tangents alone."""
  return zeros_like_aval(t.aval) if type(t) is Zero else t


def add_tangents(x, y):
  if type(x) is Zero:
    return y
  if type(y) is Zero:
    return x
  return lax.add(x, y)


# --- The interpreter -------------------------------------------------------------------

class JVPTracer(Tracer):
  __slots__ = ["primal", "tangent"]

  def __init__(self, trace, primal, tangent):
    self._trace = trace
    self.primal = primal
    self.tangent = tangent

  @property
  def aval(self):
    return get_aval(self.primal)

  def full_lower(self):
    if type(self.tangent) is Zero:   # nothing to differentiate: unbox
      return full_lower(self.primal)
    return self


class JVPTrace(Trace):
  def pure(self, val):
    return JVPTracer(self, val, Zero.from_value(val))
  lift = pure

  def process_primitive(self, primitive, tracers, params):
    check_live(self.main)   # a tracer that escaped its jvp is used on its own
    primals_in, tangents_in = unzip2((t.primal, t.tangent) for t in tracers)
    if all(type(t) is Zero for t in tangents_in):
      # JVP is linear in the tangents: all-zero in means zero out.
      primals_out = primitive.bind(*primals_in, **params)
      if not primitive.multiple_results:
        primals_out = [primals_out]
      return [JVPTracer(self, x, Zero.from_value(x)) for x in primals_out]
    jvp_rule = jvp_rules[primitive]
    primals_out, tangents_out = jvp_rule(primals_in, tangents_in, **params)
    if not primitive.multiple_results:
      primals_out, tangents_out = [primals_out], [tangents_out]
    return [JVPTracer(self, x, t) for x, t in zip(primals_out, tangents_out)]


jvp_rules = RuleTable(
    "JVP", "Register one with `ad.jvp_rules[prim] = rule` or `ad.defjvp`.")


def jvp_flat(f, primals, tangents):
  """JVP of `f`, which takes and returns flat lists of arrays."""
  with new_main(JVPTrace) as main:
    trace = JVPTrace(main)
    tracers_in = [JVPTracer(trace, x, t) for x, t in zip(primals, tangents)]
    outs = f(*tracers_in)
    tracers_out = [full_raise(trace, out) for out in outs]
    primals_out, tangents_out = unzip2((t.primal, t.tangent) for t in tracers_out)
  return primals_out, [instantiate_zeros(t) for t in tangents_out]


# --- Rule helpers, as in jax._src.interpreters.ad ----------------------------------------

def defjvp(primitive, *jvp_fns):
  """Define a JVP rule from one function per operand.

  `jvp_fns[i](tangent_i, *primals, **params)` gives operand i's contribution
  to the output tangent; Zero tangents are skipped, contributions summed.
  """
  def rule(primals, tangents, **params):
    primal_out = primitive.bind(*primals, **params)
    out = Zero.from_value(primal_out)
    for fn, t in zip(jvp_fns, tangents):
      if fn is not None and type(t) is not Zero:
        out = add_tangents(out, fn(t, *primals, **params))
    return primal_out, out
  jvp_rules[primitive] = rule
  return rule


def deflinear(primitive):
  """A primitive linear in all operands is its own JVP."""
  def rule(primals, tangents, **params):
    tangents = [instantiate_zeros(t) for t in tangents]
    return primitive.bind(*primals, **params), primitive.bind(*tangents, **params)
  jvp_rules[primitive] = rule


def defjvp_zero(primitive):
  """Outputs that don't vary with the inputs (comparisons): zero tangent."""
  def rule(primals, tangents, **params):
    out = primitive.bind(*primals, **params)
    return out, Zero.from_value(out)
  jvp_rules[primitive] = rule


# --- Rules -------------------------------------------------------------------------------

def _scalar_broadcast(t, like):
  """A rank-0 tangent meeting a larger operand stands for all its elements."""
  shape = np.shape(like)
  if np.ndim(t) == 0 and shape:
    return lax.broadcast(t, shape, range(len(shape)))
  return t


def _add_jvp(primals, tangents):
  (x, y), (x_dot, y_dot) = primals, tangents
  out = lax.add(x, y)
  x_dot = x_dot if type(x_dot) is Zero else _scalar_broadcast(x_dot, out)
  y_dot = y_dot if type(y_dot) is Zero else _scalar_broadcast(y_dot, out)
  return out, add_tangents(x_dot, y_dot)


def _sub_jvp(primals, tangents):
  (x, y), (x_dot, y_dot) = primals, tangents
  out = lax.sub(x, y)
  x_dot = x_dot if type(x_dot) is Zero else _scalar_broadcast(x_dot, out)
  y_dot = y_dot if type(y_dot) is Zero else _scalar_broadcast(lax.neg(y_dot), out)
  return out, add_tangents(x_dot, y_dot)


jvp_rules[add_p] = _add_jvp
jvp_rules[sub_p] = _sub_jvp
defjvp(mul_p, lambda x_dot, x, y: lax.mul(x_dot, y),
              lambda y_dot, x, y: lax.mul(x, y_dot))
defjvp(div_p, lambda x_dot, x, y: lax.div(x_dot, y),
              lambda y_dot, x, y: lax.neg(lax.div(lax.mul(y_dot, x), lax.mul(y, y))))
deflinear(neg_p)
defjvp(sin_p, lambda x_dot, x: lax.mul(x_dot, lax.cos(x)))
defjvp(cos_p, lambda x_dot, x: lax.neg(lax.mul(x_dot, lax.sin(x))))
defjvp(exp_p, lambda x_dot, x: lax.mul(x_dot, lax.exp(x)))
defjvp(log_p, lambda x_dot, x: lax.div(x_dot, x))
defjvp(tanh_p, lambda x_dot, x: lax.mul(x_dot, lax.sub(1., lax.mul(lax.tanh(x), lax.tanh(x)))))
for _p in lax.comparison_primitives:
  defjvp_zero(_p)


def _where_mask(cond, like):
  """`cond` as 0/1 in the dtype of `like`."""
  return lax.convert_element_type(cond, np.result_type(like))


def _max_jvp(primals, tangents):
  # Where x == y, each operand gets half the tangent, as in JAX.
  (x, y), (x_dot, y_dot) = primals, tangents
  out = lax.max(x, y)
  gt, lt = _where_mask(lax.greater(x, y), out), _where_mask(lax.less(x, y), out)
  half_eq = lax.mul(0.5, lax.sub(lax.sub(1., gt), lt))
  t = Zero.from_value(out)
  if type(x_dot) is not Zero:
    t = add_tangents(t, lax.mul(_scalar_broadcast(x_dot, out), lax.add(gt, half_eq)))
  if type(y_dot) is not Zero:
    t = add_tangents(t, lax.mul(_scalar_broadcast(y_dot, out), lax.add(lt, half_eq)))
  return out, t


jvp_rules[max_p] = _max_jvp

deflinear(reduce_sum_p)


def _reduce_max_jvp(primals, tangents, *, axes):
  # The tangent flows through the maximal elements, split evenly among ties.
  (x,), (x_dot,) = primals, tangents
  out = lax.reduce_max(x, axes)
  kept = [d for i, d in enumerate(np.shape(x)) if i not in axes]
  assert tuple(kept) == np.shape(out)
  out_b = lax.broadcast(out, np.shape(x), axes)
  is_max = _where_mask(lax.greater_equal(x, out_b), x)
  counts = lax.broadcast(lax.reduce_sum(is_max, axes), np.shape(x), axes)
  return out, lax.reduce_sum(lax.div(lax.mul(x_dot, is_max), counts), axes)


jvp_rules[reduce_max_p] = _reduce_max_jvp
deflinear(broadcast_p)
deflinear(transpose_p)
deflinear(reshape_p)


def _convert_element_type_jvp(primals, tangents, *, new_dtype):
  (x,), (x_dot,) = primals, tangents
  out = lax.convert_element_type(x, new_dtype)
  if not np.issubdtype(new_dtype, np.inexact) or type(x_dot) is Zero:
    return out, Zero.from_value(out)   # integers have no tangent space
  return out, lax.convert_element_type(x_dot, new_dtype)


jvp_rules[convert_element_type_p] = _convert_element_type_jvp


# dot_general is bilinear: one term per operand, each a dot_general itself.
defjvp(lax.dot_general_p,
       lambda x_dot, x, y, *, dimension_numbers: lax.dot_general(x_dot, y, dimension_numbers),
       lambda y_dot, x, y, *, dimension_numbers: lax.dot_general(x, y_dot, dimension_numbers))
