"""Probes of the exercises of "Custom derivatives": the rules of custom_jvp_call
and custom_vjp_call, and custom rules put to use.

Each probe runs the learner's answer (installed as the rule it replaces, or
called as a function) on inputs from `p.rng` and records what comes out; the
reference solution's records at the same seed decide. The custom functions
below have rules that are deliberately not their bodies' derivatives, so
that a rule that differentiates the body instead of running the user's rule
gives other values.
"""
from functools import partial

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, batching, lax
from autodidax import custom_derivatives as cd
from autodidax.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p

from ..probe import Stop, probe


# --- Custom functions with rules that show whether they ran ---------------------------------

def _jvp_zoo(seen):
  """custom_jvp functions; `seen` collects what the symbolic-zeros rule got."""
  @adx.custom_jvp
  def sinmul(x, y):
    return anp.sin(x) * y

  @sinmul.defjvp
  def sinmul_jvp(primals, tangents):   # 1.5 times the true x part
    (x, y), (xd, yd) = primals, tangents
    return sinmul(x, y), 1.5 * anp.cos(x) * xd * y + anp.sin(x) * yd

  @adx.custom_jvp
  def pair(d):   # a dict in, a tuple out
    return d["a"] * d["b"], anp.tanh(d["a"])

  @pair.defjvp
  def pair_jvp(primals, tangents):
    (d,), (t,) = primals, tangents
    out = pair(d)
    return out, (t["a"] * d["b"] + 2. * d["a"] * t["b"], 0.5 * (1. - out[1] ** 2) * t["a"])

  @partial(adx.custom_jvp, nondiff_argnums=(1,))
  def scale(x, k):   # k, if traced, is a closed-over operand
    return x * anp.sin(k)

  @scale.defjvp
  def scale_jvp(k, primals, tangents):
    return scale(primals[0], k), 3. * tangents[0] * anp.sin(k)

  @adx.custom_jvp
  def weighted(x, w):
    return anp.sum(w * anp.tanh(x))

  def weighted_jvp(primals, tangents):
    (x, w), (xd, wd) = primals, tangents
    seen.append("".join("z" if type(t) is cd.SymbolicZero else "a" for t in tangents))
    t = 0.
    if type(xd) is not cd.SymbolicZero:
      t = t + anp.sum(w * (1. - anp.tanh(x) ** 2) * xd)
    if type(wd) is not cd.SymbolicZero:
      t = t + 0.5 * anp.sum(anp.tanh(x) * wd)
    return weighted(x, w), t
  weighted.defjvp(weighted_jvp, symbolic_zeros=True)

  @adx.custom_jvp
  def flat(x):   # a rule whose output tangent is a symbolic zero
    return anp.floor(x) + x

  flat.defjvp(lambda p, t: (flat(*p), cd.SymbolicZero(adx.core.get_aval(p[0]))))
  return dict(sinmul=sinmul, pair=lambda x, y: sum(pair({"a": x, "b": y})),
              scale=scale, weighted=weighted, flat=flat)


def _vjp_zoo(flags):
  @adx.custom_vjp
  def vsinmul(x, y):
    return anp.sin(x) * y

  def vsinmul_fwd(x, y):
    return vsinmul(x, y), (anp.cos(x), anp.sin(x), y)

  def vsinmul_bwd(res, g):   # half the true x part
    c, s, y = res
    return 0.5 * c * y * g, s * g
  vsinmul.defvjp(vsinmul_fwd, vsinmul_bwd)

  @adx.custom_vjp
  def tree(d, y):
    return d["a"] * d["b"] + anp.tanh(y)

  def tree_fwd(d, y):
    return tree(d, y), (d, anp.tanh(y))

  def tree_bwd(res, g):
    d, t = res
    return {"a": 2. * g * d["b"], "b": None}, (1. - t * t) * g
  tree.defvjp(tree_fwd, tree_bwd)

  @adx.custom_vjp
  def mul(x, y):
    return x * y

  def mul_fwd(x, y):
    flags.append((x.perturbed, y.perturbed))
    x, y = cd.custom_vjp_primal_tree_values((x, y))
    return x * y, (x, y)
  mul.defvjp(mul_fwd, lambda r, g: (3. * g * r[1], g * r[0]), symbolic_zeros=True)
  return dict(vsinmul=vsinmul, tree=lambda x, y: tree({"a": x, "b": 2. * x}, y), mul=mul)


