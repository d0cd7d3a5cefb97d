"""Probes of the exercises of "Defining a new primitive": the rules of logaddexp.

The primitives `logaddexp_p` and `weighted_sum_p` (with the functions that bind
them) come from the notebook's setup cells. Each probe installs the learner's
rule for its own duration; where it needs another rule of logaddexp, it installs
a stand-in (NumPy's own logaddexp, a result with the operands' shape and dtype)
so that the exercises can be done in any order. The library has no logaddexp,
so no exercise removes anything from it.
"""
from contextlib import ExitStack, contextmanager

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, batching, core, lowering
from autodidax.core import ShapedArray

from ..checks import patched
from ..probe import probe

SETUP = ("logaddexp_p", "logaddexp")


def _refuse_np_logaddexp(*args, **kwargs):
  raise AssertionError("Exercise P.1: compute logaddexp yourself rather than with np.logaddexp")


def _stand_in_impl(x, y):            # not Exercise P.1: NumPy does it
  return np.logaddexp(x, y)


def _stand_in_abstract_eval(x, y):   # not quite Exercise P.2: no dtype checks
  if x.shape != y.shape:
    raise TypeError(f"logaddexp: operands of shapes {x.shape} and {y.shape}")
  return ShapedArray(x.shape, x.dtype)


@contextmanager
def _rules(prim, **rules):
  """Install `rules` (impl=, abstract_eval=, jvp=, transpose=, vmap=, lowering=) for `prim`."""
  tables = dict(impl=core.impl_rules, abstract_eval=core.abstract_eval_rules,
                jvp=ad.jvp_rules, transpose=ad.transpose_rules, vmap=batching.vmap_rules,
                lowering=lowering.lowering_rules)
  with ExitStack() as stack:
    for kind, rule in rules.items():
      stack.enter_context(tables[kind].override(prim, rule))
    yield


def _operands(p):
  """Pairs (what, x, y): scalars, ties, operands far apart and huge ones, arrays, float32."""
  u = lambda: float(np.round(p.rng.normal(), 3))
  big = float(p.rng.uniform(720, 1000))   # exp overflows float64 past 709.78
  return [
      ("two scalars", u(), u()),
      ("equal scalars", *[u()] * 2),
      ("two huge equal scalars", big, big),
      ("a very negative x", -big, u()),
      ("far apart, huge", big, -big),
      ("two vectors", p.rng.normal(size=5), p.rng.normal(size=5)),
      ("two matrices of large values", 500 * p.rng.normal(size=(2, 3)),
       500 * p.rng.normal(size=(2, 3))),
      ("two float32 vectors", p.rng.normal(size=3).astype(np.float32),
       (5 * p.rng.normal(size=3)).astype(np.float32)),
  ]


def _tol(x):
  return dict(rtol=1e-6, atol=1e-6) if np.result_type(x) == np.float32 else {}


@probe("P.1", answers=("logaddexp_impl", *SETUP))
def probe_P_1(p, logaddexp_impl, logaddexp_p, logaddexp):
  with patched(np, "logaddexp", _refuse_np_logaddexp), _rules(logaddexp_p, impl=logaddexp_impl):
    for what, x, y in _operands(p):
      out = p.call(f"logaddexp of {what}", logaddexp, x, y)
      p.value(f"logaddexp of {what}", np.asarray(out), **_tol(x))


