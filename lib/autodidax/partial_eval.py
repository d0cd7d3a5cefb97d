"""Staging Python into jaxprs, and (Part 4) partial evaluation.

Staging is the extreme case of partial evaluation, where nothing is known: every
primitive applied to a traced value is recorded as an equation instead of run.
JAX keeps both in jax/_src/interpreters/partial_eval.py, and so do we.
"""
from __future__ import annotations

import weakref
from contextlib import nullcontext
from typing import Any, NamedTuple

import numpy as np

from .core import (Primitive, ShapedArray, Trace, Tracer, abstract_eval,
                   current_design, full_lower, full_raise, get_aval, levels,
                   new_dynamic, new_main, raise_to_shaped)
from .jaxpr import (ClosedJaxpr, Jaxpr, JaxprEqn, JaxprTypeError, Lit, Var, as_shaped,
                    typecheck_jaxpr)


# --- Staging: the interpreter behind make_jaxpr and jit ---------------------------------

class DynamicJaxprTracer(Tracer):
  """A placeholder for a value that will exist only when the jaxpr runs."""
  __slots__ = ["aval"]   # a plain attribute: read for every equation

  def __init__(self, trace, aval: ShapedArray):
    self._trace = trace
    self.aval = aval


class DynamicJaxprTrace(Trace):
  """Records each primitive as an equation, computing only output types."""

  @property
  def builder(self) -> "JaxprBuilder":
    return self.main.global_data

  def new_arg(self, aval) -> DynamicJaxprTracer:
    tracer = DynamicJaxprTracer(self, raise_to_shaped(aval))
    self.builder.add_var(tracer)
    return tracer

  def pure(self, val):
    return self.builder.get_const(self, val)
  lift = pure

  def process_primitive(self, primitive, tracers, params):
    # This runs once per staged equation, so it is kept lean.
    avals_out = abstract_eval(primitive, [t.aval for t in tracers], params)
    if not primitive.multiple_results:
      avals_out = [avals_out]
    out_tracers = [DynamicJaxprTracer(self, as_shaped(a)) for a in avals_out]
    self.main.global_data.add_eqn(primitive, tracers, params, out_tracers)
    return out_tracers


class JaxprBuilder:
  """The side table a staging trace fills: equations, variables, constants.

  Each tracer's atom is settled when the tracer is registered (a Var, or a
  Lit for a scalar constant), so each equation is built as it is recorded and
  `build` only has to collect them.
  """

  def __init__(self):
    self.eqns: list = []            # JaxprEqn, in the order they were recorded
    self.atoms: dict = {}           # id(tracer) -> its Var (or Lit)
    self.tracers: list = []         # keeps tracers alive so ids stay unique
    self.const_tracers: dict = {}   # id(const value) -> tracer (hoist once)
    self.constvars: list = []       # the non-scalar constants' Vars ...
    self.consts: list = []          # ... and their values

  def add_var(self, tracer) -> Var:
    self.tracers.append(tracer)
    var = self.atoms[id(tracer)] = Var(tracer.aval)
    return var

  def get_const(self, trace, val) -> DynamicJaxprTracer:
    """A tracer for a constant: scalars become literals, others constvars."""
    tracer = self.const_tracers.get(id(val))
    if tracer is None:
      # A known constant keeps its value in the tracer's aval (a ConcreteArray),
      # so abstract-eval rules may look at it, as older JAX did; its
      # Lit or Var in the jaxpr is typed by the ShapedArray, like every atom.
      # An outer tracer has no value here: it is only a ShapedArray.
      aval = get_aval(val)
      if isinstance(val, Tracer):
        aval = raise_to_shaped(aval)
      tracer = DynamicJaxprTracer(trace, aval)
      self.tracers += [tracer, val]   # keep the value alive while its id is a key
      self.const_tracers[id(val)] = tracer
      if aval.ndim == 0 and not isinstance(val, Tracer) and isinstance(aval, ShapedArray):
        self.atoms[id(tracer)] = Lit(val, aval)   # not an outer tracer, nor a Ref
      else:
        self.constvars.append(self.add_var(tracer))
        self.consts.append(val)
    return tracer

  def add_eqn(self, primitive, tracers_in, params, tracers_out):
    atoms = self.atoms
    self.eqns.append(JaxprEqn(primitive, [atoms[id(t)] for t in tracers_in], params,
                              [self.add_var(t) for t in tracers_out]))

  def build(self, in_tracers, out_tracers) -> tuple[Jaxpr, list]:
    """The jaxpr (scalar constants inlined as literals, others as constvars)."""
    atoms = self.atoms
    jaxpr = Jaxpr(self.constvars, [atoms[id(t)] for t in in_tracers], self.eqns,
                  [atoms[id(t)] for t in out_tracers])
    return jaxpr, list(self.consts)


