"""custom_jvp and custom_vjp against jax.custom_jvp and jax.custom_vjp.

The same custom functions are defined twice, with autodidax and with JAX, by
one factory (`zoo`). Their rules are deliberately *not* the derivatives of
their bodies (a "ghost" factor here and there), so that agreeing with JAX
shows that the rule ran, not autodiff of the body. Random programs chain them
inside cond, switch, scan, fori_loop, while_loop and jit, and run under jit,
vmap, grad, jvp, linearize, vjp, hessians and their compositions: where JAX
raises, we raise the same kind of error; elsewhere the values agree. Then
unit tests: jaxprs printed as JAX's, the errors, nondiff_argnums, closures,
symbolic zeros, pictures, FLOPS and the rule tables.
"""
from functools import partial
from types import SimpleNamespace

import jax
import jax.custom_derivatives as jcd
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import stackless as sl
from autodidax import ad, batching, core, custom_derivatives as cd, lax, lowering, viz
from autodidax import partial_eval as pe
from autodidax.custom_derivatives import (ClosedOverTracerError, NondiffTracerError,
                                          custom_jvp_call_p, custom_lin_p,
                                          custom_vjp_call_p)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

OURS = SimpleNamespace(X=adx, np=anp, lax=lax, cd=cd, name="ours")
THEIRS = SimpleNamespace(X=jax, np=jnp, lax=jax.lax, cd=jcd, name="jax")


def _py_scan(f, init, xs):
  carry, ys = init, []
  for i in range(xs.shape[0]):
    carry, y = f(carry, xs[i])
    ys.append(y)
  return carry, jnp.stack(ys)


def _py_fori(lower, upper, body, init):
  for i in range(lower, upper):
    init = body(i, init)
  return init


# JAX with scan and fori_loop unrolled in Python: the reference for second
# derivatives in reverse mode through a loop. There JAX's own grad(grad(f))
# differentiates a custom_jvp function's body instead of its rule at one
# step; with a rule that is the body's derivative nothing shows (see
# test_second_reverse_derivative_through_scan), with our ghost rules it does.
THEIRS_UNROLLED = SimpleNamespace(
    X=jax, np=jnp, cd=jcd, name="jax",
    lax=SimpleNamespace(cond=jax.lax.cond, switch=jax.lax.switch,
                        while_loop=jax.lax.while_loop, scan=_py_scan,
                        fori_loop=_py_fori))


# --- The zoo: custom functions, defined once for either library ----------------------------

def zoo(bk):
  """{name: f(x, y) -> array like x}, each built on one custom function."""
  X, np_, SZ = bk.X, bk.np, bk.cd.SymbolicZero
  z = {}

  @X.custom_jvp
  def sinmul(x, y):
    return np_.sin(x) * y

  @sinmul.defjvp
  def sinmul_jvp(primals, tangents):   # the x part is 1.5 times the true one
    (x, y), (xd, yd) = primals, tangents
    return sinmul(x, y), 1.5 * np_.cos(x) * xd * y + np_.sin(x) * yd
  z["jvp"] = sinmul

  @X.custom_jvp
  def tree(d):
    return d["a"] * d["b"], np_.tanh(d["a"])

  @tree.defjvp
  def tree_jvp(primals, tangents):
    (d,), (t,) = primals, tangents
    out = tree(d)
    return out, (t["a"] * d["b"] + 2. * d["a"] * t["b"],
                 (1. - out[1] * out[1]) * t["a"] * 0.5)
  z["jvp_pytree"] = lambda x, y: (lambda o: o[0] + o[1])(tree({"a": x, "b": y}))

  @partial(X.custom_jvp, nondiff_argnums=(0,))
  def apply(fn, x):
    return fn(x)

  @apply.defjvp
  def apply_jvp(fn, primals, tangents):   # a slope that is not fn's
    (x,), (t,) = primals, tangents
    y = apply(fn, x)
    return y, (1. + y * y) * t
  z["jvp_nondiff"] = lambda x, y: apply(np_.sin, x) * y

  @X.custom_jvp
  def expmul(x, y):
    return x * np_.exp(np_.tanh(y))

  def expmul_jvp(primals, tangents):   # builds only the parts that aren't zero
    (x, y), (xd, yd) = primals, tangents
    out = expmul(x, y)
    parts = []
    if type(xd) is not SZ:
      parts.append(np_.exp(np_.tanh(y)) * xd)
    if type(yd) is not SZ:
      parts.append(0.75 * out * (1. - np_.tanh(y) ** 2) * yd)
    return out, parts[0] if len(parts) == 1 else parts[0] + parts[1]
  expmul.defjvp(expmul_jvp, symbolic_zeros=True)
  z["jvp_symbolic"] = expmul

  @X.custom_jvp
  def cosplus(x, y):
    return np_.cos(x) + x * y
  cosplus.defjvps(lambda xd, ans, x, y: 1.25 * (y - np_.sin(x)) * xd,
                  lambda yd, ans, x, y: x * yd)
  z["jvps"] = cosplus

  @X.custom_vjp
  def vsinmul(x, y):
    return np_.sin(x) * y

  def vsinmul_fwd(x, y):
    return np_.sin(x) * y, (np_.cos(x), np_.sin(x), y)

  def vsinmul_bwd(res, g):   # x's cotangent is half the true one
    c, s, y = res
    return 0.5 * c * y * g, s * g
  vsinmul.defvjp(vsinmul_fwd, vsinmul_bwd)
  z["vjp"] = vsinmul

  @X.custom_vjp
  def tanhplus(x, y):
    return np_.tanh(x) + y

  def tanhplus_fwd(x, y):   # calls itself: forward mode over it is an error
    return tanhplus(x, y), np_.tanh(x)
  tanhplus.defvjp(tanhplus_fwd, lambda t, g: (2. * (1. - t * t) * g, None))
  z["vjp_none_self"] = tanhplus

  @partial(X.custom_vjp, nondiff_argnums=(1,))
  def twice(x, fn):
    return fn(x) * x

  def twice_fwd(x, fn):
    return fn(x) * x, (x,)

  def twice_bwd(fn, res, g):
    (x,) = res
    return (3. * fn(x) * g,)
  twice.defvjp(twice_fwd, twice_bwd)
  z["vjp_nondiff"] = lambda x, y: twice(x, np_.cos) + y

  @X.custom_vjp
  def pair(x, y):
    return x * y, x + y

  def pair_fwd(x, y):
    return pair(x.value, y.value), (x.value, y.value)

  def pair_bwd(res, g):   # the second output's cotangent is often zero
    (x, y), (g1, g2) = res, g
    gx = g1 * y if type(g1) is not SZ else 0. * x
    gy = g1 * x * 0.5 if type(g1) is not SZ else 0. * y
    if type(g2) is not SZ:
      gx, gy = gx + g2, gy + g2
    return gx, gy
  pair.defvjp(pair_fwd, pair_bwd, symbolic_zeros=True)
  z["vjp_symbolic"] = lambda x, y: pair(x, y)[0]

  z["plain"] = lambda x, y: np_.sin(x) * y
  return z


