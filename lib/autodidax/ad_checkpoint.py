"""Rematerialization: `checkpoint` (alias `remat`), its policies, and names.

Reverse mode saves, in the forward pass, every value the backward pass
will need: the residuals that partial evaluation leaves known. `checkpoint`
makes a function save fewer of them and compute the others again in the
backward pass, trading compute for memory:

    f = checkpoint(block)                          # save only the inputs
    f = checkpoint(block, policy=checkpoint_policies.dots_saveable)

It is a higher-order primitive, `remat`, holding the function's jaxpr (as
JAX's `remat2`). Its rules transform that jaxpr and bind `remat` again; the
partial-evaluation rule is where the policy acts: of the values the known
part computes, only those the policy saves become residuals, and the
unknown part (the backward pass, after transposition) recomputes the rest.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import ad, batching, core, lowering, state
from . import primitives as lax
from . import partial_eval as pe
from .ad import jvp_jaxpr, transpose_jaxpr
from .api import linearize_flat
from .api_util import shaped_abstractify, split_static
from .batching import batch_jaxpr
from .control_flow.common import at_axis0, trace_flat
from .core import (ConcretizationError, Primitive, abstract_eval_rules,
                   impl_rules)
from .sharding_rules import keep_body_types, same_as_operand
from .flop_count import flops_call_rules, flops_rules
from .jaxpr import Jaxpr, JaxprEqn, Var, eval_jaxpr
from .effects import has_effects
from .tree_util import flatten_fun, tree_flatten, tree_map, tree_unflatten
from .xla import discharge_call, xla_call_p

remat_p = Primitive("remat", multiple_results=True)
name_p = Primitive("name")


# --- Policies: which values the forward pass may save ------------------
# A policy is called as `policy(prim, *avals_in, **params)` for each
# equation whose inputs are all known: may its outputs be saved?

def everything_saveable(*_, **__) -> bool:
  """Save every residual: as if there were no checkpoint."""
  return True


def nothing_saveable(*_, **__) -> bool:
  """Save nothing but the inputs, recompute the rest (the default)."""
  return False


@dataclasses.dataclass(frozen=True)
class DotsSaveable:
  """Save the results of matrix multiplications (`dot_general`), and, with
  `only_if_no_batch_dims`, only those without batch dimensions."""
  only_if_no_batch_dims: bool

  def __call__(self, prim, *avals, **params) -> bool:
    if prim is not lax.dot_general_p:
      return False
    _, (lhs_batch, rhs_batch) = params["dimension_numbers"]
    batched = bool(lhs_batch or rhs_batch)
    return not (self.only_if_no_batch_dims and batched)


dots_saveable = DotsSaveable(False)
dots_with_no_batch_dims_saveable = DotsSaveable(True)


@dataclasses.dataclass(frozen=True)
class SaveOnlyTheseNames:
  """Save the values `checkpoint_name` named with one of these names."""
  saveable_names: frozenset

  def __call__(self, prim, *avals, **params) -> bool:
    return prim is name_p and params["name"] in self.saveable_names


@dataclasses.dataclass(frozen=True)
class SaveAnyNamesButThese:
  """Save every named value except those named with one of `names`."""
  names: frozenset

  def __call__(self, prim, *avals, **params) -> bool:
    return prim is name_p and params["name"] not in self.names


def save_only_these_names(*names) -> SaveOnlyTheseNames:
  return SaveOnlyTheseNames(frozenset(names))


def save_any_names_but_these(*names) -> SaveAnyNamesButThese:
  return SaveAnyNamesButThese(frozenset(names))


@dataclasses.dataclass(frozen=True)
class SaveFromBothPolicies:
  """Save what either policy saves."""
  policy_1: object
  policy_2: object

  def __call__(self, prim, *avals, **params) -> bool:
    return bool(self.policy_1(prim, *avals, **params)
                or self.policy_2(prim, *avals, **params))


def save_from_both_policies(policy_1, policy_2) -> SaveFromBothPolicies:
  return SaveFromBothPolicies(policy_1, policy_2)


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable, checkpoint_dots=dots_saveable,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=(
        dots_with_no_batch_dims_saveable),
    save_only_these_names=save_only_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_from_both_policies=save_from_both_policies)


# --- checkpoint: trace the function, bind `remat` ----------------------

def checkpoint(fun, *, prevent_cse=True, policy=None, static_argnums=()):
  """`fun`, but reverse mode saves only what `policy` allows of its
  intermediate values (by default only its inputs) and recomputes the
  rest in the backward pass. As jax.checkpoint (alias `remat`)."""
  static = ((static_argnums,) if isinstance(static_argnums, int)
            else tuple(static_argnums))

  @functools.wraps(fun)
  def fun_remat(*args, **kwargs):
    fun_dyn, dyn_args, _ = split_static(fun, args, static, kwargs)
    args_flat, in_tree = tree_flatten(dyn_args)
    flat_fun, out_tree = flatten_fun(fun_dyn, in_tree)
    in_avals = [shaped_abstractify(x) for x in args_flat]
    with _static_argnums_hint():
      jaxpr, consts = trace_flat(flat_fun, in_avals)   # consts go first
    outs = remat_p.bind(*consts, *args_flat, jaxpr=jaxpr,
                        prevent_cse=prevent_cse, differentiated=False,
                        policy=policy)
    return tree_unflatten(out_tree(), outs)
  return fun_remat


remat = checkpoint


@contextmanager
def _static_argnums_hint():
  try:
    yield
  except ConcretizationError as e:
    e.add_note("checkpoint traces its function with abstract values. "
               "For an argument that Python code must look at (a flag, a "
               "size), list it in static_argnums, e.g. "
               "checkpoint(f, static_argnums=(1,)).")
    raise


def checkpoint_name(x, name: str):
  """`x` (a pytree of arrays), unchanged, but named `name` for the policies
  `save_only_these_names` and `save_any_names_but_these`."""
  return tree_map(lambda leaf: name_p.bind(leaf, name=name), x)


# --- The rules of remat: transform the jaxpr, bind remat again ---------

def _remat_impl(*args, jaxpr, prevent_cse, differentiated, policy, run=eval_jaxpr):
  return run(jaxpr, [], *args)


def _remat_abstract_eval(*avals, jaxpr, prevent_cse, differentiated,
                         policy):
  for i, (a, v) in enumerate(zip(avals, jaxpr.invars)):
    if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
      raise TypeError(f"remat: argument {i} is {a.str_short()} but the "
                      f"jaxpr expects {v.aval.str_short()}")
  return [core.raise_to_shaped(x.aval) for x in jaxpr.outvars]


def _remat_jvp(primals, tangents, *, jaxpr, **params):
  """A remat of the JVP jaxpr: (primals, nonzero tangents) -> (primal
  outputs, nonzero output tangents)."""
  nonzeros = tuple(type(t) is not ad.Zero and _is_float(x)
                   for x, t in zip(primals, tangents))
  n_out = len(jaxpr.outvars)
  jvp_j, consts, out_nz = jvp_jaxpr(jaxpr, nonzeros, (False,) * n_out)
  dots = [t for t, nz in zip(tangents, nonzeros) if nz]
  outs = remat_p.bind(*consts, *primals, *dots, jaxpr=jvp_j, **params)
  primals_out, dots_out = outs[:n_out], iter(outs[n_out:])
  return primals_out, [next(dots_out) if nz else ad.Zero.from_value(p)
                       for p, nz in zip(primals_out, out_nz)]


def _is_float(x) -> bool:
  return np.dtype(core.get_aval(x).dtype).kind in "fc"


def _remat_vmap(axis_size, vals_in, dims_in, *, jaxpr, **params):
  jaxpr = state.discharged_inner(jaxpr)   # Refs made inside: values
  batched = tuple(d is not batching.not_mapped for d in dims_in)
  vals = [at_axis0(axis_size, x, d) for x, d in zip(vals_in, dims_in)]
  j, consts, out_b = batch_jaxpr(jaxpr, axis_size, batched,
                                 (False,) * len(jaxpr.outvars))
  outs = remat_p.bind(*consts, *vals, jaxpr=j, **params)
  return outs, [0 if b else batching.not_mapped for b in out_b]


def _remat_partial_eval(trace, tracers, *, jaxpr, policy, **params):
  """Where the policy acts. The known part runs now and returns the known
  outputs and the residuals the policy lets it save; the unknown part,
  staged as a new remat, recomputes everything else from those residuals."""
  jaxpr = state.discharged_inner(jaxpr)   # Refs made inside: values, for the split
  unknowns = [t.pval.is_unknown for t in tracers]
  saveable = policy or nothing_saveable
  jaxpr_known, jaxpr_staged, out_unknowns, num_res = (
      partial_eval_jaxpr_policy(jaxpr, unknowns, saveable))
  known_ins = [t.pval.const for t in tracers if t.pval.is_known]
  outs = eval_jaxpr(jaxpr_known, [], *known_ins)   # runs now
  n_known = len(outs) - num_res
  known_outs, residuals = outs[:n_known], outs[n_known:]
  res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
  unknown_ins = [t for t in tracers if t.pval.is_unknown]
  params = dict(params, jaxpr=jaxpr_staged, policy=policy,
                differentiated=True)
  staged = trace.stage(remat_p, res_tracers + unknown_ins, params,
                       [x.aval for x in jaxpr_staged.outvars])
  known_outs, staged = iter(known_outs), iter(staged)
  return [next(staged) if uk else trace.pure(next(known_outs))
          for uk in out_unknowns]


def _remat_transpose(cts, *args, jaxpr, **params):
  """Transpose the jaxpr (its known operations, the recomputation, run
  first, inside it) and call that as a remat: under jit the recomputation
  stays behind the optimization barrier, in the backward pass."""
  undefined = tuple(ad.is_undefined_primal(x) for x in args)
  t_jaxpr, t_consts = transpose_jaxpr(jaxpr, undefined)
  residuals = [x for x in args if not ad.is_undefined_primal(x)]
  cts = [ad.instantiate_zeros(ct) for ct in cts]
  outs = iter(remat_p.bind(*t_consts, *residuals, *cts, jaxpr=t_jaxpr,
                           **params))
  return [next(outs) if u else None for u in undefined]


def _remat_lowering(ctx, *args, jaxpr, prevent_cse, differentiated,
                    policy):
  """Inline the jaxpr. In a backward pass (`differentiated`), its
  operands first go through an optimization barrier: XLA can't look
  through it, so it can't merge the recomputation with the forward
  pass's copy of it (common subexpression elimination, CSE)."""
  if prevent_cse and differentiated and args:
    types_ = ", ".join(lowering.mlir_type(a) for a in ctx.avals_in)
    name, n = ctx.fresh(), len(args)
    lhs = f"{name}:{n}" if n > 1 else name
    ctx.emit(f"{lhs} = stablehlo.optimization_barrier "
             f"{', '.join(args)} : {types_}", result=False)
    args = [f"{name}#{i}" for i in range(n)] if n > 1 else [name]
  env = dict(zip(jaxpr.invars, args))
  return lowering.lower_jaxpr_body(ctx, jaxpr, env)


