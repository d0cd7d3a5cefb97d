"""autodidax.pallas against jax.experimental.pallas in interpret mode.

Each kernel in pallas_cases.py is built twice from the same code, once on
each library, and run eagerly and under jit, vmap and jvp. JAX's side is
first checked against plain jax.numpy, so a wrong expectation can't pass.
"""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.experimental import pallas as jpl

import autodidax as adx
from autodidax import core, lax, pallas as pl, numpy as anp
from pallas_cases import CASES, REFERENCE, USES_PROGRAM_ID

TOL = dict(rtol=2e-5, atol=2e-5)


def leaves(tree):
  return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def close(got, want, **tol):
  got, want = leaves(got), leaves(want)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
    np.testing.assert_allclose(g, w, **(tol or TOL))


def both(name):
  ours, args = CASES[name](pl, anp, lax)
  theirs, _ = CASES[name](jpl, jjnp, jax.lax)
  return ours, theirs, args


@pytest.fixture(autouse=True)
def clean_stack():
  yield
  assert len(core.trace_stack) == 1 and core.dynamic_trace is None


# --- JAX's side against jax.numpy, then ours against JAX's ------------------------------

@pytest.mark.parametrize("name", CASES)
def test_jax_kernel_computes_its_reference(name):
  _, theirs, args = both(name)
  close(theirs(*args), REFERENCE[name](jjnp, *args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_same_values_as_jax(name, mode):
  ours, theirs, args = both(name)
  run = ours if mode == "eager" else adx.jit(ours)
  close(run(*args), theirs(*args))


@pytest.mark.parametrize("name", CASES)
def test_vmap_is_a_bigger_grid(name):
  ours, theirs, args = both(name)
  batched = [np.stack([a, 2 * a + 1, -a]) for a in args]
  close(adx.vmap(ours)(*batched), jax.vmap(theirs)(*batched))
  axes = (0,) + (None,) * (len(args) - 1)   # only the first operand batched
  close(adx.jit(adx.vmap(ours, axes))(batched[0], *args[1:]),
        jax.vmap(theirs, axes)(batched[0], *args[1:]))


def test_vmap_at_another_axis_and_nested():
  ours, theirs, (x, y) = both("elementwise")
  xs, ys = np.stack([x, x + 1], axis=2), np.stack([y, y * 3], axis=2)
  close(adx.vmap(ours, in_axes=2)(xs, ys), jax.vmap(theirs, in_axes=2)(xs, ys))
  xss, yss = np.stack([np.moveaxis(xs, 2, 0)] * 2), np.stack([np.moveaxis(ys, 2, 0)] * 2)
  close(adx.vmap(adx.vmap(ours))(xss, yss), jax.vmap(jax.vmap(theirs))(xss, yss))
  close(adx.vmap(adx.jit(ours))(xss[0], yss[0]), jax.vmap(theirs)(xss[0], yss[0]))


def test_vmap_grid_has_the_batch_axis_first():
  ours, _, (x, y) = both("elementwise")
  jaxpr = adx.make_jaxpr(adx.vmap(ours))(np.stack([x] * 3), np.stack([y] * 3))
  (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive is pl.pallas_call_p]
  assert eqn.params["grid"] == (3, 2, 2)
  assert eqn.params["in_mappings"][0].block_shape == (None, 4, 8)


@pytest.mark.parametrize("name", sorted(set(CASES) - USES_PROGRAM_ID))
def test_jvp_as_jax(name):
  ours, theirs, args = both(name)
  tangents = tuple(np.cos(a) for a in args)
  want = jax.jvp(theirs, args, tangents)
  close(adx.jvp(ours, args, tangents), want)
  close(adx.jit(lambda *a: adx.jvp(ours, a, tangents))(*args), want)


@pytest.mark.parametrize("name", sorted(USES_PROGRAM_ID))
def test_jvp_where_jax_has_none(name):
  """JAX's jvp of a kernel that calls program_id fails; ours gives the JVP of
  the reference (checked in the library itself and by finite differences)."""
  ours, theirs, args = both(name)
  tangents = tuple(np.cos(a) for a in args)
  with pytest.raises(Exception):
    jax.jvp(theirs, args, tangents)
  primal, tangent = adx.jvp(ours, args, tangents)
  ref_primal, ref_tangent = adx.jvp(lambda *a: REFERENCE[name](anp, *a), args, tangents)
  close(primal, ref_primal, rtol=1e-4, atol=1e-4)
  close(tangent, ref_tangent, rtol=1e-4, atol=1e-4)
  eps = 1e-2
  plus = ours(*[a + eps * t for a, t in zip(args, tangents)])
  minus = ours(*[a - eps * t for a, t in zip(args, tangents)])
  fd = (np.asarray(plus) - np.asarray(minus)) / (2 * eps)
  np.testing.assert_allclose(np.asarray(tangent), fd, rtol=2e-2, atol=2e-2)


# --- Blocks past the edge, and what an output holds before it is written ---------------

def _add_one(pl_, dtype, n, block, grid):
  def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1
  struct = (pl_.ShapeDtypeStruct if hasattr(pl_, "ShapeDtypeStruct") else jax.ShapeDtypeStruct)
  spec = pl_.BlockSpec((block,), lambda i: (i,))
  return pl_.pallas_call(kernel, out_shape=struct((n,), dtype), grid=(grid,),
                         in_specs=[spec], out_specs=spec, interpret=True)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 23), block=st.integers(1, 9), extra=st.integers(-1, 1))