ZOO = {"ours": zoo(OURS), "jax": zoo(THEIRS)}
NAMES = sorted(ZOO["ours"])


# --- Random programs ----------------------------------------------------------------------

WRAPPERS = ["none", "jit", "cond", "switch", "scan", "fori", "while",
            "scan/cond", "jit/switch"]


def wrapped(bk, fn, wrapper):
  """fn(u, v), run inside a control-flow primitive (or jit); "a/b" is b
  inside a."""
  np_, lax_ = bk.np, bk.lax
  if "/" in wrapper:
    outer, inner = wrapper.split("/")
    return wrapped(bk, wrapped(bk, fn, inner), outer)
  if wrapper == "none":
    return fn
  if wrapper == "jit":
    return bk.X.jit(fn)
  if wrapper == "cond":
    return lambda u, v: lax_.cond(np_.sum(u) > 0., fn, lambda a, b: np_.cos(a) * b, u, v)
  if wrapper == "switch":
    def switched(u, v):
      i = (np_.sum(v) > 0.).astype(np.int32)
      return lax_.switch(i, [lambda a, b: a - b, fn, lambda a, b: a * b], u, v)
    return switched
  if wrapper == "scan":
    def scanned(u, v):
      xs = np_.stack([v, v * 0.5])
      return lax_.scan(lambda c, x: (fn(c, x), c), u, xs)[0]
    return scanned
  if wrapper == "fori":
    return lambda u, v: lax_.fori_loop(0, 2, lambda i, c: fn(c, v), u)
  if wrapper == "while":
    def looped(u, v):
      body = lambda s: (s[0] + 1, fn(s[1], v))
      return lax_.while_loop(lambda s: s[0] < 2, body, (0, u))[1]
    return looped
  raise ValueError(wrapper)


def program(bk, steps):
  """A chain of steps; each step maps (u, v) to (v, f(u, v))."""
  fns = [wrapped(bk, ZOO[bk.name][name], w) for name, w in steps]

  def run(u, v):
    for f in fns:
      u, v = v, f(u, v)
    return v
  return run


def transformed(bk, how, f, x, y):
  """`f(x, y)` under the transformation `how`; returns a pytree of arrays."""
  X, np_ = bk.X, bk.np
  total = lambda x, y: np_.sum(f(x, y))
  tx, ty = np.cos(3. * x), np.sin(2. * y)
  xs, ys = np.stack([x, -x]), np.stack([y, y + 1.])
  if how == "eval":
    return f(x, y)
  if how == "jit":
    return X.jit(f)(x, y)
  if how == "vmap":
    return X.vmap(f)(xs, ys)
  if how == "vmap_none":
    return X.vmap(f, (0, None))(xs, y)
  if how == "jvp":
    return X.jvp(f, (x, y), (tx, ty))
  if how == "linearize":
    out, f_lin = X.linearize(f, x, y)
    return out, f_lin(tx, ty)
  if how == "vjp":
    out, f_vjp = X.vjp(f, x, y)
    return out, f_vjp(np.cos(out))
  if how == "grad":
    return X.grad(total, (0, 1))(x, y)
  if how == "jit_grad":
    return X.jit(X.grad(total, (0, 1)))(x, y)
  if how == "grad_jit":
    return X.grad(X.jit(total), (0, 1))(x, y)
  if how == "vmap_grad":
    return X.vmap(X.grad(total))(xs, ys)
  if how == "grad_vmap":
    return X.grad(lambda x: np_.sum(X.vmap(f, (0, None))(x, y)))(xs)
  if how == "jvp_vmap":
    return X.jvp(X.vmap(f), (xs, ys), (np.cos(xs), np.sin(ys)))
  if how == "vmap_jvp":
    return X.vmap(lambda a, b: X.jvp(f, (a, b), (np.ones(3), tx)))(xs, ys)
  if how == "hessian":
    return X.hessian(lambda x: total(x, y))(x)
  if how == "grad_grad":
    return X.grad(lambda x: np_.sum(X.grad(total)(x, y) ** 2))(x)
  raise ValueError(how)