impl_rules[remat_p] = _remat_impl
abstract_eval_rules[remat_p] = _remat_abstract_eval
keep_body_types(remat_p)   # its results' types, shardings included, are its body's
ad.jvp_rules[remat_p] = _remat_jvp
ad.transpose_rules[remat_p] = _remat_transpose
batching.vmap_rules[remat_p] = _remat_vmap
batching.axis_vmap_rules[remat_p] = batching.named_axis_rule(_remat_vmap)
pe.partial_eval_rules[remat_p] = _remat_partial_eval
lowering.lowering_rules[remat_p] = _remat_lowering
# FLOPS: a remat costs what its jaxpr costs when it runs, recomputation
# included: its impl, with a `run` that counts.
flops_call_rules[remat_p] = _remat_impl
# Discharge: a Ref the body uses goes in as its value and comes out after the
# outputs, as for a jit (xla.discharge_call).
state.discharge_rules[remat_p] = discharge_call
state.call_params[remat_p] = lambda eqn, body, n_consts, refs: {**eqn.params, "jaxpr": body}


# --- Partial evaluation with a policy -----------------------------------

def split_eqn(eqn, unks_in):
  """One equation as (its part that runs now, its staged part, which of
  its outputs are unknown); either part may be None. A higher-order
  primitive (jit, scan, a nested remat, ...) is split by its own rule."""
  n = len(eqn.out_binders)
  if not any(unks_in):
    return eqn, None, [False] * n
  rule = pe.partial_eval_jaxpr_rules.get(eqn.primitive)
  if rule is None:
    return None, eqn, [True] * n
  eqn1, eqn2, unks_out, _ = rule(list(unks_in), eqn)
  forwarding = pe.residual_forwarding.get(eqn.primitive)
  if forwarding is not None and eqn1 is not None and eqn2 is not None:
    inputs = {eqn1.out_binders[k]: eqn1.inputs[j] for k, j in forwarding(eqn1, eqn2).items()}
    eqn2 = JaxprEqn(eqn2.primitive, [inputs.get(x, x) if type(x) is Var else x
                                     for x in eqn2.inputs], eqn2.params, eqn2.out_binders)
  return eqn1, eqn2, unks_out


