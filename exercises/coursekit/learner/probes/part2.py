"""Probes of Part 2's exercises: jaxprs.

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import re

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, lax
from autodidax import jaxpr as jx
from autodidax.core import ShapedArray
from autodidax.jaxpr import Jaxpr, JaxprEqn, Lit, Var, typecheck_jaxpr

from ..checks import recorded_binds
from ..probe import probe


def _type(a) -> str:
  """A type as text, weak types marked: 'f32[2,3]', 'f64[] weak'."""
  if not isinstance(a, ShapedArray):
    return f"not a ShapedArray: {type(a).__name__}"
  return a.str_short() + (" weak" if a.weak_type else "")


def _error(fn, *args):
  """The exception `fn(*args)` raises, or None (NotImplementedError goes through)."""
  try:
    fn(*args)
  except NotImplementedError:
    raise
  except Exception as e:  # noqa: BLE001 (the learner's code)
    return e
  return None


def _type_or_error(fn, *args, **kwargs) -> str:
  """The type `fn` returns, as text, or the error it raises (NotImplementedError goes through)."""
  try:
    out = fn(*args, **kwargs)
  except NotImplementedError:
    raise
  except Exception as e:  # noqa: BLE001 (the learner's code)
    return f"raises {type(e).__name__}"
  return _type(out)


def _sizes(p, n):
  return tuple(int(s) for s in p.rng.integers(1, 6, size=n))


@probe("2.1", answers=("broadcast_abstract_eval",),
       removes={"autodidax.primitives:_broadcast_abstract_eval": "broadcast_abstract_eval"})
def probe_2_1(p, broadcast_abstract_eval):
  rule = broadcast_abstract_eval
  with core.abstract_eval_rules.override(lax.broadcast_p, rule):
    a, b, c = _sizes(p, 3)
    d = a + 1   # a size other than a
    cases = [   # (what, x's type, shape, axes): well typed, then ill typed, run in a seeded order
        ("a new middle axis", ShapedArray((a, b), np.float32), (a, c, b), (1,)),
        ("a weak scalar to a matrix", ShapedArray((), np.float64, True), (b, a), (0, 1)),
        ("an int32 vector, a leading axis", ShapedArray((b,), np.int32), (c, b), (0,)),
        ("a vector, two trailing axes", ShapedArray((a,), np.float64), (a, 1, c), (1, 2)),
        ("a weak matrix, no new axes", ShapedArray((a, b), np.float64, True), (a, b), ()),
        ("a bool vector, a trailing axis", ShapedArray((c,), np.bool_), (c, 7), (1,)),
        ("an f32 vector, axes 0 and 2", ShapedArray((b,), np.float32), (a, b, c), (0, 2)),
        ("the kept dimensions in the wrong order", ShapedArray((a, d), np.float64), (d, a, b), (2,)),
        ("a kept dimension of the wrong size", ShapedArray((a, b), np.float64), (b, d, 4), (2,)),
        ("too few new axes", ShapedArray((a,), np.float64), (a, c), ()),
        ("a kept dimension that doesn't match", ShapedArray((a, b), np.float64), (a, b, d), (0,)),
        ("a size-1 dimension is not stretched", ShapedArray((a, 1), np.float64), (a, c + 1), ()),
        ("a size-1 dimension is not stretched, a new axis", ShapedArray((1, b), np.float64),
         (c + 1, 2, b), (1,)),
        ("a size-1 dimension is not a new axis", ShapedArray((a, 1), np.float64), (a, c + 1), (1,)),
        ("too many new axes", ShapedArray((b,), np.float64), (b, 2), (0, 1)),
    ]
    for k, (what, x, shape, axes) in p.shuffled(cases):
      p.given(case=what, x=_type(x), shape=shape, axes=axes)
      got = p.call(f"broadcast_abstract_eval, case #{k}", _type_or_error, rule, x,
                   shape=shape, axes=axes)
      p.value(f"broadcast_abstract_eval, case #{k}: the result type, or the error raised", got)
    p.given()

    n, m = _sizes(p, 2)
    traced = [   # (what, function, args)
        ("broadcast_to a new leading axis", lambda x: anp.broadcast_to(x, (4, n, m)),
         (p.rng.normal(size=(n, m)).astype(np.float32),)),
        ("broadcast_to of a Python scalar", lambda x: anp.broadcast_to(x, (m, n)),
         (float(p.rng.normal()),)),
        ("an outer sum", lambda x, y: x + y,
         (p.rng.normal(size=(n, 1)).astype(np.float32), p.rng.normal(size=(1, m)).astype(np.float32))),
        ("an int32 broadcast times 2", lambda x: anp.broadcast_to(x, (m, n)) * 2,
         (p.rng.integers(-9, 9, size=n).astype(np.int32),)),
        ("a row times a matrix, summed", lambda x, y: anp.sum(x * y, axis=1),
         (p.rng.normal(size=m), p.rng.normal(size=(n, m)))),
    ]
    for what, f, args in traced:
      closed = p.call(f"make_jaxpr of {what}", lambda: adx.make_jaxpr(f)(*args))
      p.value(f"{what}: the primitives of its jaxpr, and its output types",
              ([e.primitive.name for e in closed.eqns], [_type(a) for a in closed.out_avals]))
      ty = p.call(f"typecheck_jaxpr of the jaxpr of {what}", typecheck_jaxpr, closed.jaxpr)
      p.value(f"{what}: typecheck_jaxpr's output types", [_type(a) for a in ty.out_types])
      p.value(f"{what}: running it", p.call(f"running the jaxpr of {what}", closed, *args))


@probe("2.2", answers=("typecheck_atom",),
       removes={"autodidax.jaxpr:typecheck_atom": "typecheck_atom"})
def probe_2_2(p, typecheck_atom):
  check = typecheck_atom
  avals = [ShapedArray(_sizes(p, 1), np.float32), ShapedArray((), np.float64),
           ShapedArray(_sizes(p, 2), np.int32), ShapedArray(_sizes(p, 1), np.float64, True)]
  vs = [Var(a) for a in avals]
  names = jx.VarNames()
  for _ in range(int(p.rng.integers(0, 60))):   # the variables' names depend on the seed
    names[Var(avals[0])]
  for i in p.rng.permutation(len(vs)):
    names[vs[i]]
  where = f"in equation {int(p.rng.integers(1, 999))}"

  def outcome(env, x, names):
    """x's type as text; or the error raised, and for a variable whether its message
    starts with `where` and the name it gives x (as the printer does, or repr(x))."""
    try:
      return _type(check(env, x, names, where))
    except NotImplementedError:
      raise
    except Exception as e:  # noqa: BLE001 (the learner's code)
      if not isinstance(x, Var):
        return f"raises {type(e).__name__}"
      msg = str(e)
      name = names[x] if names is not None else repr(x)
      named = (re.search(rf"(?<![a-z]){re.escape(name)}(?![a-z])", msg) if names is not None
               else name in msg)
      return (f"raises {type(e).__name__}", msg.startswith(where),
              name if named else "it is not named")

  cases = [(f"bound variable {i}", set(vs), v, names) for i, v in enumerate(vs)]
  cases += [(f"unbound variable {i} in {env_what}", env, v, names)
            for i, v in enumerate(vs)
            for env_what, env in (("an empty env", set()), ("an env of the others", set(vs) - {v}))]
  cases += [("an unbound variable with names=None", set(), vs[0], None)]
  cases += [(f"a literal of {what}", set(), Lit(val), names) for what, val in (
      ("a Python float", float(p.rng.normal())), ("a Python int", int(p.rng.integers(-99, 99))),
      ("a Python bool", bool(p.rng.integers(2))), ("an np.float32", np.float32(p.rng.normal())),
      ("a 0-d f64 array", np.array(p.rng.normal())), ("an np.int32", np.int32(p.rng.integers(9))))]
  cases += [(f"{what}, which is not an atom", set(vs), bad, names) for what, bad in (
      ("a bare float", float(p.rng.normal())), ("an array", p.rng.normal(size=3)),
      ("a string", "a"), ("None", None))]
  for k, (what, env, x, names_) in p.shuffled(cases):   # in a seeded order
    p.given(case=what, where=where)
    p.value(f"typecheck_atom, case #{k}: the type, or the error raised",
            p.call(f"typecheck_atom, case #{k}", outcome, env, x, names_))
  p.given()

  # typecheck_jaxpr, which asks typecheck_atom for every atom: well and ill typed, in a
  # seeded order.
  n, = _sizes(p, 1)
  c = p.rng.normal(size=n)
  jaxprs = []
  for what, f, args in [
      ("a sum of sines times y, plus 1", lambda x, y: anp.sum(anp.sin(x) * y) + 1.,
       (p.rng.normal(size=n).astype(np.float32), np.float32(p.rng.normal()))),
      ("a hoisted constant", lambda x: x * c + c * 2., (p.rng.normal(size=n),)),
      ("an input and a literal as outputs", lambda x: (x * 2., 3., x),
       (p.rng.normal(size=(2, n)).astype(np.float32),))]:
    jaxprs.append((what, p.call(f"make_jaxpr of {what}", lambda: adx.make_jaxpr(f)(*args)).jaxpr))
  f32 = ShapedArray((n,), np.float32)
  x, y, z = Var(f32), Var(f32), Var(f32)
  jaxprs += [
      ("x * 2. for an f32 x (a weak literal)",
       Jaxpr([], [x], [JaxprEqn(lax.mul_p, [x, Lit(2.)], {}, [y])], [y, Lit(1.)])),
      ("a variable used before it is bound", Jaxpr([], [x], [
          JaxprEqn(lax.mul_p, [z, x], {}, [y]), JaxprEqn(lax.sin_p, [x], {}, [z])], [y])),
      ("a variable that is never bound", Jaxpr([], [x], [JaxprEqn(lax.sin_p, [z], {}, [y])], [y])),
      ("an equation that reads its own output",
       Jaxpr([], [x], [JaxprEqn(lax.sin_p, [y], {}, [y])], [y])),
      ("an unbound output", Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y])], [z])),
      ("a bare float as an input", Jaxpr([], [x], [JaxprEqn(lax.mul_p, [x, 2.], {}, [y])], [y])),
      ("a bare float as an output", Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y])], [y, 2.])),
  ]

  def types(jaxpr):
    try:
      ty = typecheck_jaxpr(jaxpr)
    except NotImplementedError:
      raise
    except Exception as e:  # noqa: BLE001 (the learner's code)
      return f"raises {type(e).__name__}"
    return [_type(a) for a in ty.in_types], [_type(a) for a in ty.out_types]

  for k, (what, jaxpr) in p.shuffled(jaxprs):
    p.given(jaxpr=what)
    p.value(f"typecheck_jaxpr, case #{k}: the input and output types, or the error raised",
            p.call(f"typecheck_jaxpr, case #{k}", types, jaxpr))
  p.given()


@probe("2.3", answers=("eval_jaxpr",),
       removes={"autodidax.jaxpr:eval_jaxpr": "eval_jaxpr", "autodidax.jaxpr:jaxpr_as_fun": None})
def probe_2_3(p, eval_jaxpr):
  c = p.rng.normal(size=3)
  m = p.rng.normal(size=(2, 3))
  cases = [   # (what, function, x)
      ("sin(x) * 3 + x", lambda x: (anp.sin(x) * 3. + x,), p.rng.normal(size=3)),
      ("a hoisted constant", lambda x: (x * c + c * 2.,), p.rng.normal(size=3)),
      ("several outputs, one of them the input",
       lambda x: (anp.sum(anp.exp(x) * m, axis=0), x, anp.tanh(x)), p.rng.normal(size=3)),
      ("a broadcast and a reshape", lambda x: (anp.reshape(x + m, (3, 2)) * 2.,), p.rng.normal(size=3)),
      ("a scalar function", lambda x: (anp.log(x * x + 1.) / x,), float(p.rng.uniform(0.5, 2.))),
  ]
  for what, f, x in cases:
    closed = adx.make_jaxpr(f)(x)
    with recorded_binds() as binds:
      outs = p.call(f"eval_jaxpr of {what}", eval_jaxpr, closed.jaxpr, closed.consts, x)
    p.value(f"eval_jaxpr of {what}: the outputs, and the primitives bound in order",
            (outs, list(binds)))
    t = p.rng.normal(size=np.shape(x))
    run = lambda x, closed=closed: eval_jaxpr(closed.jaxpr, closed.consts, x)
    y, y_dot = p.call(f"jvp of eval_jaxpr of {what}", adx.jvp, run, (x,), (t,))
    p.value(f"jvp of eval_jaxpr of {what}: primal outputs", list(y))
    p.value(f"jvp of eval_jaxpr of {what}: tangent outputs", list(y_dot))
    xs = np.stack([np.asarray(x) * s for s in p.rng.normal(size=3)])
    p.value(f"vmap of eval_jaxpr of {what}",
            list(p.call(f"vmap of eval_jaxpr of {what}", adx.vmap(run), xs)))
  k = float(p.rng.normal())
  for what, f, args in [("constant outputs", lambda x: (c, 4., x), (k,)),
                        ("no inputs", lambda: (lax.mul(k, 3.),), ()),
                        ("an output used twice", lambda x: (anp.sin(x), anp.sin(x) * x), (c,))]:
    closed = adx.make_jaxpr(f)(*args)
    p.value(f"eval_jaxpr with {what}",
            p.call(f"eval_jaxpr with {what}", eval_jaxpr, closed.jaxpr, closed.consts, *args))


@probe("2.4", answers=("get_const",),
       removes={"autodidax.partial_eval:JaxprBuilder.get_const": "get_const"})
def probe_2_4(p, get_const):
  n = int(p.rng.integers(2, 6))
  c, d = p.rng.normal(size=n), p.rng.normal(size=n)
  s, t = float(np.round(p.rng.normal(), 3)), np.float64(np.round(p.rng.normal(), 3))
  x = p.rng.normal(size=n)

  def traced(what, f, *args, which=""):
    """Record the jaxpr of `f` (with whether every atom is a Var or a Lit, and how many
    constvars and consts it has), then its result on `args` with `which(closed)`."""
    closed = p.call(f"make_jaxpr of {what}", lambda: adx.make_jaxpr(f)(*args))
    p.value(f"{what}: the jaxpr; whether every input and output is a Var or a Lit; "
            "the number of constvars and of consts",
            (str(closed), all(isinstance(a, (Var, Lit)) for e in closed.eqns for a in e.inputs)
             and all(isinstance(a, (Var, Lit)) for a in closed.jaxpr.outvars),
             (len(closed.jaxpr.constvars), len(closed.consts))))
    p.call(f"typecheck_jaxpr of the jaxpr of {what}", typecheck_jaxpr, closed.jaxpr)
    out = p.call(f"running the jaxpr of {what}", closed, *args)
    if which:
      p.value(f"{what}: running it, and {which}", (out, identity[which](closed)))
    else:
      p.value(f"{what}: running it", out)

  identity = {
      "whether the const is c itself": lambda closed: [k is c for k in closed.consts],
      "whether the consts are d then c":
          lambda closed: [k is d for k in closed.consts] + [k is c for k in closed.consts],
      "whether the first output is the input variable":
          lambda closed: closed.jaxpr.outvars[0] is closed.jaxpr.invars[0]}
  traced("(x * c + c) * s", lambda x: (x * c + c) * s, x, which="whether the const is c itself")
  traced("(x * t + np.array(2.)) * d - c", lambda x: (x * t + np.array(2.)) * d - c, x,
         which="whether the consts are d then c")
  traced("a function of no inputs", lambda: lax.mul(s, 3.))
  traced("constant outputs", lambda x: (x, c, s), float(p.rng.normal()),
         which="whether the first output is the input variable")
  traced("an int array constant, a comparison and a bool scalar",
         lambda x: lax.convert_element_type(lax.greater(x * np.arange(n), 0.5), np.float64)
         * np.bool_(True), x)
  closed = p.call("make_jaxpr of a jvp inside", lambda: adx.make_jaxpr(
      lambda y: adx.jvp(lambda y: anp.sin(y) * c, (y,), (s,)))(0.3))
  p.value("a jvp inside: the jaxpr", str(closed))
  p.value("a jvp inside: running it", p.call("running the jaxpr of a jvp", closed, float(x[0])))


@probe("2.5", answers=("nth_name", "pp_eqn"),
       removes={"autodidax.jaxpr:_nth_name": "nth_name", "autodidax.jaxpr:pp_eqn": "pp_eqn"})
def probe_2_5(p, nth_name, pp_eqn):
  edges = [0, 26, 52, 676, 702, 17576]   # where the names get a letter longer, or roll over
  for i, edge in enumerate(edges):
    ns = [max(0, edge + int(d)) for d in p.rng.integers(-2, 3, size=3)]
    p.given(n=ns)
    p.value(f"nth_name(n) for three n near edge #{i}: (n, name)",
            p.call(f"nth_name near edge #{i}", lambda: [(n, nth_name(n)) for n in ns]))
  some = [int(n) for n in p.rng.choice(800, size=100, replace=False)]
  p.given()
  p.value("nth_name(n) for 100 n < 800: (n, name)",
          p.call("nth_name(n) for n < 800", lambda: [(n, nth_name(n)) for n in some]))
  for i, n in enumerate(p.rng.integers(800, 10**6, size=6)):
    p.given(n=int(n))
    p.value(f"nth_name of a large n (#{i}): (n, name)",
            (int(n), p.call(f"nth_name of a large n (#{i})", nth_name, int(n))))
  p.given()

  a, b, d = (int(n) for n in p.rng.integers(2, 9, size=3))
  c = p.rng.normal(size=d)
  k = float(np.round(p.rng.normal(), 3))
  fs = [   # (what, function, args)
      ("func1 of the chapter", lambda a, b: anp.sum(a + anp.sin(b) * 3.), (np.zeros(a, np.float32),) * 2),
      ("a hoisted constant", lambda x: x * c + c * k, (np.ones(d),)),
      ("broadcast and reshape", lambda x, y: anp.reshape(x + y, (a * b,)) * 2,
       (np.ones(a, np.int32), np.ones((b, 1), np.int32))),
      ("a comparison and a conversion",
       lambda x: lax.convert_element_type(lax.greater(x, k), np.float32), (np.ones((b, a)),)),
      ("a transpose and a max", lambda x: anp.max(anp.transpose(x), axis=(0, 1)), (np.ones((a, b, d)),)),
      ("no inputs", lambda: lax.mul(k, 3), ()),
      ("a bool literal", lambda x: lax.max(x, True), (np.ones(b, bool),)),
  ]
  for what, f, args in fs:
    closed = adx.make_jaxpr(f)(*args)
    for i, eqn in enumerate(closed.eqns):
      p.value(f"{what}: pp_eqn of equation {i}, with fresh names",
              p.call(f"{what}: pp_eqn of equation {i}", pp_eqn, eqn, jx.VarNames()))
    p.value(f"{what}: the printed jaxpr", p.call(f"printing the jaxpr of {what}", str, closed))
  for what, n in (("a short", int(p.rng.integers(2, 6))), ("a long", int(p.rng.integers(27, 40)))):
    def chain(x):
      for _ in range(n):
        x = anp.sin(x)
      return x
    p.given(n=n)
    p.value(f"{what} chain of n sines, printed",
            p.call(f"printing {what} chain of n sines", lambda: str(adx.make_jaxpr(chain)(k))))


@probe("2.6", answers=("fixed_jaxpr",))
def probe_2_6(p, fixed_jaxpr):
  jaxpr = p.call("fixed_jaxpr()", fixed_jaxpr)
  p.value("fixed_jaxpr() returns a Jaxpr", isinstance(jaxpr, Jaxpr))
  if not isinstance(jaxpr, Jaxpr):
    return
  again = p.call("fixed_jaxpr() a second time", fixed_jaxpr)
  p.value("each call builds a new jaxpr with fresh variables",
          again is not jaxpr and not set(getattr(again, "invars", [])) & set(jaxpr.invars))
  ty = p.call("typecheck_jaxpr of your jaxpr", typecheck_jaxpr, jaxpr)
  p.value("its input types", [_type(a) for a in ty.in_types])
  p.value("its output types", [_type(a) for a in ty.out_types])
  p.value("its number of constvars", len(jaxpr.constvars))
  p.value("the primitives of its equations, in order", [e.primitive.name for e in jaxpr.eqns])
  for i in range(4):
    x, y = p.rng.normal(size=3).astype(np.float32), np.float32(p.rng.normal())
    p.given(x=x, y=y)
    out = p.call("eval_jaxpr of your jaxpr", jx.eval_jaxpr, jaxpr, [], x, y)
    p.value(f"running it on inputs #{i}", out, rtol=1e-5, atol=1e-6)
