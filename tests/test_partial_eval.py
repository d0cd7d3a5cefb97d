"""Partial evaluation (autodidax.partial_eval): partial_eval_jaxpr's split
into a known jaxpr and an unknown one, which residuals cross between them,
and linearize/vjp built on it, against JAX and by running both halves."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import lax
from autodidax import partial_eval as pe
from autodidax.jaxpr import eval_jaxpr, typecheck_jaxpr

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

X, Y = np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.5, -0.7])


def f(x, y):
  a, b = anp.sin(x), anp.cos(x)   # depend on x only
  return a * y + b, b * 2.        # the first needs y; the second doesn't


def split(fun, unknowns, instantiate=None, args=(X, Y)):
  closed = adx.make_jaxpr(fun)(*args)
  assert not closed.consts
  return closed.jaxpr, pe.partial_eval_jaxpr(closed.jaxpr, unknowns, instantiate)


def prims(jaxpr):
  return [e.primitive.name for e in jaxpr.eqns]


def test_known_and_unknown_halves_recompose_to_the_whole():
  jaxpr, (j1, j2, out_uk, num_res) = split(f, [False, True])
  assert out_uk == [True, False]
  assert sorted(prims(j1)) == ["cos", "mul", "sin"] and prims(j2) == ["mul", "add"]
  assert num_res == 2   # sin(x) and cos(x) cross over; x itself is not needed
  typecheck_jaxpr(j1), typecheck_jaxpr(j2)
  known = eval_jaxpr(j1, [], X)
  known_outs, res = known[:1], known[1:]
  unknown_outs = eval_jaxpr(j2, [], *res, Y)
  whole = eval_jaxpr(jaxpr, [], X, Y)
  np.testing.assert_allclose(unknown_outs[0], whole[0])
  np.testing.assert_allclose(known_outs[0], whole[1])
  np.testing.assert_allclose(whole[0], np.sin(X) * Y + np.cos(X))


def test_instantiate_moves_a_known_output_to_the_unknown_side():
  _, (j1, j2, out_uk, num_res) = split(f, [False, True], instantiate=[False, True])
  assert out_uk == [True, True]
  res = eval_jaxpr(j1, [], X)
  outs = eval_jaxpr(j2, [], *res, Y)
  np.testing.assert_allclose(outs[1], np.cos(X) * 2.)


@pytest.mark.parametrize("unknowns", [[False, False], [True, True]])
def test_all_known_or_all_unknown(unknowns):
  jaxpr, (j1, j2, out_uk, num_res) = split(f, unknowns)
  assert out_uk == [all(unknowns)] * 2 and num_res == 0
  side = j2 if all(unknowns) else j1
  assert prims(side) == prims(jaxpr) and not (j1 if all(unknowns) else j2).eqns


def test_an_unknown_input_used_as_is_is_not_a_residual():
  # the known side needs nothing from the unknown one, and y passes straight through
  _, (j1, j2, out_uk, num_res) = split(lambda x, y: (lax.mul(x, 2.), y), [False, True])
  assert out_uk == [False, True] and num_res == 0 and not j2.eqns


@pytest.mark.parametrize("fun, jfun", [
    (lambda x: anp.sum(anp.tanh(x) * anp.exp(x)), lambda x: jnp.sum(jnp.tanh(x) * jnp.exp(x))),
    (lambda x: lax.scan(lambda c, xi: (c * xi + 1., c), 1., x)[0],
     lambda x: jax.lax.scan(lambda c, xi: (c * xi + 1., c), 1., x)[0]),
    (lambda x: lax.cond(anp.sum(x) > 0., anp.sin, anp.cos, x).sum(),
     lambda x: jax.lax.cond(jnp.sum(x) > 0., jnp.sin, jnp.cos, x).sum()),
])
def test_linearize_and_vjp_built_on_partial_eval_match_jax(fun, jfun):
  t = np.array([0.1, -0.4, 0.25])
  y, f_lin = adx.linearize(fun, X)
  jy, jf_lin = jax.linearize(jfun, X)
  np.testing.assert_allclose(y, jy, rtol=1e-12)
  np.testing.assert_allclose(f_lin(t), jf_lin(t), rtol=1e-12)
  _, f_vjp = adx.vjp(fun, X)
  np.testing.assert_allclose(f_vjp(1.)[0], jax.grad(jfun)(X), rtol=1e-12)
  eps = 1e-6   # and a finite difference
  np.testing.assert_allclose(f_lin(t), (fun(X + eps * t) - fun(X - eps * t)) / (2 * eps),
                             rtol=1e-6)


def test_linearize_stages_only_the_linear_part():
  _, f_lin = adx.linearize(lambda x: anp.sin(x) * x, X)
  jaxpr = adx.make_jaxpr(f_lin)(X)
  assert {"sin", "cos"}.isdisjoint(prims(jaxpr.jaxpr))   # known: computed once, now residuals


def test_cond_split_with_a_weak_residual_type_checks_and_runs():
  # the branches save residuals of different weak types (a weak Python-float
  # input in one branch, a zero in the other)
  bend = lambda x: lax.cond(x > 0., anp.sin, lambda x: x * x, x)
  closed = adx.make_jaxpr(lambda x, t: adx.jvp(bend, (x,), (t,)))(1., 1.)   # weak inputs
  jaxpr1, jaxpr2, out_unknowns, num_res = pe.partial_eval_jaxpr(closed.jaxpr, [False, True])
  assert out_unknowns == [False, True]
  for x in (1., -2.):
    known_out, *res = eval_jaxpr(jaxpr1, [], x)
    (tangent,) = eval_jaxpr(jaxpr2, [], *res, 1.)
    np.testing.assert_allclose(known_out, np.sin(x) if x > 0 else x * x)
    np.testing.assert_allclose(tangent, np.cos(x) if x > 0 else 2 * x)