def split_by_policy(jaxpr, in_unknowns, policy):
  """(equations that run now, equations of the unknown part, which
  outputs are unknown). An equation that runs now also goes to the
  unknown part, which computes it again, unless `policy` lets its
  outputs be saved."""
  unknown = dict(zip(jaxpr.invars, in_unknowns))   # Var -> is unknown
  known_eqns, staged_eqns = [], []
  for eqn in jaxpr.eqns:
    unks_in = [type(x) is Var and unknown[x] for x in eqn.inputs]
    eqn1, eqn2, unks_out = split_eqn(eqn, unks_in)
    if eqn1 is not None:
      known_eqns.append(eqn1)
      avals = [x.aval for x in eqn1.inputs]
      if not policy(eqn1.primitive, *avals, **eqn1.params):
        staged_eqns.append(eqn1)   # not saved: recomputed
    if eqn2 is not None:
      staged_eqns.append(eqn2)
    unknown.update(zip(eqn.out_binders, unks_out))
  out_unknowns = [type(x) is Var and unknown[x] for x in jaxpr.outvars]
  return known_eqns, staged_eqns, out_unknowns


def partial_eval_jaxpr_policy(jaxpr, in_unknowns, policy):
  """Split `jaxpr` as `pe.partial_eval_jaxpr` does, into

      jaxpr_known:  known inputs -> known outputs + residuals
      jaxpr_staged: residuals + unknown inputs -> unknown outputs

  but the residuals are only the known inputs and the values `policy`
  saves: the staged jaxpr recomputes every other known value it needs.
  Returns (jaxpr_known, jaxpr_staged, out_unknowns, number of residuals)."""
  known_eqns, staged_eqns, out_unknowns = split_by_policy(
      jaxpr, in_unknowns, policy)
  pick = lambda xs, flags, u: [x for x, f in zip(xs, flags) if f == u]
  ins_known = pick(jaxpr.invars, in_unknowns, False)
  ins_unknown = pick(jaxpr.invars, in_unknowns, True)
  outs_known = pick(jaxpr.outvars, out_unknowns, False)
  outs_unknown = pick(jaxpr.outvars, out_unknowns, True)
  staged_eqns = dce_eqns(staged_eqns, outs_unknown)   # only what's needed
  defined = set(ins_unknown) | {v for e in staged_eqns
                                for v in e.out_binders}
  read = [*(x for e in staged_eqns for x in e.inputs), *outs_unknown]
  residuals = list(dict.fromkeys(   # known values the staged part reads
      x for x in read if type(x) is Var and x not in defined))
  outs1 = outs_known + residuals
  jaxpr_known = Jaxpr([], ins_known, dce_eqns(known_eqns, outs1), outs1)
  jaxpr_staged = Jaxpr([], residuals + ins_unknown, staged_eqns,
                       outs_unknown)
  pe.typecheck_partial_eval_jaxpr(jaxpr, in_unknowns, out_unknowns,
                                  jaxpr_known, jaxpr_staged)
  return jaxpr_known, jaxpr_staged, out_unknowns, len(residuals)