def trace_to_jaxpr_dynamic(f, in_avals, omnistaging: bool = True) -> tuple[Jaxpr, list]:
  """Stage `f` (flat lists in and out) into a jaxpr and its constants.

  The staging trace is also made the *dynamic* trace, so it sees every bind,
  even ones that don't depend on the inputs (omnistaging). With
  `omnistaging=False` those run eagerly instead, as JAX did before 2020.
  """
  builder = JaxprBuilder()
  with new_main(DynamicJaxprTrace, builder) as main, \
       (new_dynamic(main) if omnistaging else nullcontext()):
    trace = DynamicJaxprTrace(main)
    tracers_in = [trace.new_arg(aval) for aval in in_avals]
    outs = f(*tracers_in)
    tracers_out = [full_raise(trace, out) for out in outs]
    return builder.build(tracers_in, tracers_out)


levels.trace_to_jaxpr = trace_to_jaxpr_dynamic   # see core.Design


def trace_to_jaxpr(f, in_avals) -> tuple[Jaxpr, list]:
  """Stage `f` with the running design: Part 2's `trace_to_jaxpr_dynamic`,
  or, inside a transformation of autodidax.stackless, its staging trace.
  Rules that trace functions (control flow, jit's) call this."""
  return current_design().trace_to_jaxpr(f, in_avals)


def trace_to_closed_jaxpr(f, in_avals, omnistaging: bool = True) -> ClosedJaxpr:
  jaxpr, consts = trace_to_jaxpr_dynamic(f, in_avals, omnistaging)
  return ClosedJaxpr(jaxpr, consts)


def closed_to_call_jaxpr(jaxpr: Jaxpr, consts) -> tuple[Jaxpr, list]:
  """Make constvars ordinary leading inputs, as xla_call and control flow want them."""
  return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.eqns, jaxpr.outvars), list(consts)


# --- Partial evaluation: known values run now, unknown ones are staged (Part 4) ---------------

class PartialVal(NamedTuple):
  """A value that is either known (`const`) or only known by its type (`aval`)."""
  aval: ShapedArray
  const: Any = None

  @classmethod
  def known(cls, val):
    return cls(raise_to_shaped(get_aval(val)), val)

  @classmethod
  def unknown(cls, aval):
    return cls(raise_to_shaped(aval), None)

  @property
  def is_known(self) -> bool:
    return self.const is not None

  @property
  def is_unknown(self) -> bool:
    return self.const is None


# Recipes: how an unknown tracer will be computed once the unknowns are known.
class LambdaBindingRecipe(NamedTuple):
  """An input of the staged jaxpr."""


class ConstRecipe(NamedTuple):
  """A known value that an unknown computation uses: a constant of the jaxpr."""
  val: Any


class JaxprEqnRecipe(NamedTuple):
  """An equation; it refers to its outputs weakly, its inputs strongly, so the
  tracer graph is a DAG pointing from outputs back to inputs."""
  prim: Primitive
  tracers_in: list
  params: dict
  avals_out: list
  tracer_refs_out: list   # weakrefs


class PartialEvalTracer(Tracer):
  """A partially known value: `pval` says what is known, and for an unknown
  one `recipe` says how it will be computed."""
  __slots__ = ["pval", "recipe", "__weakref__"]

  def __init__(self, trace, pval: PartialVal, recipe):
    self._trace, self.pval, self.recipe = trace, pval, recipe

  @property
  def aval(self):   # a known value keeps its value: int(x) works under grad
    return get_aval(self.pval.const) if self.pval.is_known else self.pval.aval

  def full_lower(self):   # a known value needs no box
    return full_lower(self.pval.const) if self.pval.is_known else self


