"""Batching (autodidax.batching): move_batch_axis, the per-primitive vmap
rules, and vmap's in_axes/out_axes, against jax.vmap and a loop by hand."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import batching, core, lax
from autodidax.batching import move_batch_axis, not_mapped

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

shapes = st.lists(st.integers(1, 4), max_size=3).map(tuple)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 4), st.data())
def test_move_batch_axis_moves_like_numpy(shape, size, data):
  src = data.draw(st.integers(0, len(shape)))
  dst = data.draw(st.integers(0, len(shape)))
  x = np.random.default_rng(0).normal(size=(*shape[:src], size, *shape[src:]))
  np.testing.assert_array_equal(move_batch_axis(size, src, dst, x), np.moveaxis(x, src, dst))


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 4), st.data())
def test_move_batch_axis_materializes_an_unmapped_value(shape, size, data):
  dst = data.draw(st.integers(0, len(shape)))
  x = np.arange(float(np.prod(shape, dtype=int))).reshape(shape)
  out = np.asarray(move_batch_axis(size, not_mapped, dst, x))
  assert out.shape == (*shape[:dst], size, *shape[dst:])
  for b in range(size):   # every slice along the new axis is x
    np.testing.assert_array_equal(np.take(out, b, axis=dst), x)


RNG = np.random.default_rng(3)
A, B, C = RNG.normal(size=(3, 4, 5)), RNG.normal(size=(5, 4)), RNG.normal(size=(4,))
D = RNG.normal(size=(5, 2))

# (name, ours, theirs, args, in_axes): each batching rule meets batch axes that
# differ between its operands (and operands without one).
CASES = [
    ("add, axes 0 and 1", lax.add, jax.lax.add, (A, np.swapaxes(A, 0, 1)), (0, 1)),
    ("mul, one unmapped", lax.mul, jax.lax.mul, (A, A[0]), (0, None)),
    ("sin, axis 2", lax.sin, jax.lax.sin, (A,), (2,)),
    ("reduce_sum over 0", lambda x: lax.reduce_sum(x, (0,)), lambda x: jnp.sum(x, 0), (A,), (1,)),
    ("reduce_max, last axis", lambda x: lax.reduce_max(x, (1,)), lambda x: jnp.max(x, 1),
     (A,), (-1,)),
    ("transpose", lambda x: lax.transpose(x, (1, 0)), lambda x: x.T, (A,), (2,)),
    ("reshape", lambda x: lax.reshape(x, (12,)), lambda x: x.reshape(12), (A,), (2,)),
    ("broadcast", lambda x: lax.broadcast(x, (2, 4), (0,)),   # ours names the new axes
     lambda x: jax.lax.broadcast_in_dim(x, (2, 4), (1,)), (A[0],), (1,)),
    ("dot_general, both mapped", lambda x, y: x @ y, lambda x, y: x @ y, (A, B), (2, 0)),
    ("dot_general, matrix @ mapped vector", lambda x, y: x @ y, lambda x, y: x @ y,
     (A[0], RNG.normal(size=(5, 3))), (None, 1)),
    ("numpy program", lambda x, y: anp.tanh(x * y).sum(0) + anp.max(y),
     lambda x, y: jnp.tanh(x * y).sum(0) + jnp.max(y), (A, B[:, 0]), (0, None)),
]


@pytest.mark.parametrize("name, ours, theirs, args, in_axes", CASES, ids=[c[0] for c in CASES])
def test_vmap_rules_match_jax(name, ours, theirs, args, in_axes):
  np.testing.assert_allclose(adx.vmap(ours, in_axes)(*args), jax.vmap(theirs, in_axes)(*args),
                             rtol=1e-12, atol=1e-12)


def test_nested_vmap_over_two_axes_matches_jax():
  f = lambda x, y: anp.sin(x) @ y
  g = lambda x, y: jnp.sin(x) @ y
  ours = adx.vmap(adx.vmap(f, (0, None)), (None, 1))(A, D)
  theirs = jax.vmap(jax.vmap(g, (0, None)), (None, 1))(A, D)
  np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_in_axes_as_a_pytree_prefix_and_out_axes_per_output():
  f = lambda d, s: {"sum": d["a"] + s, "prod": d["a"] * d["b"]}
  args = ({"a": A[:, :, 0], "b": A[:, 0, 0]}, 2.)
  in_axes, out_axes = ({"a": 1, "b": None}, None), {"sum": 1, "prod": 0}
  ours = adx.vmap(f, in_axes, out_axes)(*args)
  theirs = jax.vmap(f, in_axes, out_axes)(*args)
  assert set(ours) == set(theirs)
  for k in ours:
    np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-12)


def test_out_axes_none_for_an_unmapped_output():
  ours = adx.vmap(lambda x, y: (x * 2., y), (0, None), (0, None))(C, 3.)
  theirs = jax.vmap(lambda x, y: (x * 2., y), (0, None), (0, None))(C, 3.)
  np.testing.assert_allclose(ours[0], theirs[0])
  assert np.shape(ours[1]) == np.shape(theirs[1]) == () and float(ours[1]) == 3.


def test_a_missing_vmap_rule_names_the_rule_and_the_primitive():
  twice_p = core.Primitive("twice_for_vmap")
  with core.impl_rules.override(twice_p, lambda x: 2 * x), \
       core.abstract_eval_rules.override(twice_p, lambda x: x):
    with pytest.raises(core.MissingRuleError, match="twice_for_vmap"):
      adx.vmap(twice_p.bind)(C)
    rule = lambda axis_size, vals, dims: (twice_p.bind(vals[0]), dims[0])
    with batching.vmap_rules.override(twice_p, rule):
      np.testing.assert_array_equal(adx.vmap(twice_p.bind)(C), 2 * C)
