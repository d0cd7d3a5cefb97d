"""Custom derivatives: `custom_jvp` and `custom_vjp`, as higher-order primitives.

    @custom_jvp                              @custom_vjp
    def f(x): ...                            def g(x): ...
    @f.defjvp                                g.defvjp(g_fwd, g_bwd)
    def f_jvp(primals, tangents): ...

Calling `f` traces its body to a jaxpr and binds one equation that holds the
body and the rule, as JAX does:

    custom_jvp_call[name call_jaxpr jvp num_consts symbolic_zeros]     *consts, *args
    custom_vjp_call[name bwd call_jaxpr fwd num_consts symbolic_zeros] *consts, *args

The first `num_consts` operands are values the body closes over (closure
conversion, as for cond and scan). Evaluation, jit and vmap run the body;
jvp, linearize, vjp and grad run the rule instead. A custom_vjp rule knows its
linear map only transposed (bwd), so its JVP binds a third primitive,
`custom_lin`, which partial evaluation stages and transposition turns into a
call of bwd; evaluating it forwards is an error. Rules are traced to jaxprs
when a transformation first needs them, one per pattern of zero tangents.
As in jax/_src/custom_derivatives.py, the rules are registered from here.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from . import ad, batching, core, flop_count, lax, lowering
from . import partial_eval as pe
from .ad import Zero, instantiate_zeros
from .api import shaped_abstractify
from .batching import not_mapped
from .control_flow.common import at_axis0, avals_str, batch_jaxpr, trace_flat
from .core import (Primitive, ShapedArray, Tracer, abstract_eval_rules,
                   full_raise, get_aval, impl_rules, raise_to_shaped)
from .jaxpr import ClosedJaxpr, Jaxpr, Var, eval_jaxpr, pp_params_rules
from .tree_util import tree_flatten, tree_map, tree_unflatten
from .xla import closed_to_call_jaxpr

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)
custom_vjp_call_p = Primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = Primitive("custom_lin", multiple_results=True)


# --- What rules see ---------------------------------------------------------------------

class SymbolicZero:
  """A tangent (or cotangent) known to be zero, passed to rules defined with
  `symbolic_zeros=True` instead of an array of zeros. As jax.custom_derivatives'."""

  def __init__(self, aval):
    self.aval = raise_to_shaped(aval)

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: self.aval.dtype)
  ndim = property(lambda self: self.aval.ndim)

  def instantiate(self):
    """The zeros it stands for, as an array."""
    return np.zeros(self.aval.shape, self.aval.dtype)

  def __repr__(self):
    return f"SymbolicZero({self.aval.str_short()})"


class CustomVJPPrimal:
  """A primal input of a custom_vjp `fwd` defined with `symbolic_zeros=True`:
  its `value`, and whether it is `perturbed` (has a nonzero tangent)."""
  __slots__ = ("value", "perturbed")

  def __init__(self, value, perturbed: bool):
    self.value, self.perturbed = value, perturbed

  def __repr__(self):
    return f"CustomVJPPrimal({self.value!r}, perturbed={self.perturbed})"


def custom_vjp_primal_tree_values(tree):
  """The values of a tree of CustomVJPPrimal leaves (what fwd receives with
  `symbolic_zeros=True`)."""
  return tree_map(lambda leaf: leaf.value, tree)


class ClosedOverTracerError(TypeError):
  """A custom rule can't account for a value its function closes over."""


class NondiffTracerError(TypeError):
  """A traced value reached a custom_vjp argument listed in nondiff_argnums."""


# --- custom_jvp ---------------------------------------------------------------------------