def dce_eqns(eqns, outvars) -> list:
  """The equations that `outvars` depend on (dead code elimination), and
  those with effects."""
  live = {x for x in outvars if type(x) is Var}
  kept = []
  for eqn in reversed(eqns):
    if any(v in live for v in eqn.out_binders) or has_effects(eqn):   # a print stays
      kept.append(eqn)
      live.update(x for x in eqn.inputs if type(x) is Var)
  return kept[::-1]


def _remat_partial_eval_jaxpr(unks_in, eqn):
  """The same split, for a remat equation inside a jaxpr being split (a
  checkpointed body of scan, say). Known inputs the staged part reads
  are passed to it directly, not through the known equation."""
  p = eqn.params
  jk, js, out_unknowns, num_res = partial_eval_jaxpr_policy(
      state.discharged_inner(p["jaxpr"]), unks_in, p["policy"] or nothing_saveable)
  n_known_out = len(jk.outvars) - num_res
  outer = dict(zip(p["jaxpr"].invars, eqn.inputs))   # inner -> outer
  res_inner = jk.outvars[n_known_out:]
  computed = [r for r in res_inner if r not in outer]
  res_outer = {r: Var(r.aval) for r in computed}
  jk = Jaxpr([], jk.invars, jk.eqns, jk.outvars[:n_known_out] + computed)
  pick = lambda xs, flags, u: [x for x, f in zip(xs, flags) if f == u]
  ins1 = pick(eqn.inputs, unks_in, False)
  ins2 = pick(eqn.inputs, unks_in, True)
  outs1 = pick(eqn.out_binders, out_unknowns, False)
  outs2 = pick(eqn.out_binders, out_unknowns, True)
  residuals = [outer[r] if r in outer else res_outer[r] for r in res_inner]
  eqn1 = JaxprEqn(remat_p, ins1, dict(p, jaxpr=jk),
                  outs1 + [res_outer[r] for r in computed])
  eqn2 = JaxprEqn(remat_p, residuals + ins2,
                  dict(p, jaxpr=js, differentiated=True), outs2)
  return eqn1, eqn2, out_unknowns, [r for r in residuals if type(r) is Var]