def _scalarize(f):
  return lambda x, y: anp.sum(f(x, y))


def _in_order(p, cases):
  """The cases, (what, thing), in an order drawn from the seed (named for the records
  that follow): a record of them all is then not the same at every seed."""
  cases = [cases[int(i)] for i in p.rng.permutation(len(cases))]
  p.given(cases=[what for what, _ in cases])
  return cases


def _outcomes(p, label, cases):
  """Record, for each case (what, fn) in an order drawn from the seed, whether `fn()`
  raises: "raises TypeError", say, or "no error"."""
  got = []
  for _, fn in _in_order(p, cases):
    try:
      fn()
      got.append("no error")
    except NotImplementedError as e:
      p.error(label, e)
      raise Stop from None
    except Exception as e:  # noqa: BLE001 (which error is the record)
      got.append(f"raises {type(e).__name__}")
  p.value(label, got)
  p.given()


# --- D.1 -----------------------------------------------------------------------------------

@probe("D.1", answers=("custom_jvp_call_jvp",),
       removes={"autodidax.custom_derivatives:_custom_jvp_call_jvp": "custom_jvp_call_jvp"})
def probe_D_1(p, custom_jvp_call_jvp):
  seen = []
  z = _jvp_zoo(seen)
  x, y, tx, ty = (p.rng.normal(size=3) for _ in range(4))
  with ad.jvp_rules.override(custom_jvp_call_p, custom_jvp_call_jvp):
    for name in ("sinmul", "pair", "weighted"):
      f = z[name]
      out, t = p.call(f"jvp of {name}", adx.jvp, f, (x, y), (tx, ty))
      p.value(f"jvp of {name}: the primal output", out)
      p.value(f"jvp of {name}: the output tangent", t)
      p.value(f"grad of {name} in both arguments",
              p.call(f"grad of {name}", adx.grad(_scalarize(f), (0, 1)), x, y))
    seen.clear()
    grads = [p.call(f"grad of weighted in {what}", adx.grad(z["weighted"], i), x, y)
             for what, i in _in_order(p, [("x", 0), ("y", 1), ("x and y", (0, 1))])]
    p.value("grad of weighted in x only, in y only, and in both", grads)
    p.value("what weighted's rule (symbolic_zeros=True) got for x and y, under each grad "
            "(a: an array, z: a SymbolicZero)", list(seen))
    p.given()
    scale = z["scale"]
    k = float(p.rng.uniform(0.5, 1.5))
    p.value("grad of scale(x, k) with k traced by jit (a closed-over operand)",
            p.call("jit(grad) of scale", adx.jit(adx.grad(lambda x, k: anp.sum(scale(x, k)))),
                   x, k))
    p.value("jvp of x * flat(x), flat's rule giving a SymbolicZero tangent",
            p.call("jvp of flat", adx.jvp, lambda x: x * z["flat"](x), (x,), (tx,))[1])
    p.value("second derivative: grad of grad of sinmul",
            p.call("grad of grad of sinmul", adx.grad(adx.grad(z["sinmul"])),
                   float(x[0]), float(y[0])))
    p.value("hessian of sinmul in x", p.call("hessian of sinmul", adx.hessian(
        lambda x: anp.sum(z["sinmul"](x, y))), x))
    p.value("grad of vmap of sinmul", p.call("grad of vmap", adx.grad(
        lambda x: anp.sum(adx.vmap(z["sinmul"], (0, None))(anp.stack([x, 2. * x]), y))), x))
    c = float(p.rng.uniform(0.5, 2.))
    closing = lambda c, x: z["sinmul"](x, 1.) * 0. + _closed(c)(x)
    _outcomes(p, "grad in c, which a custom_jvp function closes over, and in x: what each raises",
              [("grad in c", lambda: adx.grad(lambda c: anp.sum(closing(c, x)))(c)),
               ("grad in x", lambda: adx.grad(lambda x: anp.sum(closing(c, x)))(x))])