@probe("P.2", answers=("logaddexp_abstract_eval", *SETUP))
def probe_P_2(p, logaddexp_abstract_eval, logaddexp_p, logaddexp):
  def describe(aval):
    return [type(aval).__name__, list(aval.shape), str(np.dtype(aval.dtype))]

  n, m = (int(v) for v in p.rng.integers(2, 6, size=2))   # the operands' shapes
  with _rules(logaddexp_p, abstract_eval=logaddexp_abstract_eval):
    for what, x, y in [("two vectors", p.rng.normal(size=n), p.rng.normal(size=n)),
                       ("two float32 vectors", p.rng.normal(size=m).astype(np.float32),
                        p.rng.normal(size=m).astype(np.float32)),
                       ("two matrices", p.rng.normal(size=(m, n)), p.rng.normal(size=(m, n))),
                       ("two Python floats", float(p.rng.normal()), float(p.rng.normal()))]:
      closed = p.call(f"make_jaxpr(logaddexp) of {what}", adx.make_jaxpr(logaddexp), x, y)
      p.value(f"make_jaxpr(logaddexp) of {what}: the output's type, shape and dtype, and its "
              "equations", ([describe(a) for a in closed.out_avals],
                            [e.primitive.name for e in closed.eqns]))
    c = float(p.rng.normal())
    closed = p.call("make_jaxpr of logaddexp(x, a constant)",
                    adx.make_jaxpr(lambda x: logaddexp(x, c)), float(p.rng.normal()))
    p.value("logaddexp(x, a constant) (a ConcreteArray operand): the output",
            [describe(a) for a in closed.out_avals])
    out = p.call("the rule on two ConcreteArrays", logaddexp_abstract_eval,
                 core.get_aval(p.rng.normal(size=n)), core.get_aval(p.rng.normal(size=n)))
    p.value("the rule on two ConcreteArrays returns a ShapedArray of their shape and dtype",
            describe(out))
    def outcome(x, y):
      try:
        return describe(logaddexp_abstract_eval(core.get_aval(x), core.get_aval(y)))
      except NotImplementedError:
        raise
      except Exception as e:  # noqa: BLE001 (the learner's code)
        return f"raises {type(e).__name__}"

    cases = [   # the rule refuses the first five; in a seeded order with the others
        ("shapes (n,) and (n + 1,)", np.ones(n), np.ones(n + 1)),
        ("shapes (m, n) and (n + 1, m)", np.ones((m, n)), np.ones((n + 1, m))),
        ("float64 and float32", np.ones(n), np.ones(n, np.float32)),
        ("int64 operands", np.arange(m), np.arange(m)),
        ("bool operands", np.ones(n, bool), np.ones(n, bool)),
        ("two float64 vectors", p.rng.normal(size=n), p.rng.normal(size=n)),
        ("two float32 matrices", np.ones((n, m), np.float32), np.ones((n, m), np.float32)),
        ("two float64 scalars", np.float64(p.rng.normal()), np.float64(p.rng.normal())),
        ("two float32 vectors", np.ones(m, np.float32), np.ones(m, np.float32)),
    ]
    for k, (what, x, y) in p.shuffled(cases):
      p.given(operands=what, n=n, m=m)
      p.value(f"the rule, seeded case #{k}: the output's type, shape and dtype, or the error "
              "raised", p.call(f"the rule, seeded case #{k}", outcome, x, y))
    p.given()


def _no_eager(*args):
  raise AssertionError("Exercise P.3: jit should run the compiled code, not an impl rule")


@probe("P.3", answers=("logaddexp_lowering", *SETUP))
def probe_P_3(p, logaddexp_lowering, logaddexp_p, logaddexp):
  with _rules(logaddexp_p, impl=_no_eager, abstract_eval=_stand_in_abstract_eval,
              lowering=logaddexp_lowering):
    for what, x, y in _operands(p):
      out = p.call(f"jit(logaddexp) of {what}", adx.jit(logaddexp), x, y)
      p.value(f"jit(logaddexp) of {what}", np.asarray(out), **_tol(x))


@probe("P.4", answers=("logaddexp_jvp", "weighted_sum", *SETUP))
def probe_P_4(p, logaddexp_jvp, weighted_sum, logaddexp_p, logaddexp):
  with _rules(logaddexp_p, impl=_stand_in_impl, abstract_eval=_stand_in_abstract_eval,
              jvp=logaddexp_jvp):
    big = float(p.rng.uniform(720, 1000))   # exp overflows float64 past 709.78
    for what, x, y in [("two scalars", float(p.rng.normal()), float(p.rng.normal())),
                       ("far apart, huge", big, -5.),
                       ("two vectors", p.rng.normal(size=4), p.rng.normal(size=4))]:
      for along, tx, ty in [("x", np.ones_like(x), np.zeros_like(y)),
                            ("y", np.zeros_like(x), np.ones_like(y)),
                            ("a random direction", p.rng.normal(size=np.shape(x)),
                             p.rng.normal(size=np.shape(y)))]:
        out, t = p.call(f"jvp of logaddexp, {what}, along {along}", adx.jvp, logaddexp,
                        (x, y), (tx, ty))
        p.value(f"jvp of logaddexp, {what}, along {along}: the primal output", np.asarray(out))
        p.value(f"jvp of logaddexp, {what}, along {along}: the tangent", np.asarray(t))
    x, c = p.rng.normal(size=3), p.rng.normal(size=3)
    _, t = p.call("jvp of logaddexp(x, c) (c's tangent is a symbolic Zero)", adx.jvp,
                  lambda x: logaddexp(x, c), (x,), (np.ones(3),))
    p.value("jvp of logaddexp(x, c): the tangent", t)
    for i in range(2):
      x0, c0 = float(p.rng.uniform(-2, 2)), float(p.rng.uniform(-2, 2))
      d2 = p.call("a second derivative (a jvp of a jvp)", lambda: adx.jvp(
          lambda x: adx.jvp(lambda x: logaddexp(x, c0), (x,), (1.,))[1], (x0,), (1.,))[1])
      p.value(f"second derivative of logaddexp(x, c) at point {i}", np.asarray(d2))
    x0, t0 = float(p.rng.normal()), float(p.rng.normal())
    closed = p.call("make_jaxpr of a jvp", adx.make_jaxpr(
        lambda x, t: adx.jvp(lambda x: logaddexp(x, x * 2.), (x,), (t,))), x0, t0)
    names = [e.primitive.name for e in closed.eqns]
    p.given(x=x0, t=t0)
    p.value("the jvp's jaxpr: its outputs, whether the tangent comes from weighted_sum, and "
            "how many times logaddexp is bound",
            (p.call("running the jvp's jaxpr", closed, x0, t0), "weighted_sum" in names,
             names.count("logaddexp")))
    p.given()