def test_blocks_past_the_edge_are_padded_as_in_jax(n, block, extra):
  grid = max(1, -(-n // block) + extra)   # too few blocks, just enough, one too many
  x = np.arange(n, dtype=np.float32)
  got = _add_one(pl, np.float32, n, block, grid)(x)
  want = _add_one(jpl, np.float32, n, block, grid)(x)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))   # NaN where unwritten


def test_an_unwritten_integer_output_holds_the_lowest_int_as_in_jax():
  x = np.arange(10, dtype=np.int32)
  got = _add_one(pl, np.int32, 10, 4, 2)(x)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(_add_one(jpl, np.int32, 10, 4, 2)(x)))
  assert np.asarray(got)[-1] == np.iinfo(np.int32).min


def test_a_none_block_dimension_is_dropped_from_the_kernels_ref():
  def make(pl_, jnp, struct):
    def kernel(x_ref, o_ref):
      assert x_ref.shape == (8,)
      o_ref[...] = x_ref[...] * 2.0 + jnp.sum(x_ref[...])
    spec = pl_.BlockSpec((None, 8), lambda i: (i, 0))
    return pl_.pallas_call(kernel, out_shape=struct((4, 8), np.float32), grid=(4,),
                           in_specs=[spec], out_specs=spec, interpret=True)
  x = np.arange(32, dtype=np.float32).reshape(4, 8)
  close(make(pl, anp, pl.ShapeDtypeStruct)(x), make(jpl, jjnp, jax.ShapeDtypeStruct)(x))


# --- What a reader sees: the kernel's jaxpr, and the loop XLA runs ---------------------

def test_make_jaxpr_prints_the_kernel_as_a_jaxpr_of_refs():
  ours, _, args = both("accumulating_matmul")
  text = str(adx.make_jaxpr(ours)(*args))
  assert "pallas_call[" in text and "grid=(2, 2, 4)" in text
  assert "program_id[axis=2]\n" in text
  assert "Ref{f32[4,4]}" in text and "<- f[...]" in text and "h[...] <- t" in text


def test_interpret_mode_lowers_to_one_while_loop_of_dynamic_slices():
  ours, _, args = both("tiled_matmul")
  hlo = adx.jit(ours).lower(*args).as_text()
  assert hlo.count("stablehlo.while") == 1
  assert "stablehlo.dynamic_slice" in hlo and "stablehlo.dynamic_update_slice" in hlo
  assert "pallas_call" not in hlo


def test_flops_count_every_grid_points_run():
  from autodidax.flop_count import flops
  ours, _, (x, y) = both("tiled_matmul")
  assert flops(ours)(x, y).total == 2 * 8 * 16 * 12


# --- Errors a learner can cause -------------------------------------------------------

X = np.ones((8, 8), np.float32)
S = pl.ShapeDtypeStruct((8, 8), np.float32)


def copy(x_ref, o_ref):
  o_ref[...] = x_ref[...]


W = np.ones((4, 4), np.float32)


def closes_over_w(x_ref, o_ref):
  o_ref[...] = x_ref[...] + W


def reads_first(x_ref, o_ref):
  o_ref[...] += x_ref[...]


