"""Forward-mode automatic differentiation: the JVP interpreter and its rules.

A JVPTracer carries a primal value and a tangent. The tangent may be a
symbolic `Zero`, which costs nothing to carry and lets rules skip work.
"""
from __future__ import annotations

import numpy as np

from . import primitives as lax
from .core import (RuleTable, Trace, Tracer, check_live, current_design, full_lower,
                   full_raise, get_aval, levels, new_main, raise_to_shaped)
from .named_sharding import NamedSharding, P
from .jaxpr import Jaxpr, Lit, Var, eval_jaxpr
from .primitives import (add_p, broadcast_p, convert_element_type_p, cos_p, div_p,
                  exp_p, log_p, max_p, mul_p, neg_p, reduce_max_p, reduce_sum_p,
                  reshape_p, sin_p, sub_p, tanh_p, transpose_p)
from .partial_eval import closed_to_call_jaxpr, trace_to_jaxpr
from .util import cache_by_jaxpr, unzip2


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
  """A primal value boxed with its tangent (which may be a symbolic Zero)."""
  __slots__ = ["primal", "tangent"]

  def __init__(self, trace, primal, tangent):
    self._trace, self.primal, self.tangent = trace, primal, tangent

  aval = property(lambda self: get_aval(self.primal))   # the primal's type

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
    if all(type(t) is Zero for t in tangents_in) and primitive not in jvp_even_if_zero:
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


# Primitives whose JVP rule runs even when every tangent is zero: new_ref,
# whose Ref may later be written with a value that has one (autodidax.state).
jvp_even_if_zero: set = set()

jvp_rules = RuleTable(
    "JVP", "Register one with `ad.jvp_rules[prim] = rule` (`ad.partials_jvp` "
    "builds a rule from one function per operand).")