TRANSFORMS = ["eval", "jit", "vmap", "vmap_none", "jvp", "linearize", "vjp", "grad",
              "jit_grad", "grad_jit", "vmap_grad", "grad_vmap", "jvp_vmap", "vmap_jvp",
              "hessian", "grad_grad"]


def outcome(bk, steps, how, x, y):
  """("ok", values) or ("raises", the error's kind)."""
  try:
    return "ok", transformed(bk, how, program(bk, steps), x, y)
  except (TypeError, ValueError) as e:
    return "raises", "TypeError" if isinstance(e, TypeError) else "ValueError"


FORWARD = {"jvp", "linearize", "jvp_vmap", "vmap_jvp", "hessian"}


def untaken_branch_difference(steps, how, jax_kind, our_kind) -> bool:
  """jvp of a cond or switch with a custom_vjp function in a branch: JAX
  raises even when that branch isn't taken (it compiles every branch); we run
  the branch taken only, as the chapter says."""
  return (jax_kind == "raises" and our_kind == "ok" and how in FORWARD
          and any(("cond" in w or "switch" in w) and n.startswith("vjp")
                  for n, w in steps))


def assert_same(steps, how, x, y, ours_bk=OURS):
  """Both raise the same kind of error, or agree on the values."""
  reverse_twice_in_loop = how in ("hessian", "grad_grad") and any(
      ("scan" in w or "fori" in w) and n.startswith("jvp") for n, w in steps)
  kind, theirs = outcome(THEIRS_UNROLLED if reverse_twice_in_loop else THEIRS,
                         steps, how, x, y)
  kind_ours, ours = outcome(ours_bk, steps, how, x, y)
  if untaken_branch_difference(steps, how, kind, kind_ours):
    return
  assert kind_ours == kind and (kind == "ok" or ours == theirs), (
      f"JAX: {kind} {theirs if kind == 'raises' else ''}; ours: {kind_ours} "
      f"{ours if kind_ours == 'raises' else ''}")
  if kind == "ok":
    assert_close(ours, theirs)


def assert_close(ours, theirs, tol=1e-9):
  o_leaves, o_tree = adx.tree_util.tree_flatten(ours)
  t_leaves, _ = jax.tree_util.tree_flatten(theirs)
  assert len(o_leaves) == len(t_leaves), (o_tree, len(t_leaves))
  for a, b in zip(o_leaves, t_leaves):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _sl_grad(f, argnums=0):
  """jax.grad's argnums on autodidax.stackless's grad (first argument only)."""
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

  def gradient(*args):
    pick = lambda chosen: [chosen[nums.index(i)] if i in nums else a
                           for i, a in enumerate(args)]
    g = sl.grad(lambda chosen: f(*pick(chosen)))(tuple(args[i] for i in nums))
    return g[0] if isinstance(argnums, int) else g
  return gradient


def _sl_hessian(f):   # forward over reverse, as jax.hessian
  return lambda x: sl.vmap(lambda v: sl.jvp(sl.grad(f), (x,), (v,))[1])(
      np.eye(x.size).reshape(x.size, *x.shape))


# JAX today's design (the chapter "JAX today"), with the same custom functions.
STACKLESS = SimpleNamespace(
    X=SimpleNamespace(jit=sl.jit, vmap=sl.vmap, jvp=sl.jvp, linearize=sl.linearize,
                      vjp=sl.vjp, grad=_sl_grad, hessian=_sl_hessian),
    np=anp, lax=lax, cd=cd, name="ours")


steps_st = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(WRAPPERS)),
                    min_size=1, max_size=3)


def _inputs(seed):
  rng = np.random.default_rng(seed)
  return rng.uniform(-1.5, 1.5, 3), rng.uniform(-1.5, 1.5, 3)


@settings(max_examples=max(1, settings.default.max_examples * 2))
@given(steps_st, st.sampled_from(TRANSFORMS), st.integers(0, 2**16))
def test_random_programs_match_jax(steps, how, seed):
  note(f"steps={steps} how={how}")
  assert_same(steps, how, *_inputs(seed))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("how", TRANSFORMS)
def test_each_custom_function_under_each_transformation(name, how):
  """Every custom function alone, under every transformation (no wrapper)."""
  assert_same([(name, "none")], how, *_inputs(7))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("how", ["grad", "jvp", "vmap_grad", "jit"])
def test_each_custom_function_inside_control_flow(name, wrapper, how):
  assert_same([(name, wrapper)], how, *_inputs(11))