class custom_jvp:
  """`f = custom_jvp(fun)`: `f` computes `fun`, but jvp, grad and the other
  derivatives use the rule given by `f.defjvp(rule)`, called as
  `rule(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)`.

  Arguments listed in `nondiff_argnums` (functions, settings, ...) are not
  differentiated: the rule gets them first, on their own."""

  def __init__(self, fun, nondiff_argnums=()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(sorted(set(nondiff_argnums)))
    self.jvp = None
    self.symbolic_zeros = False

  def defjvp(self, jvp, symbolic_zeros: bool = False):
    """Set the rule. With `symbolic_zeros=True` a tangent that is known to be
    zero reaches the rule as a `SymbolicZero`, not as an array of zeros.
    Returns `jvp`, so that it works as a decorator."""
    self.jvp, self.symbolic_zeros = jvp, symbolic_zeros
    return jvp

  def defjvps(self, *jvps):
    """One rule per argument: `jvps[i](tangent_i, primal_out, *primals)` is
    argument i's part of the output tangent (None: no part); parts are summed."""
    if self.nondiff_argnums:
      raise TypeError("custom_jvp: defjvps can't be used with nondiff_argnums; "
                      "write one rule with defjvp instead.")

    def jvp(primals, tangents):
      primal_out = self(*primals)
      parts = [fn(t, primal_out, *primals) for fn, t in zip(jvps, tangents)
               if fn is not None]
      if not parts:
        return primal_out, tree_map(lambda p: SymbolicZero(get_aval(p)), primal_out)
      return primal_out, tree_map(lambda *ts: functools.reduce(lax.add, ts), *parts)
    self.defjvp(jvp)

  def __call__(self, *args, **kwargs):
    name = _fun_name(self.fun)
    if self.jvp is None:
      raise AttributeError(f"No JVP rule defined for the custom_jvp function {name}: "
                           f"define one with {name}.defjvp(rule).")
    args = _positional(self.fun, name, args, kwargs)
    if nothing_is_traced():   # plain evaluation: just run the function, as JAX does
      return self.fun(*args)
    nondiff = {i: tree_map(_stop_gradient, args[i]) for i in self.nondiff_argnums}
    diff_args = _diff_args(name, args, nondiff)
    closure, args_flat, in_tree, call_jaxpr, out_tree = _trace_body(
        self.fun, args, nondiff, diff_args)
    rule = JVPRuleJaxpr(self.jvp, list(nondiff.values()), name, closure,
                        [get_aval(x) for x in args_flat], in_tree,
                        call_jaxpr.out_avals, out_tree, self.symbolic_zeros)
    outs = custom_jvp_call_p.bind(
        *closure, *args_flat, name=name, call_jaxpr=call_jaxpr, jvp_jaxpr_fun=rule,
        num_consts=len(closure), symbolic_zeros=self.symbolic_zeros)
    return tree_unflatten(out_tree, outs)


def nothing_is_traced() -> bool:
  """No transformation is running: evaluation is the only interpreter."""
  _check_not_stackless()
  return (len(core.trace_stack) == 1 and core.dynamic_trace is None
          and not core.bind_observers)


def _check_not_stackless():
  if core.bind_handler is not None:
    raise NotImplementedError(
        "custom_jvp and custom_vjp don't work inside the transformations of "
        "autodidax.stackless yet; use the ones of autodidax (adx.jvp, adx.grad, ...).")


def _fun_name(fun) -> str:
  return getattr(fun, "__name__", type(fun).__name__)


def _positional(fun, name, args, kwargs) -> tuple:
  """`args` and `kwargs` as positional arguments only (defaults filled in)."""
  try:
    signature = inspect.signature(fun)
  except (TypeError, ValueError):   # a builtin, say: take the arguments as they are
    return args
  try:
    bound = signature.bind(*args, **kwargs)
  except TypeError as e:
    raise TypeError(f"The arguments of the custom function {name} don't fit its "
                    f"signature: {e}") from None
  bound.apply_defaults()
  if bound.kwargs:
    raise TypeError(f"The custom function {name} got keyword-only arguments "
                    f"{sorted(bound.kwargs)}; custom_jvp and custom_vjp need arguments "
                    "that can be passed by position.")
  return bound.args


def _stop_gradient(x):
  return lax.stop_gradient(x) if isinstance(x, Tracer) else x


def _diff_args(name, args, nondiff) -> tuple:
  """The arguments that are differentiated; each leaf must be an array."""
  diff = tuple(a for i, a in enumerate(args) if i not in nondiff)
  for i, a in enumerate(args):
    if i in nondiff:
      continue
    for leaf in tree_flatten(a)[0]:
      if not core.is_array(leaf):
        raise TypeError(
            f"The custom function {name} got a {type(leaf).__name__} ({leaf!r:.40}) in "
            f"argument {i}, which is differentiated, so it must hold arrays only. "
            f"List arguments that are not arrays (functions, settings) in "
            f"nondiff_argnums, e.g. custom_jvp({name}, nondiff_argnums=({i},)).")
  return diff


def _trace_body(fun, args, nondiff, diff_args):
  """Trace `fun` to a jaxpr over the leaves of the differentiated arguments.
  Returns (closure, args_flat, in_tree, call_jaxpr, out_tree): the jaxpr takes
  the values it closes over first, then the arguments' leaves."""
  args_flat, in_tree = tree_flatten(diff_args)
  store = []

  def flat_fun(*leaves):
    it = iter(tree_unflatten(in_tree, leaves))
    full = [nondiff[i] if i in nondiff else next(it) for i in range(len(args))]
    out_flat, out_tree = tree_flatten(fun(*full))
    store.append(out_tree)
    return out_flat
  jaxpr, closure = trace_flat(flat_fun, [shaped_abstractify(x) for x in args_flat])
  return closure, args_flat, in_tree, ClosedJaxpr(jaxpr, []), store[-1]


def _tangent_aval(aval) -> ShapedArray:
  return ShapedArray(aval.shape, aval.dtype)


def _avals(xs) -> list:
  return [raise_to_shaped(get_aval(x)) for x in xs]


def _same_type(a, b) -> bool:
  return a.shape == b.shape and a.dtype == b.dtype


def _types(tree, avals) -> str:
  return str(tree_unflatten(tree, [a.str_short() for a in avals])).replace("'", "")


# --- Tracing a rule: the function's closure becomes inputs -----------------------------------

def trace_rule(rule_flat, closure, in_avals, what: str):
  """Stage `rule_flat(*closure_in, *args)` as `trace_flat` does, where
  `closure` holds what the custom function closes over (its equation's first
  operands): where the rule uses one of those values, directly or through
  `closure_in`, the jaxpr reads an input instead of a constant. Returns
  (jaxpr, consts): the jaxpr takes consts, then `closure`, then the rule's own
  inputs, so every transformation sees those values as the operands they are."""
  builder = pe.JaxprBuilder()
  try:
    with core.new_main(pe.DynamicJaxprTrace, builder) as main, core.new_dynamic(main):
      trace = pe.DynamicJaxprTrace(main)
      closure_in = [trace.new_arg(raise_to_shaped(get_aval(c))) for c in closure]
      for c, t in zip(closure, closure_in):   # a use of c reads this input
        builder.const_tracers[id(c)] = t
        builder.tracers.append(c)              # keeps c alive while its id is a key
      args_in = [trace.new_arg(a) for a in in_avals]
      outs = [full_raise(trace, y) for y in rule_flat(*closure_in, *args_in)]
      jaxpr, consts = builder.build(closure_in + args_in, outs)
  except core.EscapedTracerError as e:
    raise ClosedOverTracerError(
        f"{what} uses a value traced by a transformation that has finished (a "
        "jit, make_jaxpr, cond or scan around the call, whose jaxpr is being "
        "transformed now). Pass that value to the custom function as an "
        "argument, so that the rule receives it with the others.") from e
  return closed_to_call_jaxpr(jaxpr, consts)


def _substitute(trees, closure, closure_in):
  """`trees` with each leaf that is a value of `closure` replaced by its
  stand-in in `closure_in` (a nondiff argument the body closes over reaches
  the rule as the input it is, even if its own trace has finished)."""
  stand_in = {id(c): t for c, t in zip(closure, closure_in)}
  return [tree_map(lambda x: stand_in.get(id(x), x), t) for t in trees]


class JVPRuleJaxpr:
  """The `jvp_jaxpr_fun` parameter of custom_jvp_call: the user's rule, traced
  to a jaxpr when first needed, once per pattern of zero tangents.

  `rule(in_zeros) -> (jaxpr, consts, out_zeros)`; the jaxpr takes
  `*consts, *closure, *primals, *nonzero_tangents` and returns the primal
  outputs, then the output tangents that are not symbolic zeros. It prints
  as the rule's name."""

  def __init__(self, jvp, nondiff, name, closure, in_avals, in_tree, out_avals,
               out_tree, symbolic_zeros):
    self.jvp, self.nondiff, self.fun_name = jvp, nondiff, name
    self.closure, self.in_avals, self.in_tree = closure, in_avals, in_tree
    self.out_avals, self.out_tree = out_avals, out_tree
    self.symbolic_zeros = symbolic_zeros
    self.name = _fun_name(jvp)
    self._jaxprs: dict = {}

  def __repr__(self):
    return self.name

  def __call__(self, in_zeros: tuple):
    if in_zeros not in self._jaxprs:
      out_zeros: list = []

      def rule_flat(*args):   # the closure, the primals, the nonzero tangents
        k, n = len(self.closure), len(self.in_avals)
        primals, nonzero = args[k:k + n], iter(args[k + n:])
        tangents = [SymbolicZero(_tangent_aval(a)) if z else next(nonzero)
                    for a, z in zip(self.in_avals, in_zeros)]
        nondiff = _substitute(self.nondiff, self.closure, args[:k])
        primals_out, tangents_out = self._call_rule(nondiff, primals, tangents)
        out_zeros[:] = [type(t) is SymbolicZero for t in tangents_out]
        return primals_out + [t for t in tangents_out if type(t) is not SymbolicZero]
      avals = self.in_avals + [_tangent_aval(a) for a, z in zip(self.in_avals, in_zeros)
                               if not z]
      jaxpr, consts = trace_rule(rule_flat, self.closure, avals,
                                 f"The custom JVP rule {self.name} of {self.fun_name}")
      self._jaxprs[in_zeros] = jaxpr, consts, tuple(out_zeros)
    return self._jaxprs[in_zeros]

  def _call_rule(self, nondiff, primals, tangents):
    """Call the rule on pytrees; check what it returns; flat outputs."""
    what = f"The custom JVP rule {self.name} of {self.fun_name}"
    out = self.jvp(*nondiff, tree_unflatten(self.in_tree, primals),
                   tree_unflatten(self.in_tree, tangents))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise TypeError(f"{what} must return a pair (primal_out, tangent_out), "
                      f"but it returned {type(out).__name__} {out!r:.60}.")
    primals_out, p_tree = tree_flatten(out[0])
    tangents_out, t_tree = tree_flatten(out[1])
    p_avals = [get_aval(p) for p in primals_out]
    if p_tree != self.out_tree or not all(map(_same_type, p_avals, self.out_avals)):
      raise TypeError(f"{what} returned a primal output of type "
                      f"{_types(p_tree, p_avals)}, but {self.fun_name} returns "
                      f"{_types(self.out_tree, self.out_avals)}: the rule's primal output "
                      f"must be {self.fun_name}'s output.")
    if t_tree != p_tree:
      raise TypeError(f"{what} returned a tangent output structured as {t_tree} for a "
                      f"primal output structured as {p_tree}; they must match.")
    for p, t in zip(p_avals, tangents_out):
      t_aval = t.aval if type(t) is SymbolicZero else get_aval(t)
      if not _same_type(_tangent_aval(p), t_aval):
        raise TypeError(f"{what} returned a tangent of type {t_aval.str_short()} for a "
                        f"primal output of type {p.str_short()}; each tangent must have "
                        "its primal's shape and dtype.")
    return primals_out, tangents_out


# --- custom_jvp_call's rules, one per transformation --------------------------------------------

def _custom_jvp_call_impl(*args, call_jaxpr, **_):
  return eval_jaxpr(call_jaxpr.jaxpr, [], *args)


def _custom_call_abstract_eval(*avals, call_jaxpr, name, **_):
  want = call_jaxpr.in_avals
  if len(avals) != len(want) or not all(map(_same_type, avals, want)):
    raise TypeError(f"custom call of {name}: the operands are {avals_str(avals)} but "
                    f"its jaxpr takes {avals_str(want)}")
  return [raise_to_shaped(a) for a in call_jaxpr.out_avals]


impl_rules[custom_jvp_call_p] = _custom_jvp_call_impl
abstract_eval_rules[custom_jvp_call_p] = _custom_call_abstract_eval


def _custom_jvp_call_jvp(primals, tangents, *, name, call_jaxpr, jvp_jaxpr_fun,
                         num_consts, symbolic_zeros):
  """The rule fires: run the user's JVP rule (as a jaxpr) on the primals and
  tangents, instead of differentiating the body."""
  check_closure_tangents(name, "custom_jvp", tangents[:num_consts])
  consts, args = primals[:num_consts], primals[num_consts:]
  tangents = tangents[num_consts:]
  if symbolic_zeros:
    in_zeros = tuple(type(t) is Zero for t in tangents)
  else:
    in_zeros = (False,) * len(tangents)
  jaxpr, rule_consts, out_zeros = jvp_jaxpr_fun(in_zeros)
  nonzero = [instantiate_zeros(t) for t, z in zip(tangents, in_zeros) if not z]
  outs = eval_jaxpr(jaxpr, [], *rule_consts, *consts, *args, *nonzero)
  primals_out, tangents_out = outs[:len(out_zeros)], iter(outs[len(out_zeros):])
  return primals_out, [Zero.from_value(p) if z else next(tangents_out)
                       for p, z in zip(primals_out, out_zeros)]


def check_closure_tangents(name, kind, const_tangents):
  """A custom rule differentiates the explicit arguments only."""
  if any(type(t) is not Zero for t in const_tangents):
    raise ClosedOverTracerError(
        f"The {kind} function {name} closes over a value that has a tangent (one "
        "being differentiated, or an input of a jit around the call), and its "
        "rule can't say how the output depends on it. Pass the value to "
        f"{name} as an argument, or wrap it in lax.stop_gradient.")


ad.jvp_rules[custom_jvp_call_p] = _custom_jvp_call_jvp


def _custom_jvp_call_vmap(axis_size, vals_in, dims_in, *, name, call_jaxpr, jvp_jaxpr_fun,
                          num_consts, symbolic_zeros):
  """Batch the body now, and the rule when a JVP asks for it: one new
  custom_jvp_call whose outputs are batched as the body's are."""
  vals = [at_axis0(axis_size, x, d) for x, d in zip(vals_in, dims_in)]
  in_batched = tuple(d is not not_mapped for d in dims_in)
  n_out = len(call_jaxpr.out_avals)
  jaxpr, consts, out_batched = batch_jaxpr(call_jaxpr.jaxpr, axis_size, in_batched,
                                           (False,) * n_out)
  rule = BatchedJVPRule(jvp_jaxpr_fun, axis_size, _avals(consts), in_batched,
                        tuple(out_batched), num_consts)
  outs = custom_jvp_call_p.bind(
      *consts, *vals, name=name, call_jaxpr=ClosedJaxpr(jaxpr, []), jvp_jaxpr_fun=rule,
      num_consts=len(consts) + num_consts, symbolic_zeros=symbolic_zeros)
  return outs, [0 if b else not_mapped for b in out_batched]


batching.vmap_rules[custom_jvp_call_p] = _custom_jvp_call_vmap


def batch_rule_jaxpr(jaxpr, consts, axis_size, new_const_avals, in_batched, force, what):
  """Batch a rule's jaxpr, whose inputs are `*consts, *operands` (`in_batched`
  and `force` as for `batch_jaxpr`, for the operands and the outputs).
  Batching the body may have added consts to the equation, in front of its
  operands: the result takes them too (`new_const_avals`), and ignores them."""
  in_b = (False,) * len(consts) + tuple(in_batched)
  j, j_consts, got = batch_jaxpr(jaxpr, axis_size, in_b, tuple(force))
  if list(got) != list(force):
    raise TypeError(f"{what} returns outputs that vary across the vmap batch where the "
                    "custom function's outputs don't; make each output of the rule "
                    "depend on the same inputs as the function's.")
  k = len(j_consts) + len(consts)
  ignored = [Var(a) for a in new_const_avals]
  return (Jaxpr([], j.invars[:k] + ignored + j.invars[k:], j.eqns, j.outvars),
          [*j_consts, *consts])


class BatchedJVPRule:
  """`jvp_jaxpr_fun` of a batched custom_jvp_call: the rule of the unbatched
  call, batched like the body (operands batched at axis 0 where `in_batched`;
  outputs batched where the body's are)."""

  def __init__(self, rule, axis_size, new_const_avals, in_batched, out_batched,
               num_consts):
    self.rule, self.axis_size, self.new_const_avals = rule, axis_size, new_const_avals
    self.in_batched, self.out_batched = in_batched, out_batched
    self.num_consts = num_consts
    self._jaxprs: dict = {}

  def __repr__(self):
    return repr(self.rule)

  def __call__(self, in_zeros: tuple):
    if in_zeros not in self._jaxprs:
      jaxpr, consts, out_zeros = self.rule(in_zeros)
      args_b = self.in_batched[self.num_consts:]
      in_b = self.in_batched + tuple(b for b, z in zip(args_b, in_zeros) if not z)
      force = self.out_batched + tuple(b for b, z in zip(self.out_batched, out_zeros)
                                       if not z)
      jaxpr, consts = batch_rule_jaxpr(jaxpr, consts, self.axis_size, self.new_const_avals,
                                       in_b, force, f"The custom JVP rule {self.rule!r}")
      self._jaxprs[in_zeros] = jaxpr, consts, out_zeros
    return self._jaxprs[in_zeros]


def _custom_jvp_call_partial_eval(trace, tracers, *, call_jaxpr, **_):
  """Some operand is unknown. Under linearize the JVP trace above has already
  applied the rule, so an unknown operand means the function is applied to
  tangents (a linear use), where the rule has no part: inline the body, so
  its known parts run now and the rest is staged (as JAX does)."""
  outs = eval_jaxpr(call_jaxpr.jaxpr, [], *tracers)
  return [full_raise(trace, x) for x in outs]


pe.partial_eval_rules[custom_jvp_call_p] = _custom_jvp_call_partial_eval


def _custom_call_transpose(cts, *args, call_jaxpr, **_):
  """A custom function applied linearly is transposed through its body."""
  cts_in = iter(ad.backward_pass(call_jaxpr.jaxpr, list(args), cts))
  return [next(cts_in) if ad.is_undefined_primal(x) else None for x in args]


ad.transpose_rules[custom_jvp_call_p] = _custom_call_transpose


def _custom_call_lowering(ctx, *args, call_jaxpr, **_):
  """Under jit only the body runs: its ops go inline, and the rule is gone."""
  env = dict(zip(call_jaxpr.jaxpr.invars, args))
  return lowering.lower_jaxpr_body(ctx, call_jaxpr.jaxpr, env)


lowering.lowering_rules[custom_jvp_call_p] = _custom_call_lowering
flop_count.flops_call_rules[custom_jvp_call_p] = lambda call_jaxpr, **_: call_jaxpr


def _pp_custom_call(rules: tuple):
  """Print as JAX: `name` first, rules by their names, `num_consts` if any."""
  def items(params):
    shown = {rules.get(k, k): v for k, v in params.items()
             if k != "name" and not (k == "num_consts" and not v)}
    return [("name", params["name"]), *sorted(shown.items())]
  return items


pp_params_rules[custom_jvp_call_p] = _pp_custom_call({"jvp_jaxpr_fun": "jvp"})


# --- custom_vjp -----------------------------------------------------------------------------

class custom_vjp:
  """`g = custom_vjp(fun)`: `g` computes `fun`, but vjp and grad use the rule
  given by `g.defvjp(fwd, bwd)`: `fwd(*args) -> (out, residuals)` runs
  forwards, `bwd(*nondiff_args, residuals, out_cotangent)` returns one
  cotangent (or None) per differentiated argument. Forward mode (jvp) is an
  error: the rule gives the linear map only transposed.

  Arguments listed in `nondiff_argnums` must not be traced values: use them
  for functions and settings, which bwd gets first, on their own."""

  def __init__(self, fun, nondiff_argnums=()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(sorted(set(nondiff_argnums)))
    self.fwd = self.bwd = None
    self.symbolic_zeros = False

  def defvjp(self, fwd, bwd, symbolic_zeros: bool = False):
    """Set the rule. With `symbolic_zeros=True`, fwd gets each input leaf as a
    `CustomVJPPrimal(value, perturbed)`, and bwd gets a `SymbolicZero` for
    each output cotangent known to be zero."""
    self.fwd, self.bwd, self.symbolic_zeros = fwd, bwd, symbolic_zeros

  def __call__(self, *args, **kwargs):
    name = _fun_name(self.fun)
    if self.fwd is None:
      raise AttributeError(f"No VJP rule defined for the custom_vjp function {name}: "
                           f"define one with {name}.defvjp(fwd, bwd).")
    args = _positional(self.fun, name, args, kwargs)
    if nothing_is_traced():
      return self.fun(*args)
    nondiff = {i: args[i] for i in self.nondiff_argnums}
    _check_nondiff(name, nondiff)
    diff_args = _diff_args(name, args, nondiff)
    closure, args_flat, in_tree, call_jaxpr, out_tree = _trace_body(
        self.fun, args, nondiff, diff_args)
    in_avals = [get_aval(x) for x in args_flat]
    fwd = FwdRuleJaxpr(self.fwd, args, nondiff, name, closure, in_avals, in_tree,
                       call_jaxpr.out_avals, out_tree, self.symbolic_zeros)
    bwd = BwdRule(self.bwd, list(nondiff.values()), name, in_avals, in_tree, out_tree,
                  self.symbolic_zeros)
    outs = custom_vjp_call_p.bind(
        *closure, *args_flat, name=name, call_jaxpr=call_jaxpr, fwd=fwd, bwd=bwd,
        num_consts=len(closure), symbolic_zeros=self.symbolic_zeros)
    return tree_unflatten(out_tree, outs)


def _check_nondiff(name, nondiff: dict):
  for i, arg in nondiff.items():
    for leaf in tree_flatten(arg)[0]:
      if isinstance(leaf, Tracer):
        raise NondiffTracerError(
            f"The custom_vjp function {name} got a traced value "
            f"({leaf.aval.str_short()}, traced by "
            f"{leaf._trace.main.trace_type.__name__}) in argument {i}, which "
            "nondiff_argnums marks as not differentiated, so bwd can't give it "
            "the cotangent it may need. Keep nondiff_argnums for values that are "
            "never traced (functions, settings); pass arrays as ordinary "
            "arguments, and return their cotangent from bwd (None for zero).")


class FwdRuleJaxpr:
  """The `fwd` parameter of custom_vjp_call: the user's fwd, traced to a jaxpr
  when first needed (once per pattern of perturbed inputs, which matters
  only with symbolic zeros). `fwd(nonzeros) -> (jaxpr, consts, res_tree)`;
  the jaxpr takes `*consts, *closure, *args` and returns the residuals'
  leaves, then the primal outputs. It prints as fwd's name."""

  def __init__(self, fwd, args, nondiff, name, closure, in_avals, in_tree, out_avals,
               out_tree, symbolic_zeros):
    self.fwd, self.num_args, self.nondiff, self.fun_name = fwd, len(args), nondiff, name
    self.closure, self.in_avals, self.in_tree = closure, in_avals, in_tree
    self.out_avals, self.out_tree = out_avals, out_tree
    self.symbolic_zeros = symbolic_zeros
    self.name = _fun_name(fwd)
    self._jaxprs: dict = {}

  def __repr__(self):
    return self.name

  def __call__(self, nonzeros: tuple):
    if not self.symbolic_zeros:   # the same fwd for every pattern
      nonzeros = (True,) * len(self.in_avals)
    if nonzeros not in self._jaxprs:
      res_trees: list = []

      def fwd_flat(*args):   # the closure (fwd uses it directly), the inputs
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
      jaxpr, consts = trace_rule(fwd_flat, self.closure, self.in_avals,
                                 f"The custom VJP fwd {self.name} of {self.fun_name}")
      self._jaxprs[nonzeros] = jaxpr, consts, res_trees[-1]
    return self._jaxprs[nonzeros]

  def _check_out(self, out):
    what = f"The custom VJP fwd {self.name} of {self.fun_name}"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise TypeError(f"{what} must return a pair (primal_out, residuals), but it "
                      f"returned {type(out).__name__} {out!r:.60}.")
    primals_out, tree = tree_flatten(out[0])
    avals = [get_aval(p) for p in primals_out]
    if tree != self.out_tree or not all(map(_same_type, avals, self.out_avals)):
      raise TypeError(f"{what} returned a primal output of type {_types(tree, avals)}, "
                      f"but {self.fun_name} returns {_types(self.out_tree, self.out_avals)}: "
                      f"fwd's primal output must be {self.fun_name}'s output.")
    return primals_out, out[1]


class BwdRule:
  """The `bwd` parameter of custom_vjp_call: the user's bwd on flat lists.
  `bwd(res_tree, *residuals, *cotangents)` returns one cotangent per input
  leaf, `Zero` where bwd gave None. It prints as bwd's name."""

  def __init__(self, bwd, nondiff, name, in_avals, in_tree, out_tree, symbolic_zeros):
    self.bwd, self.nondiff, self.fun_name = bwd, nondiff, name
    self.in_avals, self.in_tree, self.out_tree = in_avals, in_tree, out_tree
    self.symbolic_zeros = symbolic_zeros
    self.name = _fun_name(bwd)

  def __repr__(self):
    return self.name

  def __call__(self, res_tree, *args):
    n_res = res_tree.num_leaves
    res = tree_unflatten(res_tree, args[:n_res])
    cts = tree_unflatten(self.out_tree, args[n_res:])
    out = self.bwd(*self.nondiff, res, cts)
    return self._flat_cotangents(out)

  def _flat_cotangents(self, out) -> list:
    """bwd's tuple (one entry per argument, a pytree or None) as a flat list."""
    what = f"The custom VJP bwd {self.name} of {self.fun_name}"
    args = self.in_tree.children if self.in_tree.node_type is not None else ()
    if isinstance(out, list):
      out = tuple(out)
    if not isinstance(out, tuple) or len(out) != len(args):
      raise TypeError(f"{what} must return a tuple with one cotangent (or None) per "
                      f"differentiated argument, {len(args)} here, but it returned "
                      f"{type(out).__name__} {out!r:.60}.")
    flat = []
    for i, (ct, arg_tree) in enumerate(zip(out, args)):
      leaves = _cotangent_leaves(ct, arg_tree)
      if leaves is None:
        raise TypeError(f"{what} returned a cotangent structured as "
                        f"{tree_flatten(ct)[1]} for argument {i}, which is structured "
                        f"as {arg_tree} (None may stand for any part).")
      flat += leaves
    return [self._leaf(ct, aval, k) for k, (ct, aval) in enumerate(zip(flat, self.in_avals))]

  def _leaf(self, ct, aval, k):
    if ct is None or type(ct) is SymbolicZero:
      return Zero(aval)
    ct_aval = get_aval(ct)
    if ct_aval.shape != aval.shape:
      raise TypeError(f"The custom VJP bwd {self.name} of {self.fun_name} returned a "
                      f"cotangent of type {ct_aval.str_short()} for an input of type "
                      f"{aval.str_short()} (leaf {k}); they must have the same shape.")
    if ct_aval.dtype != aval.dtype and np.issubdtype(aval.dtype, np.inexact):
      return lax.convert_element_type(ct, aval.dtype)
    return ct


def _cotangent_leaves(ct, tree):
  """The leaves of `ct`, structured as `tree` except that None stands for a
  whole subtree of zeros (None for each of its leaves); None if it doesn't fit."""
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
  leaves = [_cotangent_leaves(c, t) for c, t in zip(children, tree.children)]
  return None if None in leaves else [x for part in leaves for x in part]


class BoundBwd:
  """custom_lin's `bwd`: a custom_vjp_call's bwd with the residuals' structure
  of one fwd run. `bwd(*residuals, *cotangents)`."""

  def __init__(self, bwd, res_tree):
    self.bwd, self.res_tree = bwd, res_tree

  def __repr__(self):
    return repr(self.bwd)

  def __call__(self, *args):
    return self.bwd(self.res_tree, *args)


# --- custom_vjp_call's rules ----------------------------------------------------------------------

impl_rules[custom_vjp_call_p] = _custom_jvp_call_impl   # run the body
abstract_eval_rules[custom_vjp_call_p] = _custom_call_abstract_eval


def _custom_vjp_call_jvp(primals, tangents, *, name, call_jaxpr, fwd, bwd, num_consts,
                         symbolic_zeros):
  """Run fwd now, and keep its residuals for bwd: the tangents go through
  custom_lin, a linear map known only by its transpose."""
  check_closure_tangents(name, "custom_vjp", tangents[:num_consts])
  consts, args = primals[:num_consts], primals[num_consts:]
  tangents = tangents[num_consts:]
  in_zeros = [type(t) is Zero for t in tangents]
  jaxpr, fwd_consts, res_tree = fwd(tuple(not z for z in in_zeros))
  outs = eval_jaxpr(jaxpr, [], *fwd_consts, *consts, *args)
  res, primals_out = outs[:res_tree.num_leaves], outs[res_tree.num_leaves:]
  nonzero = [t for t, z in zip(tangents, in_zeros) if not z]
  tangents_out = custom_lin_p.bind(
      *res, *nonzero, num_res=len(res), bwd=BoundBwd(bwd, res_tree),
      out_avals=[_tangent_aval(get_aval(p)) for p in primals_out],
      symbolic_zeros=symbolic_zeros, in_zeros=in_zeros)
  return primals_out, tangents_out


ad.jvp_rules[custom_vjp_call_p] = _custom_vjp_call_jvp


def _custom_vjp_call_vmap(axis_size, vals_in, dims_in, *, name, call_jaxpr, fwd, bwd,
                          num_consts, symbolic_zeros):
  """Batch the body now; fwd and bwd when a derivative asks for them."""
  vals = [at_axis0(axis_size, x, d) for x, d in zip(vals_in, dims_in)]
  in_batched = tuple(d is not not_mapped for d in dims_in)
  n_out = len(call_jaxpr.out_avals)
  jaxpr, consts, out_batched = batch_jaxpr(call_jaxpr.jaxpr, axis_size, in_batched,
                                           (False,) * n_out)
  fwd = BatchedFwd(fwd, axis_size, _avals(consts), in_batched, tuple(out_batched))
  bwd = BatchedBwd(bwd, axis_size, in_batched[num_consts:], tuple(out_batched))
  outs = custom_vjp_call_p.bind(
      *consts, *vals, name=name, call_jaxpr=ClosedJaxpr(jaxpr, []), fwd=fwd, bwd=bwd,
      num_consts=len(consts) + num_consts, symbolic_zeros=symbolic_zeros)
  return outs, [0 if b else not_mapped for b in out_batched]


batching.vmap_rules[custom_vjp_call_p] = _custom_vjp_call_vmap


class BatchedFwd:
  """`fwd` of a batched custom_vjp_call: the unbatched fwd, batched like the
  body; every residual comes out batched (at axis 0), for BatchedBwd."""

  def __init__(self, fwd, axis_size, new_const_avals, in_batched, out_batched):
    self.fwd, self.axis_size, self.new_const_avals = fwd, axis_size, new_const_avals
    self.in_batched, self.out_batched = in_batched, out_batched
    self._jaxprs: dict = {}

  def __repr__(self):
    return repr(self.fwd)

  def __call__(self, nonzeros: tuple):
    if nonzeros not in self._jaxprs:
      jaxpr, consts, res_tree = self.fwd(nonzeros)
      force = (True,) * res_tree.num_leaves + self.out_batched
      jaxpr, consts = batch_rule_jaxpr(jaxpr, consts, self.axis_size, self.new_const_avals,
                                       self.in_batched, force,
                                       f"The custom VJP fwd {self.fwd!r}")
      self._jaxprs[nonzeros] = jaxpr, consts, res_tree
    return self._jaxprs[nonzeros]


class BatchedBwd:
  """`bwd` of a batched custom_vjp_call: the unbatched bwd under vmap. Its
  residuals are batched (BatchedFwd makes them so), each cotangent like its
  output; an input that is not batched gets the sum over the batch."""

  def __init__(self, bwd, axis_size, in_batched, out_batched):
    self.bwd, self.axis_size = bwd, axis_size
    self.in_batched, self.out_batched = in_batched, out_batched

  def __repr__(self):
    return repr(self.bwd)

  def __call__(self, res_tree, *args):
    n_res = res_tree.num_leaves
    res, cts = args[:n_res], args[n_res:]
    symbolic = {i: ct for i, ct in enumerate(cts) if type(ct) is SymbolicZero}
    zero_outs: list = []

    def one(*xs):   # one batch element: its residuals and nonzero cotangents
      it = iter(xs[n_res:])
      cts_i = [SymbolicZero(batching.mapped_aval(0, ct.aval) if b else ct.aval)
               if i in symbolic else next(it)
               for i, (ct, b) in enumerate(zip(cts, self.out_batched))]
      outs = self.bwd(res_tree, *xs[:n_res], *cts_i)
      zero_outs[:] = [type(o) is Zero for o in outs]
      return [np.zeros(o.aval.shape, o.aval.dtype) if type(o) is Zero else o for o in outs]
    nonzero = [ct for i, ct in enumerate(cts) if i not in symbolic]
    dims = ([0] * n_res + [0 if b else not_mapped for i, b in enumerate(self.out_batched)
                           if i not in symbolic])
    if all(d is not_mapped for d in dims):   # nothing to map: bwd runs once
      outs, out_dims = one(*res, *nonzero), [not_mapped] * len(self.in_batched)
    else:
      outs, out_dims, _ = batching.vmap_flat(one, dims, *res, *nonzero)
    return [self._match(o, d, b, z) for o, d, b, z in
            zip(outs, out_dims, self.in_batched, zero_outs)]

  def _match(self, ct, dim, batched, zero):
    """The cotangent of one input, batched at axis 0 if the input is."""
    if zero:   # bwd gave None: the zeros stood in for it, the same for all
      aval = raise_to_shaped(get_aval(ct))
      return Zero(aval.update(shape=(self.axis_size, *aval.shape)) if batched else aval)
    if batched:
      return batching.move_batch_axis(self.axis_size, dim, 0, ct)
    if dim is not_mapped:
      return ct
    return lax.reduce_sum(ct, (dim,))   # the input is shared by the whole batch


# --- custom_lin: a linear map known by its transpose -----------------------------------------------

def _custom_lin_forward_error(*_, **__):
  raise TypeError(
      "can't apply forward-mode autodiff (jvp) to a custom_vjp function: its rule "
      "gives the derivative only in reverse (bwd maps output cotangents to input "
      "cotangents), so nothing can push a tangent forwards. Use reverse mode "
      "(grad, vjp, jacrev), or define the function with custom_jvp, whose rule "
      "serves both modes.")


def _custom_lin_abstract_eval(*avals, out_avals, **_):
  return list(out_avals)


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, symbolic_zeros, in_zeros):
  """Cotangents in, cotangents out: this is where bwd runs."""
  res = args[:num_res]
  if symbolic_zeros:
    cts = [SymbolicZero(ct.aval) if type(ct) is Zero else ct for ct in cts]
  else:
    cts = [instantiate_zeros(ct) for ct in cts]
  cts_in = bwd(*res, *cts)
  return [None] * num_res + [ct for ct, z in zip(cts_in, in_zeros) if not z]


impl_rules[custom_lin_p] = _custom_lin_forward_error
abstract_eval_rules[custom_lin_p] = _custom_lin_abstract_eval
ad.jvp_rules[custom_lin_p] = _custom_lin_forward_error
batching.vmap_rules[custom_lin_p] = _custom_lin_forward_error
lowering.lowering_rules[custom_lin_p] = _custom_lin_forward_error
ad.transpose_rules[custom_lin_p] = _custom_lin_transpose
lowering.lowering_rules[custom_vjp_call_p] = _custom_call_lowering
flop_count.flops_call_rules[custom_vjp_call_p] = lambda call_jaxpr, **_: call_jaxpr
pp_params_rules[custom_vjp_call_p] = _pp_custom_call({})
pp_params_rules[custom_lin_p] = lambda params: sorted(
    (k, v) for k, v in params.items() if k != "out_avals")


def __getattr__(name):   # a name of jax.custom_derivatives that autodidax leaves out
  raise lax.not_in_autodidax("jax.custom_derivatives", name)
