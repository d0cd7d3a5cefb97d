"""Probes of the exercises of "The jaxpr language": control flow's rules, and reading a jaxpr.

Each probe runs the learner's answer (installed as the rule it replaces) on
inputs from `p.rng` and records what comes out; the reference solution's
records at the same seed decide.
"""
import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, control_flow, core, flop_count, lax
from autodidax.control_flow import cond_p, scan_p
from autodidax.core import ShapedArray

from ..checks import patched, recorded_binds
from ..probe import probe


def _around(p, n, sign):
  """A random vector of length n whose sum has the given sign (which branch a cond takes)."""
  x = p.rng.normal(size=n)
  return x - x.mean() + sign * p.rng.uniform(0.5, 1.5)


def _eqn_names(closed):
  return [e.primitive.name for e in closed.eqns]


@probe("C.1", answers=("cond_jvp",), removes={"autodidax.control_flow.conditionals:_cond_jvp": "cond_jvp"})
def probe_C_1(p, cond_jvp):
  c = p.rng.normal(size=3)
  two = lambda x, y: lax.cond(anp.sum(x) > 0., lambda a, b: anp.sin(a) * b,
                              lambda a, b: a * a + b, x, y)
  const = lambda x, y: lax.cond(anp.sum(y) > 0., lambda a, b: a * c, lambda a, b: b, x, y)
  step = lambda x, y: lax.cond(anp.sum(x) > 0., lambda a, b: a * b, lambda a, b: (
      lax.convert_element_type(a > b, np.float64)), x, y)   # its JVP has a const of its own
  pair = lambda x, y: lax.cond(anp.sum(x) > 0., lambda a, b: (a * b, anp.exp(a)),
                               lambda a, b: (b - a, a * 3.), x, y)
  with ad.jvp_rules.override(cond_p, cond_jvp):
    for what, f in [("two branches", two), ("a branch with a constant", const),
                    ("a step function in one branch", step), ("two outputs", pair)]:
      for branch, sign in (("true", 1.), ("false", -1.)):
        x, y = _around(p, 3, sign), _around(p, 3, sign)
        tx, ty = p.rng.normal(size=3), p.rng.normal(size=3)
        out, t = p.call(f"jvp of cond, {what}, {branch} branch", adx.jvp, f, (x, y), (tx, ty))
        p.value(f"jvp of cond, {what}, {branch} branch: primal output", out)
        p.value(f"jvp of cond, {what}, {branch} branch: tangent output", t)
    for i in range(3):
      x, y, tx, ty = (p.rng.normal(size=3) for _ in range(4))
      f = lambda x, y: lax.switch(i, [lambda a, b: a, lambda a, b: anp.tanh(a * b),
                                      lambda a, b: b - a * a], x, y)
      out, t = p.call(f"jvp of switch with three branches, index {i}", adx.jvp, f, (x, y), (tx, ty))
      p.value(f"jvp of switch, index {i}: primal output", out)
      p.value(f"jvp of switch, index {i}: tangent output", t)
    x, y, tx = _around(p, 3, 1.), p.rng.normal(size=3), p.rng.normal(size=3)
    _, t = p.call("jvp in x only (y's tangent is a symbolic Zero)", adx.jvp,
                  lambda x: two(x, y), (x,), (tx,))
    p.value("jvp in x only: tangent output", t)
    for branch, sign in (("true", 1.), ("false", -1.)):
      x, y, tx = _around(p, 3, sign), p.rng.normal(size=3), p.rng.normal(size=3)
      g = adx.jit(lambda x, y, tx: adx.jvp(lambda x: two(x, y), (x,), (tx,)))
      out, t = p.call(f"jit of a jvp of cond (a traced index), {branch} branch", g, x, y, tx)
      p.value(f"jit of a jvp of cond, {branch} branch: primal output", out)
      p.value(f"jit of a jvp of cond, {branch} branch: tangent output", t)
    closed = p.call("make_jaxpr of a jvp of cond", adx.make_jaxpr(
        lambda x, y, tx, ty: adx.jvp(two, (x, y), (tx, ty))), *(np.ones(3),) * 4)
    p.value("the jvp's jaxpr: how many cond equations (one cond of the branches' jvps)",
            _eqn_names(closed).count("cond"))
    cube = lambda x: lax.cond(x > 1., lambda x: x * x * x, anp.sin, x)
    for where, lo, hi in (("where x > 1", 1.5, 3.), ("where x <= 1", -1., 0.5)):
      x0 = float(p.rng.uniform(lo, hi))
      d2 = p.call("a second derivative through cond", lambda: adx.jvp(
          lambda x: adx.jvp(cube, (x,), (1.,))[1], (x0,), (1.,))[1])
      p.value(f"second derivative of cond(x > 1, x**3, sin(x)) {where}", np.asarray(d2))


@probe("C.2", answers=("cond_vmap_batched_index",),
       removes={"autodidax.control_flow.conditionals:_cond_vmap_batched_index": "cond_vmap_batched_index"})