@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(steps_st, st.sampled_from(TRANSFORMS), st.integers(0, 2**16))
def test_random_programs_match_jax_in_the_stackless_design(steps, how, seed):
  """The same custom functions under autodidax.stackless's transformations."""
  note(f"steps={steps} how={how}")
  assert_same(steps, how, *_inputs(seed), ours_bk=STACKLESS)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("how", TRANSFORMS)
def test_each_custom_function_under_each_stackless_transformation(name, how):
  assert_same([(name, "none")], how, *_inputs(7), ours_bk=STACKLESS)


def test_the_rule_is_used_not_the_body():
  """The ghost factors show: our grad is the rule's, and differs from the body's."""
  f = ZOO["ours"]["jvp"]
  x, y = 0.7, 1.3
  assert np.isclose(adx.grad(f)(x, y), 1.5 * np.cos(x) * y)
  body = lambda x, y: anp.sin(x) * y
  assert not np.isclose(adx.grad(f)(x, y), adx.grad(body)(x, y))
  g = ZOO["ours"]["vjp"]
  assert np.isclose(adx.grad(g)(x, y), 0.5 * np.cos(x) * y)


def test_second_reverse_derivative_through_scan():
  """grad(grad(.)) through a scan: with a rule that is the body's
  derivative, ours and JAX's agree; with a ghost rule, ours agrees with
  JAX's forward-over-forward and with JAX's loop unrolled, and JAX's
  reverse-over-reverse does not (it differentiates the body there)."""
  def honest(X, np_):
    @X.custom_jvp
    def f(x, y):
      return np_.sin(x) * y
    f.defjvp(lambda p, t: (f(*p), np_.cos(p[0]) * t[0] * p[1]
                           + np_.sin(p[0]) * t[1]))
    return f
  ys = np.array([1.3, 0.65])
  looped = lambda L, f: (lambda x: L.scan(lambda c, v: (f(c, v), c), x, ys)[0])
  for ours, theirs in [(honest(adx, anp), honest(jax, jnp)),
                       (ZOO["ours"]["jvp"], ZOO["jax"]["jvp"])]:
    gg = adx.grad(adx.grad(looped(lax, ours)))(0.7)
    np.testing.assert_allclose(gg, jax.jacfwd(jax.jacfwd(
        looped(jax.lax, theirs)))(0.7), rtol=1e-12)
    np.testing.assert_allclose(gg, jax.grad(jax.grad(
        looped(THEIRS_UNROLLED.lax, theirs)))(0.7), rtol=1e-12)
  np.testing.assert_allclose(adx.grad(adx.grad(looped(lax, honest(adx, anp))))(0.7),
                             jax.grad(jax.grad(looped(jax.lax, honest(jax, jnp))))(0.7))
  assert not np.isclose(gg, jax.grad(jax.grad(looped(jax.lax, theirs)))(0.7))


def test_higher_order_derivatives_differentiate_the_rule():
  f = ZOO["ours"]["jvp"]
  # d/dx of the rule's tangent 1.5 cos(x) y is -1.5 sin(x) y
  assert np.isclose(adx.grad(adx.grad(f))(0.7, 1.3), -1.5 * np.sin(0.7) * 1.3)
  h = adx.hessian(lambda v: anp.sum(f(v, np.ones(3))))(np.arange(3.))
  np.testing.assert_allclose(h, np.diag(-1.5 * np.sin(np.arange(3.))), atol=1e-12)


# --- Jaxprs print as JAX's ------------------------------------------------------------------

def same_print(f_ours, f_theirs, *args):
  ours = str(adx.make_jaxpr(f_ours)(*args))
  theirs = str(jax.make_jaxpr(f_theirs)(*args))
  assert ours == theirs, f"ours:\n{ours}\nJAX:\n{theirs}"


@pytest.mark.parametrize("name", ["jvp", "jvp_symbolic", "vjp", "vjp_none_self"])
def test_jaxpr_of_a_call_prints_as_jax(name):
  same_print(ZOO["ours"][name], ZOO["jax"][name], 1., 2.)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_nested_jaxpr_fits_its_line_with_its_key(k):
  """`call_jaxpr=` counts toward the line's width (the body with 2 sins fits
  in 80 columns only without it)."""
  def make(X, np_):
    @X.custom_jvp
    def f(x):
      for _ in range(k):
        x = np_.sin(x)
      return x
    f.defjvp(lambda p, t: (f(*p), t[0]))
    return f
  same_print(make(adx, anp), make(jax, jnp), 1.)


def test_jaxpr_with_nondiff_and_closure_prints_as_jax():
  def make(bk):
    X, np_ = bk.X, bk.np

    @partial(X.custom_jvp, nondiff_argnums=(1,))
    def scale(x, k):
      return x * k

    @scale.defjvp
    def scale_jvp(k, primals, tangents):
      return scale(primals[0], k), tangents[0] * k

    def closing(c, x):
      @X.custom_vjp
      def f(x):
        return c * np_.sin(x)
      f.defvjp(lambda x: (f(x), np_.cos(x)), lambda r, g: (c * r * g,))
      return f(x) + scale(x, c)
    return closing
  same_print(make(OURS), make(THEIRS), 3., 2.)


