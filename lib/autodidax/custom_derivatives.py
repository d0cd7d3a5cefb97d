"""Custom derivatives: custom_jvp and custom_vjp as higher-order primitives.

    @custom_jvp                          @custom_vjp
    def f(x): ...                        def g(x): ...
    @f.defjvp                            g.defvjp(g_fwd, g_bwd)
    def f_jvp(primals, tangents): ...

Calling `f` traces its body to a jaxpr and binds one equation that holds
the body and the rule, printed as JAX prints it:

    custom_jvp_call[name call_jaxpr jvp symbolic_zeros]      *consts, *args
    custom_vjp_call[name bwd call_jaxpr fwd symbolic_zeros]  *consts, *args

The first `num_consts` operands are the values the body closes over
(closure conversion, as for cond and scan). Evaluation, jit and vmap run
the body; jvp, linearize, vjp and grad run the rule. A custom_vjp rule knows
its linear map only transposed (bwd), so its JVP binds a third primitive,
`custom_lin`, which partial evaluation stages and transposition turns into
a call of bwd; evaluating it forwards is an error. Rules are traced to
jaxprs when a transformation first needs them. As JAX's
custom_derivatives.py, this module registers its rules itself.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from . import ad, batching, core, effects, lowering, stackless, state
from . import primitives as lax
from . import partial_eval as pe
from .ad import Zero, instantiate_zeros
from .api_util import shaped_abstractify
from .batching import batch_jaxpr, named_axis_rule, not_mapped
from .control_flow.common import at_axis0, avals_str, trace_flat, trace_tree
from .core import (Primitive, ShapedArray, Tracer, abstract_eval_rules,
                   full_raise, get_aval, impl_rules, raise_to_shaped)
from .sharding_rules import keep_body_types
from .flop_count import flops_call_rules
from .jaxpr import ClosedJaxpr, Jaxpr, Var, eval_jaxpr, pp_params_rules
from .partial_eval import closed_to_call_jaxpr
from .tree_util import tree_flatten, tree_map, tree_unflatten
from .util import not_in_autodidax

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)
custom_vjp_call_p = Primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = Primitive("custom_lin", multiple_results=True)


# --- What rules see -------------------------------------------------------

class SymbolicZero:
  """A tangent (or cotangent) known to be zero, passed to a rule defined
  with `symbolic_zeros=True` instead of an array of zeros (as JAX's)."""

  def __init__(self, aval):
    self.aval = raise_to_shaped(aval)

  shape, dtype, ndim = map(core.aval_property, ("shape", "dtype", "ndim"))

  def instantiate(self):
    """The zeros it stands for, as an array."""
    return np.zeros(self.aval.shape, self.aval.dtype)

  def __repr__(self):
    return f"SymbolicZero({self.aval.str_short()})"


class CustomVJPPrimal:
  """An input of a custom_vjp `fwd` defined with `symbolic_zeros=True`:
  its `value`, and whether it is `perturbed` (has a nonzero tangent)."""
  __slots__ = ("value", "perturbed")

  def __init__(self, value, perturbed: bool):
    self.value, self.perturbed = value, perturbed

  def __repr__(self):
    return f"CustomVJPPrimal({self.value!r}, perturbed={self.perturbed})"


def custom_vjp_primal_tree_values(tree):
  """The values of a tree of CustomVJPPrimal leaves."""
  return tree_map(lambda leaf: leaf.value, tree)


class ClosedOverTracerError(TypeError):
  """A custom rule can't account for a value its function closes over."""


class NondiffTracerError(TypeError):
  """A traced value in a custom_vjp argument listed in nondiff_argnums."""


# --- custom_jvp -----------------------------------------------------------

class custom_jvp:
  """`f = custom_jvp(fun)`: `f` computes `fun`, but jvp, grad and the other
  derivatives use the rule given by `f.defjvp(rule)`, called as
  `rule(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)`.

  Arguments listed in `nondiff_argnums` (functions, settings) are not
  differentiated: the rule gets them first, on their own."""

  def __init__(self, fun, nondiff_argnums=()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(sorted(set(nondiff_argnums)))
    self.jvp = None
    self.symbolic_zeros = False

  def defjvp(self, jvp, symbolic_zeros: bool = False):
    """Set the rule. With `symbolic_zeros=True`, a tangent known to be
    zero reaches the rule as a `SymbolicZero`, not as an array of zeros.
    Returns `jvp`, so that it works as a decorator."""
    self.jvp, self.symbolic_zeros = jvp, symbolic_zeros
    return jvp

  def defjvps(self, *jvps):
    """One rule per argument: `jvps[i](tangent_i, primal_out, *primals)`
    is argument i's part of the output tangent (None: no part); the parts
    are summed."""
    if self.nondiff_argnums:
      raise TypeError("custom_jvp: defjvps can't be used with "
                      "nondiff_argnums; write one rule with defjvp.")

    def jvp(primals, tangents):
      out = self(*primals)
      parts = [fn(t, out, *primals) for fn, t in zip(jvps, tangents)
               if fn is not None]
      if not parts:
        return out, tree_map(lambda p: SymbolicZero(get_aval(p)), out)
      add = lambda *ts: functools.reduce(lax.add, ts)
      return out, tree_map(add, *parts)
    self.defjvp(jvp)

  def __call__(self, *args, **kwargs):
    name = fun_name(self.fun)
    if self.jvp is None:
      raise AttributeError(f"No JVP rule defined for the custom_jvp "
                           f"function {name}: add one with defjvp.")
    args = positional(self.fun, name, args, kwargs)
    if nothing_is_traced():   # plain evaluation: run it, as JAX does
      return self.fun(*args)
    nondiff = {i: tree_map(stop_if_traced, args[i])
               for i in self.nondiff_argnums}
    closure, args_flat, in_tree, body, out_tree = trace_body(
        name, self.fun, args, nondiff)
    rule = JVPRuleJaxpr(self, name, list(nondiff.values()), closure,
                        _avals(args_flat), in_tree, body.out_avals,
                        out_tree)
    outs = custom_jvp_call_p.bind(
        *closure, *args_flat, name=name, call_jaxpr=body,
        jvp_jaxpr_fun=rule, num_consts=len(closure),
        symbolic_zeros=self.symbolic_zeros)
    return tree_unflatten(out_tree, outs)


# --- What a call does before it binds -------------------------------------

def nothing_is_traced() -> bool:
  """No transformation is running: evaluation is the only interpreter."""
  if core.current_design() is not core.levels:   # JAX today's design
    return stackless.evaluating()
  return core.hooks.quiet() and len(core.trace_stack) == 1


def fun_name(fun) -> str:
  return getattr(fun, "__name__", type(fun).__name__)


def positional(fun, name, args, kwargs) -> tuple:
  """`args` and `kwargs` as positional arguments (defaults filled in)."""
  try:
    signature = inspect.signature(fun)
  except (TypeError, ValueError):   # a builtin: take the arguments as is
    return args
  try:
    bound = signature.bind(*args, **kwargs)
  except TypeError as e:
    raise TypeError(f"The arguments of the custom function {name} don't "
                    f"fit its signature: {e}") from None
  bound.apply_defaults()
  if bound.kwargs:
    raise TypeError(f"The custom function {name} has keyword-only "
                    f"arguments {sorted(bound.kwargs)}; custom_jvp and "
                    "custom_vjp need arguments that can go by position.")
  return bound.args


def stop_if_traced(x):
  return lax.stop_gradient(x) if isinstance(x, Tracer) else x


def trace_body(name, fun, args, nondiff: dict):
  """Trace `fun` to a jaxpr over the leaves of the arguments not in
  `nondiff`, which must be arrays. Returns (closure, args_flat, in_tree,
  call_jaxpr, out_tree): the jaxpr takes the values it closes over (the
  closure), then the leaves of the arguments."""
  diff = tuple(a for i, a in enumerate(args) if i not in nondiff)
  args_flat, in_tree = tree_flatten(diff)
  for leaf in args_flat:
    if not core.is_array(leaf):
      i = next(i for i, a in enumerate(args) if i not in nondiff and any(
          x is leaf for x in tree_flatten(a)[0]))
      raise TypeError(
          f"The custom function {name} got a {type(leaf).__name__} "
          f"({leaf!r:.40}) in argument {i}, which is differentiated, so "
          "must hold arrays. List arguments that are not arrays "
          "(functions, settings) in nondiff_argnums, e.g. "
          f"nondiff_argnums=({i},).")
  out_trees = []

  def flat_fun(*leaves):
    it = iter(tree_unflatten(in_tree, leaves))
    full = [nondiff[i] if i in nondiff else next(it)
            for i in range(len(args))]
    out_flat, out_tree = tree_flatten(fun(*full))
    out_trees.append(out_tree)
    return out_flat
  jaxpr, closure = trace_flat(flat_fun, map(shaped_abstractify, args_flat))
  return closure, args_flat, in_tree, ClosedJaxpr(jaxpr, []), out_trees[-1]


def _tangent_aval(aval) -> ShapedArray:
  """A tangent's type: its primal's, strong, with the primal's sharding and the
  mesh axes it varies along (inside shard_map, bwd gets a varying cotangent)."""
  return ShapedArray(aval.shape, aval.dtype, sharding=getattr(aval, "sharding", None),
                     vma=getattr(aval, "vma", frozenset()))


def _avals(xs) -> list:
  return [raise_to_shaped(get_aval(x)) for x in xs]


def _same_type(a, b) -> bool:
  return a.shape == b.shape and a.dtype == b.dtype


def _types(tree, avals) -> str:
  shown = tree_unflatten(tree, [a.str_short() for a in avals])
  return str(shown).replace("'", "")


# --- Tracing a rule: the body's closure becomes inputs --------------------

def trace_rule(rule_flat, closure, in_avals, what: str):
  """Stage `rule_flat(*closure_in, *args)` as `trace_flat` does. `closure`
  holds what the custom function's body closes over (its equation's first
  operands); where the rule uses one of those values, directly or through
  `closure_in`, the jaxpr reads an input instead of a constant. Returns
  (jaxpr, consts): the jaxpr takes consts, then `closure`, then `args`, so
  every transformation sees those values as the operands they are."""
  if core.current_design() is not core.levels:   # JAX today's design
    return closed_to_call_jaxpr(*stackless.trace_to_jaxpr_reading(
        rule_flat, _avals(closure) + list(in_avals), closure))
  builder = pe.JaxprBuilder()
  try:
    with core.new_main(pe.DynamicJaxprTrace, builder) as main, \
         core.new_dynamic(main):
      trace = pe.DynamicJaxprTrace(main)
      closure_in = [trace.new_arg(a) for a in _avals(closure)]
      for c, t in zip(closure, closure_in):   # a use of c reads t
        builder.const_tracers[id(c)] = t
        builder.tracers.append(c)      # c stays alive while id(c) is a key
      args_in = [trace.new_arg(a) for a in in_avals]
      outs = rule_flat(*closure_in, *args_in)
      outs = [full_raise(trace, y) for y in outs]
      jaxpr, consts = builder.build(closure_in + args_in, outs)
  except core.EscapedTracerError as e:
    raise ClosedOverTracerError(
        f"{what} uses a value traced by a transformation that has "
        "finished (a jit, make_jaxpr, cond or scan around the call, whose "
        "jaxpr is transformed now). Pass that value to the custom function "
        "as an argument, so that the rule receives it.") from e
  return closed_to_call_jaxpr(jaxpr, consts)


def _stand_ins(trees, closure, closure_in):
  """`trees` with each leaf that is a value of `closure` replaced by its
  input in `closure_in`: a nondiff argument that the body closes over
  reaches the rule as that input, even if its own trace has finished."""
  stand_in = {id(c): t for c, t in zip(closure, closure_in)}
  return [tree_map(lambda x: stand_in.get(id(x), x), t) for t in trees]


class JVPRuleJaxpr:
  """The `jvp_jaxpr_fun` parameter of custom_jvp_call: the user's rule,
  traced to a jaxpr when first needed, once per pattern of zero tangents.

  `rule(in_zeros) -> (jaxpr, consts, out_zeros)`: the jaxpr takes
  `*consts, *closure, *primals, *nonzero_tangents` and returns the primal
  outputs, then the output tangents that are not zero (`out_zeros`). It
  prints as the rule's name."""

  def __init__(self, f: custom_jvp, name, nondiff, closure, in_avals,
               in_tree, out_avals, out_tree):
    self.jvp, self.symbolic_zeros = f.jvp, f.symbolic_zeros
    self.name, self.fun_name = fun_name(f.jvp), name
    self.nondiff, self.closure = nondiff, closure
    self.in_avals, self.in_tree = in_avals, in_tree
    self.out_avals, self.out_tree = out_avals, out_tree
    self._jaxprs: dict = {}

  def __repr__(self):
    return self.name

  def __call__(self, in_zeros: tuple):
    if in_zeros not in self._jaxprs:
      self._jaxprs[in_zeros] = self._trace(in_zeros)
    return self._jaxprs[in_zeros]

  def _trace(self, in_zeros):
    out_zeros: list = []

    def rule_flat(*args):   # the closure, primals, nonzero tangents
      k, n = len(self.closure), len(self.in_avals)
      primals, nonzero = args[k:k + n], iter(args[k + n:])
      tangents = [SymbolicZero(_tangent_aval(a)) if z else next(nonzero)
                  for a, z in zip(self.in_avals, in_zeros)]
      nondiff = _stand_ins(self.nondiff, self.closure, args[:k])
      p_out, t_out = self._call_rule(nondiff, primals, tangents)
      out_zeros[:] = [type(t) is SymbolicZero for t in t_out]
      return p_out + [t for t in t_out if type(t) is not SymbolicZero]
    avals = self.in_avals + [_tangent_aval(a) for a, z in
                             zip(self.in_avals, in_zeros) if not z]
    what = f"The custom JVP rule {self.name} of {self.fun_name}"
    jaxpr, consts = trace_rule(rule_flat, self.closure, avals, what)
    return jaxpr, consts, tuple(out_zeros)

  def _call_rule(self, nondiff, primals, tangents):
    """Call the rule on pytrees; check what it returns; flat outputs."""
    what = f"The custom JVP rule {self.name} of {self.fun_name}"
    out = self.jvp(*nondiff, tree_unflatten(self.in_tree, primals),
                   tree_unflatten(self.in_tree, tangents))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise TypeError(f"{what} must return a pair (primal_out, "
                      f"tangent_out), but it returned {out!r:.60}.")
    primals_out, p_tree = tree_flatten(out[0])
    tangents_out, t_tree = tree_flatten(out[1])
    p_avals = _avals(primals_out)
    if p_tree != self.out_tree or not all(
        map(_same_type, p_avals, self.out_avals)):
      raise TypeError(
          f"{what} returned a primal output of type "
          f"{_types(p_tree, p_avals)}, but {self.fun_name} returns "
          f"{_types(self.out_tree, self.out_avals)}; they must be equal.")
    if t_tree != p_tree:
      raise TypeError(f"{what} returned a tangent output structured as "
                      f"{t_tree} for a primal output structured as "
                      f"{p_tree}; they must match.")
    for p, t in zip(p_avals, tangents_out):
      t_aval = t.aval if type(t) is SymbolicZero else get_aval(t)
      if not _same_type(_tangent_aval(p), t_aval):
        raise TypeError(
            f"{what} returned a tangent of type {t_aval.str_short()} for "
            f"a primal output of type {p.str_short()}; a tangent must have "
            "its primal's shape and dtype.")
    return primals_out, tangents_out


# --- custom_jvp_call's rules, one transformation at a time ----------------

def _custom_call_impl(*args, call_jaxpr, **_):
  return eval_jaxpr(call_jaxpr.jaxpr, [], *args)


def _custom_call_abstract_eval(*avals, call_jaxpr, name, **_):
  want = call_jaxpr.in_avals
  if len(avals) != len(want) or not all(map(_same_type, avals, want)):
    raise TypeError(f"custom call of {name}: the operands are "
                    f"{avals_str(avals)}; its jaxpr takes "
                    f"{avals_str(want)}")
  return [raise_to_shaped(a) for a in call_jaxpr.out_avals]


impl_rules[custom_jvp_call_p] = _custom_call_impl
abstract_eval_rules[custom_jvp_call_p] = _custom_call_abstract_eval
keep_body_types(custom_jvp_call_p)   # its results' types, shardings included, are its body's


def _custom_jvp_call_jvp(primals, tangents, *, name, call_jaxpr,
                         jvp_jaxpr_fun, num_consts, symbolic_zeros):
  """The rule fires: evaluate the user's rule, traced to a jaxpr, on the
  primals and tangents, instead of differentiating the body."""
  check_closure_tangents(name, "custom_jvp", tangents[:num_consts])
  consts, args = primals[:num_consts], primals[num_consts:]
  tangents = tangents[num_consts:]
  if symbolic_zeros:
    in_zeros = tuple(type(t) is Zero for t in tangents)
  else:
    in_zeros = (False,) * len(tangents)
  jaxpr, rule_consts, out_zeros = jvp_jaxpr_fun(in_zeros)
  nonzero = [instantiate_zeros(t)
             for t, z in zip(tangents, in_zeros) if not z]
  outs = eval_jaxpr(jaxpr, [], *rule_consts, *consts, *args, *nonzero)
  n = len(out_zeros)
  primals_out, tangents_out = outs[:n], iter(outs[n:])
  return primals_out, [Zero.from_value(p) if z else next(tangents_out)
                       for p, z in zip(primals_out, out_zeros)]


def check_closure_tangents(name, kind, const_tangents):
  """A custom rule differentiates the explicit arguments only."""
  if any(type(t) is not Zero for t in const_tangents):
    raise ClosedOverTracerError(
        f"The {kind} function {name} closes over a value that has a "
        "tangent (one being differentiated, or an input of a jit around "
        "the call), and its rule can't say how the output depends on it. "
        f"Pass the value to {name} as an argument, or wrap it in "
        "lax.stop_gradient.")


ad.jvp_rules[custom_jvp_call_p] = _custom_jvp_call_jvp


def _custom_jvp_call_vmap(axis_size, vals_in, dims_in, *, name, call_jaxpr,
                          jvp_jaxpr_fun, num_consts, symbolic_zeros):
  """Batch the body now, and the rule when a JVP asks for it: one new
  custom_jvp_call, whose outputs are batched where the body's are."""
  vals = [at_axis0(axis_size, x, d) for x, d in zip(vals_in, dims_in)]
  in_batched = tuple(d is not not_mapped for d in dims_in)
  n_out = len(call_jaxpr.out_avals)
  jaxpr, consts, out_batched = batch_jaxpr(
      call_jaxpr.jaxpr, axis_size, in_batched, (False,) * n_out)
  rule = BatchedJVPRule(jvp_jaxpr_fun, axis_size, _avals(consts),
                        in_batched, tuple(out_batched), num_consts)
  outs = custom_jvp_call_p.bind(
      *consts, *vals, name=name, call_jaxpr=ClosedJaxpr(jaxpr, []),
      jvp_jaxpr_fun=rule, num_consts=len(consts) + num_consts,
      symbolic_zeros=symbolic_zeros)
  return outs, [0 if b else not_mapped for b in out_batched]


batching.vmap_rules[custom_jvp_call_p] = _custom_jvp_call_vmap
batching.axis_vmap_rules[custom_jvp_call_p] = named_axis_rule(
    _custom_jvp_call_vmap)


def batch_rule_jaxpr(jaxpr, consts, axis_size, new_const_avals, in_batched,
                     force, what, axis_name=None, num_free=0):
  """Batch a rule's jaxpr, whose inputs are `*consts, *operands`
  (`in_batched` and `force` as for `batch_jaxpr`, for the operands and the
  outputs), under the named vmap `axis_name` (None: unnamed). Batching the
  body may have added consts in front of the equation's operands: the
  result takes them too (`new_const_avals`), and ignores them. The first
  `num_free` outputs (a fwd's residuals) may come out batched or not.
  Returns (jaxpr, consts, which outputs are batched)."""
  in_b = (False,) * len(consts) + tuple(in_batched)
  with batching.rule_axis(axis_name):
    j, j_consts, got = batch_jaxpr(jaxpr, axis_size, in_b, tuple(force))
  if list(got[num_free:]) != list(force[num_free:]):
    raise TypeError(
        f"{what} returns outputs that vary across the vmap batch where the "
        "custom function's outputs don't; make each output of the rule "
        "depend on the inputs that the function's output depends on.")
  k = len(j_consts) + len(consts)
  ignored = [Var(a) for a in new_const_avals]
  jaxpr = Jaxpr([], j.invars[:k] + ignored + j.invars[k:], j.eqns,
                j.outvars)
  return jaxpr, [*j_consts, *consts], tuple(got)


class BatchedJVPRule:
  """`jvp_jaxpr_fun` of a batched custom_jvp_call: the unbatched call's
  rule, batched like the body (operands batched at axis 0 where
  `in_batched`, outputs where `out_batched`), traced when first asked."""

  def __init__(self, rule, axis_size, new_const_avals, in_batched,
               out_batched, num_consts):
    self.rule, self.axis_size = rule, axis_size
    self.new_const_avals, self.num_consts = new_const_avals, num_consts
    self.in_batched, self.out_batched = in_batched, out_batched
    self.axis_name = batching.rule_axis_name()
    self._jaxprs: dict = {}

  def __repr__(self):
    return repr(self.rule)

  def __call__(self, in_zeros: tuple):
    if in_zeros not in self._jaxprs:
      jaxpr, consts, out_zeros = self.rule(in_zeros)
      args_b = self.in_batched[self.num_consts:]
      in_b = self.in_batched + tuple(
          b for b, z in zip(args_b, in_zeros) if not z)
      force = self.out_batched + tuple(
          b for b, z in zip(self.out_batched, out_zeros) if not z)
      jaxpr, consts, _ = batch_rule_jaxpr(
          jaxpr, consts, self.axis_size, self.new_const_avals, in_b, force,
          f"The custom JVP rule {self.rule!r}", self.axis_name)
      self._jaxprs[in_zeros] = jaxpr, consts, out_zeros
    return self._jaxprs[in_zeros]


def _custom_jvp_call_partial_eval(trace, tracers, *, call_jaxpr, **_):
  """An operand is unknown. Under linearize the JVP interpreter above has
  already applied the rule, so this is the function applied to tangents
  (a linear use), where the rule has no part: inline the body, so that
  its known parts run now and the rest is staged (as JAX does)."""
  outs = eval_jaxpr(call_jaxpr.jaxpr, [], *tracers)
  return [full_raise(trace, x) for x in outs]


pe.partial_eval_rules[custom_jvp_call_p] = _custom_jvp_call_partial_eval


def _custom_call_transpose(cts, *args, call_jaxpr, **_):
  """A custom function applied linearly is transposed through its body."""
  cts_in = iter(ad.backward_pass(call_jaxpr.jaxpr, list(args), cts))
  return [next(cts_in) if ad.is_undefined_primal(x) else None
          for x in args]


ad.transpose_rules[custom_jvp_call_p] = _custom_call_transpose


def _custom_call_lowering(ctx, *args, call_jaxpr, **_):
  """Under jit only the body runs: its ops go inline; the rule is gone."""
  env = dict(zip(call_jaxpr.jaxpr.invars, args))
  return lowering.lower_jaxpr_body(ctx, call_jaxpr.jaxpr, env)


def _custom_call_flops(*args, call_jaxpr, run, **_):
  return run(call_jaxpr.jaxpr, call_jaxpr.consts, *args)   # the body is what runs


lowering.lowering_rules[custom_jvp_call_p] = _custom_call_lowering
flops_call_rules[custom_jvp_call_p] = _custom_call_flops


def _pp_custom_call(renamed: dict):
  """Print as JAX: `name` first, rules by their own names, `num_consts`
  only if there are consts."""
  def items(params):
    shown = {renamed.get(k, k): v for k, v in params.items()
             if k != "name" and not (k == "num_consts" and not v)}
    return [("name", params["name"]), *sorted(shown.items())]
  return items


pp_params_rules[custom_jvp_call_p] = _pp_custom_call(
    {"jvp_jaxpr_fun": "jvp"})


# --- custom_vjp -----------------------------------------------------------

class custom_vjp:
  """`g = custom_vjp(fun)`: `g` computes `fun`, but vjp and grad use the
  rule given by `g.defvjp(fwd, bwd)`: `fwd(*args) -> (out, residuals)`
  runs forwards, and `bwd(*nondiff_args, residuals, out_cotangent)`
  returns one cotangent (or None) per differentiated argument. Forward
  mode (jvp) is an error: the rule gives the linear map only transposed.

  Arguments listed in `nondiff_argnums` must not be traced: they are for
  functions and settings, which bwd gets first, on their own."""

  def __init__(self, fun, nondiff_argnums=()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(sorted(set(nondiff_argnums)))
    self.fwd = self.bwd = None
    self.symbolic_zeros = False

  def defvjp(self, fwd, bwd, symbolic_zeros: bool = False):
    """Set the rule. With `symbolic_zeros=True`, fwd gets each input leaf
    as a `CustomVJPPrimal(value, perturbed)`, and bwd a `SymbolicZero` for
    each output cotangent known to be zero."""
    self.fwd, self.bwd, self.symbolic_zeros = fwd, bwd, symbolic_zeros

  def __call__(self, *args, **kwargs):
    name = fun_name(self.fun)
    if self.fwd is None:
      raise AttributeError(f"No VJP rule defined for the custom_vjp "
                           f"function {name}: add one with defvjp.")
    args = positional(self.fun, name, args, kwargs)
    if nothing_is_traced():
      return self.fun(*args)
    nondiff = {i: args[i] for i in self.nondiff_argnums}
    check_nondiff(name, nondiff)
    closure, args_flat, in_tree, body, out_tree = trace_body(
        name, self.fun, args, nondiff)
    in_avals = _avals(args_flat)
    fwd = FwdRuleJaxpr(self, name, len(args), nondiff, closure, in_avals,
                       in_tree, body.out_avals, out_tree)
    bwd = BwdRule(self, name, list(nondiff.values()), in_avals, in_tree,
                  out_tree)
    outs = custom_vjp_call_p.bind(
        *closure, *args_flat, name=name, call_jaxpr=body, fwd=fwd, bwd=bwd,
        num_consts=len(closure), symbolic_zeros=self.symbolic_zeros)
    return tree_unflatten(out_tree, outs)


def check_nondiff(name, nondiff: dict):
  for i, arg in nondiff.items():
    for leaf in tree_flatten(arg)[0]:
      if isinstance(leaf, Tracer):
        by = leaf._trace.main.trace_type.__name__
        raise NondiffTracerError(
            f"The custom_vjp function {name} got a traced value "
            f"({leaf.aval.str_short()}, traced by {by}) in argument {i}, "
            "which nondiff_argnums marks as not differentiated, so bwd "
            "can't give it the cotangent it may need. Keep nondiff_argnums "
            "for values that are never traced (functions, settings); pass "
            "arrays as ordinary arguments, and return their cotangent from "
            "bwd (None for zero).")


class FwdRuleJaxpr:
  """The `fwd` parameter of custom_vjp_call: the user's fwd, traced to a
  jaxpr when first needed (once per pattern of perturbed inputs, which
  matters only with symbolic zeros). `fwd(nonzeros) -> (jaxpr, consts,
  res_tree)`: the jaxpr takes `*consts, *closure, *args` and returns the
  residuals' leaves, then the primal outputs. It prints as fwd's name."""

  def __init__(self, g: custom_vjp, name, num_args, nondiff, closure,
               in_avals, in_tree, out_avals, out_tree):
    self.fwd, self.symbolic_zeros = g.fwd, g.symbolic_zeros
    self.name, self.fun_name = fun_name(g.fwd), name
    self.num_args, self.nondiff, self.closure = num_args, nondiff, closure
    self.in_avals, self.in_tree = in_avals, in_tree
    self.out_avals, self.out_tree = out_avals, out_tree
    self._jaxprs: dict = {}

  def __repr__(self):
    return self.name

  def __call__(self, nonzeros: tuple):
    if not self.symbolic_zeros:   # then fwd is the same for every pattern
      nonzeros = (True,) * len(self.in_avals)
    if nonzeros not in self._jaxprs:
      self._jaxprs[nonzeros] = self._trace(nonzeros)
    return self._jaxprs[nonzeros]

  def _trace(self, nonzeros):
    res_trees: list = []

    def fwd_flat(*args):   # the closure (fwd reads it directly), the inputs
      leaves = args[len(self.closure):]
      if self.symbolic_zeros:
        leaves = [CustomVJPPrimal(x, nz) for x, nz in zip(leaves, nonzeros)]
      it = iter(tree_unflatten(self.in_tree, leaves))
      full = [self.nondiff[i] if i in self.nondiff else next(it)
              for i in range(self.num_args)]
      primals_out, res = self._check_out(self.fwd(*full))
      res_flat, res_tree = tree_flatten(res)
      res_trees.append(res_tree)
      return res_flat + primals_out
    what = f"The custom VJP fwd {self.name} of {self.fun_name}"
    jaxpr, consts = trace_rule(fwd_flat, self.closure, self.in_avals, what)
    return jaxpr, consts, res_trees[-1]

  def _check_out(self, out):
    what = f"The custom VJP fwd {self.name} of {self.fun_name}"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise TypeError(f"{what} must return a pair (primal_out, residuals), "
                      f"but it returned {out!r:.60}.")
    primals_out, tree = tree_flatten(out[0])
    avals = _avals(primals_out)
    if tree != self.out_tree or not all(
        map(_same_type, avals, self.out_avals)):
      # JAX: a wrong structure is a TypeError, a wrong shape or dtype a ValueError
      raise (TypeError if tree != self.out_tree else ValueError)(
          f"{what} returned a primal output of type {_types(tree, avals)}, "
          f"but {self.fun_name} returns "
          f"{_types(self.out_tree, self.out_avals)}; they must be equal.")
    return primals_out, out[1]


class BwdRule:
  """The `bwd` parameter of custom_vjp_call: the user's bwd on flat lists.
  `bwd(res_tree, *residuals, *cotangents)` returns one cotangent per
  input leaf, `Zero` where bwd gave None. It prints as bwd's name."""

  def __init__(self, g: custom_vjp, name, nondiff, in_avals, in_tree,
               out_tree):
    self.bwd, self.name, self.fun_name = g.bwd, fun_name(g.bwd), name
    self.nondiff, self.in_avals = nondiff, in_avals
    self.in_tree, self.out_tree = in_tree, out_tree

  def __repr__(self):
    return self.name

  def __call__(self, res_tree, *args):
    n_res = res_tree.num_leaves
    res = tree_unflatten(res_tree, args[:n_res])
    cts = tree_unflatten(self.out_tree, args[n_res:])
    return self._flat_cotangents(self.bwd(*self.nondiff, res, cts))

  def _flat_cotangents(self, out) -> list:
    """bwd's tuple (an entry per argument: a pytree, or None) as a list."""
    what = f"The custom VJP bwd {self.name} of {self.fun_name}"
    arg_trees = self.in_tree.children
    if isinstance(out, list):
      out = tuple(out)
    if not isinstance(out, tuple) or len(out) != len(arg_trees):
      raise TypeError(
          f"{what} must return a tuple with one cotangent (or None) per "
          f"differentiated argument, {len(arg_trees)} here, but it "
          f"returned {out!r:.60}.")
    flat = []
    for i, (ct, arg_tree) in enumerate(zip(out, arg_trees)):
      leaves = cotangent_leaves(ct, arg_tree)
      if leaves is None:
        raise TypeError(
            f"{what} returned a cotangent structured as "
            f"{tree_flatten(ct)[1]} for argument {i}, structured as "
            f"{arg_tree} (None may stand for any part).")
      flat += leaves
    return [self._leaf(ct, aval) for ct, aval in zip(flat, self.in_avals)]

  def _leaf(self, ct, aval):
    if ct is None or type(ct) is SymbolicZero:
      return Zero(aval)
    ct_aval = get_aval(ct)
    if ct_aval.shape != aval.shape:
      raise ValueError(   # as JAX's
          f"The custom VJP bwd {self.name} of {self.fun_name} returned a "
          f"cotangent of type {ct_aval.str_short()} for an input of type "
          f"{aval.str_short()}; they must have the same shape.")
    if ct_aval.vma != aval.vma:   # inside shard_map: the varying mesh axes, as in JAX
      raise ValueError(
          f"The custom VJP bwd {self.name} of {self.fun_name} returned a "
          f"cotangent of type {ct_aval.str_short()} for an input of type "
          f"{aval.str_short()}: the manual axis types do not match. A cotangent "
          "varies along the mesh axes its input varies along: psum it over the "
          "others (or pcast the input to varying before the call).")
    return ct   # another float dtype passes on as it is, as in JAX


def cotangent_leaves(ct, tree):
  """The leaves of `ct`, structured as `tree`, where None may stand for
  any subtree (None for each of its leaves); None if it doesn't fit."""
  if ct is None:
    return [None] * tree.num_leaves
  node = tree.node_type
  if node is None:
    return [ct]
  if node.cls is not None and type(ct) is not node.cls:
    return None
  children, aux = node.flatten(ct)
  if aux != tree.aux_data or len(children) != len(tree.children):
    return None
  parts = [cotangent_leaves(c, t) for c, t in zip(children, tree.children)]
  return None if None in parts else [x for part in parts for x in part]


class BoundBwd:
  """custom_lin's `bwd`: a custom_vjp_call's bwd, with the residuals'
  structure of one fwd run. `bwd(*residuals, *cotangents)`."""

  def __init__(self, bwd, res_tree):
    self.bwd, self.res_tree = bwd, res_tree

  def __repr__(self):
    return repr(self.bwd)

  def __call__(self, *args):
    return self.bwd(self.res_tree, *args)


# --- custom_vjp_call's rules ----------------------------------------------

impl_rules[custom_vjp_call_p] = _custom_call_impl
abstract_eval_rules[custom_vjp_call_p] = _custom_call_abstract_eval
keep_body_types(custom_vjp_call_p)   # its results' types, shardings included, are its body's


def _custom_vjp_call_jvp(primals, tangents, *, name, call_jaxpr, fwd, bwd,
                         num_consts, symbolic_zeros):
  """Run fwd now, and keep its residuals for bwd: the tangents go through
  custom_lin, a linear map known only by its transpose."""
  check_closure_tangents(name, "custom_vjp", tangents[:num_consts])
  consts, args = primals[:num_consts], primals[num_consts:]
  tangents = tangents[num_consts:]
  in_zeros = [type(t) is Zero for t in tangents]
  jaxpr, fwd_consts, res_tree = fwd(tuple(not z for z in in_zeros))
  outs = eval_jaxpr(jaxpr, [], *fwd_consts, *consts, *args)
  n_res = res_tree.num_leaves
  res, primals_out = outs[:n_res], outs[n_res:]
  nonzero = [t for t, z in zip(tangents, in_zeros) if not z]
  tangents_out = custom_lin_p.bind(
      *res, *nonzero, num_res=n_res, bwd=BoundBwd(bwd, res_tree),
      out_avals=[_tangent_aval(get_aval(p)) for p in primals_out],
      symbolic_zeros=symbolic_zeros, in_zeros=in_zeros)
  return primals_out, tangents_out


ad.jvp_rules[custom_vjp_call_p] = _custom_vjp_call_jvp


def _custom_vjp_call_vmap(axis_size, vals_in, dims_in, *, name, call_jaxpr,
                          fwd, bwd, num_consts, symbolic_zeros):
  """Batch the body now, fwd and bwd when a derivative asks for them."""
  vals = [at_axis0(axis_size, x, d) for x, d in zip(vals_in, dims_in)]
  in_batched = tuple(d is not not_mapped for d in dims_in)
  n_out = len(call_jaxpr.out_avals)
  jaxpr, consts, out_batched = batch_jaxpr(
      call_jaxpr.jaxpr, axis_size, in_batched, (False,) * n_out)
  out_batched = tuple(out_batched)
  fwd = BatchedFwd(fwd, axis_size, _avals(consts), in_batched, out_batched)
  bwd = BatchedBwd(bwd, axis_size, in_batched[num_consts:], out_batched)
  outs = custom_vjp_call_p.bind(
      *consts, *vals, name=name, call_jaxpr=ClosedJaxpr(jaxpr, []),
      fwd=fwd, bwd=bwd, num_consts=len(consts) + num_consts,
      symbolic_zeros=symbolic_zeros)
  return outs, [0 if b else not_mapped for b in out_batched]


batching.vmap_rules[custom_vjp_call_p] = _custom_vjp_call_vmap
batching.axis_vmap_rules[custom_vjp_call_p] = named_axis_rule(
    _custom_vjp_call_vmap)


class BatchedResiduals:
  """The residuals' structure a batched fwd returns: the unbatched fwd's
  (`tree`), and which residual leaves are batched (at axis 0)."""

  def __init__(self, tree, batched: tuple):
    self.tree, self.batched = tree, batched
    self.num_leaves = tree.num_leaves


class BatchedFwd:
  """`fwd` of a batched custom_vjp_call: the unbatched fwd, batched like
  the body. A residual is batched (at axis 0) or not, as it comes out;
  BatchedResiduals tells BatchedBwd which."""

  def __init__(self, fwd, axis_size, new_const_avals, in_batched,
               out_batched):
    self.fwd, self.axis_size = fwd, axis_size
    self.new_const_avals = new_const_avals
    self.in_batched, self.out_batched = in_batched, out_batched
    self.axis_name = batching.rule_axis_name()
    self._jaxprs: dict = {}

  def __repr__(self):
    return repr(self.fwd)

  def __call__(self, nonzeros: tuple):
    if nonzeros not in self._jaxprs:
      jaxpr, consts, res_tree = self.fwd(nonzeros)
      n_res = res_tree.num_leaves
      force = (False,) * n_res + self.out_batched
      jaxpr, consts, got = batch_rule_jaxpr(
          jaxpr, consts, self.axis_size, self.new_const_avals,
          self.in_batched, force, f"The custom VJP fwd {self.fwd!r}",
          self.axis_name, n_res)
      res_tree = BatchedResiduals(res_tree, got[:n_res])
      self._jaxprs[nonzeros] = jaxpr, consts, res_tree
    return self._jaxprs[nonzeros]


class BatchedBwd:
  """`bwd` of a batched custom_vjp_call: the unbatched bwd under vmap. Its
  residuals are batched where BatchedFwd's are, each cotangent like its
  output. An input that is not batched gets the sum over the batch of what
  bwd gives it batched; what comes out unbatched (from unbatched residuals
  and cotangents alone) counts once, as in JAX."""

  def __init__(self, bwd, axis_size, in_batched, out_batched):
    self.bwd, self.axis_size = bwd, axis_size
    self.in_batched, self.out_batched = in_batched, out_batched
    self.axis_name = batching.rule_axis_name()

  def __repr__(self):
    return repr(self.bwd)

  def __call__(self, batched_res, *args):
    res_tree, n_res = batched_res.tree, batched_res.num_leaves
    res, cts = args[:n_res], args[n_res:]
    symbolic = {i for i, ct in enumerate(cts) if type(ct) is SymbolicZero}
    zero_outs: list = []

    def one(*xs):   # one batch element: residuals, nonzero cotangents
      it = iter(xs[n_res:])
      cts_i = [next(it) if i not in symbolic else SymbolicZero(
          batching.mapped_aval(0, ct.aval) if b else ct.aval)
               for i, (ct, b) in enumerate(zip(cts, self.out_batched))]
      outs = self.bwd(res_tree, *xs[:n_res], *cts_i)
      zero_outs[:] = [type(o) is Zero for o in outs]
      return [np.zeros(o.aval.shape, o.aval.dtype) if type(o) is Zero
              else o for o in outs]
    nonzero = [ct for i, ct in enumerate(cts) if i not in symbolic]
    dims = [0 if b else not_mapped for b in batched_res.batched] + [
        0 if b else not_mapped for i, b in enumerate(self.out_batched)
        if i not in symbolic]
    if self.axis_name is not None:   # collectives in bwd find their vmap
      outs, out_dims, _ = batching.vmap_flat(
          one, dims, *res, *nonzero, axis_name=self.axis_name,
          axis_size=self.axis_size)
    elif all(d is not_mapped for d in dims):   # nothing to map: run once
      outs = one(*res, *nonzero)
      out_dims = [not_mapped] * len(outs)
    else:
      outs, out_dims, _ = core.current_design().vmap(one, dims, *res,
                                                     *nonzero)
    return [self._match(o, d, b, z) for o, d, b, z in
            zip(outs, out_dims, self.in_batched, zero_outs)]

  def _match(self, ct, dim, batched, zero):
    """The cotangent of one input: batched at axis 0 if the input is."""
    if zero:   # bwd gave None, for every element
      aval = raise_to_shaped(get_aval(ct))
      if batched:
        aval = aval.update(shape=(self.axis_size, *aval.shape))
      return Zero(aval)
    if batched:
      return batching.move_batch_axis(self.axis_size, dim, 0, ct)
    if dim is not_mapped:
      return ct
    return lax.reduce_sum(ct, (dim,))   # the whole batch shares the input


lowering.lowering_rules[custom_vjp_call_p] = _custom_call_lowering
flops_call_rules[custom_vjp_call_p] = _custom_call_flops
pp_params_rules[custom_vjp_call_p] = _pp_custom_call({})


# --- custom_jvp and custom_vjp bodies may read a Ref, not write it ---------------------------

def _discharge_custom_call(eqn, vals, env):
  """A custom function's body reads a Ref it closes over: the call again,
  its body and rule reading the Ref's current value, passed in its place. A
  write isn't discharged: the rule can't say how the Ref's value changes (JAX
  doesn't discharge custom_jvp_call at all)."""
  p = eqn.params
  _read_only(p["call_jaxpr"].jaxpr, p["name"])
  body, _ = state.discharged_body(p["call_jaxpr"].jaxpr, p["name"])
  body = ClosedJaxpr(_without_finals(body, p["call_jaxpr"].jaxpr), [])
  rule = "jvp_jaxpr_fun" if "jvp_jaxpr_fun" in p else "fwd"
  return eqn.primitive.bind(*vals, **{**p, "call_jaxpr": body,
                                      rule: ReadOnlyRule(p[rule], p["name"])})


def _read_only(jaxpr: Jaxpr, name: str):
  if any(isinstance(e, (effects.WriteEffect, effects.AccumEffect)) for e in jaxpr.effects):
    raise NotImplementedError(
        f"The custom function {name} writes a Ref it closes over, which its rule can't "
        "account for: write the Ref outside the custom function, passing in its value.")


def _without_finals(new: Jaxpr, old: Jaxpr) -> Jaxpr:
  return Jaxpr(new.constvars, new.invars, new.eqns, new.outvars[:len(old.outvars)])


class ReadOnlyRule:
  """A custom rule (`jvp_jaxpr_fun` or `fwd`) whose jaxpr reads Refs of its
  closure: the same rule, reading their values instead."""

  def __init__(self, rule, name):
    self.rule, self.name, self._jaxprs = rule, name, {}

  def __repr__(self):
    return repr(self.rule)

  def __call__(self, zeros: tuple):
    if zeros not in self._jaxprs:
      jaxpr, consts, *rest = self.rule(zeros)
      _read_only(jaxpr, self.name)
      new, _ = state.discharged_body(jaxpr, self.name)
      self._jaxprs[zeros] = (_without_finals(new, jaxpr), consts, *rest)
    return self._jaxprs[zeros]


for _p in (custom_jvp_call_p, custom_vjp_call_p):
  state.discharge_rules[_p] = _discharge_custom_call
  effects.inner_jaxprs[_p] = lambda params: [(params["call_jaxpr"], 0)]


# --- custom_lin: a linear map known by its transpose ----------------------

def _custom_lin_forward_error(*_, **__):
  raise TypeError(
      "can't apply forward-mode autodiff (jvp) to a custom_vjp function: "
      "its rule gives the derivative only in reverse (bwd maps output "
      "cotangents to input cotangents), so nothing can push a tangent "
      "forwards. Use reverse mode (grad, vjp, jacrev), or define the "
      "function with custom_jvp, whose rule serves both modes.")


def _custom_lin_abstract_eval(*avals, out_avals, **_):
  return list(out_avals)


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals,
                          symbolic_zeros, in_zeros):
  """Cotangents in, cotangents out: this is where bwd runs."""
  res = args[:num_res]
  if symbolic_zeros:
    cts = [SymbolicZero(ct.aval) if type(ct) is Zero else ct for ct in cts]
  else:
    cts = [instantiate_zeros(ct) for ct in cts]
  cts_in = bwd(*res, *cts)
  return [None] * num_res + [ct for ct, z in zip(cts_in, in_zeros)
                             if not z]


def _pp_custom_lin(params):
  return sorted((k, v) for k, v in params.items() if k != "out_avals")


impl_rules[custom_lin_p] = _custom_lin_forward_error
abstract_eval_rules[custom_lin_p] = _custom_lin_abstract_eval
keep_body_types(custom_lin_p)   # its results' types, shardings included, are its body's
ad.jvp_rules[custom_lin_p] = _custom_lin_forward_error
batching.vmap_rules[custom_lin_p] = _custom_lin_forward_error
lowering.lowering_rules[custom_lin_p] = _custom_lin_forward_error
ad.transpose_rules[custom_lin_p] = _custom_lin_transpose
pp_params_rules[custom_lin_p] = _pp_custom_lin


# --- closure_convert: a closure's tracers as explicit arguments ---------------------------------

def closure_convert(fun, *example_args):
  """`fun`, for arguments like `example_args`, with the tracers it closes
  over hoisted into arguments of their own, as `jax.closure_convert`:
  returns `(converted, hoisted)`, and `converted(*args, *hoisted)` is
  `fun(*args)`. Pass `hoisted` to a custom function explicitly, and its rule
  can give them tangents (a closed-over value can't have one)."""
  flat, in_tree = tree_flatten(example_args)
  jaxpr, consts, out_tree = trace_tree(fun, in_tree, [shaped_abstractify(x) for x in flat])
  is_hoisted = [isinstance(c, Tracer) for c in consts]
  hoisted = [c for c, h in zip(consts, is_hoisted) if h]

  def converted(*args_and_hoisted):
    split = len(args_and_hoisted) - len(hoisted)
    given = iter(args_and_hoisted[split:])
    values = [next(given) if h else c for c, h in zip(consts, is_hoisted)]
    args_flat, tree = tree_flatten(args_and_hoisted[:split])
    if tree != in_tree:
      raise TypeError(f"closure_convert: the converted function takes arguments shaped "
                      f"like the examples, {in_tree}, then the hoisted values; got {tree}")
    return tree_unflatten(out_tree, eval_jaxpr(jaxpr, [], *values, *args_flat))
  return converted, hoisted


def __getattr__(name):   # a name of jax.custom_derivatives not here
  raise not_in_autodidax("jax.custom_derivatives", name)