class PartialEvalTrace(Trace):
  def new_arg(self, pval: PartialVal) -> PartialEvalTracer:
    return PartialEvalTracer(self, pval, LambdaBindingRecipe())

  def pure(self, val):
    return PartialEvalTracer(self, PartialVal.known(val), None)
  lift = pure

  def instantiate_const(self, tracer: PartialEvalTracer) -> PartialEvalTracer:
    """An unknown stand-in for a known tracer, so an equation can use it."""
    if tracer.pval.is_unknown:
      return tracer
    return PartialEvalTracer(self, PartialVal.unknown(tracer.aval), ConstRecipe(tracer.pval.const))

  def process_primitive(self, primitive, tracers, params):
    """Known inputs: compute now. Else a rule splits the work, or, by
    default, the whole primitive is staged."""
    if all(t.pval.is_known for t in tracers):
      outs = primitive.bind(*(t.pval.const for t in tracers), **params)
      return [self.pure(x) for x in (outs if primitive.multiple_results else [outs])]
    rule = partial_eval_rules.get(primitive)
    if rule is not None:
      return rule(self, tracers, **params)
    tracers_in = [self.instantiate_const(t) for t in tracers]
    avals_out = abstract_eval(primitive, [t.aval for t in tracers_in], params)
    if not primitive.multiple_results:
      avals_out = [avals_out]
    return self.stage(primitive, tracers_in, params, avals_out)

  def stage(self, primitive, tracers_in, params, avals_out) -> list:
    """Record one equation over unknown tracers; returns its unknown outputs."""
    outs = [PartialEvalTracer(self, PartialVal.unknown(a), None) for a in avals_out]
    recipe = JaxprEqnRecipe(primitive, tracers_in, params, [raise_to_shaped(a) for a in avals_out],
                            [weakref.ref(t) for t in outs])
    for t in outs:
      t.recipe = recipe
    return outs


partial_eval_rules: dict = {}   # primitive -> rule(trace, tracers, **params) (optional)


def partial_eval_by_jaxpr_rule(trace, prim: Primitive, tracers, params):
  """A rule of PartialEvalTrace made from `prim`'s rule for jaxprs
  (`partial_eval_jaxpr_rules`, below), so that a higher-order primitive
  writes its split once: split a jaxpr of one equation, bind the known
  equation now, and stage the unknown one."""
  ins = [Var(raise_to_shaped(t.aval)) for t in tracers]
  avals = abstract_eval(prim, [v.aval for v in ins], params)
  outs = [Var(as_shaped(a))
          for a in (avals if prim.multiple_results else [avals])]
  eqn1, eqn2, _, _ = partial_eval_jaxpr_rules[prim](
      [t.pval.is_unknown for t in tracers], JaxprEqn(prim, ins, params, outs))
  known = {v: t.pval.const for v, t in zip(ins, tracers) if t.pval.is_known}
  unknown = {v: t for v, t in zip(ins, tracers) if t.pval.is_unknown}
  read = lambda x: x.val if type(x) is Lit else known[x]
  if eqn1 is not None:
    vals = eqn1.primitive.bind(*map(read, eqn1.inputs), **eqn1.params)
    multiple = eqn1.primitive.multiple_results
    known.update(zip(eqn1.out_binders, vals if multiple else [vals]))
  staged = trace.stage(
      eqn2.primitive, [unknown[x] if x in unknown
                       else trace.instantiate_const(trace.pure(read(x)))
                       for x in eqn2.inputs],
      eqn2.params, [v.aval for v in eqn2.out_binders])
  unknown.update(zip(eqn2.out_binders, staged))
  return [unknown[v] if v in unknown else trace.pure(known[v]) for v in outs]


def partial_eval_flat(f, pvals_in: list, instantiate=None) -> tuple[Jaxpr, list, list]:
  """Run `f` on partially known inputs: known parts are computed now, the rest
  becomes a jaxpr. Returns (jaxpr, output PartialVals, the jaxpr's consts).
  Outputs with `instantiate[i]` set are made unknown even if known;
  `instantiate` may also be a function of the number of outputs."""
  with new_main(PartialEvalTrace) as main:
    trace = PartialEvalTrace(main)
    ins = [trace.new_arg(pval) for pval in pvals_in]
    outs = [full_raise(trace, y) for y in f(*ins)]
    if callable(instantiate):
      instantiate = instantiate(len(outs))
    if instantiate is not None:
      outs = [trace.instantiate_const(t) if inst else t for t, inst in zip(outs, instantiate)]
    unknown = lambda tracers: [t for t in tracers if t.pval.is_unknown]
    jaxpr, consts = tracers_to_jaxpr(unknown(ins), unknown(outs))
  return jaxpr, [t.pval for t in outs], consts