def _closed(c):
  @adx.custom_jvp
  def f(x):
    return c * anp.sin(x)
  f.defjvp(lambda p, t: (f(*p), c * anp.cos(p[0]) * t[0]))
  return f


# --- D.2 -----------------------------------------------------------------------------------

@probe("D.2", answers=("custom_jvp_call_vmap",),
       removes={"autodidax.custom_derivatives:_custom_jvp_call_vmap": "custom_jvp_call_vmap"})
def probe_D_2(p, custom_jvp_call_vmap):
  z = _jvp_zoo([])
  B = int(p.rng.integers(2, 6))   # the batch size: the shapes below come from the seed
  xs, ys, ts = (p.rng.normal(size=(B, 2)) for _ in range(3))
  y = p.rng.normal(size=2)

  @adx.custom_jvp
  def two(x, y):   # two outputs: the second doesn't depend on x
    return anp.sin(x) * y, anp.cos(y)
  two.defjvp(lambda p_, t: (two(*p_), (anp.cos(p_[0]) * t[0] * p_[1] * 2.,
                                       -anp.sin(p_[1]) * t[1])))
  with batching.vmap_rules.override(custom_jvp_call_p, custom_jvp_call_vmap):
    for name in ("sinmul", "pair", "weighted"):
      f = z[name]
      p.value(f"vmap of {name}", p.call(f"vmap of {name}", adx.vmap(f), xs, ys))
      p.value(f"vmap of {name}, y not mapped",
              p.call(f"vmap of {name}, in_axes=(0, None)", adx.vmap(f, (0, None)), xs, y))
      p.value(f"vmap of {name}, x batched along its axis 1", p.call(
          f"vmap of {name}, in_axes=(1, 0)", adx.vmap(f, (1, 0)), xs.T, ys))
      out, t = p.call(f"jvp of vmap of {name}: the rule, batched",
                      adx.jvp, adx.vmap(f), (xs, ys), (ts, np.ones_like(ys)))
      p.value(f"jvp of vmap of {name}: the output tangent", t)
      p.value(f"grad of vmap of {name} (y not mapped)", p.call(
          f"grad of vmap of {name}", adx.grad(lambda y: anp.sum(adx.vmap(f, (0, None))(xs, y))),
          y))
    p.value("vmap of a function with an output that isn't batched, out_axes=(0, None)",
            p.call("vmap with out_axes=(0, None)",
                   adx.vmap(two, (0, None), out_axes=(0, None)), xs, y))
    p.value("jvp of vmap with an output that isn't batched", p.call(
        "jvp of vmap of two", adx.jvp, adx.vmap(two, (0, None)), (xs, y), (ts, y))[1])
    k = p.rng.uniform(0.5, 1.5, size=B)
    p.value("vmap over k, which scale closes over", p.call(
        "vmap of grad of scale over k", adx.vmap(adx.grad(lambda k, x: anp.sum(
            adx.jit(z["scale"])(x, k)), 1), (0, None)), k, y))
    p.value("jit of vmap of jvp", p.call("jit of vmap of jvp", adx.jit(adx.vmap(
        lambda x, t: adx.jvp(lambda x: z["sinmul"](x, y), (x,), (t,))[1])), xs, ts))
    pads, vals = p.rng.normal(size=(B, 3)), p.rng.normal(size=B)
    p.value("jvp of vmap of a pad whose padding value is batched (batching the body "
            "adds a const)", p.call("jvp of vmap of padded", adx.jvp, adx.vmap(_padded),
                                    (pads, vals), (p.rng.normal(size=(B, 3)),
                                                   p.rng.normal(size=B)))[1])
    args = {(0, 0): (xs, ys), (0, None): (xs, y), (None, 0): (y, ys), (1, 0): (xs.T, ys)}
    in_axes = list(args)[int(p.rng.integers(len(args)))]
    p.given(in_axes=in_axes)
    closed = p.call("make_jaxpr of vmap of sinmul",
                    adx.make_jaxpr(adx.vmap(z["sinmul"], in_axes)), *args[in_axes])
    p.value("make_jaxpr of vmap of sinmul: the equations, and their outputs' types",
            [f"{e.primitive.name}: {', '.join(v.aval.str_short() for v in e.out_binders)}"
             for e in closed.eqns])
    p.given()