pe.partial_eval_jaxpr_rules[remat_p] = _remat_partial_eval_jaxpr


# --- name: an identity that policies can see ---------------------------

def _name_jvp(primals, tangents, *, name):
  (x,), (x_dot,) = primals, tangents
  return name_p.bind(x, name=name), x_dot   # the tangent isn't named


def _name_vmap(axis_size, vals_in, dims_in, *, name):
  (x,), (d,) = vals_in, dims_in
  return name_p.bind(x, name=name), d


def _name_transpose(ct, x, *, name):
  return [ct]


impl_rules[name_p] = lambda x, *, name: x
abstract_eval_rules[name_p] = (
    lambda x, *, name: core.raise_to_shaped(x))
ad.jvp_rules[name_p] = _name_jvp
ad.transpose_rules[name_p] = _name_transpose
batching.vmap_rules[name_p] = _name_vmap
lowering.lowering_rules[name_p] = lambda ctx, x, *, name: x
core.sharding_rules[name_p] = same_as_operand
flops_rules[name_p] = lambda avals_in, avals_out, **_: 0


# --- print_saved_residuals: what is saved, and where it comes from -----

def saved_residuals(f, *args) -> list[tuple]:
  """[(aval, where it comes from)] for each residual that reverse mode of
  `f(*args)` saves, as jax.ad_checkpoint.saved_residuals."""
  args_flat, in_tree = tree_flatten(args)
  names = _arg_names(f, args, in_tree)

  def residuals_of(*xs):
    flat_fun, _ = flatten_fun(f, in_tree)
    return linearize_flat(flat_fun, list(xs))[2]   # the residuals

  avals = [shaped_abstractify(x) for x in args_flat]
  with _recording_sources(sys._getframe()) as sources:
    jaxpr, _ = pe.trace_to_jaxpr_dynamic(residuals_of, avals)
    sources.flush()
  return _describe_residuals(jaxpr, names, sources)


def print_saved_residuals(f, *args) -> None:
  """One line per residual, as jax.ad_checkpoint.print_saved_residuals."""
  for aval, src in saved_residuals(f, *args):
    print(f"{aval.str_short()} {src}")


def _describe_residuals(jaxpr, names, sources) -> list[tuple]:
  outs = {x for x in jaxpr.outvars if type(x) is Var}
  found = [(x.aval, "from a literal") for x in jaxpr.outvars
           if type(x) is not Var]
  found += [(v.aval, "from a constant") for v in jaxpr.constvars
            if v in outs]
  found += [(v.aval, f"from the argument {n}")
            for v, n in zip(jaxpr.invars, names) if v in outs]
  for eqn in jaxpr.eqns:
    first = eqn.out_binders[0] if eqn.out_binders else None
    src = sources.get(first, "unknown")
    for v in eqn.out_binders:
      if v not in outs:
        continue
      if eqn.primitive is name_p:
        what = f"named '{eqn.params['name']}'"
      elif eqn.primitive is xla_call_p:
        name = eqn.params.get("name", "jit_fun").removeprefix("jit_")
        what = f"output of jitted function '{name}'"
      else:
        what = f"output of {eqn.primitive.name}"
      found.append((v.aval, f"{what} from {src}"))
  return found