def probe_C_2(p, cond_vmap_batched_index):
  # control_flow's vmap rule of cond calls the answer when the index is batched.
  B = 5
  xs = p.rng.normal(size=(B, 2))
  xs[:, 1] += np.where(np.arange(B) % 2 == 0, 2., -2.)   # both branches are taken
  ws = p.rng.normal(size=B)
  c = p.rng.normal(size=2)
  f = lambda x, w: lax.cond(anp.sum(x) > 0., lambda a, b: anp.sin(a) * b, lambda a, b: a - b, x, w)
  cases = [("vmap with in_axes=(0, 0)", adx.vmap(f, (0, 0)), (xs, ws)),
           ("vmap with in_axes=(0, None): an unbatched operand", adx.vmap(f, (0, None)),
            (xs, float(ws[0]))),
           ("vmap with in_axes=(1, 0)", adx.vmap(f, (1, 0)), (xs.T, ws)),
           ("vmap of a cond whose branch returns a constant", adx.vmap(
               lambda x: lax.cond(anp.sum(x) > 0., lambda a: a * c, lambda a: c, x)), (xs,)),
           ("vmap of a cond with two outputs", adx.vmap(
               lambda x: lax.cond(x > 0., lambda a: (a, a * 2.), lambda a: (-a, a * 3.), x)),
            (xs[:, 1],)),
           ("vmap of a cond with matrix outputs", adx.vmap(
               lambda m: lax.cond(anp.sum(m) > 0., lambda a: a * 2., anp.cos, m)),
            (p.rng.normal(size=(B, 2, 3)) + np.where(np.arange(B) % 2 == 0, 1., -1.)[:, None, None],)),
           ("jit of a vmap of cond", adx.jit(adx.vmap(f, (0, 0))), (xs, ws))]
  for what, g, args in cases:
    p.value(what, p.call(what, g, *args))
  idx = np.array([2, 0, 1, 2, 1])
  h = lambda i, x: lax.switch(i, [anp.sin, anp.cos, lambda z: -z * 2.], x)
  p.value("switch with a batched index", p.call("switch with a batched index", adx.vmap(h), idx, xs))
  p.value("switch with a batched index and an unbatched operand",
          p.call("switch with a batched index and an unbatched operand",
                 adx.vmap(h, (0, None)), idx, xs[0]))


def _body(a):
  return lambda i, c: anp.sin(c) * a + i


@probe("C.3", answers=("my_fori_loop",), removes={"autodidax.control_flow.loops:fori_loop": None})
def probe_C_3(p, my_fori_loop):
  a = float(p.rng.uniform(0.3, 0.9))
  body = _body(a)
  for lo, n in [(0, 0), (0, 1), (0, 4), (2, 5), (3, 2)]:
    x = p.rng.normal(size=3)
    what = f"my_fori_loop({lo}, np.int32({n}), ...)"
    p.value(what, p.call(what, my_fori_loop, lo, np.int32(n), body, x))
    g = adx.jit(lambda x, n: my_fori_loop(lo, n, body, x))
    p.value(f"{what} under jit (a traced upper bound)", p.call(f"{what} under jit", g, x, np.int32(n)))
  x = p.rng.normal(size=3)
  g = adx.jit(lambda x, lo, hi: my_fori_loop(lo, hi, body, x))
  p.value("under jit with both bounds traced",
          p.call("under jit with both bounds traced", g, x, np.int32(1), np.int32(4)))
  total = p.call("an int32 carry: the sum of the counters",
                 my_fori_loop, 0, np.int32(6), lambda i, s: s + i * i, np.int32(0))
  p.value("an int32 carry: the sum of the squares of the counters", np.asarray(total))
  closed = p.call("make_jaxpr with a traced bound", adx.make_jaxpr(
      lambda x, n: my_fori_loop(0, n, body, x)), x, np.int32(3))
  p.value("the jaxpr with a traced bound has a while equation", "while" in _eqn_names(closed))
  t = p.rng.normal(size=3)
  out, t_out = p.call("jvp through the loop", adx.jvp,
                      lambda x: my_fori_loop(1, np.int32(4), body, x), (x,), (t,))
  p.value("jvp through the loop: primal output", out)
  p.value("jvp through the loop: tangent output", t_out)


def _describe(avals):
  return [[type(a).__name__, list(a.shape), str(np.dtype(a.dtype))] for a in avals]


@probe("C.4", answers=("scan_abstract_eval",),
       removes={"autodidax.control_flow.loops:_scan_abstract_eval": "scan_abstract_eval"})
