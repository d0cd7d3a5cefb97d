"""JAX today: the same transformations, dispatched by context instead of levels.

Parts 1-4 route every `bind` by *levels*: the interpreter stack is global and
the highest-level tracer among the arguments picks the interpreter. Since
version 0.4.36 JAX has no levels. Here is that design, small:

- one *current trace* at a time, set with `set_current_trace` (a context value);
- each trace knows its *parent*, the trace that was current when it began;
- a tracer points to the trace object that made it, and a trace treats any
  value that is not its own tracer as a constant from outside (*lifting*);
- `bind` hands the operation to the current trace, which runs its rule with
  its parent as the current trace.

Only dispatch is new: the primitives, rule tables, avals, Jaxpr, lowering and
transpose rules are the main library's. Reverse mode linearizes directly with
a `LinearizeTrace`, as JAX does now.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager

import numpy as np

from . import ad, batching, core, lowering, runtime, xla
from . import partial_eval as pe
from .ad import UndefPrimal, Zero, instantiate_zeros
from .batching import not_mapped
from .core import Primitive, abstract_eval_rules, get_aval, impl_rules, raise_to_shaped
from .jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Lit, Var, as_shaped, eval_jaxpr
from .tree_util import tree_flatten, tree_unflatten
from .util import unzip2


# --- Traces, tracers, and the current trace ----------------------------------------------

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
    raise core.NoCurrentTraceError(self)

  def __repr__(self):
    return f"{type(self).__name__}#{self.serial}{'' if self.live else ' (finished)'}"


class Tracer(core.Tracer):
  """A boxed value; `_trace` is the trace object that made it (its tag).
  Subclassing core.Tracer gives it the operators autodidax.numpy installs."""
  __slots__ = ()

  def __bool__(self):
    if isinstance(self.aval, core.ConcreteArray):
      return bool(self.aval.val)
    raise TypeError(f"A value traced by {self._trace} has no concrete value here "
                    f"({self.aval.str_short()}), so Python can't branch on it.")


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
  prev, prev_handler = _current, core.bind_handler
  _current, core.bind_handler = trace, _bind_current
  try:
    yield trace
  finally:
    _current, core.bind_handler = prev, prev_handler


def current_trace() -> Trace:
  return _current


def _bind_current(prim, args, params):   # core.bind calls this, via bind_handler
  return bind_with_trace(_current, prim, args, params)


dispatch_observers: list = []   # callbacks(trace, prim, args, depth), for autodidax.viz
_depth = 0


def bind_with_trace(trace: Trace, prim: Primitive, args, params) -> list:
  """`trace` applies `prim`. Meanwhile the current trace is the evaluator
  (JAX's `take_current_trace`): a rule sets the trace its own binds go to."""
  global _depth
  for x in args:
    if isinstance(x, Tracer) and not x._trace.live:
      raise core.EscapedTracerError(
          f"{x} escaped: its transformation has finished (was it saved to a "
          "global or an outer variable?). Return values from transformed functions.")
  for observe in dispatch_observers:
    observe(trace, prim, args, _depth)
  _depth += 1
  try:
    with set_current_trace(eval_trace):
      return trace.process_primitive(prim, list(args), params)
  finally:
    _depth -= 1


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


# --- jvp -------------------------------------------------------------------------------------

class JVPTracer(Tracer):
  __slots__ = ("primal", "tangent")

  def __init__(self, trace, primal, tangent):
    self._trace, self.primal, self.tangent = trace, primal, tangent

  aval = property(lambda self: get_aval(self.primal))


class JVPTrace(Trace):
  def to_primal_tangent_pair(self, x):
    if isinstance(x, JVPTracer) and x._trace is self:   # the tag: this very trace
      return x.primal, x.tangent
    return x, Zero.from_value(x)   # anything else is a constant here

  def process_primitive(self, prim, args, params):
    primals, tangents = unzip2(map(self.to_primal_tangent_pair, args))
    if all(type(t) is Zero for t in tangents):
      return bind_with_trace(self.parent, prim, primals, params)
    with set_current_trace(self.parent):
      primals_out, tangents_out = ad.jvp_rules[prim](primals, tangents, **params)
    if not prim.multiple_results:
      primals_out, tangents_out = [primals_out], [tangents_out]
    return [p if type(t) is Zero else JVPTracer(self, p, t)
            for p, t in zip(primals_out, tangents_out)]


def jvp(f, primals, tangents):
  primals_flat, in_tree = tree_flatten(tuple(primals))
  tangents_flat, _ = tree_flatten(tuple(tangents))
  with running(JVPTrace(_current)) as trace:
    ins = [JVPTracer(trace, p, t) for p, t in zip(primals_flat, tangents_flat)]
    outs, out_tree = _call(f, trace, in_tree, ins)
    p_out, t_out = unzip2(map(trace.to_primal_tangent_pair, outs))
  return (tree_unflatten(out_tree, p_out),
          tree_unflatten(out_tree, [instantiate_zeros(t) for t in t_out]))


# --- vmap ------------------------------------------------------------------------------------

class BatchTracer(Tracer):
  __slots__ = ("val", "batch_dim")

  def __init__(self, trace, val, batch_dim):
    self._trace, self.val, self.batch_dim = trace, val, batch_dim

  aval = property(lambda self: batching.mapped_aval(self.batch_dim, get_aval(self.val)))


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
      outs, dims_out = batching.vmap_rules[prim](self.axis_size, vals, dims, **params)
    if not prim.multiple_results:
      outs, dims_out = [outs], [dims_out]
    return [x if d is not_mapped else BatchTracer(self, x, d) for x, d in zip(outs, dims_out)]


def vmap(f, in_axes=0):
  """Map `f` over axis `in_axes[i]` of argument i (None: not mapped); the
  outputs are mapped along their axis 0."""
  def batched(*args):
    axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
    flat, in_tree = tree_flatten(args)
    dims = [None if ax is None else ax % np.ndim(x)   # each leaf gets its argument's axis
            for arg, ax in zip(args, axes) for x in tree_flatten(arg)[0]]
    sizes = {np.shape(x)[d] for x, d in zip(flat, dims) if d is not None}
    if len(sizes) != 1:
      raise ValueError(f"vmap needs one mapped axis size, got {sorted(sizes) or 'none'}")
    size, = sizes
    with running(BatchTrace(_current, size)) as trace:
      ins = [x if d is None else BatchTracer(trace, x, d) for x, d in zip(flat, dims)]
      outs, out_tree = _call(f, trace, in_tree, ins)
      outs = map(trace.to_batch_info, outs)
    return tree_unflatten(out_tree, [batching.move_batch_axis(size, d, 0, x) for x, d in outs])
  return batched


# --- Staging to a jaxpr ----------------------------------------------------------------------

class JaxprTracer(Tracer):
  __slots__ = ("aval",)

  def __init__(self, trace, aval):
    self._trace, self.aval = trace, aval


class DynamicJaxprTrace(Trace):
  """Records each operation as an equation. With no parent it stages every
  bind (so omnistaging needs no extra machinery); with one it stages only
  operations on its own tracers and hands the rest to the parent (that is
  partial evaluation, which linearize uses for its tangents)."""

  def __init__(self, parent=None):
    super().__init__(parent)
    self.eqns, self.atoms, self.consts, self.keep = [], {}, {}, []

  def new_arg(self, aval) -> JaxprTracer:
    return self._new(raise_to_shaped(aval))

  def _new(self, aval):
    tracer = JaxprTracer(self, aval)
    self.atoms[id(tracer)] = Var(aval)
    self.keep.append(tracer)   # ids stay unique while the trace lives
    return tracer

  def to_jaxpr_tracer(self, x) -> JaxprTracer:
    if isinstance(x, JaxprTracer) and x._trace is self:
      return x
    if id(x) not in self.consts:   # lift a value from outside: a constant
      is_tracer = isinstance(x, core.Tracer)
      aval = raise_to_shaped(x.aval) if is_tracer else get_aval(x)
      tracer = JaxprTracer(self, aval)
      self.atoms[id(tracer)] = (Lit(x, aval) if aval.ndim == 0 and not is_tracer
                                else Var(aval))
      self.consts[id(x)] = (tracer, x)
      self.keep += [tracer, x]
    return self.consts[id(x)][0]

  def process_primitive(self, prim, args, params):
    own = any(isinstance(x, JaxprTracer) and x._trace is self for x in args)
    if self.parent is not None and not own:
      return bind_with_trace(self.parent, prim, args, params)
    if prim is jit_p:   # our staging inlines a nested jit
      with set_current_trace(self):
        return eval_jaxpr(params["jaxpr"], [], *args)
    ins = [self.to_jaxpr_tracer(x) for x in args]
    avals = abstract_eval_rules[prim](*[t.aval for t in ins], **params)
    outs = [self._new(as_shaped(a)) for a in (avals if prim.multiple_results else [avals])]
    self.eqns.append(JaxprEqn(prim, [self.atoms[id(t)] for t in ins], params,
                              [self.atoms[id(t)] for t in outs]))
    return outs

  def to_jaxpr(self, ins, outs) -> tuple[Jaxpr, list]:
    outs = [self.atoms[id(self.to_jaxpr_tracer(x))] for x in outs]
    consts = [(self.atoms[id(t)], x) for t, x in self.consts.values()
              if type(self.atoms[id(t)]) is Var]
    return (Jaxpr([v for v, _ in consts], [self.atoms[id(t)] for t in ins], self.eqns, outs),
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


# --- jit: a primitive whose parameter is a jaxpr ---------------------------------------------

jit_p = Primitive("jit", multiple_results=True)


def _stage_for_jit(f, in_avals) -> tuple[Jaxpr, list]:
  """Stage `f`; its constants become leading inputs, passed at each call."""
  jaxpr, consts = trace_to_jaxpr(f, in_avals)
  return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.eqns, jaxpr.outvars), consts


def jit(f):
  cache: dict = {}

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
      staged = *_stage_for_jit(flat_f, key[1]), out_tree[0]
      if not any(isinstance(c, core.Tracer) for c in staged[1]):
        cache[key] = staged   # (a closed-over tracer is only good for this call)
    jaxpr, consts, out_tree = staged
    outs = jit_p.bind(*consts, *flat, jaxpr=jaxpr, name=getattr(f, "__name__", "f"))
    return tree_unflatten(out_tree, outs)
  return jitted


def _jit_impl(*args, jaxpr, name):   # compile with XLA (cached per jaxpr), run
  platform = runtime.default_platform()
  return xla.execute_compiled(xla.compile_jaxpr(jaxpr, platform, f"jit_{name}"),
                              args, platform)


def _jvp_jaxpr(jaxpr):
  n = len(jaxpr.invars)
  def f(*xs):
    p_out, t_out = jvp(lambda *p: eval_jaxpr(jaxpr, [], *p), xs[:n], xs[n:])
    return [*p_out, *t_out]
  return _stage_for_jit(f, jaxpr.in_avals * 2)


def _jit_jvp(primals, tangents, *, jaxpr, name):
  new_jaxpr, consts = _jvp_jaxpr(jaxpr)
  outs = jit_p.bind(*consts, *primals, *map(instantiate_zeros, tangents),
                    jaxpr=new_jaxpr, name=f"jvp_{name}")
  return outs[:len(outs) // 2], outs[len(outs) // 2:]


def _jit_vmap(axis_size, vals, dims, *, jaxpr, name):
  in_axes = [None if d is not_mapped else d for d in dims]
  in_avals = [a if d is None else a.update(shape=a.shape[:d] + (axis_size,) + a.shape[d:])
              for a, d in zip(jaxpr.in_avals, in_axes)]
  new_jaxpr, consts = _stage_for_jit(
      vmap(lambda *xs: eval_jaxpr(jaxpr, [], *xs), tuple(in_axes)), in_avals)
  outs = jit_p.bind(*consts, *vals, jaxpr=new_jaxpr, name=f"vmap_{name}")
  return outs, [0] * len(outs)


def _jit_linearize(trace, prim, primals, tangents, params):
  """Split jit's JVP jaxpr (Part 4's partial_eval_jaxpr): the primal part
  runs compiled now, the tangent part is staged into the linear jaxpr."""
  jaxpr, consts = _jvp_jaxpr(params["jaxpr"])
  n_in, n_out = len(primals), len(params["jaxpr"].outvars)
  known, unknown, _, num_res = pe.partial_eval_jaxpr(
      jaxpr, [False] * (len(consts) + n_in) + [True] * n_in,
      instantiate=[False] * n_out + [True] * n_out)
  outs = bind_with_trace(trace.parent, jit_p, [*consts, *primals],
                         dict(jaxpr=known, name=params["name"]))
  with set_current_trace(trace.tangent_trace):
    tangents_out = eval_jaxpr(unknown, [], *outs[n_out:],
                              *map(instantiate_zeros, tangents))
  return outs[:n_out], tangents_out


def _jit_lowering(ctx, *args, jaxpr, name):   # a jit inside a jit is inlined
  return lowering.lower_jaxpr_body(ctx, jaxpr, dict(zip(jaxpr.invars, args)))


impl_rules[jit_p] = _jit_impl
abstract_eval_rules[jit_p] = lambda *avals, jaxpr, name: [x.aval for x in jaxpr.outvars]
ad.jvp_rules[jit_p] = _jit_jvp
batching.vmap_rules[jit_p] = _jit_vmap
lowering.lowering_rules[jit_p] = _jit_lowering


# --- linearize, vjp and grad -----------------------------------------------------------------

class LinearizeTracer(Tracer):
  __slots__ = ("primal", "tangent")

  def __init__(self, trace, primal, tangent):
    self._trace, self.primal, self.tangent = trace, primal, tangent

  aval = property(lambda self: get_aval(self.primal))


class LinearizeTrace(Trace):
  """Primals are computed by the parent as we go; tangents are staged, right
  away, into a linear jaxpr by `tangent_trace`. No JVP jaxpr to split later."""

  def __init__(self, parent):
    super().__init__(parent)
    self.tangent_trace = DynamicJaxprTrace(parent)

  def to_primal_tangent_pair(self, x):
    if isinstance(x, LinearizeTracer) and x._trace is self:
      return x.primal, x.tangent
    return x, Zero.from_value(x)

  def process_primitive(self, prim, args, params):
    primals, tangents = unzip2(map(self.to_primal_tangent_pair, args))
    if all(type(t) is Zero for t in tangents):
      return bind_with_trace(self.parent, prim, primals, params)
    rule = linearize_rules.get(prim, _linearize_from_jvp)
    primals_out, tangents_out = rule(self, prim, primals, tangents, params)
    return [p if type(t) is Zero else LinearizeTracer(self, p, t)
            for p, t in zip(primals_out, tangents_out)]


def _linearize_from_jvp(trace, prim, primals, tangents, params):
  # The JVP rule runs with the tangent trace current: what touches a tangent
  # is staged, the rest (the primal work) goes on to the parent.
  with set_current_trace(trace.tangent_trace):
    primals_out, tangents_out = ad.jvp_rules[prim](primals, tangents, **params)
  if not prim.multiple_results:
    return [primals_out], [tangents_out]
  return primals_out, tangents_out


linearize_rules = {jit_p: _jit_linearize}   # JAX: primitive_linearizations


def linearize_jaxpr(f, *primals):
  """(primal outputs, linear jaxpr, its constants, output tree)."""
  flat, in_tree = tree_flatten(primals)
  with running(LinearizeTrace(_current)) as trace, running(trace.tangent_trace) as tt:
    t_in = [tt.new_arg(raise_to_shaped(get_aval(x))) for x in flat]
    ins = [LinearizeTracer(trace, x, t) for x, t in zip(flat, t_in)]
    outs, out_tree = _call(f, trace, in_tree, ins)
    p_out, t_out = unzip2(map(trace.to_primal_tangent_pair, outs))
    jaxpr, consts = tt.to_jaxpr(t_in, map(instantiate_zeros, t_out))
  return p_out, jaxpr, consts, out_tree


def linearize(f, *primals):
  p_out, jaxpr, consts, out_tree = linearize_jaxpr(f, *primals)
  def f_jvp(*tangents):
    return tree_unflatten(out_tree, eval_jaxpr(jaxpr, consts, *tree_flatten(tangents)[0]))
  return tree_unflatten(out_tree, p_out), f_jvp


def vjp(f, *primals):
  p_out, jaxpr, consts, out_tree = linearize_jaxpr(f, *primals)
  in_tree = tree_flatten(primals)[1]
  def f_vjp(cts):
    undefined = [UndefPrimal(v.aval) for v in jaxpr.invars]
    cts_in = ad.backward_pass(jaxpr, [*consts, *undefined], tree_flatten(cts)[0])
    return tree_unflatten(in_tree, map(instantiate_zeros, cts_in))
  return tree_unflatten(out_tree, p_out), f_vjp


def grad(f):
  def gradient(*args):
    out, f_vjp = vjp(f, *args)
    aval = get_aval(out)
    if aval.shape != ():
      raise TypeError(f"grad needs a scalar output, got {aval.str_short()}")
    return f_vjp(np.ones((), aval.dtype))[0]
  return gradient


# --- Where each piece lives in JAX today ---------------------------------------------------
# (concept, the name in Parts 1-4, the name here, the name under jax._src); each
# name is a real attribute: the chapter and tests/test_stackless.py resolve them.

JAX_NAMES = [
    ("a primitive and its bind", "core.Primitive", "core.Primitive", "core.Primitive"),
    ("an interpreter", "core.Trace", "stackless.Trace", "core.Trace"),
    ("its identity (the tag)", "core.MainTrace", "stackless.Trace", "core.TraceTag"),
    ("a boxed value", "core.Tracer", "stackless.Tracer", "core.Tracer"),
    ("who handles a bind", "core.find_top_trace", "stackless.current_trace",
     "core.find_top_trace"),
    ("starting a transformation", "core.new_main", "stackless.set_current_trace",
     "core.set_current_trace"),
    ("a rule picks where its binds go", "core.full_raise", "stackless.bind_with_trace",
     "core.take_current_trace"),
    ("evaluation", "core.EvalTrace", "stackless.EvalTrace", "core.EvalTrace"),
    ("forward mode", "ad.JVPTrace", "stackless.JVPTrace", "interpreters.ad.JVPTrace"),
    ("JVP rules", "ad.jvp_rules", "ad.jvp_rules", "interpreters.ad.primitive_jvps"),
    ("a symbolic zero tangent", "ad.Zero", "ad.Zero", "interpreters.ad.Zero"),
    ("vectorizing", "batching.BatchTrace", "stackless.BatchTrace",
     "interpreters.batching.BatchTrace"),
    ("batching rules", "batching.vmap_rules", "batching.vmap_rules",
     "interpreters.batching.primitive_batchers"),
    ("abstract values", "core.ShapedArray", "core.ShapedArray", "core.ShapedArray"),
    ("the IR", "jaxpr.Jaxpr", "jaxpr.Jaxpr", "core.Jaxpr"),
    ("running a jaxpr", "jaxpr.eval_jaxpr", "jaxpr.eval_jaxpr", "core.eval_jaxpr"),
    ("staging (make_jaxpr, jit)", "partial_eval.DynamicJaxprTrace",
     "stackless.DynamicJaxprTrace", "interpreters.partial_eval.DynamicJaxprTrace"),
    ("omnistaging", "core.new_dynamic", "stackless.set_current_trace",
     "core.set_current_trace"),
    ("partial evaluation", "partial_eval.PartialEvalTrace", "stackless.DynamicJaxprTrace",
     "interpreters.partial_eval.JaxprTrace"),
    ("known or unknown", "partial_eval.PartialVal", "stackless.DynamicJaxprTrace",
     "interpreters.partial_eval.PartialVal"),
    ("jit's primitive", "xla.xla_call_p", "stackless.jit_p", "pjit.jit_p"),
    ("lowering rules", "lowering.register_lowering", "lowering.register_lowering",
     "interpreters.mlir.register_lowering"),
    ("linearize", "api.linearize", "stackless.LinearizeTrace",
     "interpreters.ad.LinearizeTrace"),
    ("per-primitive linearization", "partial_eval.partial_eval_jaxpr",
     "stackless.linearize_rules", "interpreters.ad.primitive_linearizations"),
    ("a linear input being transposed", "ad.UndefPrimal", "ad.UndefPrimal",
     "interpreters.ad.UndefinedPrimal"),
    ("transpose rules", "ad.transpose_rules", "ad.transpose_rules",
     "interpreters.ad.primitive_transposes"),
    ("the backward pass", "ad.backward_pass", "ad.backward_pass",
     "interpreters.ad.backward_pass"),
]