@adx.custom_jvp
def _padded(x, v):
  return lax.pad(x, v, [(1, 1, 0)])


_padded.defjvp(lambda p, t: (_padded(*p), 2. * lax.pad(t[0], t[1], [(1, 1, 0)])))


# --- D.3 -----------------------------------------------------------------------------------

@probe("D.3", answers=("custom_vjp_call_jvp",),
       removes={"autodidax.custom_derivatives:_custom_vjp_call_jvp": "custom_vjp_call_jvp"})
def probe_D_3(p, custom_vjp_call_jvp):
  flags = []
  z = _vjp_zoo(flags)
  x, y, ct = (p.rng.normal(size=3) for _ in range(3))
  with ad.jvp_rules.override(custom_vjp_call_p, custom_vjp_call_jvp):
    for name in ("vsinmul", "tree", "mul"):
      f = z[name]
      p.value(f"grad of {name} in both arguments",
              p.call(f"grad of {name}", adx.grad(_scalarize(f), (0, 1)), x, y))
      out, f_vjp = p.call(f"vjp of {name}", adx.vjp, f, x, y)
      p.value(f"vjp of {name}: the output", out)
      p.value(f"vjp of {name}: the cotangents", p.call(f"vjp of {name}, backward", f_vjp, ct))
    flags.clear()
    order = _in_order(p, [("x", 0), ("y", 1)])
    p.value("grad of mul in x only and in y only", [p.call(
        f"grad of mul in {what}", adx.grad(_scalarize(z["mul"]), i), x, y) for what, i in order])
    p.value("the perturbed flags mul's fwd (symbolic_zeros=True) got, under each grad",
            [list(f) for f in flags])
    only = [lambda x: z["vsinmul"](x, y), lambda y: z["vsinmul"](x, y)]
    lins = [p.call(f"linearize of vsinmul in {what}", adx.linearize, only[i], (x, y)[i])[1].jaxpr
            for what, i in order]
    p.value("linearize of vsinmul in x only and in y only: custom_lin's in_zeros, "
            "and its operands", [[[e.params["in_zeros"], len(e.inputs)] for e in lin.eqns
                                  if e.primitive is cd.custom_lin_p] for lin in lins])
    p.given()
    k = int(p.rng.integers(1, 5))
    p.given(saved=k)
    lin = p.call("linearize of a function that saves k values", adx.linearize, _saver(k),
                 x, y)[1].jaxpr
    p.value("linearize of a custom_vjp function whose fwd saves k values and y: "
            "custom_lin equations, and their num_res",
            [e.params["num_res"] for e in lin.eqns if e.primitive is cd.custom_lin_p])
    p.given()
    p.value("vmap of grad of vsinmul", p.call("vmap of grad", adx.vmap(
        adx.grad(_scalarize(z["vsinmul"]))), np.stack([x, y]), np.stack([y, x])))
    p.value("grad of vmap of tree", p.call("grad of vmap", adx.grad(lambda x: anp.sum(
        adx.vmap(z["tree"], (0, None))(anp.stack([x, -x]), y))), x))
    p.value("grad of jit of vsinmul", p.call("grad of jit", adx.grad(adx.jit(
        _scalarize(z["vsinmul"])), (0, 1)), x, y))
    p.value("grad through a scan of vsinmul", p.call("grad through scan", adx.grad(
        lambda x: lax.scan(lambda c, yi: (z["vsinmul"](c, yi), None), x, np.stack([y, y]))[0]
        .sum()), x))
    c = float(p.rng.uniform(0.5, 2.))
    closing = lambda c, x: _closed_vjp(c)(x)
    _outcomes(p, "grad in c, which a custom_vjp function closes over, grad in x, and jvp "
              "(forward mode over a custom_vjp function): what each raises",
              [("grad in c", lambda: adx.grad(lambda c: anp.sum(closing(c, x)))(c)),
               ("grad in x", lambda: adx.grad(lambda x: anp.sum(closing(c, x)))(x)),
               ("jvp", lambda: adx.jvp(z["vsinmul"], (x, y), (ct, ct)))])