def probe_C_4(p, scan_abstract_eval):
  n, m = (int(k) for k in p.rng.integers(2, 7, size=2))   # scan lengths
  w = p.rng.normal(size=2)
  cases = [
      ("a scalar carry, vector ys", lambda xs: lax.scan(lambda c, x: (c + x, c * x), 0., xs),
       (p.rng.normal(size=n),)),
      ("a matrix scanned by rows, two ys", lambda xs: lax.scan(
          lambda c, x: (c + anp.sum(x), (x * c, anp.sum(x))), 1., xs), (p.rng.normal(size=(m, 3)),)),
      ("two carries and a const, in reverse", lambda xs: lax.scan(
          lambda c, x: ((c[0] * w, c[1] + x), x * 2.), (w, 0.), xs, reverse=True),
       (p.rng.normal(size=m),)),
      ("float32 carry and xs, bool ys", lambda xs: lax.scan(
          lambda c, x: (c * np.float32(0.5) + x, x > c), np.float32(1.), xs),
       (p.rng.normal(size=n).astype(np.float32),)),
  ]
  with core.abstract_eval_rules.override(scan_p, scan_abstract_eval):
    for what, f, args in cases:
      closed = p.call(f"make_jaxpr of a scan: {what}", adx.make_jaxpr(f), *args)
      p.given(n=n, m=m)
      p.value(f"{what}: the outputs' types, shapes and dtypes, and the outputs under jit",
              (_describe(closed.out_avals), p.call(f"jit of {what}", adx.jit(f), *args)))
    p.given()
    closed = adx.make_jaxpr(lambda xs: lax.scan(lambda c, x: (c + x, c), 0., xs))(np.arange(n * 1.))
    params = closed.eqns[-1].params
    xs = ShapedArray((n,), np.float64)

    def outcome(carry):
      try:
        return _describe(scan_abstract_eval(carry, xs, **params))
      except NotImplementedError:
        raise
      except Exception as e:  # noqa: BLE001 (the learner's code)
        return f"raises {type(e).__name__}"

    carries = [   # (what, the carry's type): the body returns f64[]; in a seeded order
        ("f64[2], returned as f64[]", ShapedArray((2,), np.float64)),
        ("f32[], returned as f64[]", ShapedArray((), np.float32)),
        ("int32[], returned as f64[]", ShapedArray((), np.int32)),
        ("f64[], well typed", ShapedArray((), np.float64))]
    for k, (what, carry) in p.shuffled(carries):
      p.given(carry=what, n=n)
      p.value(f"the rule, seeded case #{k}: the carry then the stacked ys, or the error raised",
              p.call(f"the rule, seeded case #{k}", outcome, carry))
    p.given()


@probe("C.5", answers=("dot_general_flops",),
       removes={"autodidax.flop_count:_dot_general_flops": "dot_general_flops"})
def probe_C_5(p, dot_general_flops):
  m, k, n, b = (int(v) for v in p.rng.permutation([2, 3, 4, 5, 6, 7])[:4])   # all different
  a, w, v = np.ones((m, k)), np.ones((k, n)), np.ones(k)
  dg = lax.dot_general
  cases = [
      ("matrix @ matrix", lambda a, w: a @ w, (a, w)),
      ("matrix @ vector", lambda a, v: a @ v, (a, v)),
      ("vector . vector", lambda v: v @ v, (v,)),
      ("a batch of matrices @ matrix", lambda x, w: x @ w, (np.ones((b, m, k)), w)),
      ("contracting the first axes (x.T @ y)", lambda x, y: dg(x, y, (((0,), (0,)), ((), ()))),
       (np.ones((k, m)), np.ones((k, n)))),
      ("two contracting axes", lambda x, y: dg(x, y, (((1, 2), (0, 1)), ((), ()))),
       (np.ones((m, k, 3)), np.ones((k, 3, n)))),
      ("a batch axis", lambda x, y: dg(x, y, (((2,), (1,)), ((0,), (0,)))),
       (np.ones((b, m, k)), np.ones((b, k, n)))),
      ("a batch axis that isn't first", lambda x, y: dg(x, y, (((0,), (1,)), ((2,), (0,)))),
       (np.ones((k, m, b)), np.ones((b, k, n)))),
      ("in a 7-step loop", lambda a, v: lax.fori_loop(0, 7, lambda i, h: a @ v + h, np.zeros(m)),
       (a, v)),
  ]
  with patched(flop_count, "flops_rules", dict(flop_count.flops_rules)) as rules:
    rules[lax.dot_general_p] = dot_general_flops
    for what, f, args in cases:
      got = p.call(f"flops of {what}", adx.flops(f), *args)
      p.value(f"flops of {what}: in total", got.total)
      p.value(f"flops of {what}: in dot_general", got.by_primitive.get("dot_general", 0))


@probe("C.6", answers=("jaxpr_outputs",))
def probe_C_6(p, jaxpr_outputs):
  inputs = [[0.5, 2., 3.]] + [[float(v) for v in np.round(p.rng.uniform(0., 3., size=3), 1)]
                              for _ in range(4)]
  for i, a in p.shuffled(inputs):   # the chapter's input among them
    p.given(a=a)
    with recorded_binds() as binds:
      out = p.call(f"jaxpr_outputs of input #{i}", jaxpr_outputs, list(a))
    pair = isinstance(out, (tuple, list)) and len(out) == 2
    p.value(f"jaxpr_outputs of input #{i}: whether it returns a pair (b, c); b, the final "
            "carry; c, the stacked outputs; the primitives bound (none: work it out, don't "
            "run it)", (pair, p.call(f"b of input #{i} as a float", float, out[0]),
                        p.call(f"c of input #{i} as a list of floats",
                               lambda: [float(v) for v in out[1]]), len(binds))
            if pair else (pair,))
    if not pair:
      return
