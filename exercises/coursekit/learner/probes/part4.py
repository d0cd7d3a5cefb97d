"""Probes of Part 4's exercises: reverse mode.

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
from contextlib import contextmanager

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, control_flow, lax
from autodidax import partial_eval as pe
from autodidax.ad import UndefPrimal, Zero, is_undefined_primal
from autodidax.core import ShapedArray, new_main
from autodidax.jaxpr import Jaxpr, eval_jaxpr, typecheck_jaxpr

from ..checks import recorded_binds
from ..probe import probe

F64, F32 = np.dtype("float64"), np.dtype("float32")


def _undef(shape, dtype=F64):
  return UndefPrimal(ShapedArray(tuple(shape), dtype))


def _or_error(fn, *args, **kwargs):
  """`fn(*args, **kwargs)`, or the error it raises, by name (NotImplementedError goes through)."""
  try:
    return fn(*args, **kwargs)
  except NotImplementedError:
    raise
  except Exception as e:  # noqa: BLE001 (the learner's code)
    return f"raises {type(e).__name__}"


def _one_entry(out):
  """Whether a rule returned a list of one cotangent, and that cotangent."""
  ok = isinstance(out, (list, tuple)) and len(out) == 1
  return ok, out[0] if ok else out


@probe("4.1", answers=("reduce_sum_transpose", "broadcast_transpose"),
       removes={"autodidax.ad:_reduce_sum_transpose": "reduce_sum_transpose",
                "autodidax.ad:_broadcast_transpose": "broadcast_transpose"})
def probe_4_1(p, reduce_sum_transpose, broadcast_transpose):
  for shape, axes, dtype in [((3,), (0,), F64), ((2, 3), (0,), F64), ((2, 3), (1,), F64),
                             ((2, 3), (0, 1), F64), ((2, 3, 4), (1,), F64),
                             ((2, 3, 4), (0, 2), F32), ((4,), (), F64)]:
    out_shape = tuple(d for i, d in enumerate(shape) if i not in axes)
    ct = p.rng.normal(size=out_shape).astype(dtype)
    what = f"reduce_sum_transpose for an operand {dtype.name}{list(shape)}, axes={axes}"
    out = p.call(what, reduce_sum_transpose, ct, _undef(shape, dtype), axes=axes)
    p.value(f"{what}: whether it returns a list of one cotangent, and that cotangent",
            _one_entry(out))
  for shape, out_shape, axes, dtype in [
      ((3,), (2, 3), (0,), F64), ((3,), (3, 4), (1,), F64), ((), (2, 3), (0, 1), F64),
      ((2, 3), (2, 4, 3), (1,), F32), ((2, 3), (5, 2, 3, 4), (0, 3), F64), ((2,), (2,), (), F64)]:
    ct = p.rng.normal(size=out_shape).astype(dtype)
    what = f"broadcast_transpose from {dtype.name}{list(shape)} to {list(out_shape)}, axes={axes}"
    out = p.call(what, broadcast_transpose, ct, _undef(shape, dtype), shape=out_shape, axes=axes)
    p.value(f"{what}: whether it returns a list of one cotangent, and that cotangent",
            _one_entry(out))

  w = p.rng.normal(size=(3, 4))
  fns = [("sum over axis 1", lambda x: anp.sum(anp.sin(x) * w, axis=1), p.rng.normal(size=(3, 4))),
         ("sum of all", lambda x: anp.sum(x * x), p.rng.normal(size=5)),
         ("broadcast a row", lambda x: anp.tanh(x * w), p.rng.normal(size=4)),
         ("broadcast a column", lambda x: anp.exp(anp.reshape(x, (3, 1)) * w), p.rng.normal(size=3)),
         ("mean and broadcast back", lambda x: x - anp.mean(x, axis=0, keepdims=True),
          p.rng.normal(size=(3, 4)))]
  with ad.transpose_rules.override(lax.reduce_sum_p, reduce_sum_transpose), \
       ad.transpose_rules.override(lax.broadcast_p, broadcast_transpose):
    for what, f, x in fns:
      y, f_vjp = p.call(f"vjp of {what}", adx.vjp, f, x)
      ct = p.rng.normal(size=np.shape(y))
      p.value(f"vjp of {what}", p.call(f"vjp of {what}", f_vjp, ct))
      p.value(f"jacrev of {what} (the rules run under vmap)",
              p.call(f"jacrev of {what}", adx.jacrev(f), x))


@probe("4.2", answers=("mul_transpose",), removes={"autodidax.ad:_mul_transpose": "mul_transpose"})
def probe_4_2(p, mul_transpose):
  cases = [((3,), p.rng.normal(size=3)), ((2, 3), p.rng.normal(size=(2, 3))),
           ((2, 3), float(p.rng.normal())), ((2, 3), np.float64(p.rng.normal())),
           ((4,), np.array(p.rng.normal())), ((), p.rng.normal(size=(2, 3))),
           ((), p.rng.normal(size=4)), ((), float(p.rng.normal()))]
  for shape, known in cases:
    ct = p.rng.normal(size=np.broadcast_shapes(shape, np.shape(known)))
    for linear in "xy":
      x, y = (_undef(shape), known) if linear == "x" else (known, _undef(shape))
      what = (f"mul_transpose with {linear} linear of shape {shape}, "
              f"the other a {type(known).__name__} of shape {np.shape(known)}")
      out = p.call(what, mul_transpose, ct, x, y)
      ok = isinstance(out, (list, tuple)) and len(out) == 2
      p.value(f"{what}: whether it returns a list of two entries, which are None, and the "
              "linear operand's cotangent",
              (ok, [o is None for o in out], out[0 if linear == "x" else 1]) if ok else (ok,))
  n = int(p.rng.integers(2, 6))
  ct, known = p.rng.normal(size=n), p.rng.normal(size=n)
  pair = [("both operands linear", (ct, _undef((n,)), _undef((n,)))),
          ("x linear, y known", (ct, _undef((n,)), known))]
  for k, (what, args) in p.shuffled(pair):   # in a seeded order
    p.given(case=what, n=n)
    p.value(f"mul_transpose, seeded case #{k}: its cotangents, or the error raised",
            p.call(f"mul_transpose, seeded case #{k}", _or_error, mul_transpose, *args))
  p.given()

  v, m, s = p.rng.normal(size=3), p.rng.normal(size=(2, 3)), float(p.rng.normal())
  fns = [("x * 3.", lambda x: x * 3., (v,)),
         ("2. * sin(x) * x", lambda x: 2. * anp.sin(x) * x, (v,)),
         ("s * v * v (a scalar s)", lambda s, x: s * x * x, (s, v)),
         ("x * y * cos(x), matrices", lambda x, y: x * y * anp.cos(x), (m, anp.cos(m))),
         ("sum(s * exp(m), axis=0) (a scalar s)", lambda s, x: anp.sum(s * anp.exp(x), axis=0), (s, m))]
  with ad.transpose_rules.override(lax.mul_p, mul_transpose):
    for what, f, args in fns:
      y, f_vjp = p.call(f"vjp of {what}", adx.vjp, f, *args)
      ct = p.rng.normal(size=np.shape(y))
      p.value(f"vjp of {what}", p.call(f"vjp of {what}", f_vjp, ct))
    p.value("jacrev of 2 sin(x) x (the rule runs under vmap)",
            p.call("jacrev of 2 sin(x) x", adx.jacrev(lambda x: anp.sin(x) * x * 2.), v))
    p.value("grad of sum(s * m * m) with respect to the scalar s",
            p.call("grad with respect to a scalar factor",
                   adx.grad(lambda s: anp.sum(s * m * m)), s))


@probe("4.3", answers=("instantiate_const",),
       removes={"autodidax.partial_eval:PartialEvalTrace.instantiate_const": "instantiate_const"})
def probe_4_3(p, instantiate_const):
  with new_main(pe.PartialEvalTrace) as main:
    trace = pe.PartialEvalTrace(main)
    unknown = trace.new_arg(pe.PartialVal.unknown(ShapedArray((3,), F64)))
    r = p.call("instantiate_const of an unknown tracer", instantiate_const, trace, unknown)
    p.value("an unknown tracer comes back unchanged", r is unknown)
    for val in (p.rng.normal(size=3), np.float64(p.rng.normal()), p.rng.normal(size=(2, 2))):
      known = trace.pure(val)
      what = f"instantiate_const of a known value of shape {np.shape(val)}"
      r = p.call(what, instantiate_const, trace, known)
      pval, recipe = getattr(r, "pval", None), getattr(r, "recipe", None)
      p.value(f"{what}: whether it is a new PartialEvalTracer, of the same trace, unknown, of "
              "the known value's type; whether its recipe is ConstRecipe(the known value "
              "itself), and the known tracer is left as it was; the recipe's value",
              (isinstance(r, pe.PartialEvalTracer) and r is not known,
               getattr(getattr(r, "_trace", None), "main", None) is main,
               isinstance(pval, pe.PartialVal) and pval.is_unknown and pval.aval == known.aval,
               type(recipe) is pe.ConstRecipe and recipe.val is val,
               known.pval.is_known and known.pval.const is val and known.recipe is None,
               getattr(recipe, "val", None)))

  v, m = p.rng.normal(size=3), p.rng.normal(size=(2, 3))
  fns = [("sin(x) * x", lambda x: anp.sin(x) * x, (v,)),
         ("sum(exp(x) * cos(y))", lambda x, y: anp.sum(anp.exp(x) * anp.cos(y)), (m, p.rng.normal(size=(2, 3)))),
         ("tanh(x) * 3 + x / 2", lambda x: anp.tanh(x) * 3. + x / 2., (v,)),
         ("a matrix product", lambda a, b: anp.sin(a @ b), (m, p.rng.normal(size=(3, 2))))]
  for what, f, args in fns:
    y, f_lin = p.call(f"linearize of {what}", adx.linearize, f, *args)
    p.value(f"linearize of {what}: the primal output", y)
    ts = [p.rng.normal(size=np.shape(a)) for a in args]
    p.value(f"linearize of {what}: f_lin(t), and the number of constants (residuals) of the "
            "linear jaxpr", (p.call(f"f_lin of {what}", f_lin, *ts), len(f_lin.jaxpr.consts)))
  # x known, y unknown: sin(x) is computed now and becomes the staged mul's constant.
  x, t = p.rng.normal(size=2), p.rng.normal(size=2)
  jaxpr, pvals, consts = p.call(
      "partial_eval_flat of sin(x) * y, x known", pe.partial_eval_flat,
      lambda x, y: [anp.sin(x) * y],
      [pe.PartialVal.known(x), pe.PartialVal.unknown(ShapedArray((2,), F64))])
  p.value("sin(x) * y, x known: staged equations, constants, is the output unknown; the "
          "staged jaxpr's constants", ([len(jaxpr.eqns), len(consts), pvals[0].is_unknown], consts))
  p.value("sin(x) * y, x known: evaluating the staged jaxpr",
          p.call("evaluating the staged jaxpr", eval_jaxpr, jaxpr, consts, t))


def _assemble(jaxpr, in_unknowns, split):
  """The two jaxprs, from a split (as my_partial_eval_jaxpr in the notebook)."""
  eqns1, eqns2, residuals, out_unknowns = split
  ins1 = [v for v, uk in zip(jaxpr.invars, in_unknowns) if not uk]
  outs1 = [x for x, uk in zip(jaxpr.outvars, out_unknowns) if not uk]
  ins2 = [v for v, uk in zip(jaxpr.invars, in_unknowns) if uk]
  outs2 = [x for x, uk in zip(jaxpr.outvars, out_unknowns) if uk]
  return Jaxpr([], ins1, list(eqns1), outs1 + list(residuals)), \
      Jaxpr([], list(residuals) + ins2, list(eqns2), outs2)


@probe("4.4", answers=("split_eqns",), removes={"autodidax.partial_eval:partial_eval_jaxpr": None})
def probe_4_4(p, split_eqns):
  v, w = p.rng.normal(size=3), p.rng.normal(size=3)

  def jvp_of(f):
    return lambda x, t: adx.jvp(f, (x,), (t,))

  programs = [   # (description, function, args, which inputs are unknown)
      ("sin(x) * y", lambda x, y: anp.sin(x) * y, (v, w),
       [(False, True), (True, False), (True, True), (False, False)]),
      ("y * x * x (x used twice)", lambda x, y: y * x * x, (v, w), [(False, True), (True, False)]),
      ("outputs of both kinds", lambda x, y: (anp.cos(x) + 1., y * 2. * x, anp.sin(y), x),
       (v, w), [(False, True), (True, False)]),
      ("known work after unknown work", lambda x, y: (y * 2., anp.sin(x) * anp.exp(x), 3.),
       (v, w), [(False, True), (True, False)]),
      ("unknown flows on", lambda x, y, z: anp.sum(anp.sin(anp.cos(x) * y) * anp.exp(z) + z),
       (v, w, v * w), [(False, True, False), (True, False, False), (False, False, True)]),
      ("linearize's JVP jaxpr", jvp_of(lambda x: anp.sum(anp.tanh(x) * anp.sin(x) * x)), (v, w),
       [(False, True)]),
      ("a JVP jaxpr with two outputs", jvp_of(lambda x: anp.exp(x) / (x * x + 1.)), (v, w),
       [(False, True)]),
  ]
  for what, f, args, patterns in programs:
    jaxpr = adx.make_jaxpr(f)(*args).jaxpr
    origin = {v: f"input {i}" for i, v in enumerate(jaxpr.invars)}
    origin.update({v: f"equation {i}" for i, e in enumerate(jaxpr.eqns) for v in e.out_binders})
    for in_unknowns in patterns:
      where = f"{what}, in_unknowns={list(in_unknowns)}"
      split = p.call(f"split_eqns ({where})", split_eqns, jaxpr, list(in_unknowns))
      eqns1, eqns2, residuals, out_unknowns = split
      found = ([bool(u) for u in out_unknowns],
               [[jaxpr.eqns.index(e) for e in eqns1], [jaxpr.eqns.index(e) for e in eqns2]],
               sorted(origin.get(r, "not a variable of the jaxpr") for r in residuals))
      jaxpr1, jaxpr2 = _assemble(jaxpr, in_unknowns, split)
      p.call(f"typecheck_jaxpr of the known half ({where})", typecheck_jaxpr, jaxpr1)
      p.call(f"typecheck_jaxpr of the unknown half ({where})", typecheck_jaxpr, jaxpr2)
      known_args = [a for a, uk in zip(args, in_unknowns) if not uk]
      unknown_args = [a for a, uk in zip(args, in_unknowns) if uk]
      outs1 = p.call(f"evaluating the known half ({where})", eval_jaxpr, jaxpr1, [], *known_args)
      n_known = len(outs1) - len(residuals)
      outs2 = p.call(f"evaluating the unknown half ({where})", eval_jaxpr, jaxpr2, [],
                     *outs1[n_known:], *unknown_args)
      p.value(f"{where}: which outputs are unknown; the known and unknown equations (their "
              "positions); where each residual comes from (sorted); the known outputs, then "
              "the unknown ones", (*found, [outs1[:n_known], outs2]))


@probe("4.5", answers=("backward_pass",), removes={"autodidax.ad:backward_pass": "backward_pass"})
def probe_4_5(p, backward_pass):
  n = int(p.rng.integers(2, 6))
  s = ShapedArray((n,), F64)
  ct1, ct2 = p.rng.normal(size=n), p.rng.normal(size=n)
  mul_rule = ad.transpose_rules[lax.mul_p]
  calls = []   # "ct" or "Zero": the cotangents the mul rule was called with

  def spy_mul(ct, x, y):   # the library's mul rule, recording its calls
    calls.append("Zero" if type(ct) is Zero else "ct")
    return mul_rule(ct, x, y)

  def transpose(what, f, args, cts):
    jaxpr = adx.make_jaxpr(f)(*[np.zeros(a.aval.shape) if is_undefined_primal(a) else a
                                for a in args]).jaxpr
    calls.clear()
    out = p.call(f"backward_pass of {what}", backward_pass, jaxpr, list(args), list(cts))
    p.given(n=n)
    p.value(f"backward_pass of {what}: how many entries (one per linear input), which are "
            "symbolic Zeros, the cotangents, and the cotangents the mul rule was called with",
            (len(out) if isinstance(out, list) else f"a {type(out).__name__}",
             [type(o) is Zero for o in out], [ad.instantiate_zeros(o) for o in out], list(calls)))
    p.given()

  a = p.rng.normal(size=n)
  with ad.transpose_rules.override(lax.mul_p, spy_mul):
    transpose("t + t (t used twice)", lambda t: t + t, [UndefPrimal(s)], [ct1])
    transpose("(t * 2, t * 3 + t) (t used three times)", lambda t: (t * 2., t * 3. + t),
              [UndefPrimal(s)], [ct1, ct2])
    transpose("(t, t) (an output variable listed twice)", lambda t: (t, t), [UndefPrimal(s)], [ct1, ct2])
    transpose("(t * 2, 1.) (a literal output)", lambda t: (t * 2., 1.), [UndefPrimal(s)],
              [ct1, np.float64(p.rng.normal())])
    transpose("(t * 2, t * 3) with cotangents (ct, Zero)", lambda t: (t * 2., t * 3.),
              [UndefPrimal(s)], [ct1, Zero(s)])
    transpose("t * 2 with a Zero cotangent", lambda t: t * 2., [UndefPrimal(s)], [Zero(s)])
    transpose("t * 2 of (t, u), u unused", lambda t, u: t * 2., [UndefPrimal(s), UndefPrimal(s)], [ct1])
    transpose("sin(a) * t + a * t, a known", lambda a, t: anp.sin(a) * t + a * t,
              [a, UndefPrimal(s)], [ct1])

  def chain(x, n):
    z = x
    for _ in range(n):
      z = x * (z + z)
    return anp.sum(z)

  v = p.rng.normal(size=n)
  fns = [("sin(x) * cos(x)", lambda x: anp.sum(anp.sin(x) * anp.cos(x))),
         ("x * x * x", lambda x: anp.sum(x * x * x)),
         ("z = x * (z + z), 6 times", lambda x: chain(x, 6)),
         ("tanh(x) * exp(tanh(x)) + tanh(x)",
          lambda x: anp.sum(anp.tanh(x) * anp.exp(anp.tanh(x)) + anp.tanh(x))),
         ("a jitted function (its transpose runs backward_pass too)",
          adx.jit(lambda x: anp.sum(anp.sin(x) * x))),
         ("a cond (a primitive with several outputs)",
          lambda x: anp.sum(lax.cond(anp.sum(x) > 0., lambda x: (x * x, anp.sin(x)),
                                     lambda x: (x * 3., x), x)[1] * x))]
  for what, f in fns:   # adx.grad calls ad.backward_pass: the learner's
    p.value(f"grad of {what}", p.call(f"grad of {what}", adx.grad(f), v))
  y, f_vjp = adx.vjp(lambda x: (anp.sin(x), x * 3., x), v)
  p.value("vjp of (sin(x), 3x, x)", p.call("vjp of (sin(x), 3x, x)", f_vjp, (ct1, ct2, ct1)))


@probe("4.6", answers=("grad",),
       removes={"autodidax.api:grad": "grad", "autodidax.api:value_and_grad": None,
                "autodidax.api:jacrev": None})
def probe_4_6(p, grad):
  v, m = p.rng.normal(size=3), p.rng.normal(size=(2, 3))
  calls = []

  def counted(f):
    def g(*args):
      calls.append(1)
      return f(*args)
    return g

  cases = [   # (description, function, args, argnums)
      ("sum(sin(x) * x)", lambda x: anp.sum(anp.sin(x) * x), (v,), 0),
      ("a scalar function", lambda x: anp.tanh(x) * x, (float(p.rng.normal()),), 0),
      ("x * y, argnums=1", lambda x, y: anp.sum(anp.exp(x) * y * y), (v, p.rng.normal(size=3)), 1),
      ("three arguments, argnums=(0, 2)",
       lambda x, y, z: anp.sum(anp.sin(x) * y) + anp.sum(z @ x), (v, m[0], m), (0, 2)),
      ("three arguments, argnums=(2, 0)",
       lambda x, y, z: anp.sum(anp.sin(x) * y) + anp.sum(z @ x), (v, m[0], m), (2, 0)),
      ("argnums=(1,)", lambda x, y: anp.sum(x * anp.cos(y)), (v, m[1]), (1,)),
      ("float32 arguments and output", lambda x: anp.sum(anp.sin(x) * x),
       (p.rng.normal(size=3).astype(np.float32),), 0),
      ("a float32 output of float64 arguments",
       lambda x: anp.astype(anp.sum(x * x), np.float32), (v,), 0),
      ("a float32 argument among float64 ones, argnums=(0, 1)",
       lambda x, y: anp.sum(x * anp.astype(y, np.float64)),
       (v, p.rng.normal(size=3).astype(np.float32)), (0, 1)),
  ]
  for what, f, args, argnums in cases:
    calls.clear()
    g = p.call(f"grad(f, argnums={argnums})", grad, counted(f), argnums)
    got = p.call(f"grad of {what}", g, *args)
    p.value(f"grad of {what}: the type of the result, the result, and how often it called f",
            (type(got).__name__ if isinstance(got, (tuple, list, dict)) else "an array or scalar",
             got, len(calls)))

  params = {"w": m, "b": p.rng.normal(size=2)}
  loss = lambda q, x: anp.sum(anp.tanh(q["w"] @ x + q["b"]) ** 2)
  got = p.call("grad with respect to a dict of parameters", grad(loss), params, v)
  p.value("the gradient of a dict argument: a dict with its keys",
          sorted(got) if type(got) is dict else f"a {type(got).__name__}")
  p.value("the gradient of a dict of parameters", got)
  x0 = float(p.rng.normal())
  p.value("grad of grad of sin(x) x^2",
          p.call("grad of grad", grad(grad(lambda x: anp.sin(x) * x * x)), x0))
  outputs = [   # grad refuses the first five, in a seeded order with the others
      ("a vector output", lambda x: anp.sin(x)),
      ("a tuple output", lambda x: (anp.sum(x), anp.sum(x))),
      ("a (1,)-shaped output", lambda x: anp.sum(x, keepdims=True)),
      ("an integer output", lambda x: anp.astype(anp.sum(x), np.int32)),
      ("a bool output", lambda x: anp.sum(x) > 0.),
      ("a scalar output", lambda x: anp.sum(anp.sin(x))),
      ("a 0-d float32 output", lambda x: anp.astype(anp.sum(x * x), np.float32)),
      ("an output of shape ()", lambda x: anp.reshape(anp.sum(anp.cos(x)), ())),
      ("a scalar output built from an integer", lambda x: anp.sum(x) * 3),
  ]
  for k, (what, f) in p.shuffled(outputs):
    p.given(output=what)
    p.value(f"grad of a function, seeded case #{k}: the gradient, or the error raised",
            p.call(f"grad of a function, seeded case #{k}", _or_error, lambda: grad(f)(v)))
  p.given()


def _count(x):
  """A count as an int, if it is one (a fitted formula may give 320.0000001)."""
  try:
    v = float(x)
  except (TypeError, ValueError):
    return f"a {type(x).__name__}"
  return int(round(v)) if abs(v - round(v)) < 1e-6 else v


@probe("4.7", answers=("naive_binds", "fast_grad", "VJP_RULES"))
def probe_4_7(p, naive_binds, fast_grad, VJP_RULES):
  for k, n in enumerate([1, *sorted(p.rng.choice(np.arange(2, 300), size=3, replace=False))]):
    n = int(n)
    p.given(n=n)
    p.value(f"naive_binds(n), case {k + 1} of 4",
            _count(p.call(f"naive_binds(n), case {k + 1} of 4", naive_binds, n)))
  p.given()
  calls = {}   # primitive name -> how many times fast_grad called its VJP rule

  @contextmanager
  def counted_rules():
    old = dict(VJP_RULES)
    def spy(prim, rule):
      def counted(*args, **params):
        calls[prim.name] = calls.get(prim.name, 0) + 1
        return rule(*args, **params)
      return counted
    VJP_RULES.update({prim: spy(prim, rule) for prim, rule in old.items()})
    try:
      yield
    finally:
      VJP_RULES.clear()
      VJP_RULES.update(old)

  def chain(x, n):
    z = x
    for _ in range(n):
      z = x * (z + z)
    return z

  a = float(p.rng.uniform(0.3, 0.6))
  short, long = int(p.rng.integers(2, 6)), int(p.rng.integers(10, 16))
  programs = [("the chain, a short n", lambda x: chain(x, short), (a,)),
              ("the chain, a long n", lambda x: chain(x, long), (a,)),
              ("sin(x) * y + x * x", lambda x, y: anp.sin(x) * y + x * x,
               (float(p.rng.normal()), float(p.rng.normal()))),
              ("sum(sin(x * x) * x)", lambda x: anp.sum(anp.sin(x * x) * x), (p.rng.normal(size=3),)),
              ("an unused input", lambda x, y: x * x, (float(p.rng.normal()), 2.))]
  with counted_rules():
    for what, f, args in programs:
      jaxpr = adx.make_jaxpr(f)(*args).jaxpr
      calls.clear()
      p.given(n=short if "short" in what else long if "long" in what else None)
      got = p.call(f"fast_grad of {what}", fast_grad, jaxpr, list(args))
      p.value(f"fast_grad of {what}: how many gradients (one per input), the gradients, and "
              "how often it called each rule of VJP_RULES",
              (len(got) if isinstance(got, (list, tuple)) else f"a {type(got).__name__}",
               [np.asarray(g) for g in got], dict(calls)))
  n = int(p.rng.integers(8, 13))
  grads, counts = [], []
  for length in (n, 2 * n, 4 * n):
    jaxpr = adx.make_jaxpr(lambda x: chain(x, length))(a).jaxpr
    with recorded_binds() as binds:
      got = p.call(f"fast_grad of the chain, n={length}", fast_grad, jaxpr, [a])
    grads.append([np.asarray(g) for g in got])
    counts.append(len(binds))
  p.given(n=n)
  p.value("fast_grad of the chain for n, 2 n and 4 n, and whether the number of binds grows "
          "linearly with n (at most 10 binds per link)",
          (grads, counts[2] - counts[1] == 2 * (counts[1] - counts[0]) and counts[2] <= 40 * n))
  p.given()


# --- Reverse mode through control flow ------------------------------------------------------------

def _switch_grads(p, what, f, args, argnums):
  p.value(f"grad of {what}", p.call(f"grad of {what}", adx.grad(f, argnums), *args))
  p.value(f"grad of {what}, under jit (the index is a tracer)",
          p.call(f"jit of grad of {what}", adx.jit(adx.grad(f, argnums)), *args))


@probe("4.8", answers=("cond_transpose",),
       removes={"autodidax.control_flow.conditionals:_cond_transpose": "cond_transpose"})
def probe_4_8(p, cond_transpose):
  seen = []   # per call of the rule: which entries it returned as None

  def spy(cts, index, *ops, branches):
    out = cond_transpose(cts, index, *ops, branches=branches)
    seen.append([o is None for o in out] if isinstance(out, (list, tuple)) else type(out).__name__)
    return out

  x, y, c = p.rng.normal(size=3), p.rng.normal(size=3), p.rng.normal(size=3)
  s = float(p.rng.normal())
  two = lambda flag, x, y: anp.sum(lax.cond(flag, lambda x, y: anp.sin(x) * y,
                                            lambda x, y: x * x - y, x, y))
  unused = lambda flag, x, y: anp.sum(lax.cond(flag, lambda x, y: x * s, lambda x, y: x * y, x, y))
  closes = lambda flag, x: anp.sum(lax.cond(flag, lambda x: anp.exp(x) * c, lambda x: x * c + c, x))
  pair = lambda flag, x: lax.cond(flag, lambda x: (anp.sum(x * x), anp.sum(anp.sin(x))),
                                  lambda x: (anp.sum(x * c), anp.sum(x)), x)[0]
  three = lambda i, x, y: anp.sum(lax.switch(i, [lambda x, y: x * y, lambda x, y: anp.tanh(x),
                                                 lambda x, y: y * c], x, y))
  with ad.transpose_rules.override(control_flow.cond_p, spy):
    for flag in (True, False):
      seen.clear()
      _switch_grads(p, f"cond(sin(x) * y, x * x - y), pred={flag}", two, (flag, x, y), (1, 2))
      _switch_grads(p, f"cond(x * s, x * y), pred={flag}, y's cotangent in the first branch "
                    "is a symbolic Zero", unused, (flag, x, y), (1, 2))
      _switch_grads(p, f"cond(exp(x) * c, x * c + c), pred={flag}, c a closed-over constant",
                    closes, (flag, x), 1)
      _switch_grads(p, f"a cond with two outputs, the second unused (a Zero cotangent), "
                    f"pred={flag}", pair, (flag, x), 1)
      p.value(f"pred={flag}: which entries the rule returned as None, per call", list(seen))
    for i in range(3):
      _switch_grads(p, f"switch with three branches, index {i}", three, (np.int32(i), x, y), (1, 2))
    f = lambda x: lax.cond(anp.sum(x * c) > 0., lambda x: anp.sin(x) * x, lambda x: x * 3., x)
    p.value("jacrev of a cond (the rule runs under vmap)", p.call("jacrev of a cond", adx.jacrev(f), x))
    jaxpr = p.call("make_jaxpr of grad of a cond", adx.make_jaxpr(adx.grad(two, (1, 2))), True, x, y)
    p.value("grad of a cond, staged: how many cond equations (one forward, one transposed)",
            sum(e.primitive is control_flow.cond_p for e in jaxpr.jaxpr.eqns))
    simple = adx.make_jaxpr(lambda x: lax.cond(True, lambda x: x * 2., lambda x: x * 3., x))(x)
    (branches,) = [e.params["branches"] for e in simple.jaxpr.eqns if e.primitive is control_flow.cond_p]
    ct = p.rng.normal(size=3)
    pair = [("a linear index (raise a ValueError)", _undef((), np.dtype("int32"))),
            ("a known index", np.int32(p.rng.integers(2)))]
    for k, (what, index) in p.shuffled(pair):   # in a seeded order
      p.given(index=what)
      p.value(f"cond_transpose, seeded case #{k}: its cotangents, or the error raised",
              p.call(f"cond_transpose, seeded case #{k}", _or_error, cond_transpose, [ct], index,
                     _undef((3,)), branches=branches))
    p.given()


@contextmanager
def _without_reverse_mode_of_scan():
  """The library's own partial evaluation and transposition of scan refuse to run."""
  def refuse(*args, **kwargs):
    raise NotImplementedError("Exercise 4.9 asks you to build the backward scan yourself: "
                              "the library's reverse mode of scan is not available here")
  old = pe.partial_eval_rules.get(control_flow.scan_p)
  pe.partial_eval_rules[control_flow.scan_p] = refuse
  try:
    with ad.transpose_rules.override(control_flow.scan_p, refuse):
      yield
  finally:
    pe.partial_eval_rules[control_flow.scan_p] = old