def test_jaxpr_under_vmap_and_jvp_print_as_jax():
  f, f_j = ZOO["ours"]["jvp"], ZOO["jax"]["jvp"]
  same_print(adx.vmap(f), jax.vmap(f_j), np.ones(3), np.ones(3))
  same_print(lambda x, t: adx.jvp(f, (x, 2.), (t, 1.)),
             lambda x, t: jax.jvp(f_j, (x, 2.), (t, 1.)), 1., 1.)
  g, g_j = ZOO["ours"]["vjp"], ZOO["jax"]["vjp"]
  same_print(adx.vmap(g), jax.vmap(g_j), np.ones(3), np.ones(3))


def test_linearized_custom_vjp_shows_custom_lin():
  g = ZOO["ours"]["vjp"]
  lin = adx.linearize(g, 1., 2.)[1].jaxpr
  [eqn] = [e for e in lin.eqns if e.primitive is custom_lin_p]
  assert eqn.params["num_res"] == 3 and eqn.params["in_zeros"] == [False, False]
  assert "custom_lin[bwd=vsinmul_bwd in_zeros=[False, False] num_res=3" in str(lin)


# --- Errors -----------------------------------------------------------------------------------

def test_jvp_of_custom_vjp_raises_type_error_that_says_what_to_do():
  g = ZOO["ours"]["vjp"]
  with pytest.raises(TypeError, match="forward-mode.*custom_vjp.*grad, vjp.*custom_jvp"):
    adx.jvp(g, (1., 2.), (1., 0.))
  with pytest.raises(TypeError, match="forward-mode"):
    adx.linearize(g, 1., 2.)[1](1., 0.)
  with pytest.raises(TypeError, match="forward-mode"):
    adx.jacfwd(g)(1., 2.)
  with pytest.raises(TypeError, match="forward-mode"):
    adx.jit(lambda x: adx.jvp(lambda x: g(x, 2.), (x,), (1.,)))(1.)
  with pytest.raises(TypeError, match="forward-mode"):
    adx.vmap(adx.linearize(g, 1., 2.)[1])(np.ones(2), np.ones(2))
  with pytest.raises(TypeError):
    jax.jvp(ZOO["jax"]["vjp"], (1., 2.), (1., 0.))


def test_missing_rule_raises():
  f = adx.custom_jvp(lambda x: x)
  with pytest.raises(AttributeError, match="No JVP rule defined.*defjvp"):
    f(1.)
  g = adx.custom_vjp(lambda x: x)
  with pytest.raises(AttributeError, match="No VJP rule defined.*defvjp"):
    g(1.)


def test_nondiff_argnums_tracer_in_custom_vjp_is_a_clear_error():
  def make(bk):
    @partial(bk.X.custom_vjp, nondiff_argnums=(1,))
    def scale(x, k):
      return x * k
    scale.defvjp(lambda x, k: (x * k, None), lambda k, r, g: (g * k,))
    return scale
  ours, theirs = make(OURS), make(THEIRS)
  assert adx.grad(ours)(2., 3.) == jax.grad(theirs)(2., 3.) == 3.
  for run in (lambda: adx.jit(ours)(2., 3.), lambda: adx.grad(lambda k: ours(2., k))(3.),
              lambda: adx.vmap(ours, (None, 0))(2., np.ones(2))):
    with pytest.raises(NondiffTracerError, match="argument 1.*nondiff_argnums.*ordinary"):
      run()
  with pytest.raises(Exception, match="Tracer"):
    jax.jit(theirs)(2., 3.)


def test_nondiff_argnums_tracer_in_custom_jvp_gets_a_stopped_gradient_as_in_jax():
  def make(bk):
    @partial(bk.X.custom_jvp, nondiff_argnums=(1,))
    def scale(x, k):
      return x * bk.np.sin(k)

    @scale.defjvp
    def scale_jvp(k, primals, tangents):
      return scale(primals[0], k), tangents[0] * bk.np.sin(k)
    return scale
  ours, theirs = make(OURS), make(THEIRS)
  for how in (lambda X, s: X.grad(s, 1)(2., 3.), lambda X, s: X.jit(X.grad(s))(2., 3.),
              lambda X, s: X.vmap(X.grad(s), (None, 0))(2., np.arange(3.))):
    np.testing.assert_allclose(how(adx, ours), how(jax, theirs))
  # better than JAX: the rule gets the jit's traced k as the input it is
  np.testing.assert_allclose(adx.grad(adx.jit(ours))(2., 3.), np.sin(3.))


def test_non_array_argument_must_be_nondiff():
  f = adx.custom_jvp(lambda fn, x: fn(x))
  f.defjvp(lambda p, t: (f(*p), t[1]))
  with pytest.raises(TypeError, match="function.*argument 0.*nondiff_argnums=\\(0,\\)"):
    adx.jit(lambda x: f(anp.sin, x))(1.)


