"""Staging Python into jaxprs, and (Part 4) partial evaluation.

Staging is the extreme case of partial evaluation, where nothing is known: every
primitive applied to a traced value is recorded as an equation instead of run.
JAX keeps both in jax/_src/interpreters/partial_eval.py, and so do we.
"""
from __future__ import annotations

from contextlib import nullcontext

from .core import (MainTrace, ShapedArray, Trace, Tracer, abstract_eval_rules,
                   full_raise, get_aval, new_dynamic, new_main, raise_to_shaped)
from .jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Lit, Var, as_shaped


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
    avals_out = abstract_eval_rules[primitive](*[t.aval for t in tracers], **params)
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
      aval = raise_to_shaped(get_aval(val))
      tracer = DynamicJaxprTracer(trace, aval)
      self.tracers += [tracer, val]   # keep the value alive while its id is a key
      self.const_tracers[id(val)] = tracer
      if aval.ndim == 0:
        self.atoms[id(tracer)] = Lit(val, aval)
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


def trace_to_closed_jaxpr(f, in_avals, omnistaging: bool = True) -> ClosedJaxpr:
  jaxpr, consts = trace_to_jaxpr_dynamic(f, in_avals, omnistaging)
  return ClosedJaxpr(jaxpr, consts)
