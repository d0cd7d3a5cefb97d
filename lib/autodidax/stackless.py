"""JAX today: the same transformations, dispatched by context, not levels.

Parts 1-4 route every `bind` by *levels*: the interpreter stack is global and
the highest-level tracer among the arguments picks the interpreter. Since
version 0.4.36 JAX has no levels. Here is that design, small:

- one *current trace* at a time, set with `set_current_trace` (a context value);
- each trace knows its *parent*, the trace that was current when it began;
- a tracer points to the trace object that made it, and a trace treats any
  value that is not its own tracer as a constant from outside (*lifting*);
- `bind` hands the operation to the current trace, which runs its rule with
  its parent as the current trace.

Only dispatch is new. The primitives, the rule tables (impl, abstract eval,
JVP, batching, transpose, partial evaluation, lowering), the tracers
(`ad.JVPTracer`, `batching.BatchTracer`, `partial_eval.DynamicJaxprTracer`:
a tracer is just a box and its trace's tag), the avals, `Jaxpr`, `xla_call`
(jit) and control flow are the main library's. Reverse mode linearizes
directly with a `LinearizeTrace`, as JAX does now.

Rules that stage or transform a function (cond's branches, a scan's body,
jit's jaxpr) call the running design's entry points (`core.Design`); this
module's `design` supplies ours while one of our transformations runs. So a
new higher-order primitive works in both designs once it has the usual rules:
impl, abstract eval, JVP, batching, transpose, lowering, and Part 4's
`partial_eval.partial_eval_jaxpr_rules` (its `partial_eval_rules` entry, for
the levels, is then two lines: `partial_eval.partial_eval_by_jaxpr_rule`, as
for cond). Its rules trace functions with `partial_eval.trace_to_jaxpr` and
transform jaxprs with `core.current_design()` (as `ad.jvp_jaxpr` and
`batching.batch_jaxpr` do). `LinearizeTrace` linearizes it by partial
evaluation of its JVP (`linearize_by_partial_eval`), because its params hold
a jaxpr; a primitive that needs another way registers one in
`linearize_rules`.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager

import numpy as np

from . import ad, batching, core, spmd
from . import partial_eval as pe
from .ad import JVPTracer, UndefPrimal, Zero, instantiate_zeros
from .batching import BatchTracer, not_mapped
from .core import (Primitive, abstract_eval, get_aval, impl_rules,
                   raise_to_shaped)
from .jaxpr import (ClosedJaxpr, Jaxpr, JaxprEqn, Lit, Var, as_shaped,
                    eval_jaxpr, has_jaxpr)
from .partial_eval import DynamicJaxprTracer, closed_to_call_jaxpr
from .tree_util import tree_flatten, tree_unflatten
from .util import unzip2
from .xla import xla_call_p


# --- Traces and the current trace ------------------------------------------

class Trace:
  """An interpreter *instance*: one per transformation call, with a parent."""
  _serial = itertools.count(1)

  def __init__(self, parent: "Trace | None"):
    self.parent, self.live = parent, True
    self.serial = next(Trace._serial)   # only to tell traces apart in pictures

  def process_primitive(self, prim, args, params) -> list:
    raise NotImplementedError

  @property
  def main(self):   # only Parts 1-4's `bind` asks for a level: no trace was current
    if not self.live:   # a tracer that escaped a finished transformation
      raise core.EscapedTracerError(
          f"A tracer of {self!r} escaped: its transformation has finished (was it "
          "saved to a global or an outer variable?). Return values from transformed "
          "functions instead.")
    raise core.NoCurrentTraceError(self)

  def __repr__(self):
    state = "" if self.live else " (finished)"
    return f"{type(self).__name__}#{self.serial}{state}"


class EvalTrace(Trace):
  def process_primitive(self, prim, args, params):
    out = impl_rules[prim](*args, **params)
    return out if prim.multiple_results else [out]


eval_trace = EvalTrace(parent=None)
_current: Trace = eval_trace


@contextmanager
def set_current_trace(trace: Trace):
  """Make `trace` the one every `bind` goes to, for the `with` block."""
  global _current
  prev, _current = _current, trace
  try:
    with core.hooks.routing(design):   # binds come here, not to core.bind
      yield trace
  finally:
    _current = prev


def current_trace() -> Trace:
  return _current


def bind_current(prim, args, params):   # every bind, while we route them
  return bind_with_trace(_current, prim, args, params)


dispatch_observers: list = []   # callbacks(trace, prim, args, depth), for viz
_depth = 0


def bind_with_trace(trace: Trace, prim: Primitive, args, params) -> list:
  """`trace` applies `prim`. Meanwhile the current trace is the evaluator
  (JAX's `take_current_trace`): a rule sets the trace its own binds go to."""
  global _depth
  check_alive(args)
  for observe in dispatch_observers:
    observe(trace, prim, args, _depth)
  _depth += 1
  try:
    with set_current_trace(eval_trace):
      return trace.process_primitive(prim, list(args), params)
  finally:
    _depth -= 1


def check_alive(args):
  for x in args:
    if isinstance(x, core.Tracer) and not isinstance(x._trace, Trace):
      raise core.EscapedTracerError(
          f"{x} belongs to a level-based transformation of Parts 1-4, which "
          "can't meet the stackless ones: use one design at a time (sl.jvp "
          "inside sl.vmap, adx.jvp inside adx.vmap).")
    if isinstance(x, core.Tracer) and not x._trace.live:
      raise core.EscapedTracerError(
          f"{x} escaped: its transformation has finished (was it saved to a "
          "global or an outer variable?). Return values from transformed "
          "functions.")


@contextmanager
def running(trace: Trace):
  """Run a transformation with `trace`; afterwards its tracers are dead."""
  try:
    yield trace
  finally:
    trace.live = False


def _call(f, trace, in_tree, flat_in):
  """Call `f` on pytree arguments with `trace` current; flat outputs, tree."""
  with set_current_trace(trace):
    out = f(*tree_unflatten(in_tree, flat_in))
  return tree_flatten(out)


# --- jvp -------------------------------------------------------------------

class JVPTrace(Trace):
  def to_primal_tangent_pair(self, x):
    if isinstance(x, JVPTracer) and x._trace is self:   # the tag: this trace
      return x.primal, x.tangent
    return x, Zero.from_value(x)   # anything else is a constant here

  def process_primitive(self, prim, args, params):
    primals, tangents = unzip2(map(self.to_primal_tangent_pair, args))
    if all(type(t) is Zero for t in tangents):
      return bind_with_trace(self.parent, prim, primals, params)
    with set_current_trace(self.parent):
      primals_out, tangents_out = ad.jvp_rules[prim](primals, tangents,
                                                     **params)
    if not prim.multiple_results:
      primals_out, tangents_out = [primals_out], [tangents_out]
    return [p if type(t) is Zero else JVPTracer(self, p, t)
            for p, t in zip(primals_out, tangents_out)]


def jvp_flat(f, primals, tangents) -> tuple[list, list]:
  """jvp of `f` (flat lists in and out); Zero tangents stay symbolic."""
  with running(JVPTrace(_current)) as trace:
    with set_current_trace(trace):
      outs = f(*[JVPTracer(trace, p, t) for p, t in zip(primals, tangents)])
    return unzip2(map(trace.to_primal_tangent_pair, outs))


def jvp(f, primals, tangents):
  primals_flat, in_tree = tree_flatten(tuple(primals))
  tangents_flat, _ = tree_flatten(tuple(tangents))
  out_tree = []

  def flat_f(*xs):
    outs, tree = tree_flatten(f(*tree_unflatten(in_tree, xs)))
    out_tree.append(tree)
    return outs
  p_out, t_out = jvp_flat(flat_f, primals_flat, tangents_flat)
  return (tree_unflatten(out_tree[0], p_out),
          tree_unflatten(out_tree[0], map(instantiate_zeros, t_out)))


# --- vmap ------------------------------------------------------------------

class BatchTrace(Trace):
  def __init__(self, parent, axis_size: int):
    super().__init__(parent)
    self.axis_size = axis_size

  def to_batch_info(self, x):
    if isinstance(x, BatchTracer) and x._trace is self:
      return x.val, x.batch_dim
    return x, not_mapped

  def process_primitive(self, prim, args, params):
    vals, dims = unzip2(map(self.to_batch_info, args))
    if all(d is not_mapped for d in dims):
      return bind_with_trace(self.parent, prim, vals, params)
    with set_current_trace(self.parent):
      outs, dims_out = batching.vmap_rules[prim](self.axis_size, vals, dims,
                                                 **params)
    if not prim.multiple_results:
      outs, dims_out = [outs], [dims_out]
    return [x if d is not_mapped else BatchTracer(self, x, d)
            for x, d in zip(outs, dims_out)]


def vmap_flat(f, in_dims, *args):
  """vmap of `f` (flat lists in and out) over axis `in_dims[i]` of args[i]
  (`not_mapped`: not mapped); the outputs, their batch axes, the size."""
  sizes = {np.shape(x)[d] for x, d in zip(args, in_dims) if d is not not_mapped}
  if len(sizes) != 1:
    raise ValueError("vmap needs one mapped axis size, got "
                     f"{sorted(sizes) or 'none'}")
  size, = sizes
  with running(BatchTrace(_current, size)) as trace:
    with set_current_trace(trace):
      outs = f(*[x if d is not_mapped else BatchTracer(trace, x, d)
                 for x, d in zip(args, in_dims)])
    vals, dims = unzip2(map(trace.to_batch_info, outs))
  return vals, dims, size


def vmap(f, in_axes=0):
  """Map `f` over axis `in_axes[i]` of argument i (None: not mapped); the
  outputs are mapped along their axis 0."""
  def batched(*args):
    axes = (in_axes if isinstance(in_axes, (tuple, list))
            else (in_axes,) * len(args))
    flat, in_tree = tree_flatten(args)
    dims = [not_mapped if ax is None else ax % np.ndim(x)   # each leaf: its
            for arg, ax in zip(args, axes)                   # argument's axis
            for x in tree_flatten(arg)[0]]
    out_tree = []

    def flat_f(*xs):
      outs, tree = tree_flatten(f(*tree_unflatten(in_tree, xs)))
      out_tree.append(tree)
      return outs
    outs, dims_out, size = vmap_flat(flat_f, dims, *flat)
    return tree_unflatten(out_tree[0], [batching.move_batch_axis(size, d, 0, x)
                                        for x, d in zip(outs, dims_out)])
  return batched


# --- Staging to a jaxpr ----------------------------------------------------

class DynamicJaxprTrace(Trace):
  """Records each operation as an equation. With no parent it stages every
  bind (so omnistaging needs no extra machinery); with one it stages only
  operations on its own tracers and hands the rest to the parent (that is
  partial evaluation, which linearize uses for its tangents)."""

  def __init__(self, parent=None):
    super().__init__(parent)
    self.eqns, self.atoms, self.consts, self.keep = [], {}, {}, []

  def new_arg(self, aval) -> DynamicJaxprTracer:
    return self._new(raise_to_shaped(aval))

  def _new(self, aval):
    tracer = DynamicJaxprTracer(self, aval)
    self.atoms[id(tracer)] = Var(aval)
    self.keep.append(tracer)   # ids stay unique while the trace lives
    return tracer

  def to_jaxpr_tracer(self, x) -> DynamicJaxprTracer:
    if isinstance(x, DynamicJaxprTracer) and x._trace is self:
      return x
    if id(x) not in self.consts:   # lift a value from outside: a constant
      is_tracer = isinstance(x, core.Tracer)
      aval = raise_to_shaped(x.aval) if is_tracer else get_aval(x)
      tracer = DynamicJaxprTracer(self, aval)
      self.atoms[id(tracer)] = (Lit(x, aval) if aval.ndim == 0 and not is_tracer
                                else Var(aval))
      self.consts[id(x)] = (tracer, x)
      self.keep += [tracer, x]
    return self.consts[id(x)][0]

  def process_primitive(self, prim, args, params):
    own = any(isinstance(x, DynamicJaxprTracer) and x._trace is self
              for x in args)
    if self.parent is not None and not own:
      return bind_with_trace(self.parent, prim, args, params)
    ins = [self.to_jaxpr_tracer(x) for x in args]
    avals = abstract_eval(prim, [t.aval for t in ins], params)
    outs = [self._new(as_shaped(a))
            for a in (avals if prim.multiple_results else [avals])]
    self.eqns.append(JaxprEqn(prim, [self.atoms[id(t)] for t in ins], params,
                              [self.atoms[id(t)] for t in outs]))
    return outs

  def to_jaxpr(self, ins, outs) -> tuple[Jaxpr, list]:
    outs = [self.atoms[id(self.to_jaxpr_tracer(x))] for x in outs]
    consts = [(self.atoms[id(t)], x) for t, x in self.consts.values()
              if type(self.atoms[id(t)]) is Var]
    return (Jaxpr([v for v, _ in consts], [self.atoms[id(t)] for t in ins],
                  self.eqns, outs),
            [x for _, x in consts])


def trace_to_jaxpr(f, in_avals) -> tuple[Jaxpr, list]:
  """Stage `f` (flat in, flat out) into a jaxpr and its constants."""
  with running(DynamicJaxprTrace()) as trace:
    ins = [trace.new_arg(a) for a in in_avals]
    with set_current_trace(trace):
      outs = f(*ins)
    return trace.to_jaxpr(ins, outs)


def make_jaxpr(f):
  def staged(*args):
    flat, in_tree = tree_flatten(args)
    avals = [raise_to_shaped(get_aval(x)) for x in flat]
    return ClosedJaxpr(*trace_to_jaxpr(lambda *xs: tree_flatten(
        f(*tree_unflatten(in_tree, xs)))[0], avals))
  return staged


# --- jit: Part 3's xla_call, its jaxpr staged here -------------------------

def jit(f):
  """Stage `f` once per argument types; bind `xla_call` on its jaxpr, whose
  rules (compile and run; transform the jaxpr and bind again) are Part 3's."""
  cache: dict = {}
  name = f"jit_{getattr(f, '__name__', 'f')}"

  def jitted(*args):
    flat, in_tree = tree_flatten(args)
    key = in_tree, tuple(raise_to_shaped(get_aval(x)) for x in flat)
    staged = cache.get(key)
    if staged is None:
      out_tree = []

      def flat_f(*xs):
        outs, tree = tree_flatten(f(*tree_unflatten(in_tree, xs)))
        out_tree.append(tree)
        return outs
      jaxpr, consts = closed_to_call_jaxpr(*trace_to_jaxpr(flat_f, key[1]))
      staged = jaxpr, consts, out_tree[0]
      if not any(isinstance(c, core.Tracer) for c in staged[1]):
        cache[key] = staged   # (a closed-over tracer: good for this call only)
    jaxpr, consts, out_tree = staged
    params = dict(jaxpr=jaxpr, num_consts=len(consts), name=name)
    mesh = spmd.find_mesh(jaxpr)
    if mesh is not None:   # a shard_map inside: a program for its mesh
      params.update(mesh=mesh, in_shardings=(None,) * len(jaxpr.invars),
                    out_shardings=(None,) * len(jaxpr.outvars))
    outs = xla_call_p.bind(*consts, *flat, **params)
    return tree_unflatten(out_tree, outs)
  return jitted


# --- linearize, vjp and grad -----------------------------------------------

class LinearizeTrace(JVPTrace):
  """Primals are computed by the parent as we go; tangents are staged, right
  away, into a linear jaxpr by `tangent_trace`. No JVP jaxpr to split later.
  Its tracers are JVPTracers whose tangents are tangent_trace's tracers."""

  def __init__(self, parent):
    super().__init__(parent)
    self.tangent_trace = DynamicJaxprTrace(parent)

  def process_primitive(self, prim, args, params):
    primals, tangents = unzip2(map(self.to_primal_tangent_pair, args))
    if all(type(t) is Zero for t in tangents):
      return bind_with_trace(self.parent, prim, primals, params)
    rule = linearize_rules.get(prim) or (
        linearize_by_partial_eval if any(map(has_jaxpr, params.values()))
        else linearize_op_by_op)
    primals_out, tangents_out = rule(self, prim, primals, tangents, params)
    return [p if type(t) is Zero else JVPTracer(self, p, t)
            for p, t in zip(primals_out, tangents_out)]


def linearize_op_by_op(trace, prim, primals, tangents, params):
  # The JVP rule runs with the tangent trace current: what touches a tangent
  # is staged, the rest (the primal work) goes on to the parent.
  with set_current_trace(trace.tangent_trace):
    primals_out, tangents_out = ad.jvp_rules[prim](primals, tangents, **params)
  if not prim.multiple_results:
    return [primals_out], [tangents_out]
  return primals_out, tangents_out


def linearize_by_partial_eval(trace, prim, primals, tangents, params):
  """For a higher-order primitive (cond, while, scan, xla_call), whose JVP
  rule binds it once on primals and tangents together: op by op, the primal
  work would be staged too. Stage the JVP rule into a jaxpr, split that
  with Part 4's partial_eval_jaxpr, run the known part now (on the parent)
  and stage the unknown part (on the tangent trace)."""
  avals = [raise_to_shaped(get_aval(x)) for x in primals]
  nonzero = [type(t) is not Zero for t in tangents]
  out_nonzero: list = []

  def jvp_rule(*args):   # primals, then the nonzero tangents
    ts = iter(args[len(avals):])
    ts = [next(ts) if nz else Zero(a) for a, nz in zip(avals, nonzero)]
    outs, ts_out = ad.jvp_rules[prim](args[:len(avals)], ts, **params)
    if not prim.multiple_results:
      outs, ts_out = [outs], [ts_out]
    out_nonzero[:] = [type(t) is not Zero for t in ts_out]
    return [*outs, *(t for t in ts_out if type(t) is not Zero)]

  jaxpr, consts = closed_to_call_jaxpr(*trace_to_jaxpr(
      jvp_rule, avals + [a for a, nz in zip(avals, nonzero) if nz]))
  n_out, n_t = len(out_nonzero), sum(out_nonzero)
  known, unknown, out_unknown, _ = pe.partial_eval_jaxpr(
      jaxpr, [False] * (len(consts) + len(avals)) + [True] * sum(nonzero),
      instantiate=[False] * n_out + [True] * n_t)
  assert not any(out_unknown[:n_out]), "a primal output depends on a tangent"
  with set_current_trace(trace.parent):
    outs = eval_jaxpr(known, [], *consts, *primals)
  primals_out, residuals = outs[:n_out], outs[n_out:]
  with set_current_trace(trace.tangent_trace):
    ts_out = iter(eval_jaxpr(unknown, [], *residuals,
                             *(t for t in tangents if type(t) is not Zero)))
  return primals_out, [next(ts_out) if nz else Zero.from_value(p)
                       for p, nz in zip(primals_out, out_nonzero)]


linearize_rules: dict = {}   # JAX: primitive_linearizations


def linearize_jaxpr(f, *primals):
  """(primal outputs, linear jaxpr, its constants, output tree)."""
  flat, in_tree = tree_flatten(primals)
  with running(LinearizeTrace(_current)) as trace, \
       running(trace.tangent_trace) as tt:
    t_in = [tt.new_arg(raise_to_shaped(get_aval(x))) for x in flat]
    ins = [JVPTracer(trace, x, t) for x, t in zip(flat, t_in)]
    outs, out_tree = _call(f, trace, in_tree, ins)
    p_out, t_out = unzip2(map(trace.to_primal_tangent_pair, outs))
    jaxpr, consts = tt.to_jaxpr(t_in, map(instantiate_zeros, t_out))
  return p_out, jaxpr, consts, out_tree


def linearize(f, *primals):
  p_out, jaxpr, consts, out_tree = linearize_jaxpr(f, *primals)
  def f_jvp(*tangents):
    outs = eval_jaxpr(jaxpr, consts, *tree_flatten(tangents)[0])
    return tree_unflatten(out_tree, outs)
  return tree_unflatten(out_tree, p_out), f_jvp


def vjp(f, *primals):
  p_out, jaxpr, consts, out_tree = linearize_jaxpr(f, *primals)
  in_tree = tree_flatten(primals)[1]
  def f_vjp(cts):
    undefined = [UndefPrimal(v.aval) for v in jaxpr.invars]
    # In this design, so that rules that trace (a scan's transpose, a
    # custom_vjp's bwd under vmap) trace with it too.
    with set_current_trace(current_trace()):
      cts_in = ad.backward_pass(jaxpr, [*consts, *undefined],
                                tree_flatten(cts)[0])
    return tree_unflatten(in_tree, map(instantiate_zeros, cts_in))
  return tree_unflatten(out_tree, p_out), f_vjp


def grad(f):
  """The gradient of `f` with respect to its first argument, as jax.grad:
  floating-point inputs, and one floating-point scalar output."""
  def gradient(x, *rest):
    for leaf in tree_flatten(x)[0]:
      if not np.issubdtype(get_aval(leaf).dtype, np.inexact):
        raise TypeError(
            "grad requires floating-point inputs, but got "
            f"{get_aval(leaf).dtype.name}. Convert the input to a float, or "
            "use vjp.")
    out, f_vjp = vjp(lambda x: f(x, *rest), x)
    aval = get_aval(out)
    if aval.shape != ():
      raise TypeError(f"grad needs a scalar output, got {aval.str_short()}; "
                      "for other outputs use vjp.")
    if not np.issubdtype(aval.dtype, np.floating):
      raise TypeError(f"grad requires a floating-point output, but got "
                      f"{aval.dtype.name}. For other outputs use vjp.")
    return f_vjp(np.ones((), aval.dtype))[0]
  return gradient


# --- This design's entry points, for the rules of higher-order primitives --

design = core.Design("stackless", bind=bind_current,
                     trace_to_jaxpr=trace_to_jaxpr, jvp=jvp_flat,
                     vmap=vmap_flat)


# --- Custom rules (custom_jvp, custom_vjp), traced in this design ----------

def trace_to_jaxpr_reading(f, in_avals, stand_ins) -> tuple[Jaxpr, list]:
  """`trace_to_jaxpr`, where a use of `stand_ins[i]` reads input i instead
  of becoming a constant: a custom rule that uses what the custom function's
  body closes over reads it as the equation's operand (custom_derivatives)."""
  with running(DynamicJaxprTrace()) as trace:
    ins = [trace.new_arg(a) for a in in_avals]
    for x, t in zip(stand_ins, ins):
      trace.consts[id(x)], trace.keep = (t, x), trace.keep + [x]
    with set_current_trace(trace):
      outs = [trace.to_jaxpr_tracer(y) for y in f(*ins)]
    for x in stand_ins:
      del trace.consts[id(x)]
    return trace.to_jaxpr(ins, outs)


def evaluating() -> bool:
  """Whether the current trace is the evaluator: nothing is traced."""
  return type(current_trace()) is EvalTrace


# --- Where each piece lives in JAX today -----------------------------------
# (concept, the name in Parts 1-4, the name here, the name under jax._src);
# each name is a real attribute: the chapter and tests/test_stackless.py
# resolve them.

JAX_NAMES = [
    ("a primitive and its bind", "core.Primitive", "core.Primitive",
     "core.Primitive"),
    ("an interpreter", "core.Trace", "stackless.Trace", "core.Trace"),
    ("its identity (the tag)", "core.MainTrace", "stackless.Trace",
     "core.TraceTag"),
    ("a boxed value", "core.Tracer", "core.Tracer", "core.Tracer"),
    ("who handles a bind", "core.find_top_trace", "stackless.current_trace",
     "core.find_top_trace"),
    ("starting a transformation", "core.new_main",
     "stackless.set_current_trace", "core.set_current_trace"),
    ("a rule picks where its binds go", "core.full_raise",
     "stackless.bind_with_trace", "core.take_current_trace"),
    ("evaluation", "core.EvalTrace", "stackless.EvalTrace", "core.EvalTrace"),
    ("forward mode", "ad.JVPTrace", "stackless.JVPTrace",
     "interpreters.ad.JVPTrace"),
    ("JVP rules", "ad.jvp_rules", "ad.jvp_rules",
     "interpreters.ad.primitive_jvps"),
    ("a symbolic zero tangent", "ad.Zero", "ad.Zero", "interpreters.ad.Zero"),
    ("vectorizing", "batching.BatchTrace", "stackless.BatchTrace",
     "interpreters.batching.BatchTrace"),
    ("batching rules", "batching.vmap_rules", "batching.vmap_rules",
     "interpreters.batching.primitive_batchers"),
    ("abstract values", "core.ShapedArray", "core.ShapedArray",
     "core.ShapedArray"),
    ("the IR", "jaxpr.Jaxpr", "jaxpr.Jaxpr", "core.Jaxpr"),
    ("running a jaxpr", "jaxpr.eval_jaxpr", "jaxpr.eval_jaxpr",
     "core.eval_jaxpr"),
    ("staging (make_jaxpr, jit)", "partial_eval.DynamicJaxprTrace",
     "stackless.DynamicJaxprTrace",
     "interpreters.partial_eval.DynamicJaxprTrace"),
    ("omnistaging", "core.new_dynamic", "stackless.set_current_trace",
     "core.set_current_trace"),
    ("partial evaluation", "partial_eval.PartialEvalTrace",
     "stackless.DynamicJaxprTrace", "interpreters.partial_eval.JaxprTrace"),
    ("known or unknown", "partial_eval.PartialVal",
     "stackless.DynamicJaxprTrace", "interpreters.partial_eval.PartialVal"),
    ("jit's primitive", "xla.xla_call_p", "xla.xla_call_p", "pjit.jit_p"),
    ("lowering rules", "lowering.register_lowering",
     "lowering.register_lowering", "interpreters.mlir.register_lowering"),
    ("linearize", "api.linearize", "stackless.LinearizeTrace",
     "interpreters.ad.LinearizeTrace"),
    ("per-primitive linearization", "partial_eval.partial_eval_jaxpr",
     "stackless.linearize_rules", "interpreters.ad.primitive_linearizations"),
    ("linearizing a higher-order primitive", "partial_eval.partial_eval_jaxpr",
     "stackless.linearize_by_partial_eval",
     "interpreters.ad.fallback_linearize_rule"),
    ("a linear input being transposed", "ad.UndefPrimal", "ad.UndefPrimal",
     "interpreters.ad.UndefinedPrimal"),
    ("transpose rules", "ad.transpose_rules", "ad.transpose_rules",
     "interpreters.ad.primitive_transposes"),
    ("the backward pass", "ad.backward_pass", "ad.backward_pass",
     "interpreters.ad.backward_pass3"),   # (jax.vjp runs it; backward_pass wraps it)
]