def test_closing_over_a_differentiated_value_is_a_clear_error():
  def h(bk, c, x):
    @bk.X.custom_jvp
    def f(x):
      return c * bk.np.sin(x)
    f.defjvp(lambda p, t: (f(*p), c * bk.np.cos(p[0]) * t[0]))
    return f(x)
  # fine while the closed-over value is not differentiated, as in JAX
  np.testing.assert_allclose(adx.grad(lambda x: h(OURS, 3., x))(2.),
                             jax.grad(lambda x: h(THEIRS, 3., x))(2.))
  np.testing.assert_allclose(
      adx.grad(lambda x: anp.sum(adx.vmap(lambda c: h(OURS, c, x))(np.arange(3.))))(2.),
      jax.grad(lambda x: jnp.sum(jax.vmap(lambda c: h(THEIRS, c, x))(np.arange(3.))))(2.))
  with pytest.raises(ClosedOverTracerError, match="closes over a value.*argument"):
    adx.grad(lambda c: h(OURS, c, 2.))(3.)
  with pytest.raises(Exception):
    jax.grad(lambda c: h(THEIRS, c, 2.))(3.)


def test_rule_closing_over_a_finished_trace_is_a_clear_error():
  def h(c, x):
    @adx.custom_jvp
    def f(x):
      return anp.sin(x)
    f.defjvp(lambda p, t: (f(*p), c * t[0]))   # c: only the rule uses it
    return f(x)
  closed = adx.make_jaxpr(h)(3., 2.)
  with pytest.raises(ClosedOverTracerError, match="has finished.*argument"):
    adx.jvp(lambda x: closed(3., x)[0], (2.,), (1.,))


@pytest.mark.parametrize("bad,match", [
    (lambda f: (lambda p, t: f(*p)), "must return a pair"),
    (lambda f: (lambda p, t: ((f(*p), f(*p)), t[0])), "primal output of type"),
    (lambda f: (lambda p, t: (f(*p), np.float32(1.))), "tangent of type f32"),
    (lambda f: (lambda p, t: (f(*p), (t[0], t[0]))), "tangent output structured"),
])
def test_bad_jvp_rules_are_reported(bad, match):
  f = adx.custom_jvp(lambda x: anp.sin(x))
  f.defjvp(bad(f))
  with pytest.raises(TypeError, match=match):
    adx.jvp(f, (1.,), (1.,))
  assert core.trace_stack == [core.trace_stack[0]]


@pytest.mark.parametrize("fwd,bwd,error,match", [
    (lambda x: anp.sin(x), lambda r, g: (g,), TypeError, "must return a pair"),
    (lambda x: ((x, x), None), lambda r, g: (g,), TypeError, "primal output of type"),
    (lambda x: (anp.sin(x), None), lambda r, g: g, TypeError, "one cotangent \\(or None\\)"),
    (lambda x: (anp.sin(x), None), lambda r, g: (np.ones(2),), ValueError, "same shape"),
])
def test_bad_vjp_rules_are_reported(fwd, bwd, error, match):
  g = adx.custom_vjp(lambda x: anp.sin(x))
  g.defvjp(fwd, bwd)
  with pytest.raises(error, match=match):
    adx.grad(g)(1.)


def _wrong_shape(X, np_, where):
  """A custom_vjp function of f32[3] whose fwd returns a primal of shape (2,), or
  whose bwd returns a cotangent of shape (2,)."""
  f = X.custom_vjp(lambda x: np_.sin(x))
  if where == "fwd":
    f.defvjp(lambda x: (np_.sin(x)[:2], x), lambda r, g: (g,))
  else:
    f.defvjp(lambda x: (np_.sin(x), x), lambda r, g: (g[:2],))
  return f


@pytest.mark.parametrize("where", ["fwd", "bwd"])
@pytest.mark.parametrize("how", ["grad", "jit_grad", "grad_jit", "vjp_pullback", "vmap_grad"])
def test_wrong_shapes_from_vjp_rules_raise_valueerror_like_jax(where, how):
  """JAX 0.10.2 raises ValueError for a cotangent of the wrong shape, and for a
  primal from fwd of the wrong shape, which reaches bwd as the cotangent's
  shape; so do we, at once, saying which rule and which types. (JAX checks
  fwd's primal itself only where the call was staged first, grad of jit, and
  raises TypeError there; `vjp` alone, with no pullback called, it lets
  pass. Our custom_vjp_call is typed by the function's jaxpr, so fwd's primal
  is checked wherever fwd runs.)"""
  x = np.arange(3, dtype=np.float32) / 3
  kinds = []
  for X, np_ in ((jax, jnp), (adx, anp)):
    f = _wrong_shape(X, np_, where)
    loss = lambda x: np_.sum(f(x))
    run = {"grad": lambda: X.grad(loss)(x),
           "jit_grad": lambda: X.jit(X.grad(loss))(x),
           "grad_jit": lambda: X.grad(X.jit(loss))(x),
           "vjp_pullback": lambda: X.vjp(f, x)[1](np.ones(3 if where == "bwd" else 2,
                                                          np.float32)),
           "vmap_grad": lambda: X.vmap(X.grad(loss))(np.stack([x, x]))}[how]
    with pytest.raises(Exception) as e:
      run()
    kinds.append(type(e.value))
  if (where, how) == ("fwd", "grad_jit"):
    assert kinds[0] is TypeError, kinds   # JAX's one TypeError (above)
  else:
    assert issubclass(kinds[0], ValueError), kinds   # JAX's side, against itself
  assert issubclass(kinds[1], ValueError), kinds
  assert not issubclass(kinds[1], TypeError)
  assert core.trace_stack == [core.trace_stack[0]]