def _saver(k):
  """A custom_vjp function whose fwd saves k values and y."""
  @adx.custom_vjp
  def f(x, y):
    return anp.sin(x) * y

  def fwd(x, y):
    return f(x, y), (*(anp.cos(x) * (i + 1) for i in range(k)), y)

  def bwd(res, g):
    *cs, y = res
    return sum(cs) * y * g, g
  f.defvjp(fwd, bwd)
  return f


def _closed_vjp(c):
  @adx.custom_vjp
  def f(x):
    return c * anp.sin(x)
  f.defvjp(lambda x: (f(x), anp.cos(x)), lambda r, g: (c * r * g,))
  return f


# --- D.4 -----------------------------------------------------------------------------------

@probe("D.4", answers=("clip_norm",))
def probe_D_4(p, clip_norm):
  x = p.rng.normal(size=4)
  p.value("the output is the input", p.call("clip_norm(x, 1.)", clip_norm, x, 1.))
  u = p.rng.normal(size=4)   # a second path to x, so that a zero cotangent's grad isn't 0
  for what, scale in (("a long cotangent", 10.), ("a short cotangent", 0.1),
                      ("a zero cotangent", 0.)):
    w = scale * p.rng.normal(size=4)
    for max_norm in (0.5, 2.):
      p.value(f"grad of sum(w * clip_norm(x, {max_norm})) + sum(u * x), {what}",
              p.call(f"grad, {what}", adx.grad(
                  lambda x: anp.sum(w * clip_norm(x, max_norm)) + anp.sum(u * x)), x))
  m = p.rng.normal(size=(2, 3)) * 5.
  p.value("vjp of clip_norm(m, 1.) for a matrix (its norm counts every element)",
          p.call("vjp for a matrix", lambda: adx.vjp(lambda m: clip_norm(m, 1.), m)[1](m)))
  ws = p.rng.normal(size=(3, 4)) * np.array([[0.1], [1.], [10.]])
  per_example = lambda x, w: adx.grad(lambda x: anp.sum(w * clip_norm(x, 1.)))(x)
  p.value("vmap over examples: each cotangent is clipped on its own",
          p.call("vmap of grad", adx.vmap(per_example, (None, 0)), x, ws))
  p.value("under jit", p.call("jit of grad", adx.jit(adx.grad(
      lambda x, w: anp.sum(w * clip_norm(x, 1.)))), x, ws[2]))
  _outcomes(p, "jvp of clip_norm (a custom_vjp function: forward mode fails), and vjp: "
            "what each raises", [("jvp", lambda: adx.jvp(lambda x: clip_norm(x, 1.), (x,), (x,))),
                                 ("vjp", lambda: adx.vjp(lambda x: clip_norm(x, 1.), x))])