def jvp_flat(f, primals, tangents, instantiate=True):
  """JVP of `f`, which takes and returns flat lists of arrays. With
  `instantiate=False`, output tangents may be symbolic Zeros."""
  with new_main(JVPTrace) as main:
    trace = JVPTrace(main)
    boxed = [JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
    outs = [full_raise(trace, y) for y in f(*boxed)]
  tangents_out = [t.tangent for t in outs]
  if instantiate:
    tangents_out = [instantiate_zeros(t) for t in tangents_out]
  return [t.primal for t in outs], tangents_out


levels.jvp = lambda f, primals, tangents: jvp_flat(  # see core.Design
    f, primals, tangents, instantiate=False)


@cache_by_jaxpr
def jvp_jaxpr(jaxpr: Jaxpr, nonzeros: tuple, instantiate: tuple):
  """A jaxpr mapping (primals, the `nonzeros` tangents) to (primal outs, the
  tangent outs that are nonzero or `instantiate`d). Returns (jaxpr, consts,
  out_nonzeros); the jaxpr takes `consts` first. (jit passes all True.)"""
  n = len(jaxpr.invars)
  out_nz: list = []

  def fun(*args):
    primals, tans = args[:n], iter(args[n:])
    tangents = [next(tans) if nz else Zero(v.aval) for v, nz in zip(jaxpr.invars, nonzeros)]
    # jvp_flat; inside a stackless transformation, its own
    p_out, t_out = current_design().jvp(lambda *xs: eval_jaxpr(jaxpr, [], *xs),
                                        primals, tangents)
    out_nz[:] = [type(t) is not Zero or bool(inst) for t, inst in zip(t_out, instantiate)]
    return p_out + [instantiate_zeros(t) for t, nz in zip(t_out, out_nz) if nz]

  avals = jaxpr.in_avals
  tangent_avals = [a for a, nz in zip(avals, nonzeros) if nz]
  j, consts = closed_to_call_jaxpr(*trace_to_jaxpr(fun, avals + tangent_avals))
  return j, consts, list(out_nz)


# --- Rule builders: the usual shapes of a JVP rule ---------------------------------------

def partials_jvp(primitive, *jvp_fns):
  """A JVP rule from one function per operand (JAX's `defjvp` builds the same).

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
  return rule


def linear_jvp(primitive):
  """The JVP rule of a primitive linear in all operands: apply it to the tangents."""
  def rule(primals, tangents, **params):
    tangents = [instantiate_zeros(t) for t in tangents]
    return primitive.bind(*primals, **params), primitive.bind(*tangents, **params)
  return rule


def zero_jvp(primitive):
  """The JVP rule of outputs that don't vary with the inputs (comparisons)."""
  def rule(primals, tangents, **params):
    out = primitive.bind(*primals, **params)
    return out, Zero.from_value(out)
  return rule


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
jvp_rules[mul_p] = partials_jvp(mul_p, lambda x_dot, x, y: lax.mul(x_dot, y),
                                       lambda y_dot, x, y: lax.mul(x, y_dot))
jvp_rules[div_p] = partials_jvp(
    div_p, lambda x_dot, x, y: lax.div(x_dot, y),
    lambda y_dot, x, y: lax.mul(lax.mul(lax.neg(y_dot), x),
                                lax.integer_pow(y, -2)))
jvp_rules[neg_p] = linear_jvp(neg_p)
jvp_rules[sin_p] = partials_jvp(sin_p, lambda x_dot, x: lax.mul(x_dot, lax.cos(x)))
jvp_rules[cos_p] = partials_jvp(cos_p, lambda x_dot, x: lax.neg(lax.mul(x_dot, lax.sin(x))))
jvp_rules[log_p] = partials_jvp(log_p, lambda x_dot, x: lax.div(x_dot, x))


def _exp_jvp(primals, tangents):
  """exp' = exp: the output is its own slope, so exp runs once (as JAX's)."""
  (x,), (x_dot,) = primals, tangents
  y = lax.exp(x)
  if type(x_dot) is Zero:
    return y, Zero.from_value(y)
  return y, lax.mul(x_dot, y)


jvp_rules[exp_p] = _exp_jvp


def _tanh_jvp(primals, tangents):
  """tanh' = 1 - tanh² = (1 + y)(1 - y), from the output y: tanh is computed
  once. Written as JAX's rule, (ẋ + ẋ y)(1 - y), so that reverse mode saves
  the same residuals (y and 1 - y)."""
  (x,), (x_dot,) = primals, tangents
  y = lax.tanh(x)
  if type(x_dot) is Zero:
    return y, Zero.from_value(y)
  return y, lax.mul(lax.add(x_dot, lax.mul(x_dot, y)), lax.sub(1., y))


jvp_rules[tanh_p] = _tanh_jvp
for _p in lax.comparison_primitives:
  jvp_rules[_p] = zero_jvp(_p)


def _where_mask(cond, like):
  """`cond` as 0/1 in the dtype of `like`."""
  return lax.convert_element_type(cond, np.result_type(like))


def _max_jvp(primals, tangents):
  (x, y), (x_dot, y_dot) = primals, tangents
  out = lax.max(x, y)
  return out, _pick_tangent(out, x, y, x_dot, y_dot)


def _pick_tangent(out, x, y, x_dot, y_dot):
  """The tangent of max or min: the operand's that equals the result, half of
  each where both do, none where neither does (NaN), as JAX's."""
  t = Zero.from_value(out)
  for a, b, a_dot in ((x, y, x_dot), (y, x, y_dot)):
    if type(a_dot) is not Zero:
      share = lax.div(_where_mask(lax.eq(a, out), out),
                      lax.add(_where_mask(lax.eq(b, out), out), 1.))
      t = add_tangents(t, lax.mul(_scalar_broadcast(a_dot, out), share))
  return t


jvp_rules[max_p] = _max_jvp
jvp_rules[reduce_sum_p] = linear_jvp(reduce_sum_p)


def _reduce_max_jvp(primals, tangents, *, axes):
  # The tangent flows through the maximal elements, split evenly among ties.
  (x,), (x_dot,) = primals, tangents
  out = lax.reduce_max(x, axes)
  return out, _chosen_tangent(x, x_dot, out, axes)


def _chosen_tangent(x, x_dot, out, axes):
  """The mean tangent of the elements equal to `out` (as JAX's: 0/0 = NaN
  where none is, an empty axis or a NaN)."""
  is_out = _where_mask(lax.eq(x, lax.broadcast(out, np.shape(x), axes)), x)
  return lax.div(lax.reduce_sum(lax.mul(x_dot, is_out), axes),
                 lax.reduce_sum(is_out, axes))


jvp_rules[reduce_max_p] = _reduce_max_jvp
for _p in (broadcast_p, transpose_p, reshape_p):
  jvp_rules[_p] = linear_jvp(_p)


def _convert_element_type_jvp(primals, tangents, *, new_dtype, weak_type):
  (x,), (x_dot,) = primals, tangents
  out = lax.convert_element_type(x, new_dtype, weak_type)
  if (not np.issubdtype(new_dtype, np.inexact) or type(x_dot) is Zero
      or not np.issubdtype(get_aval(x).dtype, np.inexact)):
    return out, Zero.from_value(out)   # integers have no tangent space
  return out, lax.convert_element_type(x_dot, new_dtype, weak_type)


jvp_rules[convert_element_type_p] = _convert_element_type_jvp


# dot_general is bilinear: one term per operand, each a dot_general itself.
jvp_rules[lax.dot_general_p] = partials_jvp(
    lax.dot_general_p,
    lambda x_dot, x, y, *, dimension_numbers, out_sharding=None: lax.dot_general(
        x_dot, y, dimension_numbers, out_sharding),
    lambda y_dot, x, y, *, dimension_numbers, out_sharding=None: lax.dot_general(
        x, y_dot, dimension_numbers, out_sharding))


# --- Transposition: running a linear jaxpr backwards (Part 4) ----------------------------------

class UndefPrimal:
  """A linear input of a jaxpr being transposed: only its type is known."""
  __slots__ = ["aval"]

  def __init__(self, aval):
    self.aval = raise_to_shaped(aval)

  def __repr__(self):
    return f"UndefPrimal({self.aval.str_short()})"


def is_undefined_primal(x) -> bool:
  return type(x) is UndefPrimal


transpose_rules = RuleTable(
    "Transpose", "Register one with `ad.transpose_rules[prim] = rule`; the rule "
    "gets (cotangent, *operands) with UndefPrimal for the linear operands.")


def backward_pass(jaxpr, args, cts) -> list:
  """Cotangents for the UndefPrimal entries of `args` (constvars then invars),
  given cotangents `cts` for the outputs. Zero cotangents stay symbolic, so
  parts of the jaxpr that don't reach an output cost nothing."""
  read_primal, linear_eqns = eval_known_eqns(jaxpr, args)
  ct_env: dict = {}

  def add_cotangent(x, ct):
    if type(x) is Var and ct is not None and type(ct) is not Zero:
      ct_env[x] = add_tangents(ct_env[x], ct) if x in ct_env else ct

  for x, ct in zip(jaxpr.outvars, cts):
    add_cotangent(x, ct)
  for eqn in reversed(linear_eqns):   # each sends its outputs' cotangents to its inputs
    cts_out = [fit_vma(ct_env.pop(v, Zero(v.aval)), v.aval) for v in eqn.out_binders]
    if all(type(ct) is Zero for ct in cts_out):
      continue
    rule = transpose_rules[eqn.primitive]
    ct_arg = cts_out if eqn.primitive.multiple_results else cts_out[0]
    cts_in = rule(ct_arg, *map(read_primal, eqn.inputs), **eqn.params)
    for x, ct in zip(eqn.inputs, cts_in):
      add_cotangent(x, ct)
  return [fit_vma(ct_env.pop(v, Zero(v.aval)), v.aval)
          for v, x in zip(jaxpr.constvars + jaxpr.invars, args) if is_undefined_primal(x)]


def fit_vma(ct, aval):
  """A cotangent with its primal's type. Inside shard_map (check_vma), a
  cotangent may vary over more mesh axes than its primal, where an invariant
  value met varying ones (an implicit pvary): it is summed over those (a
  psum, pvary's transpose). autodidax.shard_map sets the real one."""
  return ct


def eval_known_eqns(jaxpr, args):
  """The forward step before a backward pass. A linear jaxpr may also compute
  on its known inputs (residuals, constants): run those equations now. Returns
  a reader of primal values (an UndefPrimal for a linear one) and the
  remaining equations, which each read a linear value."""
  env = {v: x for v, x in zip(jaxpr.constvars + jaxpr.invars, args)
         if not is_undefined_primal(x)}

  def read_primal(x):
    if type(x) is Lit:
      return x.val
    return env[x] if x in env else UndefPrimal(x.aval)

  linear_eqns = []
  for eqn in jaxpr.eqns:
    ins = [read_primal(x) for x in eqn.inputs]
    if any(is_undefined_primal(x) for x in ins):
      linear_eqns.append(eqn)
    else:
      outs = eqn.primitive.bind(*ins, **eqn.params)
      env.update(zip(eqn.out_binders, outs if eqn.primitive.multiple_results else [outs]))
  return read_primal, linear_eqns


@cache_by_jaxpr
def transpose_jaxpr(jaxpr: Jaxpr, undefined: tuple) -> tuple[Jaxpr, list]:
  """A jaxpr mapping (residuals, output cotangents) to the cotangents of the
  `undefined` (linear) inputs. Returns (jaxpr, consts); it takes `consts` first."""
  avals_in, avals_out = jaxpr.in_avals, jaxpr.out_avals
  res_avals = [a for a, u in zip(avals_in, undefined) if not u]

  def transposed(*args):
    res, cts = iter(args[:len(res_avals)]), args[len(res_avals):]
    primals = [UndefPrimal(a) if u else next(res) for a, u in zip(avals_in, undefined)]
    return [instantiate_zeros(ct) for ct in backward_pass(jaxpr, primals, cts)]

  return closed_to_call_jaxpr(*trace_to_jaxpr(transposed, res_avals + avals_out))


# The rules: `rule(ct, *operands, **params)` returns one cotangent per operand
# (None for operands that are not linear inputs).

def _unbroadcast(ct, operand):
  """A rank-0 operand broadcast against a larger one gets the summed cotangent."""
  aval = operand.aval if is_undefined_primal(operand) else get_aval(operand)
  if aval.shape == np.shape(ct):
    return ct
  return lax.reduce_sum(ct, None)


def _add_transpose(ct, x, y):
  return [_unbroadcast(ct, x) if is_undefined_primal(x) else None,
          _unbroadcast(ct, y) if is_undefined_primal(y) else None]


def _sub_transpose(ct, x, y):
  return [_unbroadcast(ct, x) if is_undefined_primal(x) else None,
          _unbroadcast(lax.neg(ct), y) if is_undefined_primal(y) else None]


def _mul_transpose(ct, x, y):
  if is_undefined_primal(x) and is_undefined_primal(y):
    raise ValueError("mul: both operands are linear inputs, so the product is "
                     "not linear and can't be transposed")
  if is_undefined_primal(x):
    return [_unbroadcast(lax.mul(ct, y), x), None]
  return [None, _unbroadcast(lax.mul(x, ct), y)]


def _div_transpose(ct, x, y):
  if is_undefined_primal(y):
    raise ValueError("div is linear only in its numerator; its denominator "
                     "can't be a linear input")
  return [_unbroadcast(lax.div(ct, y), x), None]


transpose_rules[lax.add_p] = _add_transpose
transpose_rules[lax.sub_p] = _sub_transpose
transpose_rules[lax.mul_p] = _mul_transpose
transpose_rules[lax.div_p] = _div_transpose
transpose_rules[neg_p] = lambda ct, x: [lax.neg(ct)]


def _reduce_sum_transpose(ct, x, *, axes):
  out = lax.broadcast(ct, x.aval.shape, axes)
  want = getattr(x.aval, "sharding", None)   # on Explicit axes: the primal's layout
  if want is not None and getattr(out, "aval", None) is not None and out.aval.sharding != want:
    out = lax.reshard_p.bind(out, sharding=want)
  return [out]


def _broadcast_transpose(ct, x, *, shape, axes):
  return [lax.reduce_sum(ct, axes)]


transpose_rules[reduce_sum_p] = _reduce_sum_transpose
transpose_rules[broadcast_p] = _broadcast_transpose
transpose_rules[transpose_p] = (
    lambda ct, x, *, permutation: [lax.transpose(ct, np.argsort(permutation))])
transpose_rules[reshape_p] = (
    lambda ct, x, *, new_sizes, out_sharding=None: [
        lax.reshape(ct, x.aval.shape, x.aval.sharding if out_sharding else None)])
transpose_rules[convert_element_type_p] = (
    lambda ct, x, *, new_dtype, weak_type:
    [lax.convert_element_type(ct, x.aval.dtype, x.aval.weak_type)])


def _dot_transpose_lhs(ct, y, x_aval, dimension_numbers):
  """Cotangent of the left operand: contract ct's rhs-free axes with y."""
  (lc, rc), (lb, rb) = dimension_numbers
  x_ndim, y_ndim = len(x_aval.shape), np.ndim(y)
  lf = [i for i in range(x_ndim) if i not in lc and i not in lb]
  rf = [i for i in range(y_ndim) if i not in rc and i not in rb]
  nb = len(lb)
  ct_rf = tuple(range(nb + len(lf), nb + len(lf) + len(rf)))
  # out's axes are x's batch axes, x's free axes, then x's contracting axes
  # in the order y holds them; put them back in x's order.
  x_axes = [*lb, *lf, *(lc[i] for i in np.argsort(rc))]
  # On Explicit axes, the cotangent is laid out as x, whatever ct's and y's
  # layouts: a contraction they both split is then no ambiguity (as in JAX,
  # an x without a sharding leaves it one: an error).
  s = x_aval.sharding
  s = None if s is None else type(s)(s.mesh, type(s.spec)(
      *[s.spec.padded(x_ndim)[a] for a in x_axes]))
  out = lax.dot_general(ct, y, ((ct_rf, tuple(rf)), (tuple(range(nb)), tuple(rb))), s)
  out = lax.transpose(out, np.argsort(x_axes))
  # Operands of two dtypes: the cotangent comes in the result's; give x's.
  return out if get_aval(out).dtype == x_aval.dtype else lax.convert_element_type(
      out, x_aval.dtype)


def _dot_general_transpose(ct, x, y, *, dimension_numbers, out_sharding=None):
  (lc, rc), (lb, rb) = dimension_numbers
  if is_undefined_primal(x) and is_undefined_primal(y):
    raise ValueError("dot_general: both operands are linear inputs; not linear")
  if is_undefined_primal(x):
    return [_dot_transpose_lhs(ct, y, x.aval, dimension_numbers), None]
  # For y, swap the operands: ct's axes are (batch, x free, y free).
  nb, x_free = len(lb), np.ndim(x) - len(lc) - len(lb)
  y_free = len(y.aval.shape) - len(rc) - len(rb)
  perm = [*range(nb), *range(nb + x_free, nb + x_free + y_free), *range(nb, nb + x_free)]
  ct_swapped = lax.transpose(ct, perm)
  return [None, _dot_transpose_lhs(ct_swapped, x, y.aval, ((rc, lc), (rb, lb)))]


transpose_rules[lax.dot_general_p] = _dot_general_transpose


# --- Rules of the NumPy-subset primitives ---------------------------------------------------

def _mask(pred, like):
  """A boolean as 1/0 in the dtype (and weak type) of `like`."""
  aval = get_aval(like)
  return lax.convert_element_type(pred, aval.dtype, aval.weak_type)


def _full(x, like):
  """`x` broadcast to the shape of `like` (a rank-0 operand may stand for all)."""
  return _scalar_broadcast(x, like)


def _min_jvp(primals, tangents):
  (x, y), (x_dot, y_dot) = primals, tangents
  out = lax.min(x, y)
  return out, _pick_tangent(out, x, y, x_dot, y_dot)


jvp_rules[lax.min_p] = _min_jvp


def _pow_jvp(primals, tangents):
  # d(x^y)/dx = y x^(y-1), taken as 0 where an integer y is 0;
  # d(x^y)/dy = log(x) x^y, taken as 0 where x == 0. As in JAX.
  (x, y), (x_dot, y_dot) = primals, tangents
  out = lax.pow(x, y)
  int_y = lax.integer_exponent(get_aval(x), get_aval(y))   # (y_dot is zero)
  if int_y:
    y = lax.convert_element_type(y, get_aval(x).dtype)
  t = Zero.from_value(out)
  if type(x_dot) is not Zero:
    slope = lax.mul(y, lax.pow(x, lax.sub(y, 1.)))
    if int_y:
      zeros = np.zeros(np.shape(slope), get_aval(slope).dtype)
      slope = lax.select_n(lax.eq(y, 0.), slope, zeros)
    t = add_tangents(t, lax.mul(_full(x_dot, out), _full(slope, out)))
  if type(y_dot) is not Zero:
    log_x = lax.log(lax.add(x, _mask(lax.eq(x, 0.), x)))
    t = add_tangents(t, lax.mul(_full(y_dot, out), lax.mul(log_x, out)))
  return out, t


jvp_rules[lax.pow_p] = _pow_jvp


def _integer_pow_jvp(primals, tangents, *, y):
  (x,), (x_dot,) = primals, tangents
  out = lax.integer_pow(x, y)
  if y == 0:
    return out, Zero.from_value(out)
  # As JAX's rule: x itself for x ** 1 (no integer_pow[y=1] equation)
  slope = lax.mul(float(y), x if y == 2 else lax.integer_pow(x, y - 1)) if y != 1 else 1.
  return out, lax.mul(x_dot, slope)


jvp_rules[lax.integer_pow_p] = _integer_pow_jvp


def _trunc(q):
  """Round toward zero: sign(q) * floor(|q|)."""
  return lax.mul(lax.sign(q), lax.floor(lax.abs(q)))


# rem(x, y) = x - y * trunc(x / y), and trunc is flat.
jvp_rules[lax.rem_p] = partials_jvp(
    lax.rem_p, lambda x_dot, x, y: _full(x_dot, lax.rem(x, y)),
    lambda y_dot, x, y: lax.mul(lax.neg(_full(y_dot, lax.rem(x, y))), _trunc(lax.div(x, y))))


# abs: the slope at 0 is 1, as in JAX (x >= 0 takes the + branch).
jvp_rules[lax.abs_p] = partials_jvp(lax.abs_p, lambda x_dot, x: lax.mul(
    x_dot, lax.sub(lax.mul(2., _mask(lax.greater_equal(x, 0.), x)), 1.)))
jvp_rules[lax.sqrt_p] = partials_jvp(
    lax.sqrt_p, lambda x_dot, x: lax.div(x_dot, lax.mul(2., lax.sqrt(x))))
jvp_rules[lax.rsqrt_p] = partials_jvp(lax.rsqrt_p, lambda x_dot, x: lax.mul(
    x_dot, lax.div(lax.mul(-0.5, lax.rsqrt(x)), x)))
for _p in (lax.sign_p, lax.floor_p, lax.round_p, lax.stop_gradient_p, lax.and_p,
           lax.or_p, lax.xor_p, lax.not_p, lax.argmax_p, lax.argmin_p):
  jvp_rules[_p] = zero_jvp(_p)


def _reduce_min_jvp(primals, tangents, *, axes):
  (x,), (x_dot,) = primals, tangents
  out = lax.reduce_min(x, axes)
  return out, _chosen_tangent(x, x_dot, out, axes)


jvp_rules[lax.reduce_min_p] = _reduce_min_jvp


def _reduce_prod_jvp(primals, tangents, *, axes):
  # The slope for x_i is the product of the other elements. Dividing the
  # product by x_i fails at zeros, so zeros are replaced by ones first: with
  # no zero the slope is prod/x_i, with one zero only that element has a
  # slope (the product of the rest), with two or more every slope is 0.
  (x,), (x_dot,) = primals, tangents
  out = lax.reduce_prod(x, axes)
  back = lambda v: lax.broadcast(v, np.shape(x), axes)
  is0 = _mask(lax.eq(x, 0.), x)
  nonzero = lax.add(x, is0)
  prod_nz = back(lax.reduce_prod(nonzero, axes))
  zeros = back(lax.reduce_sum(is0, axes))
  slope = lax.add(lax.mul(_mask(lax.eq(zeros, 0.), x), lax.div(prod_nz, nonzero)),
                  lax.mul(lax.mul(_mask(lax.eq(zeros, 1.), x), is0), prod_nz))
  return out, lax.reduce_sum(lax.mul(x_dot, slope), axes)


jvp_rules[lax.reduce_prod_p] = _reduce_prod_jvp
for _p in (lax.cumsum_p, lax.concatenate_p, lax.pad_p, lax.slice_p, lax.rev_p):
  jvp_rules[_p] = linear_jvp(_p)


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
  x, *starts = primals
  out = lax.dynamic_slice_p.bind(x, *starts, slice_sizes=slice_sizes)
  x_dot = tangents[0]
  if type(x_dot) is Zero:
    return out, Zero.from_value(out)
  return out, lax.dynamic_slice_p.bind(x_dot, *starts, slice_sizes=slice_sizes)


def _dynamic_update_slice_jvp(primals, tangents):
  x, update, *starts = primals
  out = lax.dynamic_update_slice_p.bind(x, update, *starts)
  if type(tangents[0]) is Zero and type(tangents[1]) is Zero:
    return out, Zero.from_value(out)
  t_x, t_u = (instantiate_zeros(t) for t in tangents[:2])
  return out, lax.dynamic_update_slice_p.bind(t_x, t_u, *starts)


jvp_rules[lax.dynamic_slice_p] = _dynamic_slice_jvp
jvp_rules[lax.dynamic_update_slice_p] = _dynamic_update_slice_jvp


def _ct_aval(x):
  return x.aval if is_undefined_primal(x) else get_aval(x)


transpose_rules[lax.cumsum_p] = lambda ct, x, *, axis, reverse: [
    lax.cumsum(ct, axis, not reverse)]


def _concatenate_transpose(ct, *xs, dimension):
  cts, start = [], 0
  for x in xs:
    shape = _ct_aval(x).shape
    stop = start + shape[dimension]
    if is_undefined_primal(x):
      lo = [0] * len(shape)
      lo[dimension] = start
      hi = list(np.shape(ct))
      hi[dimension] = stop
      cts.append(lax.slice(ct, lo, hi))
    else:
      cts.append(None)
    start = stop
  return cts


transpose_rules[lax.concatenate_p] = _concatenate_transpose


def _pad_transpose(ct, x, padding_value, *, padding_config):
  # Undo the edges (a negative edge was a cut: pad it back with zeros), then
  # keep every (interior + 1)-th element.
  unpadded = lax.pad(ct, np.zeros((), np.result_type(ct)), [(-lo, -hi, 0) for lo, hi, _ in padding_config])
  ct_x = lax.slice(unpadded, [0] * np.ndim(ct), np.shape(unpadded),
                   [mid + 1 for _, _, mid in padding_config])
  ct_v = None
  if is_undefined_primal(padding_value):
    ct_v = lax.sub(lax.reduce_sum(ct, None), lax.reduce_sum(ct_x, None))
  return [ct_x if is_undefined_primal(x) else None, ct_v]


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
  shape = x.aval.shape
  ends = [a + (n - 1) * s + 1 if n else a
          for a, n, s in zip(start_indices, np.shape(ct), strides)]
  config = [(a, d - e, s - 1) for a, e, d, s in zip(start_indices, ends, shape, strides)]
  return [lax.pad(ct, np.zeros((), np.result_type(ct)), config)]


transpose_rules[lax.pad_p] = _pad_transpose
transpose_rules[lax.slice_p] = _slice_transpose
transpose_rules[lax.rev_p] = lambda ct, x, *, dimensions: [lax.rev(ct, dimensions)]


def _dynamic_slice_transpose(ct, x, *starts, slice_sizes):
  zeros = zeros_like_aval(x.aval)
  return [lax.dynamic_update_slice_p.bind(zeros, ct, *starts)] + [None] * len(starts)


def _dynamic_update_slice_transpose(ct, x, update, *starts):
  u_aval = _ct_aval(update)
  ct_x = lax.dynamic_update_slice_p.bind(ct, zeros_like_aval(u_aval), *starts)
  ct_u = lax.dynamic_slice_p.bind(ct, *starts, slice_sizes=u_aval.shape)
  return [ct_x if is_undefined_primal(x) else None,
          ct_u if is_undefined_primal(update) else None] + [None] * len(starts)


transpose_rules[lax.dynamic_slice_p] = _dynamic_slice_transpose
transpose_rules[lax.dynamic_update_slice_p] = _dynamic_update_slice_transpose


# --- Rules of select_n and clamp ---------------------------------------------------------------

def _select_n_jvp(primals, tangents):
  which, *cases = primals
  out = lax.select_n(which, *cases)
  if all(type(t) is Zero for t in tangents[1:]):
    return out, Zero.from_value(out)
  return out, lax.select_n(which, *[instantiate_zeros(t) for t in tangents[1:]])


def _select_n_transpose(ct, which, *cases):
  if is_undefined_primal(which):
    raise ValueError("select_n is not linear in its selector")
  zeros = np.zeros(np.shape(ct), np.result_type(get_aval(ct).dtype))
  return [None] + [lax.select_n(which, *[ct if j == i else zeros for j in range(len(cases))])
                   if is_undefined_primal(c) else None for i, c in enumerate(cases)]


def _clamp_jvp(primals, tangents):
  lo, x, hi = primals
  out = lax.clamp(lo, x, hi)
  if np.result_type(get_aval(x).dtype).kind not in "fc":
    return out, Zero.from_value(out)
  # Whose tangent each element takes, as JAX's rule: x's strictly inside (at
  # a bound the slope is 0), lo's where lo > x (and lo < hi), hi's where x > hi.
  picks = (lax.bitwise_and(lax.greater(lo, x), lax.less(lo, hi)),
           lax.bitwise_and(lax.greater(x, lo), lax.less(x, hi)),
           lax.less(hi, x))
  shape = np.shape(out)
  full = lambda v: v if np.shape(v) == shape else lax.broadcast(
      v, shape, range(len(shape)))   # (a scalar bound)
  zeros = np.zeros(shape, get_aval(out).dtype)
  t = Zero.from_value(out)
  for pick, t_dot in zip(picks, tangents):
    if type(t_dot) is not Zero:
      t = add_tangents(t, lax.select_n(full(pick), zeros, full(t_dot)))
  return out, t


jvp_rules[lax.select_n_p] = _select_n_jvp
transpose_rules[lax.select_n_p] = _select_n_transpose
jvp_rules[lax.clamp_p] = _clamp_jvp


# --- Rules of reshard (the chapter Many devices) ------------------------------------------------

def _reshard_jvp(primals, tangents, *, sharding):
  t = tangents[0]
  return ([lax.reshard_p.bind(primals[0], sharding=sharding)],
          [Zero(get_aval(t)) if isinstance(t, Zero) else lax.reshard_p.bind(t, sharding=sharding)])


def _reshard_transpose(ct, x, *, sharding):
  """Back to the operand's layout."""
  old = x.aval.sharding or NamedSharding(sharding.mesh, P())
  return [lax.reshard_p.bind(ct, sharding=old)]


jvp_rules[lax.reshard_p] = _reshard_jvp
transpose_rules[lax.reshard_p] = _reshard_transpose