# --- nondiff_argnums, pytrees, keyword arguments, symbolic zeros --------------------------------

def test_keyword_arguments_are_resolved_to_positions():
  def make(bk):
    @partial(bk.X.custom_jvp, nondiff_argnums=(1,))
    def power(x, n=2):
      return x ** n
    power.defjvp(lambda n, p, t: (power(p[0], n), 10. * n * p[0] ** (n - 1) * t[0]))
    return power
  ours, theirs = make(OURS), make(THEIRS)
  for kwargs in ({}, {"n": 3}):
    np.testing.assert_allclose(adx.grad(lambda x: ours(x, **kwargs))(1.5),
                               jax.grad(lambda x: theirs(x, **kwargs))(1.5))
  np.testing.assert_allclose(adx.grad(lambda x: ours(x=x, n=3))(1.5),
                             jax.grad(lambda x: theirs(x=x, n=3))(1.5))


def test_symbolic_zeros_reach_the_rule_only_when_asked_for():
  seen = []

  @adx.custom_jvp
  def f(x, y):
    return x * y

  def f_jvp(primals, tangents):
    seen.append([type(t).__name__ for t in tangents])
    return f(*primals), primals[1] * 0. + (
        0. if type(tangents[0]) is cd.SymbolicZero else tangents[0] * primals[1])
  f.defjvp(f_jvp, symbolic_zeros=True)
  adx.grad(f)(2., 3.)
  assert seen[-1][1] == "SymbolicZero" and seen[-1][0] != "SymbolicZero"
  f.defjvp(f_jvp)   # without: zeros are instantiated
  adx.grad(f)(2., 3.)
  assert "SymbolicZero" not in seen[-1]


def test_symbolic_zero_outputs_are_zeros():
  @adx.custom_jvp
  def f(x):
    return anp.sin(x)
  f.defjvp(lambda p, t: (f(*p), cd.SymbolicZero(core.get_aval(p[0]))))
  assert adx.jvp(f, (1.,), (1.,))[1] == 0.
  assert adx.grad(lambda x: f(x) + x)(1.) == 1.


def test_custom_vjp_with_symbolic_zeros_sees_perturbed_flags():
  flags = []

  @adx.custom_vjp
  def f(x, y):
    return x * y

  def fwd(x, y):
    flags.append((x.perturbed, y.perturbed))
    x, y = cd.custom_vjp_primal_tree_values((x, y))
    return x * y, (x, y)
  f.defvjp(fwd, lambda r, g: (g * r[1], g * r[0]), symbolic_zeros=True)
  assert adx.grad(f, 1)(2., 3.) == 2.
  assert flags[-1] == (False, True)


def test_bwd_may_return_none_for_a_whole_argument_tree():
  def make(bk):
    @bk.X.custom_vjp
    def f(d, y):
      return d["a"] * d["b"] + y
    f.defvjp(lambda d, y: (f(d, y), d), lambda d, g: ({"a": g * d["b"], "b": None}, None))
    return f
  args = ({"a": 2., "b": 3.}, 4.)
  ours, theirs = adx.grad(make(OURS), (0, 1))(*args), jax.grad(make(THEIRS), (0, 1))(*args)
  assert_close(ours, theirs)


def test_eager_call_runs_the_function_as_is():
  calls = []

  @adx.custom_jvp
  def f(x):
    calls.append(type(x).__name__)
    if x > 0:            # Python control flow on a value: fine eagerly, as in JAX
      return anp.sin(x)
    return x
  f.defjvp(lambda p, t: (f(*p), t[0]))
  assert f(1.) == np.sin(1.) and calls == ["float"]


# --- Rules: registered, named, and covered ------------------------------------------------

TABLES = {"impl": core.impl_rules, "abstract eval": core.abstract_eval_rules,
          "jvp": ad.jvp_rules, "vmap": batching.vmap_rules, "lowering": lowering.lowering_rules}


@pytest.mark.parametrize("prim", [custom_jvp_call_p, custom_vjp_call_p, custom_lin_p],
                         ids=lambda p: p.name)
def test_every_transformation_has_a_rule(prim):
  for name, table in TABLES.items():
    assert prim in table, (prim, name)
  assert prim in ad.transpose_rules or prim is custom_vjp_call_p
  assert (prim in pe.partial_eval_rules) == (prim is custom_jvp_call_p)


def test_custom_calls_under_partial_eval_of_jaxprs_and_linear_use():
  """A custom_jvp function applied to tangents (a linear use) is transposed
  through its body, both when partial evaluation inlines it and when a
  staged jaxpr keeps the equation."""
  @adx.custom_jvp
  def double(t):
    return 2. * t
  double.defjvp(lambda p, t: (double(*p), double(*t)))   # linear: the rule applies f
  f = lambda x: anp.sin(x) * double(x)
  np.testing.assert_allclose(adx.grad(f)(0.3), adx.grad(lambda x: anp.sin(x) * 2. * x)(0.3))
  np.testing.assert_allclose(adx.grad(adx.jit(f))(0.3), adx.grad(f)(0.3))
  np.testing.assert_allclose(adx.grad(adx.grad(f))(0.3), adx.grad(adx.grad(
      lambda x: anp.sin(x) * 2. * x))(0.3))


