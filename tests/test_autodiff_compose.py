"""Reverse mode composed with everything else, on random programs and on the
Autodidax Part 4 stress tests: grad of vmap, vmap of grad, jvp of grad, grad
of jit, jit of grad, grad of grad (and jit of it), jacrev, jacfwd of jacrev;
the seven Hessians; the nested jit/jvp closure test `foo`. JAX is the oracle.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from test_autodiff import (ad_programs, describe, like, pack, scalar_fun, tree_fun,
                           weights_for)
from test_programs import (OURS, THEIRS, Program, assert_trees_close, in_axes_for,
                           inputs_for, seeds, tol)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

B = 2   # batch size

# The tests that compile with our jit as well as JAX's run fewer examples.
fewer = settings(max_examples=max(1, settings.default.max_examples * 5 // 8))


def _tree_vdot(bk, tree, vs):
  leaves = (adx.tree_util.tree_leaves if bk is OURS else jax.tree_util.tree_leaves)(tree)
  terms = [bk.np.sum(bk.np.multiply(g, v)) for g, v in zip(leaves, vs)]
  out = terms[0]
  for t in terms[1:]:
    out = bk.np.add(out, t)
  return out


def _setup(program, seed):
  xs = inputs_for(program, seed)
  w = weights_for(program, seed + 1)
  return xs, scalar_fun(program, OURS, w), scalar_fun(program, THEIRS, w)


# --- First order, composed ------------------------------------------------------------------

@given(ad_programs(n_ops=(1, 4)), seeds, st.data())
def test_grad_of_vmap_matches_jax(program, seed, data):
  note(describe(program))
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xs = inputs_for(program, seed, [(in_axes, B)])
  w = weights_for(program, seed + 1)
  f, f_j = scalar_fun(program, OURS, w), scalar_fun(program, THEIRS, w)
  axes = (pack(list(in_axes)),)
  ours = adx.grad(lambda t: anp.sum(adx.vmap(f, axes)(t)))(pack(xs))
  theirs = jax.jit(jax.grad(lambda t: jnp.sum(jax.vmap(f_j, axes)(t))))(pack(xs))
  assert_trees_close(ours, theirs, tol(program))


@given(ad_programs(n_ops=(1, 4)), seeds, st.data())
def test_vmap_of_grad_matches_jax(program, seed, data):
  note(describe(program))
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xs = inputs_for(program, seed, [(in_axes, B)])
  w = weights_for(program, seed + 1)
  f, f_j = scalar_fun(program, OURS, w), scalar_fun(program, THEIRS, w)
  axes = (pack(list(in_axes)),)
  ours = adx.vmap(adx.grad(f), axes)(pack(xs))
  theirs = jax.jit(jax.vmap(jax.grad(f_j), axes))(pack(xs))
  assert_trees_close(ours, theirs, tol(program))


@given(ad_programs(n_ops=(1, 4)), seeds)
def test_jvp_of_grad_matches_jax(program, seed):
  note(describe(program))
  xs, f, f_j = _setup(program, seed)
  ts = pack(like(xs, seed + 2))
  ours = adx.jvp(adx.grad(f), (pack(xs),), (ts,))
  theirs = jax.jit(lambda x, t: jax.jvp(jax.grad(f_j), (x,), (t,)))(pack(xs), ts)
  assert_trees_close(ours, theirs, tol(program))


@fewer
@given(ad_programs(), seeds)
def test_grad_of_jit_and_jit_of_grad_match_jax(program, seed):
  note(describe(program))
  xs, f, f_j = _setup(program, seed)
  theirs = jax.jit(jax.grad(f_j))(pack(xs))
  assert_trees_close(adx.grad(adx.jit(f))(pack(xs)), theirs, tol(program))
  assert_trees_close(adx.jit(adx.grad(f))(pack(xs)), theirs, tol(program))
  assert_trees_close(adx.jit(adx.grad(adx.jit(f)))(pack(xs)), theirs, tol(program))


# --- Second order ------------------------------------------------------------------------------

@fewer
@given(ad_programs(n_ops=(1, 4)), seeds)
def test_grad_of_grad_matches_jax(program, seed):
  """grad(x -> <grad f(x), v>): a Hessian-vector product, three ways."""
  note(describe(program))
  xs, f, f_j = _setup(program, seed)
  vs = like(xs, seed + 2)
  h = lambda t: _tree_vdot(OURS, adx.grad(f)(t), vs)
  h_j = lambda t: _tree_vdot(THEIRS, jax.grad(f_j)(t), vs)
  theirs = jax.jit(jax.grad(h_j))(pack(xs))
  assert_trees_close(adx.grad(h)(pack(xs)), theirs, tol(program))
  assert_trees_close(adx.jit(adx.grad(h))(pack(xs)), theirs, tol(program))
  h_jit = lambda t: _tree_vdot(OURS, adx.jit(adx.grad(f))(t), vs)
  assert_trees_close(adx.grad(h_jit)(pack(xs)), theirs, tol(program))


def _single_output(program):
  return program._replace(outs=program.outs[:1])


@given(ad_programs(n_ops=(1, 4), max_in_size=8).map(_single_output), seeds, st.data())
def test_jacrev_matches_jax(program, seed, data):
  note(describe(program))
  n = len(program.in_shapes)
  argnums = data.draw(st.one_of(st.integers(0, n - 1),
                                st.lists(st.integers(0, n - 1), min_size=1, max_size=n,
                                         unique=True).map(tuple)), "argnums")
  xs = inputs_for(program, seed)
  f = lambda *a: program_out(program, OURS, a)
  f_j = lambda *a: program_out(program, THEIRS, a)
  ours = adx.jacrev(f, argnums)(*xs)
  assert_trees_close(ours, jax.jit(jax.jacrev(f_j, argnums))(*xs), tol(program))
  # Forward and reverse mode agree with each other too.
  assert_trees_close(ours, jax.jit(jax.jacfwd(f_j, argnums))(*xs), tol(program))
  assert_trees_close(adx.jacfwd(f, argnums)(*xs), ours, 1e-9 if not program.has_f32 else 2e-4)


def program_out(program, bk, args):
  from test_autodiff import run
  return run(program, bk, *args)[0]


@given(ad_programs(n_inputs=(1, 1), n_ops=(1, 4), max_in_size=6).map(_single_output), seeds)
def test_jacfwd_of_jacrev_matches_jax(program, seed):
  note(describe(program))
  xs = inputs_for(program, seed)
  f = lambda x: program_out(program, OURS, (x,))
  f_j = lambda x: program_out(program, THEIRS, (x,))
  ours = adx.jacfwd(adx.jacrev(f))(*xs)
  assert_trees_close(ours, jax.jit(jax.jacfwd(jax.jacrev(f_j)))(*xs), tol(program))
  assert_trees_close(adx.jacrev(adx.jacfwd(f))(*xs), ours, tol(program))


# --- The seven Hessians (Autodidax Part 4) -----------------------------------------------------

def _g(np_):
  return lambda x: np_.cos(x) * 2.


def _make_f(np_, jit):
  g = jit(_g(np_))
  return jit(lambda x: g(x * 2.))


@pytest.mark.parametrize("jitted", [False, True], ids=["plain", "jit_decorated"])
@pytest.mark.parametrize("x", [3., -1.7])
def test_seven_hessians(jitted, x):
  """f(x) = g(2x), g(x) = 2 cos x (jit-decorated as in Autodidax, or not)."""
  f = _make_f(anp, adx.jit if jitted else (lambda h: h))
  f_j = _make_f(jnp, jax.jit if jitted else (lambda h: h))
  jit, grad, jvp = adx.jit, adx.grad, adx.jvp
  want = jax.grad(jax.grad(f_j))(x)
  np.testing.assert_allclose(want, -8. * np.cos(2. * x), rtol=1e-12)
  hessians = [
      grad(grad(f))(x),
      grad(grad(jit(f)))(x),
      grad(jit(grad(f)))(x),
      jit(grad(grad(f)))(x),
      jvp(grad(f), (x,), (1.,))[1],
      jvp(jit(grad(f)), (x,), (1.,))[1],
      jvp(jit(grad(jit(f))), (x,), (1.,))[1],
  ]
  for h in hessians:
    assert not isinstance(h, adx.core.Tracer)
    np.testing.assert_allclose(h, want, rtol=1e-12)
  # The values and first derivatives, all ways.
  vals = [f(x), jit(f)(x), jvp(f, (x,), (5.,))[0], jvp(jit(f), (x,), (5.,))[0]]
  derivs = [grad(f)(x), grad(jit(f))(x), jit(grad(jit(f)))(x),
            jvp(f, (x,), (1.,))[1], jvp(jit(f), (x,), (1.,))[1]]
  for v in vals:
    np.testing.assert_allclose(v, f_j(x), rtol=1e-12)
  for d in derivs:
    np.testing.assert_allclose(d, jax.grad(f_j)(x), rtol=1e-12)


# --- The compositionality stress test (Autodidax Part 4) -------------------------------------------

def _make_foo(jit, jvp, sin):
  def foo(x):
    @jit
    def bar(y):
      def baz(w):
        q = jit(lambda x: y)(x)
        q = q + jit(lambda: y)()
        q = q + jit(lambda y: w + y)(y)
        q = jit(lambda w: jit(sin)(x) * y)(1.0) + q
        return q
      p, t = jvp(baz, (x + 1.0,), (y,))
      return t + (x * p)
    return bar(x)
  return foo


@pytest.mark.parametrize("x", [3., -0.6])
def test_foo_stress_test(x):
  foo = _make_foo(adx.jit, adx.jvp, anp.sin)
  foo_j = _make_foo(jax.jit, jax.jvp, jnp.sin)
  jit, grad, jvp = adx.jit, adx.grad, adx.jvp
  val_j, d_j = jax.value_and_grad(foo_j)(x)
  h_j = jax.grad(jax.grad(foo_j))(x)
  for v in [foo(x), jit(foo)(x), jvp(foo, (x,), (5.,))[0], jvp(jit(foo), (x,), (5.,))[0],
            adx.value_and_grad(foo)(x)[0]]:
    np.testing.assert_allclose(v, val_j, rtol=1e-12)
  for d in [grad(foo)(x), grad(jit(foo))(x), jit(grad(jit(foo)))(x),
            jvp(foo, (x,), (1.,))[1], jvp(jit(foo), (x,), (1.,))[1],
            adx.vjp(foo, x)[1](1.)[0]]:
    np.testing.assert_allclose(d, d_j, rtol=1e-12)
  for h in [grad(grad(foo))(x), grad(jit(grad(foo)))(x), jit(grad(grad(foo)))(x),
            jvp(grad(foo), (x,), (1.,))[1]]:
    np.testing.assert_allclose(h, h_j, rtol=1e-12)


def test_foo_vmap_of_grad():
  foo = _make_foo(adx.jit, adx.jvp, anp.sin)
  foo_j = _make_foo(jax.jit, jax.jvp, jnp.sin)
  xs = np.array([3., -0.6, 1.25])
  np.testing.assert_allclose(adx.vmap(adx.grad(foo))(xs), jax.vmap(jax.grad(foo_j))(xs),
                             rtol=1e-12)


# --- Odd corners: differentiating through vjp/linearize, jit outputs that are
# literals, inputs or integers, third order through nested jits ---------------------------------

J = adx.jit
CORNERS = [
    ("jvp_of_vjp", lambda: adx.jvp(lambda x: adx.vjp(anp.sin, x)[1](1.)[0], (1.,), (1.,)),
     lambda: jax.jvp(lambda x: jax.vjp(jnp.sin, x)[1](1.)[0], (1.,), (1.,))),
    ("grad_wrt_cotangent", lambda: adx.grad(lambda c: adx.vjp(J(anp.sin), 1.)[1](c)[0])(2.),
     lambda: jax.grad(lambda c: jax.vjp(jnp.sin, 1.)[1](c)[0])(2.)),
    ("grad_of_vjp_x_and_ct",
     lambda: adx.grad(lambda x: adx.vjp(J(lambda a: anp.sin(a) * a), x)[1](x)[0])(2.),
     lambda: jax.grad(lambda x: jax.vjp(lambda a: jnp.sin(a) * a, x)[1](x)[0])(2.)),
    ("grad_of_linearize", lambda: adx.grad(lambda x: adx.linearize(anp.sin, x)[1](x))(2.),
     lambda: jax.grad(lambda x: jax.linearize(jnp.sin, x)[1](x))(2.)),
    ("third_order_nested_jit",
     lambda: J(adx.grad(J(adx.grad(J(adx.grad(J(lambda x: anp.exp(x) * x)))))))(2.),
     lambda: jax.grad(jax.grad(jax.grad(lambda x: jnp.exp(x) * x)))(2.)),
    ("jit_literal_and_const_outputs",
     lambda: adx.vjp(J(lambda x: (x * 2., 1.0, np.ones(2))), 1.)[1]((1., 1., np.ones(2))),
     lambda: jax.vjp(lambda x: (x * 2., 1.0, jnp.ones(2)), 1.)[1]((1., 1., np.ones(2)))),
    ("jit_passthrough_output",
     lambda: adx.vjp(J(lambda x, y: (y, x * y)), 1., 2.)[1]((1., 1.)),
     lambda: jax.vjp(lambda x, y: (y, x * y), 1., 2.)[1]((1., 1.))),
    ("grad_jit_with_int_operand",
     lambda: adx.grad(adx.grad(lambda x: J(lambda x, n: anp.sin(x) * anp.astype(n, np.float64))(
         x, np.int32(3))))(1.),
     lambda: jax.grad(jax.grad(lambda x: jnp.sin(x) * 3.))(1.)),
    ("grad_f32_through_jit",
     lambda: adx.grad(lambda y: J(lambda x, y: anp.sum(x * anp.astype(y, np.float64)))(
         np.arange(2.), y))(np.float32(3)),
     lambda: jax.grad(lambda y: jnp.sum(jnp.arange(2.) * y.astype(np.float64)))(np.float32(3))),
    ("vmap_of_jacrev", lambda: adx.vmap(adx.jacrev(lambda x: anp.sin(x) * x))(
        np.arange(6.).reshape(2, 3)),
     lambda: jax.vmap(jax.jacrev(lambda x: jnp.sin(x) * x))(np.arange(6.).reshape(2, 3))),
    ("grad_of_jit_of_vmap",
     lambda: adx.grad(lambda x: anp.sum(J(adx.vmap(lambda a: anp.sin(a) * a))(x)))(np.arange(3.)),
     lambda: jax.grad(lambda x: jnp.sum(jax.vmap(lambda a: jnp.sin(a) * a)(x)))(np.arange(3.))),
    ("grad_of_batched_matmul_in_jit",
     lambda: adx.grad(lambda a, b: anp.sum(anp.sin(J(anp.matmul)(a, b))), (0, 1))(
         np.linspace(0, 1, 24).reshape(2, 3, 4), np.linspace(-1, 1, 40).reshape(2, 4, 5)),
     lambda: jax.grad(lambda a, b: jnp.sum(jnp.sin(jnp.matmul(a, b))), (0, 1))(
         np.linspace(0, 1, 24).reshape(2, 3, 4), np.linspace(-1, 1, 40).reshape(2, 4, 5))),
]


@pytest.mark.parametrize("ours,theirs", [c[1:] for c in CORNERS], ids=[c[0] for c in CORNERS])
def test_corner_cases_match_jax(ours, theirs):
  o, t = ours(), theirs()
  ol, tl = adx.tree_util.tree_leaves(o), jax.tree_util.tree_leaves(t)
  assert len(ol) == len(tl)
  for a, b in zip(ol, tl):
    assert not isinstance(a, adx.core.Tracer)
    assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype, (a, b)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
