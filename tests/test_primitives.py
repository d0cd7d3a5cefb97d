"""A user-defined primitive, as in the chapter "Defining a new primitive".

`multiply_add(x, y, z) = x * y + z` gets its rules one at a time: each missing
rule fails where JAX fails, with the library's message; with all of them it
goes through every transformation, alone and composed in any order, and
agrees with JAX (on the same computation written with jax.numpy). A primitive
with several results works too, and `viz.trace` prints the calls.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, batching, core, lax, lowering, viz
from autodidax.core import MissingRuleError

RULES = ("impl", "abstract_eval", "lowering", "jvp", "transpose", "batching")
TABLES = {"impl": core.impl_rules, "abstract_eval": core.abstract_eval_rules,
          "lowering": lowering.lowering_rules, "jvp": ad.jvp_rules,
          "transpose": ad.transpose_rules, "batching": batching.vmap_rules}


def define_multiply_add(rules=RULES):
  """A fresh `multiply_add` primitive with the given rules (as in the chapter)."""
  p = core.Primitive("multiply_add")
  ma = lambda x, y, z: p.bind(x, y, z)

  def abstract_eval(x, y, z):
    if not x.shape == y.shape == z.shape:
      raise TypeError(f"multiply_add: shapes {x.shape}, {y.shape}, {z.shape} differ")
    if not x.dtype == y.dtype == z.dtype:
      raise TypeError(f"multiply_add: dtypes {x.dtype}, {y.dtype}, {z.dtype} differ")
    return core.ShapedArray(x.shape, x.dtype)

  def lower(ctx, x, y, z):
    t = lowering.mlir_type(ctx.avals_out[0])
    xy = ctx.emit(f"stablehlo.multiply {x}, {y} : {t}")
    return ctx.emit(f"stablehlo.add {xy}, {z} : {t}")

  def jvp(primals, tangents):
    x, y, z = primals
    xt, yt, zt = (ad.instantiate_zeros(t) for t in tangents)
    return ma(x, y, z), ma(xt, y, ma(x, yt, zt))

  def transpose(ct, x, y, z):
    assert not (ad.is_undefined_primal(x) and ad.is_undefined_primal(y))
    zeros = ad.zeros_like_aval(core.get_aval(ct))
    return (ma(ct, y, zeros) if ad.is_undefined_primal(x) else None,
            ma(x, ct, zeros) if ad.is_undefined_primal(y) else None,
            ct if ad.is_undefined_primal(z) else None)

  def batch(axis_size, vals_in, dims_in):
    vals = [batching.move_batch_axis(axis_size, d, 0, v) for v, d in zip(vals_in, dims_in)]
    return ma(*vals), 0

  if "impl" in rules:
    p.def_impl(lambda x, y, z: np.add(np.multiply(x, y), z))
  if "abstract_eval" in rules:
    p.def_abstract_eval(abstract_eval)
  if "lowering" in rules:
    lowering.register_lowering(p, lower)
  if "jvp" in rules:
    ad.jvp_rules[p] = jvp
  if "transpose" in rules:
    ad.transpose_rules[p] = transpose
  if "batching" in rules:
    batching.vmap_rules[p] = batch
  return p, ma


def forget(p):
  for table in TABLES.values():
    table.pop(p, None)


@pytest.fixture
def make():
  """`make(rules)` -> (primitive, wrapper); the rules are removed afterwards."""
  made = []

  def make(rules=RULES):
    p, ma = define_multiply_add(rules)
    made.append(p)
    return p, ma
  yield make
  for p in made:
    forget(p)


MA, ma = define_multiply_add()   # the complete one, for the walkthrough
square_add = lambda a, b: ma(a, a, b)
jax_square_add = lambda a, b: a * a + b


def close(ours, theirs):
  ours_flat, theirs_flat = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
  assert len(ours_flat) == len(theirs_flat)
  for o, t in zip(ours_flat, theirs_flat):
    np.testing.assert_allclose(np.asarray(o), np.asarray(t), rtol=1e-12, atol=1e-12)
    assert np.shape(o) == np.shape(t)


# --- Each missing rule fails where JAX fails ----------------------------------------------

def without(rule):
  return tuple(r for r in RULES if r != rule)


def test_no_impl(make):
  p, ma_ = make(without("impl"))
  with pytest.raises(MissingRuleError, match=r"^Evaluation rule for 'multiply_add' not implemented"):
    ma_(2., 2., 10.)


def test_jit_without_abstract_eval(make):
  p, ma_ = make(without("abstract_eval"))
  assert ma_(2., 2., 10.) == 14.   # eager evaluation doesn't need it
  for run in (lambda: adx.jit(lambda a, b: ma_(a, a, b))(2., 10.),
              lambda: adx.make_jaxpr(lambda a, b: ma_(a, a, b))(2., 10.)):
    with pytest.raises(MissingRuleError,
                       match=r"^Abstract evaluation rule for 'multiply_add' not implemented"):
      run()


def test_jit_without_lowering(make):
  p, ma_ = make(without("lowering"))
  jaxpr = adx.make_jaxpr(lambda a, b: ma_(a, a, b))(2., 10.)   # staging works
  assert [e.primitive for e in jaxpr.eqns] == [p]
  with pytest.raises(MissingRuleError, match=r"^Lowering rule for 'multiply_add' not implemented"):
    adx.jit(lambda a, b: ma_(a, a, b))(2., 10.)


def test_jvp_without_jvp_rule(make):
  p, ma_ = make(without("jvp"))
  for run in (lambda: adx.jvp(lambda a, b: ma_(a, a, b), (2., 10.), (1., 1.)),
              lambda: adx.grad(lambda a, b: ma_(a, a, b))(2., 10.)):
    with pytest.raises(MissingRuleError, match=r"^JVP rule for 'multiply_add' not implemented"):
      run()
  # A JVP with all-zero tangents needs no rule: nothing to differentiate.
  assert adx.jvp(lambda a: ma_(2., 2., 10.) + a, (1.,), (1.,)) == (15., 1.)


def test_grad_without_transpose_rule(make):
  p, ma_ = make(without("transpose"))
  f = lambda a, b: ma_(a, a, b)
  assert adx.jvp(f, (2., 10.), (1., 1.)) == (14., 5.)   # forward mode is fine
  for run in (lambda: adx.grad(f)(2., 10.), lambda: adx.vjp(f, 2., 10.)[1](1.),
              lambda: adx.jit(adx.grad(f))(2., 10.)):
    with pytest.raises(MissingRuleError, match=r"^Transpose rule for 'multiply_add' not implemented"):
      run()
  # linearize doesn't transpose, so it works
  y, f_lin = adx.linearize(f, 2., 10.)
  assert (y, f_lin(1., 1.)) == (14., 5.)


def test_vmap_without_batching_rule(make):
  p, ma_ = make(without("batching"))
  with pytest.raises(MissingRuleError, match=r"^Batching rule for 'multiply_add' not implemented"):
    adx.vmap(lambda a, b: ma_(a, a, b))(np.array([2., 3.]), np.array([10., 20.]))
  # unbatched operands need no rule
  assert adx.vmap(lambda a: ma_(2., 2., 10.) + a)(np.array([1., 2.])).tolist() == [15., 16.]


def test_rules_graph_marks_missing_rules(make):
  p, _ = make(without("transpose"))
  src = viz.rules_graph(p).source
  assert re.search(r'r_transpose \[label="transpose rule\n\(missing\)"', src)
  assert src.count("(missing)") == 1


def test_abstract_eval_rejects_bad_operands():
  with pytest.raises(TypeError, match="shapes"):
    adx.make_jaxpr(lambda x: ma(x, x, np.ones(3)))(np.ones(2))
  with pytest.raises(TypeError, match="dtypes"):
    adx.make_jaxpr(lambda x: ma(x, x, np.float32(1.)))(1.)


# --- The walkthrough, against JAX ------------------------------------------------------------

def test_walkthrough_values_match_jax():
  a, b = np.array([2., 3.]), np.array([10., 20.])
  jvp_fun = lambda f: (lambda p, t: jax.jvp(f, p, t) if f is jax_square_add else adx.jvp(f, p, t))
  cases = [
      (square_add(2., 10.), jax_square_add(2., 10.)),
      (adx.jit(square_add)(2., 10.), jax.jit(jax_square_add)(2., 10.)),
      (adx.jit(square_add, static_argnums=1)(2., 10.), jax.jit(jax_square_add, static_argnums=1)(2., 10.)),
      (adx.jvp(square_add, (2., 10.), (1., 1.)), jax.jvp(jax_square_add, (2., 10.), (1., 1.))),
      (adx.jit(jvp_fun(square_add))((2., 10.), (1., 1.)),
       jax.jit(jvp_fun(jax_square_add))((2., 10.), (1., 1.))),
      (adx.grad(square_add)(2., 10.), jax.grad(jax_square_add)(2., 10.)),
      (adx.grad(square_add, argnums=(0, 1))(2., 10.), jax.grad(jax_square_add, argnums=(0, 1))(2., 10.)),
      (adx.jit(adx.grad(square_add))(2., 10.), jax.jit(jax.grad(jax_square_add))(2., 10.)),
      (adx.vmap(square_add)(a, b), jax.vmap(jax_square_add)(a, b)),
      (adx.vmap(square_add, in_axes=(0, None))(a, 10.), jax.vmap(jax_square_add, in_axes=(0, None))(a, 10.)),
      (adx.jit(adx.vmap(square_add))(a, b), jax.jit(jax.vmap(jax_square_add))(a, b)),
  ]
  for ours, theirs in cases:
    close(ours, theirs)
  assert adx.jvp(square_add, (2., 10.), (1., 1.)) == (14., 5.)
  assert adx.grad(square_add)(2., 10.) == 4.


def test_transposition_walkthrough():
  # f(x, y) = x * y + y at (2, 4): ct_x = y = 4, ct_y = x + 1 = 3
  f = lambda x, y: x * y + y
  assert adx.grad(f, argnums=(0, 1))(2., 4.) == (4., 3.)
  f_ma = lambda x, y: ma(x, y, y)
  assert adx.grad(f_ma, argnums=(0, 1))(2., 4.) == (4., 3.)


def test_jaxprs_match_the_chapter():
  jaxpr = adx.make_jaxpr(adx.grad(square_add))(2., 10.)
  assert [e.primitive.name for e in jaxpr.eqns] == ["multiply_add"] * 3 + ["add"]
  text = adx.jit(square_add).lower(2., 10.).as_text()
  assert "stablehlo.multiply %arg0, %arg0 : tensor<f64>" in text
  assert re.search(r"stablehlo.add %\d+, %arg1 : tensor<f64>", text)
  # jvp under jit: three multiply_adds (one primal, two tangent)
  jv = adx.make_jaxpr(lambda p, t: adx.jvp(square_add, p, t))((2., 10.), (1., 1.))
  assert [e.primitive.name for e in jv.eqns] == ["multiply_add"] * 3


def test_concrete_array_reaches_abstract_eval_for_constants(make):
  p, ma_ = make()
  seen = []
  rule = core.abstract_eval_rules[p]
  with core.abstract_eval_rules.override(p, lambda *avals: seen.append(avals) or rule(*avals)):
    out = adx.jit(lambda a, b: ma_(a, a, b), static_argnums=1)(2., 10.)
    jaxpr = adx.make_jaxpr(lambda a: ma_(a, a, 10.))(2.)
  assert float(out) == 14.
  staged = seen[0]   # the first call is staging; typecheck_jaxpr follows
  assert [type(a) for a in staged] == [core.ShapedArray, core.ShapedArray, core.ConcreteArray]
  assert staged[2].val == 10.
  assert all(type(a) is core.ShapedArray for a in seen[1])   # the type checker: Lit types
  # the jaxpr itself is typed by ShapedArrays only, and prints as before
  [eqn] = jaxpr.eqns
  assert all(type(x.aval) is core.ShapedArray for x in eqn.inputs + eqn.out_binders)
  assert str(jaxpr) == "{ lambda ; a:f64[]. let b:f64[] = multiply_add a a 10.0:f64[] in (b,) }"


def test_constants_keep_tracers_shaped_and_jit_caches():
  # A closed-over constant array becomes a constvar, typed by a ShapedArray,
  # and the ConcreteArray never makes a staged value concrete.
  c = np.arange(3.)
  f = adx.jit(lambda x: ma(x, c, c))
  assert np.asarray(f(np.ones(3))).tolist() == [0., 2., 4.]
  assert np.asarray(f(np.ones(3))).tolist() == [0., 2., 4.] and f.trace_count == 1
  jaxpr = adx.make_jaxpr(lambda x: ma(x, c, c))(np.ones(3))
  assert all(type(v.aval) is core.ShapedArray for v in jaxpr.jaxpr.constvars)

  def branchy(x):
    if ma(x, x, x) > 0:   # a staged value: still not concrete
      return x
    return -x
  with pytest.raises(core.ConcretizationError):
    adx.jit(branchy)(1.)
  # jit of a closure over an outer tracer: that constant is not concrete
  assert float(adx.grad(lambda y: adx.jit(lambda x: ma(x, y, y))(2.))(3.)) == 3.


# --- Several results ---------------------------------------------------------------------------

sincos_p = core.Primitive("sincos", multiple_results=True)
sincos_p.def_impl(lambda x: [np.sin(x), np.cos(x)])
sincos_p.def_abstract_eval(lambda x: [core.ShapedArray(x.shape, x.dtype)] * 2)


def _sincos_lowering(ctx, x):
  t = lowering.mlir_type(ctx.avals_out[0])
  return [ctx.emit(f"stablehlo.sine {x} : {t}"), ctx.emit(f"stablehlo.cosine {x} : {t}")]


lowering.register_lowering(sincos_p, _sincos_lowering)


def _sincos_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  s, c = sincos_p.bind(x)
  ts, tc = scale2_p.bind(ad.instantiate_zeros(t), c, lax.neg(s))
  return [s, c], [ts, tc]


ad.jvp_rules[sincos_p] = _sincos_jvp
batching.vmap_rules[sincos_p] = lambda n, vals, dims: (sincos_p.bind(*vals), [dims[0]] * 2)

# scale2(t, a, b) = [t * a, t * b]: linear in t, with two results to transpose.
scale2_p = core.Primitive("scale2", multiple_results=True)
scale2_p.def_impl(lambda t, a, b: [np.multiply(t, a), np.multiply(t, b)])
scale2_p.def_abstract_eval(lambda t, a, b: [core.ShapedArray(t.shape, t.dtype)] * 2)
lowering.register_lowering(scale2_p, lambda ctx, t, a, b: [
    ctx.emit(f"stablehlo.multiply {t}, {a} : {lowering.mlir_type(ctx.avals_out[0])}"),
    ctx.emit(f"stablehlo.multiply {t}, {b} : {lowering.mlir_type(ctx.avals_out[0])}")])


def _scale2_transpose(cts, t, a, b):
  assert ad.is_undefined_primal(t) and not ad.is_undefined_primal(a)
  ct_a, ct_b = (ad.instantiate_zeros(ct) for ct in cts)
  return [lax.add(lax.mul(ct_a, a), lax.mul(ct_b, b)), None, None]


ad.transpose_rules[scale2_p] = _scale2_transpose
ad.jvp_rules[scale2_p] = lambda primals, tangents: (
    scale2_p.bind(*primals),
    scale2_p.bind(ad.instantiate_zeros(tangents[0]), *primals[1:]) if type(tangents[1]) is ad.Zero
    and type(tangents[2]) is ad.Zero else _scale2_full_jvp(primals, tangents))


def _scale2_full_jvp(primals, tangents):
  (t, a, b), (tt, ta, tb) = primals, [ad.instantiate_zeros(x) for x in tangents]
  return [lax.add(lax.mul(tt, a), lax.mul(t, ta)), lax.add(lax.mul(tt, b), lax.mul(t, tb))]


def _scale2_batch(n, vals, dims):
  vals = [batching.move_batch_axis(n, d, 0, v) for v, d in zip(vals, dims)]
  return scale2_p.bind(*vals), [0, 0]


batching.vmap_rules[scale2_p] = _scale2_batch


def sincos_sum(x):
  s, c = sincos_p.bind(x)
  return anp.sum(s * 2. + c)


def jax_sincos_sum(x):
  return jnp.sum(jnp.sin(x) * 2. + jnp.cos(x))


def test_multiple_results_through_every_transformation():
  x = np.linspace(-1., 2., 4)
  s, c = sincos_p.bind(x)
  close((s, c), (np.sin(x), np.cos(x)))
  close(adx.jit(lambda x: sincos_p.bind(x))(x), [np.sin(x), np.cos(x)])
  close(adx.jvp(sincos_sum, (x,), (np.ones(4),)), jax.jvp(jax_sincos_sum, (x,), (np.ones(4),)))
  close(adx.grad(sincos_sum)(x), jax.grad(jax_sincos_sum)(x))
  close(adx.jit(adx.grad(sincos_sum))(x), jax.grad(jax_sincos_sum)(x))
  close(adx.vmap(adx.grad(sincos_sum))(np.stack([x, x + 1])),
        jax.vmap(jax.grad(jax_sincos_sum))(np.stack([x, x + 1])))
  close(adx.jit(adx.vmap(adx.grad(sincos_sum)))(np.stack([x, x + 1])),
        jax.vmap(jax.grad(jax_sincos_sum))(np.stack([x, x + 1])))
  close(adx.jacfwd(adx.grad(sincos_sum))(x), jax.hessian(jax_sincos_sum)(x))
  jaxpr = adx.make_jaxpr(lambda x: sincos_p.bind(x))(x)
  assert len(jaxpr.eqns) == 1 and len(jaxpr.eqns[0].out_binders) == 2


# --- Every composition, in every order ---------------------------------------------------------

def f_ours(x):
  return ma(anp.sin(x), x, anp.cos(x) * 2.)


def f_jax(x):
  return jnp.sin(x) * x + jnp.cos(x) * 2.


def apply(name, f, api):
  """One transformation of a function of one array to an array of the same shape."""
  if api == "ours":
    jit, jvp, grad, vmap, cos, total = adx.jit, adx.jvp, adx.grad, adx.vmap, anp.cos, anp.sum
  else:
    jit, jvp, grad, vmap, cos, total = jax.jit, jax.jvp, jax.grad, jax.vmap, jnp.cos, jnp.sum
  if name == "jit":
    return jit(f)
  if name == "jvp":
    return lambda x: jvp(f, (x,), (cos(x),))[1]
  if name == "grad":
    return grad(lambda x: total(f(x)))
  if name == "vmap":
    return vmap(f)
  if name == "vmap1":
    return vmap(f, in_axes=1, out_axes=1)
  raise ValueError(name)


@given(st.lists(st.sampled_from(["jit", "jvp", "grad", "vmap", "vmap1"]), min_size=1, max_size=4),
       st.integers(0, 2**31 - 1))
def test_every_composition_matches_jax(names, seed):
  x = np.random.default_rng(seed).normal(size=(2, 3, 2, 2, 2))   # rank > number of vmaps
  ours, theirs = f_ours, f_jax
  for name in names:   # names[0] is applied first (innermost)
    ours, theirs = apply(name, ours, "ours"), apply(name, theirs, "jax")
  got, want = ours(x), theirs(x)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-10)


@given(st.sampled_from([(0, 0, 0), (0, None, 0), (None, 0, 1), (1, 0, None), (1, 1, 1)]),
       st.sampled_from(["eager", "jit", "grad"]))
def test_batching_rule_with_any_axes(axes, mode):
  rng = np.random.default_rng(0)
  shapes = [(3,) if ax is None else (3, 2) if ax == 1 else (2, 3) for ax in axes]
  args = [rng.normal(size=s) for s in shapes]
  fo = lambda x, y, z: ma(x, y, z)
  fj = lambda x, y, z: x * y + z
  if mode == "grad":
    fo = adx.grad(lambda x, y, z: anp.sum(ma(x, y, z)))
    fj = jax.grad(lambda x, y, z: jnp.sum(x * y + z))
  ours = adx.vmap(fo, in_axes=axes)
  if mode == "jit":
    ours = adx.jit(ours)
  close(ours(*args), jax.vmap(fj, in_axes=axes)(*args))


# --- viz.trace ------------------------------------------------------------------------------------

def test_trace_prints_calls_and_returns(capsys):
  @viz.trace("inner")
  def inner(x, y):
    viz.trace_note("note")
    return ma(x, x, y)

  @viz.trace("outer")
  def outer(a, b):
    return inner(a, b)

  adx.jvp(outer, (2., 10.), (1., 0.))
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == ("call outer(Traced<ConcreteArray(f64[], 2.0)>with<JVPTrace level=1>, "
                      "Traced<ConcreteArray(f64[], 10.0)>with<JVPTrace level=1>)")
  assert lines[1].startswith("  call inner(Traced<")
  assert lines[2] == "    note"
  assert lines[3].startswith("  |<- inner = Traced<ConcreteArray(f64[], 14.0)>with<JVPTrace")
  assert lines[-1].startswith("|<- outer = ")

  adx.jit(outer, static_argnums=1)(2., 10.)
  out = capsys.readouterr().out
  assert "call outer(Traced<ShapedArray(float64[], weak_type=True)>with<DynamicJaxprTrace level=1>, 10.0)" in out


def test_trace_restores_indentation_after_an_exception(capsys, make):
  p, ma_ = make(without("jvp"))

  @viz.trace("f")
  def f(x):
    return g(x)

  @viz.trace("g")
  def g(x):
    return ma_(x, x, x)

  with pytest.raises(MissingRuleError):
    adx.jvp(f, (1.,), (1.,))
  lines = capsys.readouterr().out.splitlines()
  assert lines[-2:] == ["  |<- g raised MissingRuleError", "|<- f raised MissingRuleError"]
  f(2.)
  assert capsys.readouterr().out.splitlines()[0] == "call f(2.0)"   # back at column 0
  with viz.tracing(False):
    f(2.)
  assert capsys.readouterr().out == ""
  f(2.)
  assert capsys.readouterr().out != ""


def test_trace_short_forms():
  assert viz.pp_traced((np.array([2., 3.]), 1, None)) == "([2. 3.], 1, None)"
  assert viz.pp_traced(np.float64(14.)) == "14.0"
  assert viz.pp_traced(core.ConcreteArray(np.float64(1.))) == "ConcreteArray(f64[], 1.0)"
  assert viz.pp_traced(ad.UndefPrimal(core.ShapedArray((2,), np.float32))) == "UndefPrimal(f32[2])"
  assert viz.pp_traced(lowering.LoweringContext(lowering.Module("m"))) == "<LoweringContext>"
  assert viz.pp_traced(np.zeros(100)) == "f64[100]"


# The module's primitives are registered only while its tests run, so that the
# other modules' checks over every registered rule (test_lowering) don't see them.
_MODULE_PRIMS = [MA, sincos_p, scale2_p]
_SAVED = {p: {k: t[p] for k, t in TABLES.items() if p in t} for p in _MODULE_PRIMS}
for _p in _MODULE_PRIMS:
  forget(_p)


@pytest.fixture(autouse=True, scope="module")
def _registered():
  for p, rules in _SAVED.items():
    for kind, rule in rules.items():
      TABLES[kind][p] = rule
  yield
  for p in _SAVED:
    forget(p)