def test_flops_count_the_body():
  f = ZOO["ours"]["jvp"]
  assert adx.flops(f)(np.ones(4), np.ones(4)).by_primitive == {"sin": 4, "mul": 4}
  g = ZOO["ours"]["vjp"]
  assert adx.flops(g)(np.ones(4), np.ones(4)).total == 8


def test_lowered_text_has_the_body_only():
  f = ZOO["ours"]["jvp"]
  text = adx.jit(f).lower(1., 2.).as_text()
  adx.runtime.verify(text)
  assert "stablehlo.sine" in text and "cosine" not in text
  text = adx.jit(adx.grad(f)).lower(1., 2.).as_text()
  assert "cosine" in text   # the rule's, under grad


def test_pictures_name_what_they_show():
  f = ZOO["ours"]["jvp"]
  with viz.record() as rec:
    adx.jvp(f, (1., 2.), (1., 0.))
  g = viz.bind_tree(rec)
  assert "custom_jvp_call" in g.name and "JVPTrace" in g.name
  svg = viz.svg_html(g)
  assert "custom_jvp_call" in svg
  closed = adx.make_jaxpr(adx.grad(f))(1., 2.)
  assert "jvp=sinmul_jvp" in viz.svg_html(viz.jaxpr_graph(closed))
  for kind in ("custom_jvp", "custom_vjp"):
    g = viz.custom_call_graph(kind)
    assert f"{kind}_call equation" in g.name and "jvp: " in g.name
  assert "raises" in viz.svg_html(viz.custom_call_graph("custom_vjp"))
  assert "linearize: fwd, then applying it raises" in viz.custom_call_graph("custom_vjp").name


def test_the_custom_vjp_picture_fails_where_jax_fails():
  """The opening picture's red boxes: `jvp` of a custom_vjp function raises;
  `linearize` works, and applying its result raises; in JAX as in ours."""
  for X, np_ in ((adx, anp), (jax, jnp)):
    @X.custom_vjp
    def f(x):
      return np_.sin(x)
    f.defvjp(lambda x: (np_.sin(x), np_.cos(x)), lambda c, g: (c * g,))
    with pytest.raises(TypeError, match="forward-mode"):
      X.jvp(f, (1.,), (1.,))
    _, f_lin = X.linearize(f, 1.)
    with pytest.raises(TypeError, match="forward-mode"):
      f_lin(1.)
  assert set(viz.CUSTOM_VJP_FAILS) == {"jvp", "linearize"}


def _scaled_sin(X, np_):
  """c * sin(x) with c closed over, made differentiable in c by closure_convert."""
  def scaled_sin(c, x):
    g = lambda x: c * np_.sin(x)
    g_conv, hoisted = X.closure_convert(g, x)

    @X.custom_jvp
    def f(x, *consts):
      return g_conv(x, *consts)

    @f.defjvp
    def f_jvp(primals, tangents):
      return X.jvp(g_conv, primals, tangents)
    return f(x, *hoisted)
  return scaled_sin


def test_closure_convert_hoists_closed_over_tracers_as_jax_does():
  ours, theirs = _scaled_sin(adx, anp), _scaled_sin(jax, jnp)
  for argnum in (0, 1):
    np.testing.assert_allclose(adx.grad(ours, argnum)(2., 1.), jax.grad(theirs, argnum)(2., 1.))
  np.testing.assert_allclose(adx.grad(ours)(2., 1.), np.sin(1.))
  g_conv, hoisted = adx.closure_convert(lambda x: 3. * anp.sin(x), 1.)
  assert hoisted == [] and np.isclose(g_conv(1.), 3. * np.sin(1.))   # nothing traced: nothing hoisted
  def hoists(c):
    conv, h = adx.closure_convert(lambda x: {"y": c * x}, 1.)
    assert len(h) == 1
    with pytest.raises(TypeError, match="shaped like the examples"):
      conv((2.,), *h)
    return conv(2., *h)["y"]
  assert np.isclose(adx.grad(hoists)(3.), 2.)


def test_bind_tree_merges_neighbouring_leaves():
  with viz.record() as rec:
    adx.jvp(lambda x: anp.sin(x) * x, (1.,), (1.,))
  g = viz.bind_tree(rec)
  svg = viz.svg_html(g)
  assert "sin by JVPTrace (level 1)" in g.name
  assert "sin, cos, mul" in svg   # the JVP rule of sin, as one box


def test_a_bwd_cotangent_of_another_float_dtype_passes_on_as_jax():
  def make(X, np_):
    @X.custom_vjp
    def f(x):
      return np_.sin(x)
    f.defvjp(lambda x: (f(x), x),
             lambda x, ct: (np_.asarray(np_.cos(x) * ct, np.float32),))
    return f
  ours = adx.grad(make(adx, anp))(0.5)
  theirs = jax.grad(make(jax, jnp))(0.5)
  assert np.asarray(ours).dtype == np.asarray(theirs).dtype == np.float32
  np.testing.assert_allclose(ours, theirs, rtol=1e-6)