TILE = pl.BlockSpec((4, 4), lambda i, j: (i, j))
ERRORS = {
    "index map arity": (lambda: pl.pallas_call(copy, S, grid=(2,), in_specs=[
        pl.BlockSpec((4, 8), lambda i: (i,))])(X), ValueError, "must return 2 values"),
    "block rank": (lambda: pl.pallas_call(copy, S, grid=(2,), in_specs=[
        pl.BlockSpec((4,), lambda i: (i,))])(X), ValueError, "same number of dimensions"),
    "out_shape": (lambda: pl.pallas_call(copy, (8, 8))(X), ValueError, "Invalid out_shape"),
    "reads output first": (lambda: pl.pallas_call(reads_first, S)(X), ValueError,
                           "before writing it"),
    "returns a value": (lambda: pl.pallas_call(lambda x, o: 1, S)(X), ValueError,
                        "should return None"),
    "captures a constant": (lambda: pl.pallas_call(closes_over_w, S, grid=(2, 2),
                                                   in_specs=[TILE], out_specs=TILE)(X),
                            ValueError, "captures constants"),
    "program_id outside": (lambda: pl.program_id(0), ValueError, "outside a kernel"),
    "program_id axis": (lambda: pl.pallas_call(
        lambda x, o: o.__setitem__(..., x[...] * pl.program_id(1)), S, grid=(2,))(X),
        ValueError, "has 1 axes"),
    "spec count": (lambda: pl.pallas_call(copy, S, in_specs=[pl.BlockSpec()] * 2)(X),
                   ValueError, "2 in_specs for 1 inputs"),
    "not a spec": (lambda: pl.pallas_call(copy, S, in_specs=[None])(X), TypeError,
                   "not a BlockSpec"),
    "float index": (lambda: pl.pallas_call(copy, S, grid=(2,), in_specs=[
        pl.BlockSpec((4, 8), lambda i: (i * 1.5, 0))])(X), ValueError, "integer scalars"),
    "grid": (lambda: pl.pallas_call(copy, S, grid=(2.0,))(X), ValueError,
             "tuple of integers"),
}


@pytest.mark.parametrize("what", ERRORS)
def test_learner_errors_say_what_to_do(what):
  run, kind, words = ERRORS[what]
  with pytest.raises(kind, match=words) as info:
    run()
  assert len(str(info.value)) > 60   # a sentence on what to do, not just a name


def test_grad_says_what_jax_users_do_instead():
  ours, theirs, (x, y) = both("elementwise")
  with pytest.raises(ValueError, match="Linearization failed"):
    jax.grad(lambda a, b: theirs(a, b).sum())(x, y)
  for g in (adx.grad(lambda a, b: ours(a, b).sum()),
            adx.jit(adx.grad(lambda a, b: ours(a, b).sum())),
            adx.grad(adx.jit(lambda a, b: ours(a, b).sum()))):
    with pytest.raises(pl.PallasReverseModeError, match="custom_vjp"):
      g(x, y)


def test_ds_reads_a_dynamic_slice_of_a_ref_and_checks_a_static_one():
  def f(x, i):
    r = adx.new_ref(x)
    return r[pl.ds(i, 3)]
  x = np.arange(8.0, dtype=np.float32)
  np.testing.assert_array_equal(np.asarray(adx.jit(f)(x, 2)), x[2:5])
  assert "<- c[b:b+3]" in str(adx.make_jaxpr(f)(x, 2))
  with pytest.raises(IndexError, match="runs past"):
    f(x, 7)


def test_a_kernel_that_writes_its_input_sees_the_write_in_later_runs_as_in_jax():
  """Interpret mode carries an input through the loop only if the kernel writes it."""
  def make(pl_, struct):
    def kernel(c_ref, o_ref):
      c_ref[...] = c_ref[...] + 1.0
      o_ref[...] = c_ref[...]
    return pl_.pallas_call(kernel, out_shape=struct((3, 2), np.float32), grid=(3,),
                           in_specs=[pl_.BlockSpec((1, 2), lambda i: (0, 0))],
                           out_specs=pl_.BlockSpec((1, 2), lambda i: (i, 0)), interpret=True)
  c = np.zeros((1, 2), np.float32)
  got = make(pl, pl.ShapeDtypeStruct)(c)
  close(got, make(jpl, jax.ShapeDtypeStruct)(c))
  np.testing.assert_array_equal(np.asarray(got)[:, 0], [1, 2, 3])