def tracer_parents(t: PartialEvalTracer) -> list:
  return t.recipe.tracers_in if isinstance(t.recipe, JaxprEqnRecipe) else []


def tracers_to_jaxpr(tracers_in: list, tracers_out: list) -> tuple[Jaxpr, list]:
  """Walk the recipe DAG from the outputs and write its equations in
  dependency order. Scalar constants become literals, others constvars."""
  atoms = {id(t): Var(t.aval) for t in tracers_in}   # id(tracer) -> its Var or Lit
  const_atoms: dict = {}   # id(value) -> its Var or Lit: each constant appears once
  constvars, consts, eqns, written = [], [], [], set()

  def const_atom(val):
    if id(val) not in const_atoms:
      if (np.ndim(val) == 0 and not isinstance(val, Tracer)
          and isinstance(get_aval(val), ShapedArray)):   # not a Ref
        const_atoms[id(val)] = Lit(val)
      else:
        const_atoms[id(val)] = var = Var(get_aval(val))
        constvars.append(var)
        consts.append(val)
    return const_atoms[id(val)]

  for t in toposort(tracers_out, tracer_parents):
    recipe = t.recipe
    if isinstance(recipe, ConstRecipe):
      atoms[id(t)] = const_atom(recipe.val)
    elif isinstance(recipe, JaxprEqnRecipe) and id(recipe) not in written:
      written.add(id(recipe))
      out_vars = [Var(a) for a in recipe.avals_out]
      for ref, v in zip(recipe.tracer_refs_out, out_vars):
        if ref() is not None:   # an output nobody kept still gets a binder
          atoms[id(ref())] = v
      eqns.append(JaxprEqn(recipe.prim, [atoms[id(x)] for x in recipe.tracers_in],
                           recipe.params, out_vars))
    elif isinstance(recipe, LambdaBindingRecipe):
      assert id(t) in atoms, "an input of the function was not an input"
  jaxpr = Jaxpr(constvars, [atoms[id(t)] for t in tracers_in], eqns,
                [atoms[id(t)] for t in tracers_out])
  typecheck_jaxpr(jaxpr)
  return jaxpr, consts


def toposort(out_nodes: list, parents) -> list:
  """Nodes reachable from `out_nodes`, each after all its parents. Iterative,
  so chains of any length work (no recursion limit)."""
  if not out_nodes:
    return []
  seen, order, stack = set(), [], [(n, False) for n in reversed(out_nodes)]
  while stack:
    node, expanded = stack.pop()
    if expanded:
      order.append(node)
      continue
    if id(node) in seen:
      continue
    seen.add(id(node))
    stack.append((node, True))
    stack.extend((p, False) for p in reversed(parents(node)) if id(p) not in seen)
  return order


# --- Partial evaluation of jaxprs --------------------------------------------------------------

