"""Probes of the "JAX today" exercises: tracing without levels (autodidax.stackless).

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import numpy as np

import autodidax.numpy as anp
from autodidax import core, viz
from autodidax import stackless as sl
from autodidax.ad import Zero
from autodidax.jaxpr import eval_jaxpr

from ..probe import probe


def _f64(*shape):
  return core.ShapedArray(shape, np.float64)


@probe("T.1", answers=("to_primal_tangent_pair",),
       removes={"autodidax.stackless:JVPTrace.to_primal_tangent_pair": "to_primal_tangent_pair"})
def probe_T_1(p, to_primal_tangent_pair):
  a, b = p.rng.normal(size=2)
  with sl.running(sl.JVPTrace(sl.eval_trace)) as trace:
    def outcome(val):
      primal, tangent = to_primal_tangent_pair(trace, val)
      return ("the value itself" if primal is val else primal,
              f"a Zero of shape {tangent.aval.shape}" if type(tangent) is Zero else tangent)

    cases = [   # in a seeded order
        ("your own tracer", sl.JVPTracer(trace, a, b)),
        ("another trace's JVPTracer", sl.JVPTracer(sl.JVPTrace(sl.eval_trace), a, b)),
        ("a plain array", p.rng.normal(size=int(p.rng.integers(1, 6))))]
    for k, (what, val) in p.shuffled(cases):
      p.given(value=what)
      p.value(f"to_primal_tangent_pair, seeded case #{k}: (primal, tangent)",
              p.call(f"to_primal_tangent_pair, seeded case #{k}", outcome, val))
    p.given()

  x0, y0 = p.rng.uniform(0.5, 1.5, size=2)   # the check installed it in JVPTrace
  inner = lambda x: sl.jvp(lambda y: anp.sin(x * y), (y0,), (1.,))[1]
  p.value("a jvp of a jvp that closes over x",
          p.call("a nested jvp", sl.jvp, lambda x: x * inner(x), (x0,), (1.,)))
  xs = p.rng.normal(size=4)
  g = sl.vmap(lambda x: sl.jvp(lambda y: anp.tanh(x * y), (2.,), (1.,))[1])
  p.value("vmap of a jvp that closes over the batched x", p.call("vmap of jvp", g, xs))


@probe("T.2", answers=("process_primitive",),
       removes={"autodidax.stackless:BatchTrace.process_primitive": "process_primitive"})
def probe_T_2(p, process_primitive):
  del process_primitive   # installed as BatchTrace.process_primitive
  xs, ys = p.rng.normal(size=3), p.rng.normal(size=4)
  programs = [
      ("vmap of sin(x) * 2", lambda: sl.vmap(lambda x: anp.sin(x) * 2.)(xs)),
      ("vmap with an unbatched argument",
       lambda: sl.vmap(lambda x, y: x * anp.sum(y), (0, None))(xs, ys)),
      ("vmap of vmap, closing over the outer batch",
       lambda: sl.vmap(lambda x: sl.vmap(lambda y: anp.cos(x) + y)(ys))(xs)),
      ("jvp of vmap", lambda: sl.jvp(sl.vmap(lambda x: anp.sin(x) * x), (xs,), (ys[:3],))),
      ("grad of a sum of vmap",
       lambda: sl.grad(lambda x: anp.sum(sl.vmap(lambda y: anp.tanh(y) * y)(x)))(xs)),
  ]
  for what, run in programs:
    p.value(what, p.call(what, run))
  with viz.record_dispatch() as rec:
    p.call("vmap with a computation on a constant", sl.vmap(lambda x: x * 2. + anp.sum(ys)), xs)
  p.value("who handles reduce_sum of an unbatched constant",
          [type(t).__name__ for t, prim, *_ in rec.events if prim.name == "reduce_sum"])


@probe("T.3", answers=("trace_to_jaxpr",),
       removes={"autodidax.stackless:trace_to_jaxpr": "trace_to_jaxpr"})
def probe_T_3(p, trace_to_jaxpr):
  scale = float(p.rng.uniform(0.2, 0.8))
  n = int(p.rng.integers(2, 7))

  def program(a, b):   # the table needs no traced input: it is staged all the same
    table = anp.exp(np.arange(n * 1.) * scale)
    return [anp.sin(a) * table + b]
  jaxpr, consts = p.call("staging a program", trace_to_jaxpr, program, [_f64(n), _f64()])
  p.given(n=n)
  p.value("the staged jaxpr (of a: f64[n] and b: f64[]), printed", str(jaxpr))
  p.given()
  x = p.rng.normal(size=n)
  p.value("running the staged jaxpr", p.call("running the staged jaxpr", eval_jaxpr,
                                             jaxpr, consts, x, 2.))
  leaked = []
  p.call("staging a function that leaks a tracer", trace_to_jaxpr,
         lambda a: leaked.append(a) or [a * 2.], [_f64()])
  p.raises("using a tracer that leaked out of the staging",
           lambda: sl.jvp(lambda y: leaked[0] * y, (1.,), (1.,)))
  p.value("jit of a jvp", p.call("jit of a jvp", sl.jit(
      lambda x: sl.jvp(anp.tanh, (x,), (x,))[1]), x))
  p.value("grad of jit", p.call("grad of jit", sl.grad(sl.jit(
      lambda x: anp.sum(anp.sin(x) * x))), x))


@probe("T.4", answers=("my_vjp",),
       removes={"autodidax.stackless:vjp": "my_vjp", "autodidax.api:vjp": None,
                "autodidax.api:vjp_flat": None})
def probe_T_4(p, my_vjp):
  x, y = p.rng.normal(size=3), p.rng.normal(size=3)
  programs = [   # (description, function, args)
      ("sum(sin(x) * y)", lambda x, y: anp.sum(anp.sin(x) * y), (x, y)),
      ("tanh(x) * x (one input, a vector output)", lambda x: anp.tanh(x) * x, (x,)),
      ("an unused input", lambda x, y: anp.exp(x) * 2., (x, y)),
      ("a scalar", lambda a: anp.sin(a) * a, (float(p.rng.normal()),)),
  ]
  for what, f, args in programs:
    out, f_vjp = p.call(f"my_vjp of {what}", my_vjp, f, *args)
    p.value(f"my_vjp of {what}: the output", out)
    ct = p.rng.normal(size=np.shape(out))
    cts = p.call(f"f_vjp of {what}", f_vjp, ct)
    p.value(f"f_vjp of {what}: whether it returns a tuple of one cotangent per input, and the "
            "cotangents", (type(cts) is tuple and len(cts) == len(args), cts))


def _nest(kinds, xs):
  """How to run g under the transformations `kinds`, outermost first, on scalars."""
  def run(g):
    h = g
    for kind in reversed(kinds):
      h = (lambda h: lambda x: sl.jvp(h, (x,), (1.,))[1])(h) if kind == "jvp" \
          else (lambda h: lambda x: sl.vmap(h)(x * xs))(h)
    return h(1.)
  return run


@probe("T.5", answers=("trace_chain",))
def probe_T_5(p, trace_chain):
  xs = p.rng.normal(size=3)
  nestings = [   # (description, how to run g under transformations)
      ("no transformation", lambda g: g(1.)),
      ("jvp", lambda g: sl.jvp(g, (1.,), (1.,))),
      ("vmap of jvp", lambda g: sl.vmap(lambda x: sl.jvp(g, (x,), (1.,)))(xs)),
      ("jvp of vmap of jvp",
       lambda g: sl.jvp(lambda y: sl.vmap(lambda x: sl.jvp(g, (x * y,), (1.,))[1])(xs),
                        (2.,), (1.,))),
      ("grad of vmap", lambda g: sl.grad(lambda y: anp.sum(sl.vmap(g)(xs * y)))(1.)),
  ]
  for _ in range(2):   # and nestings drawn from the seed
    kinds = [str(t) for t in p.rng.choice(["jvp", "vmap"], size=int(p.rng.integers(2, 4)))]
    nestings.append((" of ".join(kinds), _nest(kinds, xs)))
  for k, (what, run) in p.shuffled(nestings):   # in a seeded order
    seen = []

    def g(x):
      seen.append(p.call(f"trace_chain under nesting #{k}", trace_chain, sl.current_trace()))
      return x * 2.
    p.given(nesting=what)
    run(g)
    p.value(f"the chain under nesting #{k}", seen[0])
  p.given()