@probe("4.9", answers=("scan_vjp",),
       removes={"autodidax.control_flow.loops:_scan_transpose": None,
                "autodidax.control_flow.loops:_scan_partial_eval": None,
                "autodidax.control_flow.loops:_scan_partial_eval_jaxpr": None,
                "autodidax.control_flow.loops:_scan_split": None})
def probe_4_9(p, scan_vjp):
  W = p.rng.normal(size=(3, 3)) / 2
  bodies = [   # (description, f(carry, x) -> new carry, init, xs)
      ("c * x + sin(c)", lambda c, x: c * x + anp.sin(c), p.rng.normal(size=3), p.rng.normal(size=(5, 3))),
      ("tanh(W @ c + x), W closed over", lambda c, x: anp.tanh(W @ c + x), p.rng.normal(size=3),
       p.rng.normal(size=(6, 3))),
      ("a scalar carry, c * cos(x) + x", lambda c, x: c * anp.cos(x) + x, float(p.rng.normal()),
       p.rng.normal(size=7)),
      ("a carry of shape (2,), x of shape (4,)", lambda c, x: c * anp.sum(anp.sin(x)) + anp.cos(c) * anp.sum(x * x),
       p.rng.normal(size=2), p.rng.normal(size=(3, 4))),
      ("one step", lambda c, x: anp.exp(c) * x, p.rng.normal(size=2), p.rng.normal(size=(1, 2))),
  ]
  with _without_reverse_mode_of_scan():
    for what, f, init, xs in bodies:
      with recorded_binds() as binds:
        final, backward = p.call(f"scan_vjp for {what}", scan_vjp, f, init, xs)
      p.value(f"{what}: the final carry, and the scans bound by the forward pass",
              (final, binds.count("scan")))
      ct = p.rng.normal(size=np.shape(final))
      with recorded_binds() as binds:
        cts = p.call(f"backward for {what}", backward, ct)
      p.value(f"{what}: whether backward(ct) returns a pair, the cotangents of init and xs, "
              "and the scans bound by the backward pass (one, reversed)",
              (isinstance(cts, (tuple, list)) and len(cts) == 2, list(cts), binds.count("scan")))
      jitted = adx.jit(lambda init, xs, ct, f=f: scan_vjp(f, init, xs)[1](ct))
      p.value(f"{what}: the same, under jit",
              list(p.call(f"jit of scan_vjp for {what}", jitted, init, xs, ct)))