def partial_eval_jaxpr(jaxpr: Jaxpr, in_unknowns: list, instantiate=None):
  """Split `jaxpr` into a known part and an unknown part.

  jaxpr1: known inputs -> known outputs + residuals
  jaxpr2: residuals + unknown inputs -> unknown outputs
  Returns (jaxpr1, jaxpr2, out_unknowns, num_res). `instantiate[i]` forces
  output i to be unknown (computed by jaxpr2) even if it could be known.
  """
  assert not jaxpr.constvars, "partial_eval_jaxpr takes jaxprs without constvars"
  env: dict = {}   # Var -> True if unknown
  residuals: list = []
  eqns1, eqns2 = [], []

  def read(x):
    return type(x) is Var and env[x]

  def as_residual(x):
    if type(x) is Var and not env[x] and x not in residuals:
      residuals.append(x)

  for v, uk in zip(jaxpr.invars, in_unknowns):
    env[v] = uk
  for eqn in jaxpr.eqns:
    unks_in = [read(x) for x in eqn.inputs]
    rule = partial_eval_jaxpr_rules.get(eqn.primitive)
    if rule is not None and any(unks_in):
      eqn1, eqn2, unks_out, res = rule(unks_in, eqn)
      if eqn1 is not None:
        eqns1.append(eqn1)
      eqns2.append(eqn2)
      for x in res:
        env.setdefault(x, False)   # residuals a rule makes are known values
        as_residual(x)
      for v, uk in zip(eqn.out_binders, unks_out):
        env[v] = uk
    elif any(unks_in):
      for x in eqn.inputs:
        as_residual(x)
      eqns2.append(eqn)
      for v in eqn.out_binders:
        env[v] = True
    else:
      eqns1.append(eqn)
      for v in eqn.out_binders:
        env[v] = False

  out_unknowns = [read(x) for x in jaxpr.outvars]
  if instantiate is not None:
    for i, (x, inst) in enumerate(zip(jaxpr.outvars, instantiate)):
      if inst and not out_unknowns[i]:
        if type(x) is Var:
          as_residual(x)
        out_unknowns[i] = True
  # Outputs that are known go out of jaxpr1; unknown ones out of jaxpr2. An
  # unknown output that jaxpr1 computed (instantiated) is passed as a residual.
  ins1 = [v for v, uk in zip(jaxpr.invars, in_unknowns) if not uk]
  outs1 = [x for x, uk in zip(jaxpr.outvars, out_unknowns) if not uk]
  res1 = list(residuals)
  jaxpr1 = Jaxpr([], ins1, eqns1, outs1 + res1)
  res2 = [Var(x.aval) for x in res1]
  renaming = dict(zip(res1, res2))
  ins2 = [v for v, uk in zip(jaxpr.invars, in_unknowns) if uk]
  rename = lambda x: renaming.get(x, x) if type(x) is Var else x
  eqns2 = [e._replace(inputs=[rename(x) for x in e.inputs]) for e in eqns2]
  outs2 = [rename(x) for x, uk in zip(jaxpr.outvars, out_unknowns) if uk]
  jaxpr2 = Jaxpr([], res2 + ins2, eqns2, outs2)
  typecheck_partial_eval_jaxpr(jaxpr, in_unknowns, out_unknowns, jaxpr1, jaxpr2)
  return jaxpr1, jaxpr2, out_unknowns, len(res1)


def typecheck_partial_eval_jaxpr(jaxpr, in_unknowns, out_unknowns, jaxpr1, jaxpr2):
  """Each part type-checks, and together they have the type of the whole:
  if `jaxpr` is (known ins, unknown ins) -> (known outs, unknown outs), then
  jaxpr1 is known ins -> (known outs, residuals) and jaxpr2 is
  (the same residuals, unknown ins) -> unknown outs."""
  whole, part1, part2 = (typecheck_jaxpr(j) for j in (jaxpr, jaxpr1, jaxpr2))
  split = lambda types, unknown: ([t for t, u in zip(types, unknown) if not u],
                                  [t for t, u in zip(types, unknown) if u])
  ins_known, ins_unknown = split(whole.in_types, in_unknowns)
  outs_known, outs_unknown = split(whole.out_types, out_unknowns)
  residuals = part1.out_types[len(outs_known):]
  for what, got, want in [
      ("known jaxpr's inputs", part1.in_types, ins_known),
      ("known jaxpr's outputs", part1.out_types[:len(outs_known)], outs_known),
      ("unknown jaxpr's inputs", part2.in_types, residuals + ins_unknown),
      ("unknown jaxpr's outputs", part2.out_types, outs_unknown)]:
    if list(map(raise_to_shaped, got)) != list(map(raise_to_shaped, want)):
      raise JaxprTypeError(f"partial evaluation: the {what} are {got}, expected {want}")


partial_eval_jaxpr_rules: dict = {}   # primitive -> rule(unks_in, eqn)
# primitive -> rule(eqn1, eqn2) -> {output index of the known equation: its input index}:
# the outputs that are just inputs, which a split by policy (checkpoint) passes on as
# they are, as JAX's partial_eval_jaxpr_custom does: the residual is the input.
residual_forwarding: dict = {}