def _arg_names(f, args, in_tree) -> list[str]:
  """`x`, `params[0]['w']`, ...: each leaf's argument name and its path."""
  try:
    params = list(inspect.signature(f).parameters.values())
  except (TypeError, ValueError):
    params = []
  names = []
  positional = (inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD)
  for i, tree in enumerate(in_tree.children):
    if i < len(params) and params[i].kind in positional:
      base = params[i].name
    elif params and params[-1].kind is params[-1].VAR_POSITIONAL:
      base = f"{params[-1].name}[{i - len(params) + 1}]"
    else:
      base = f"args[{i}]"
    names += [base + path for path in _leaf_paths(tree)]
  return names


def _leaf_paths(tree) -> list[str]:
  if tree.node_type is None:
    return [""]
  if tree.node_type.name == "dict":
    keys = [f"[{k!r}]" for k in tree.aux_data]
  else:
    keys = [f"[{i}]" for i in range(len(tree.children))]
  return [k + p for k, c in zip(keys, tree.children)
          for p in _leaf_paths(c)]


# Where each staged equation came from. While `saved_residuals` runs, a
# bind observer notes, for each bind, the user's line that made it: the
# innermost frame outside autodidax, or, when a jaxpr is being evaluated
# (a rule runs a jaxpr traced earlier), the line that made that jaxpr's
# equation.

_LIBRARY = str(Path(__file__).resolve().parent) + "/"
_STDLIB = str(Path(contextlib.__file__).resolve().parent) + "/"


class _Sources:
  def __init__(self, boundary):
    self.boundary = boundary   # saved_residuals' frame: beyond it, no source
    self.by_var: dict = {}     # Var -> "file:line:col (function)"
    self.pending: list = []    # (BindEvent, source), outputs not seen

  def observe(self, event):
    src = self._source()   # (which may flush, replacing self.pending)
    self.pending.append((event, src))

  def flush(self):
    for event, src in self.pending:
      staged = event.main.trace_type is pe.DynamicJaxprTrace
      if staged and event.outs is not None:
        atoms = event.main.global_data.atoms
        for out in event.outs:
          v = atoms.get(id(out))
          if type(v) is Var:
            self.by_var.setdefault(v, src)
    self.pending = [(e, s) for e, s in self.pending if e.outs is None]

  def get(self, var, default=None):
    return self.by_var.get(var, default)

  def _source(self) -> str:
    """The line of f's that made this operation. Under a jaxpr's equation being
    evaluated, the equation's line, even from code it calls (a custom_jvp rule),
    as JAX's source_info user_context; else the innermost line of user code."""
    frame = sys._getframe(3)   # above _source, observe and core.hooks._observed
    user = None
    while frame is not None and frame is not self.boundary:
      filename = str(Path(frame.f_code.co_filename).resolve())
      if not filename.startswith((_LIBRARY, _STDLIB)):
        user = user or _summarize(frame)
        frame = frame.f_back
        continue
      eqn = frame.f_locals.get("eqn")   # a jaxpr's equation being evaluated
      if isinstance(eqn, JaxprEqn) and eqn.out_binders:
        if eqn.out_binders[0] not in self.by_var:
          self.flush()
        if eqn.out_binders[0] in self.by_var:
          return self.by_var[eqn.out_binders[0]]
      frame = frame.f_back
    return user or ("" if frame is not None else "unknown")   # no line of f's, as JAX


def _summarize(frame) -> str:
  code = frame.f_code
  positions = list(code.co_positions())
  at = frame.f_lasti // 2
  line, _, col, _ = positions[at] if at >= 0 else (None,) * 4
  line = line or frame.f_lineno
  where = f"{code.co_filename}:{line}" + (f":{col}" if col else "")
  return f"{where} ({code.co_qualname})"


@contextmanager
def _recording_sources(boundary=None):
  sources = _Sources(boundary)
  with core.observe_binds(sources.observe):
    yield sources