# --- D.5 -----------------------------------------------------------------------------------

@probe("D.5", answers=("soft_threshold",))
def probe_D_5(p, soft_threshold):
  x = p.rng.normal(size=6) * 2.
  lam = p.rng.uniform(0.2, 1.5, size=6)
  p.value("soft_threshold(x, lam)", p.call("soft_threshold(x, lam)", soft_threshold, x, lam))
  w = p.rng.normal(size=6)
  loss = lambda x, lam: anp.sum(w * soft_threshold(x, lam))
  p.value("grad in x and lam", p.call("grad in x and lam", adx.grad(loss, (0, 1)), x, lam))
  p.value("grad in lam, under jit", p.call("jit of grad in lam", adx.jit(adx.grad(loss, 1)),
                                           x, lam))
  lams = p.rng.uniform(0.2, 1.5, size=(3, 6))
  p.value("vmap over lam of the grad in lam", p.call(
      "vmap of grad", adx.vmap(adx.grad(loss, 1), (None, 0)), x, lams))
  p.value("jit of soft_threshold", p.call("jit", adx.jit(soft_threshold), x, lam))
  _outcomes(p, "jvp of soft_threshold (a custom_vjp function: forward mode fails), and "
            "vjp: what each raises", [("jvp", lambda: adx.jvp(soft_threshold, (x, lam), (x, lam))),
                                      ("vjp", lambda: adx.vjp(soft_threshold, x, lam))])


# --- D.6 -----------------------------------------------------------------------------------

def _equilibrium(bwd):
  """The chapter's solver, with the learner's bwd."""
  @adx.custom_vjp
  def equilibrium(W, b):
    step = lambda x: anp.tanh(W @ x + b)
    moving = lambda c: anp.max(anp.abs(c[0] - c[1])) > 1e-13
    x0 = anp.zeros_like(b)
    return lax.while_loop(moving, lambda c: (step(c[0]), c[0]), (step(x0), x0))[0]

  def fwd(W, b):
    x = equilibrium(W, b)
    return x, (W, x)
  equilibrium.defvjp(fwd, bwd)
  return equilibrium


@probe("D.6", answers=("equilibrium_bwd",))
def probe_D_6(p, equilibrium_bwd):
  eq = _equilibrium(equilibrium_bwd)
  n = 4
  W = p.rng.normal(size=(n, n)) * 0.3 / np.sqrt(n)
  b = p.rng.normal(size=n)
  c = p.rng.normal(size=n)
  loss = lambda W, b: anp.sum(c * eq(W, b))
  gW, gb = p.call("grad of sum(c * equilibrium(W, b))", adx.grad(loss, (0, 1)), W, b)
  p.value("grad in W", gW, rtol=1e-6, atol=1e-9)
  p.value("grad in b", gb, rtol=1e-6, atol=1e-9)
  x_bar = p.rng.normal(size=n)
  p.value("vjp for another cotangent", p.call(
      "vjp", lambda: adx.vjp(eq, W, b)[1](x_bar)), rtol=1e-6, atol=1e-9)
  p.value("grad under jit", p.call("jit of grad", adx.jit(adx.grad(loss, 1)), W, b),
          rtol=1e-6, atol=1e-9)
  bs = p.rng.normal(size=(3, n))
  p.value("vmap over b of the grad in b", p.call(
      "vmap of grad", adx.vmap(adx.grad(loss, 1), (None, 0)), W, bs), rtol=1e-6, atol=1e-9)
  W2 = p.rng.normal(size=(2, 2)) * 0.2
  b2 = p.rng.normal(size=2)
  p.value("a 2x2 system: grad in b", p.call("grad, 2x2", adx.grad(
      lambda b: anp.sum(eq(W2, b) ** 2)), b2), rtol=1e-6, atol=1e-9)