@probe("P.5", answers=("weighted_sum_transpose", "weighted_sum_p", "weighted_sum"))
def probe_P_5(p, weighted_sum_transpose, weighted_sum_p, weighted_sum):
  n = 3
  wx, wy, x, y, ct = (p.rng.normal(size=n) for _ in range(5))
  U = lambda: ad.UndefPrimal(ShapedArray((n,), np.float64))

  def cotangents(*args):
    try:
      return list(weighted_sum_transpose(ct, *args))
    except NotImplementedError:
      raise
    except Exception as e:  # noqa: BLE001 (the learner's code)
      return f"raises {type(e).__name__}"

  cases = [   # (what, operands): the rule refuses the last two; in a seeded order
      ("(ct, U, U, wx, wy): both xt and yt linear", (U(), U(), wx, wy)),
      ("(ct, U, y, wx, wy): only xt linear", (U(), y, wx, wy)),
      ("(ct, x, U, wx, wy): only yt linear", (x, U(), wx, wy)),
      ("(ct, x, y, U, wy): a linear weight", (x, y, U(), wy)),
      ("(ct, U, y, wx, U): a linear weight", (U(), y, wx, U()))]
  with _rules(weighted_sum_p, transpose=weighted_sum_transpose):
    for k, (what, args) in p.shuffled(cases):
      p.given(operands=what)
      p.value(f"the rule, seeded case #{k}: one cotangent per operand (None where it isn't "
              "linear), or the error raised", p.call(f"the rule, seeded case #{k}", cotangents, *args))
    p.given()

    f = lambda x, y: weighted_sum(x, y, wx, wy)
    out, f_vjp = p.call("vjp of weighted_sum", adx.vjp, f, x, y)
    p.value("vjp of weighted_sum: the output", out)
    p.value("vjp of weighted_sum: the cotangents of xt and yt",
            list(p.call("the vjp function", f_vjp, ct)))
    g = lambda x: anp.sum(weighted_sum(x, x * 2., wx, wy))
    p.value("grad of sum(weighted_sum(x, 2x, wx, wy))", p.call("grad", adx.grad(g), x))
    p.value("jit(grad) of sum(weighted_sum(x, 2x, wx, wy))",
            p.call("jit(grad)", adx.jit(adx.grad(g)), x))
    h = lambda x: anp.sum(anp.sin(weighted_sum(x, 3. * np.ones(n), wx, wy)))
    p.value("grad of sum(sin(weighted_sum(x, 3, wx, wy))): only xt linear",
            p.call("grad with only xt linear", adx.grad(h), x))


@probe("P.6", answers=("logaddexp_batch", *SETUP))
def probe_P_6(p, logaddexp_batch, logaddexp_p, logaddexp):
  shape_for = {0: (4, 3), 1: (3, 4), None: (3,)}
  with _rules(logaddexp_p, impl=_stand_in_impl, abstract_eval=_stand_in_abstract_eval,
              vmap=logaddexp_batch):
    for in_axes in [(0, 0), (1, 1), (0, 1), (1, 0), (0, None), (None, 1)]:
      x, y = (p.rng.normal(size=shape_for[a]) for a in in_axes)
      for out_axes in (0, 1):
        what = f"vmap(logaddexp, in_axes={in_axes}, out_axes={out_axes})"
        p.value(what, p.call(what, adx.vmap(logaddexp, in_axes=in_axes, out_axes=out_axes), x, y))
    x, y = p.rng.normal(size=(2, 4, 3)), p.rng.normal(size=(3,))
    f = adx.vmap(adx.vmap(logaddexp, in_axes=(0, None)), in_axes=(1, None))
    p.value("vmap of vmap", p.call("vmap of vmap", f, x, y))
    closed = p.call("make_jaxpr of vmap(logaddexp)", adx.make_jaxpr(adx.vmap(logaddexp)), x[0], x[1])
    p.value("the jaxpr of vmap(logaddexp): how many times logaddexp is bound (once, on the batch)",
            [e.primitive.name for e in closed.eqns].count("logaddexp"))
    for in_axes in [(0, None), (None, 1)]:   # staged, the operands' shapes must agree
      x, y = (p.rng.normal(size=shape_for[a]) for a in in_axes)
      what = f"make_jaxpr of vmap(logaddexp, in_axes={in_axes})"
      closed = p.call(what, adx.make_jaxpr(adx.vmap(logaddexp, in_axes=in_axes)), x, y)
      p.value(f"{what}: the output's shape", list(closed.out_avals[0].shape))
