"""StableHLO emission: every lowering rule produces text that jaxlib's MLIR
verifier accepts and XLA compiles, and that computes what JAX computes; jit of
jit calls a private function; literal constants (inf, nan, -0.0, bools, big
ints) survive the trip through MLIR text.

References come from JAX (jax.lax / jax.numpy), never from autodidax itself.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, lax, lowering, runtime
from autodidax import stackless

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

# Primitives with an impl rule that deliberately have no lowering rule.
# A Ref's primitives are discharged before lowering (autodidax/state.py).
from autodidax import callback, state  # noqa: E402
NOT_LOWERABLE: set = {state.new_ref_p, state.get_p, state.swap_p, state.addupdate_p}
# A kernel's program_id becomes an input of the loop interpret mode makes, before lowering.
from autodidax import pallas as apl  # noqa: E402
from jax.experimental import pallas as jpl  # noqa: E402
NOT_LOWERABLE.add(apl.program_id_p)
# Host callbacks need their Python functions at compile time: tests/test_effects.py
# compiles them with those, against JAX.
CALLS_BACK = {callback.debug_callback_p, callback.pure_callback_p, callback.io_callback_p}
# Lowering rules that raise on purpose: custom_lin is the tangent map of a
# custom_vjp function, which only transposition may run (test_custom_derivatives).
LOWERING_RAISES = {"custom_lin"}

# Lowered only inside a program for several devices: tests/test_many_devices.py
# compiles them on 8 devices, against JAX.
from autodidax import parallel, sharding  # noqa: E402
from autodidax.shard_map import pvary_p, shard_map_p  # noqa: E402
ON_A_MESH = {*parallel.collective_primitives, shard_map_p, sharding.reshard_p, pvary_p}

rng = np.random.default_rng(0)
F32 = lambda *s: rng.uniform(-2, 2, s).astype(np.float32)   # noqa: E731
F64 = lambda *s: rng.uniform(-2, 2, s)                        # noqa: E731
POS = lambda *s: rng.uniform(0.5, 2, s).astype(np.float32)   # noqa: E731
I32 = lambda *s: rng.integers(-9, 10, s).astype(np.int32)    # noqa: E731
NZ32 = lambda *s: (rng.integers(1, 5, s) * rng.choice([-1, 1], s)).astype(np.int32)  # noqa: E731
U8 = lambda *s: rng.integers(0, 256, s).astype(np.uint8)     # noqa: E731
BOOL = lambda *s: rng.integers(0, 2, s).astype(bool)         # noqa: E731


def _jax_trunc_div(x, y):
  return jax.lax.div(x, y)   # C-style integer division, as StableHLO's divide


def _dn(lc, rc, lb=(), rb=()):
  return ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))


def _inner_jit(x):
  return adx.jit(lambda y: anp.sin(y) * 2.)(x) + 1.


@adx.custom_jvp
def _custom_jvp_sin(x):
  return anp.sin(x)


_custom_jvp_sin.defjvp(lambda p, t: (_custom_jvp_sin(*p), anp.cos(p[0]) * t[0]))


@adx.custom_vjp
def _custom_vjp_tanh(x):
  return anp.tanh(x)


_custom_vjp_tanh.defvjp(lambda x: (anp.tanh(x), x), lambda x, g: (g,))


# (id, autodidax function, jax function, args). Each lowering rule must be
# exercised by at least one case: test_every_lowering_rule_has_a_case checks.
def _pallas_add(pl_):
  """An elementwise kernel over a grid of 2: pallas_call lowers to its interpret loop."""
  def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]
  spec = pl_.BlockSpec((4,), lambda i: (i,))
  return pl_.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), np.float32), grid=(2,),
                         in_specs=[spec, spec], out_specs=spec, interpret=True)


CASES = [
    ("add_f32", lax.add, jax.lax.add, (F32(3), F32(3))),
    ("add_scalar_weak", lambda x: lax.add(x, 1.5), lambda x: x + 1.5, (F32(2, 3),)),
    ("add_rank0_left", lambda x: lax.add(np.float32(2.), x), lambda x: 2. + x, (F32(3),)),
    ("add_i32", lax.add, jax.lax.add, (I32(4), I32(4))),
    ("or_bool", lax.bitwise_or, lambda x, y: x | y, (BOOL(5), BOOL(5))),
    ("sub_f64", lax.sub, jax.lax.sub, (F64(2, 2), F64(2, 2))),
    ("mul_u8", lax.mul, jax.lax.mul, (U8(4), U8(4))),
    ("mul_f32", lax.mul, jax.lax.mul, (F32(3), F32(3))),
    ("div_f32", lax.div, jax.lax.div, (F32(4), POS(4))),
    ("div_i32", lax.div, _jax_trunc_div, (I32(6), NZ32(6))),
    ("max_f32", lax.max, jax.lax.max, (F32(5), F32(5))),
    ("max_i32", lax.max, jax.lax.max, (I32(5), I32(5))),
    ("greater_f32", lax.greater, jax.lax.gt, (F32(4), F32(4))),
    ("greater_u8", lax.greater, jax.lax.gt, (U8(6), U8(6))),
    ("less_i32", lax.less, jax.lax.lt, (I32(6), I32(6))),
    ("less_bool", lax.less, jax.lax.lt, (BOOL(6), BOOL(6))),
    ("greater_equal_f64", lax.greater_equal, jax.lax.ge, (F64(3), F64(3))),
    ("less_equal_f32_scalar", lambda x: lax.less_equal(x, 0.), lambda x: x <= 0., (F32(5),)),
    ("neg_f32", lax.neg, jax.lax.neg, (F32(3),)),
    ("neg_i32", lax.neg, jax.lax.neg, (I32(3),)),
    ("sin", lax.sin, jax.lax.sin, (F32(3),)),
    ("cos", lax.cos, jax.lax.cos, (F64(3),)),
    ("exp", lax.exp, jax.lax.exp, (F32(2, 2),)),
    ("log", lax.log, jax.lax.log, (POS(3),)),
    ("tanh", lax.tanh, jax.lax.tanh, (F32(3),)),
    ("reduce_sum_f32", lambda x: lax.reduce_sum(x, 1), lambda x: jnp.sum(x, 1), (F32(2, 3),)),
    ("reduce_sum_all_i32", lambda x: lax.reduce_sum(x), lambda x: jnp.sum(x, dtype=x.dtype), (I32(2, 3),)),
    ("reduce_sum_no_axes", lambda x: lax.reduce_sum(x, ()), lambda x: x, (F32(3),)),
    ("reduce_max_f64", lambda x: lax.reduce_max(x, (0, 2)), lambda x: jnp.max(x, (0, 2)),
     (F64(2, 3, 2),)),
    ("reduce_max_i32", lambda x: lax.reduce_max(x, 0), lambda x: jnp.max(x, 0), (I32(4, 2),)),
    ("reduce_max_u8", lambda x: lax.reduce_max(x), lambda x: jnp.max(x), (U8(5),)),
    ("reduce_max_bool", lambda x: lax.reduce_max(x), lambda x: jnp.any(x), (BOOL(5),)),
    ("broadcast", lambda x: lax.broadcast(x, (2, 3, 4), (0, 2)),
     lambda x: jax.lax.broadcast_in_dim(x, (2, 3, 4), (1,)), (F32(3),)),
    ("broadcast_scalar", lambda x: lax.broadcast(x, (2, 2), (0, 1)),
     lambda x: jnp.broadcast_to(x, (2, 2)), (np.int32(7),)),
    ("transpose", lambda x: lax.transpose(x, (2, 0, 1)),
     lambda x: jnp.transpose(x, (2, 0, 1)), (F32(2, 3, 4),)),
    ("reshape", lambda x: lax.reshape(x, (3, 2)), lambda x: jnp.reshape(x, (3, 2)), (F32(2, 3),)),
    ("reshape_to_scalar", lambda x: lax.reshape(x, ()), lambda x: jnp.reshape(x, ()), (F64(1, 1),)),
    ("convert_f32_i32", lambda x: lax.convert_element_type(x, np.int32),
     lambda x: x.astype(jnp.int32), (F32(5) * 3,)),
    ("convert_i32_f64", lambda x: lax.convert_element_type(x, np.float64),
     lambda x: x.astype(jnp.float64), (I32(5),)),
    ("convert_f64_f32", lambda x: lax.convert_element_type(x, np.float32),
     lambda x: x.astype(jnp.float32), (F64(5),)),
    ("convert_f32_bool", lambda x: lax.convert_element_type(x, np.bool_),
     lambda x: x.astype(jnp.bool_), (np.array([0., -0., 0.5, -2., np.inf, np.nan], np.float32),)),
    ("convert_i32_bool", lambda x: lax.convert_element_type(x, np.bool_),
     lambda x: x.astype(jnp.bool_), (np.array([0, 1, -1, 7], np.int32),)),
    ("convert_u8_bool", lambda x: lax.convert_element_type(x, np.bool_),
     lambda x: x.astype(jnp.bool_), (np.array([0, 1, 128, 255], np.uint8),)),
    ("convert_bool_f32", lambda x: lax.convert_element_type(x, np.float32),
     lambda x: x.astype(jnp.float32), (BOOL(5),)),
    ("convert_bool_i32", lambda x: lax.convert_element_type(x, np.int32),
     lambda x: x.astype(jnp.int32), (BOOL(5),)),
    ("convert_i64_u8", lambda x: lax.convert_element_type(x, np.uint8),
     lambda x: x.astype(jnp.uint8), (np.array([0, 1, 200, 255], np.int64),)),
    ("dot_matmat", lambda x, y: lax.dot_general(x, y, _dn([1], [0])),
     lambda x, y: jax.lax.dot_general(x, y, _dn([1], [0])), (F32(2, 3), F32(3, 4))),
    ("dot_vecvec_i32", lambda x, y: lax.dot_general(x, y, _dn([0], [0])),
     lambda x, y: jax.lax.dot_general(x, y, _dn([0], [0])), (I32(3), I32(3))),
    ("dot_batched", lambda x, y: lax.dot_general(x, y, _dn([2], [1], [0], [0])),
     lambda x, y: jax.lax.dot_general(x, y, _dn([2], [1], [0], [0])), (F64(2, 3, 4), F64(2, 4, 5))),
    ("dot_batch_not_leading", lambda x, y: lax.dot_general(x, y, _dn([0], [2], [1], [0])),
     lambda x, y: jax.lax.dot_general(x, y, _dn([0], [2], [1], [0])), (F32(3, 2, 4), F32(2, 5, 3))),
    ("dot_outer", lambda x, y: lax.dot_general(x, y, _dn([], [])),
     lambda x, y: jax.lax.dot_general(x, y, _dn([], [])), (F32(2), F32(3))),
    ("xla_call", _inner_jit, lambda x: jnp.sin(x) * 2. + 1., (F32(3),)),
    # The jax.numpy subset (autodidax.numpy)
    *[(f"{n}_{t}", getattr(lax, n), getattr(jax.lax, j), args) for n, j, t, args in [
        ("eq", "eq", "f32", (F32(4), F32(4))), ("ne", "ne", "i32", (I32(4), I32(4))),
        ("min", "min", "u8", (U8(4), U8(4))), ("min", "min", "bool", (BOOL(4), BOOL(4))),
        ("pow", "pow", "f64", (np.abs(F64(4)), F64(4))), ("rem", "rem", "i32", (I32(4), NZ32(4))),
        ("rem", "rem", "f32", (F32(4), F32(4) + 3)),
        ("bitwise_and", "bitwise_and", "i32", (I32(4), I32(4))),
        ("bitwise_xor", "bitwise_xor", "bool", (BOOL(4), BOOL(4))),
        ("bitwise_not", "bitwise_not", "u8", (U8(4),)), ("abs", "abs", "i32", (I32(4),)),
        ("sign", "sign", "f32", (F32(4),)), ("sqrt", "sqrt", "f64", (np.abs(F64(4)),)),
        ("rsqrt", "rsqrt", "f32", (np.abs(F32(4)) + 1,)), ("floor", "floor", "f32", (F32(4),)),
        ]],
    ("stop_gradient", lambda x: lax.stop_gradient(x) * 2., lambda x: jax.lax.stop_gradient(x) * 2.,
     (F32(4),)),
    ("round_even", lambda x: lax.round(x * 2, 1), lambda x: jax.lax.round(x * 2, 1), (F32(6),)),
    ("round_away", lambda x: lax.round(x * 2), lambda x: jax.lax.round(x * 2), (F32(6),)),
    ("integer_pow_5", lambda x: lax.integer_pow(x, 5), lambda x: jax.lax.integer_pow(x, 5), (F32(4),)),
    ("integer_pow_neg", lambda x: lax.integer_pow(x, -2), lambda x: jax.lax.integer_pow(x, -2),
     (F64(4) + 3,)),
    ("integer_pow_0_i32", lambda x: lax.integer_pow(x, 0), lambda x: jax.lax.integer_pow(x, 0), (I32(3),)),
    ("reduce_min_i32", lambda x: lax.reduce_min(x, 1), lambda x: jax.lax.reduce_min(x, (1,)), (I32(2, 3),)),
    ("reduce_prod", lambda x: lax.reduce_prod(x, 0), lambda x: jax.lax.reduce_prod(x, (0,)), (F64(2, 3),)),
    ("argmax", lambda x: lax.argmax(x, 1), lambda x: jax.lax.argmax(x, 1, np.int64), (F32(2, 5),)),
    ("argmin_nan", lambda x: lax.argmin(x, 0), lambda x: jax.lax.argmin(x, 0, np.int64),
     (np.array([1., np.nan, -2., np.nan]),)),
    ("argmin_u8", lambda x: lax.argmin(x, 0), lambda x: jax.lax.argmin(x, 0, np.int64), (U8(6),)),
    ("cumsum", lambda x: lax.cumsum(x, 1), lambda x: jax.lax.cumsum(x, 1), (F32(2, 4),)),
    ("cumsum_reverse", lambda x: lax.cumsum(x, 0, True), lambda x: jax.lax.cumsum(x, 0, True), (I32(5),)),
    ("concatenate", lambda x, y: lax.concatenate([x, y], 1), lambda x, y: jax.lax.concatenate([x, y], 1),
     (F32(2, 3), F32(2, 1))),
    ("pad", lambda x: lax.pad(x, np.float32(-1), [(1, -1, 2), (0, 2, 0)]),
     lambda x: jax.lax.pad(x, np.float32(-1), [(1, -1, 2), (0, 2, 0)]), (F32(3, 2),)),
    ("slice", lambda x: lax.slice(x, (1, 0), (3, 4), (1, 3)),
     lambda x: jax.lax.slice(x, (1, 0), (3, 4), (1, 3)), (F32(3, 4),)),
    ("rev", lambda x: lax.rev(x, (0, 1)), lambda x: jax.lax.rev(x, (0, 1)), (I32(3, 4),)),
    ("dynamic_slice", lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 2)),
     lambda x, i: jax.lax.dynamic_slice(x, (i, 1), (2, 2)), (F32(4, 3), np.int64(3))),
    ("dynamic_update_slice", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, np.int32(0))),
     lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, np.int32(0))),
     (F32(4, 3), F32(2, 3), np.int32(-1))),
    # Control flow (autodidax/control_flow/)
    ("cond", lambda x: lax.cond(anp.sum(x) > 0., anp.sin, anp.cos, x),
     lambda x: jax.lax.cond(jnp.sum(x) > 0., jnp.sin, jnp.cos, x), (F32(3),)),
    ("switch_clamp", lambda i, x: lax.switch(i, [anp.sin, anp.cos, lambda z: z * 2.], x),
     lambda i, x: jax.lax.switch(i, [jnp.sin, jnp.cos, lambda z: z * 2.], x),
     (np.array(7, np.int32), F32(3))),
    ("select_n_bool", lambda p, x, y: lax.select_n(p, x, y),
     lambda p, x, y: jax.lax.select_n(p, x, y), (BOOL(4), F32(4), F32(4))),
    ("select_n_int", lambda i, x, y, z: lax.select_n(i, x, y, z),
     lambda i, x, y, z: jax.lax.select_n(i, x, y, z),
     (np.array([0, 2, 1, 2], np.int32), F32(4), F32(4), F32(4))),
    ("while", lambda x: lax.while_loop(lambda c: anp.sum(c * c) < 100., lambda c: c * 2. + 1., x),
     lambda x: jax.lax.while_loop(lambda c: jnp.sum(c * c) < 100., lambda c: c * 2. + 1., x),
     (F64(3),)),
    ("scan", lambda c, xs: lax.scan(lambda c, x: (c * x + 1., c + x), c, xs, reverse=True)[1],
     lambda c, xs: jax.lax.scan(lambda c, x: (c * x + 1., c + x), c, xs, reverse=True)[1],
     (F32(2), F32(4, 2))),
    ("stackless_jit", lambda x: stackless.jit(lambda y: anp.sin(y) * 2.)(x),   # "JAX today"
     lambda x: jnp.sin(x) * 2., (F64(3),)),
    # Custom derivatives (autodidax/custom_derivatives.py): the body goes inline
    ("custom_jvp_call", lambda x: _custom_jvp_sin(x) * 2., lambda x: jnp.sin(x) * 2.,
     (F32(3),)),
    ("custom_vjp_call", _custom_vjp_tanh, jnp.tanh, (F64(2, 2),)),
    # Rematerialization (autodidax/ad_checkpoint.py): the body inline; a name is the identity
    ("remat", adx.checkpoint(lambda x: anp.sin(anp.sin(x)) * x),
     lambda x: jnp.sin(jnp.sin(x)) * x, (F32(2, 3),)),
    ("name", lambda x: adx.ad_checkpoint.checkpoint_name(anp.exp(x), "e") + 1.,
     lambda x: jnp.exp(x) + 1., (F64(4),)),
    ("pallas_call_add", _pallas_add(apl), _pallas_add(jpl), (F32(8), F32(8))),
]


def _prims_in(jaxpr, acc):
  for eqn in jaxpr.eqns:
    acc.add(eqn.primitive)
    if "jaxpr" in eqn.params:
      _prims_in(eqn.params["jaxpr"], acc)
  return acc


def _closed_jaxpr(fn, args):
  return adx.make_jaxpr(fn)(*args)


@pytest.mark.parametrize("name,fn,ref,args", CASES, ids=[c[0] for c in CASES])
def test_lowering_rule_verifies_compiles_and_matches_jax(name, fn, ref, args):
  text = adx.jit(fn).lower(*args).as_text()
  print(text)
  assert "stablehlo." in text or "func.call" in text
  runtime.verify(text)
  exe = runtime.compile(text, "cpu")
  bufs = [runtime.device_put(np.asarray(a), "cpu") for a in args]
  (out,) = [runtime.to_numpy(b) for b in exe.execute(bufs)]
  want = np.asarray(jax.jit(ref)(*args))
  assert out.dtype == want.dtype, (out.dtype, want.dtype)
  assert out.shape == want.shape
  tol = 1e-6 if out.dtype == np.float32 else 1e-12
  np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,fn,ref,args", CASES, ids=[c[0] for c in CASES])
def test_eager_impl_matches_jax(name, fn, ref, args):
  """The same cases evaluated eagerly (NumPy impl rules): same values and dtype
  as JAX, hence as the compiled code."""
  out = np.asarray(fn(*args))
  want = np.asarray(jax.jit(ref)(*args))
  assert out.dtype == want.dtype, (out.dtype, want.dtype)
  np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_every_lowering_rule_has_a_case():
  covered = set()
  for _, fn, _, args in CASES:
    _prims_in(_closed_jaxpr(fn, args).jaxpr, covered)
  missing = [p.name for p in lowering.lowering_rules if p not in covered
             and p not in ON_A_MESH and p not in CALLS_BACK
             and p.name not in LOWERING_RAISES]
  assert not missing, f"lowering rules with no test case in CASES: {missing}"


def test_every_primitive_with_an_impl_has_a_lowering_rule():
  missing = [p.name for p in list(core.impl_rules)
             if p not in lowering.lowering_rules and p not in NOT_LOWERABLE]
  assert not missing, f"primitives that jit can't lower: {missing}"


# --- jit of jit ---------------------------------------------------------------------------------

def test_jit_of_jit_calls_a_private_function():
  x = F32(3)
  inner = adx.jit(lambda y: anp.sin(y) * 2.)
  outer = adx.jit(lambda y: inner(y) + inner(y))   # the same jaxpr twice: one function
  text = outer.lower(x).as_text()
  runtime.verify(text)
  privates = [line.split("@")[1].split("(")[0] for line in text.splitlines()
              if "func.func private @" in line]
  assert len(privates) == 1, text
  assert text.count(f"func.call @{privates[0]}(") == 2, text
  assert "func.func public @main(" in text
  np.testing.assert_allclose(outer(x), 2 * (np.sin(x) * 2), rtol=1e-6)


def test_jit_of_jit_with_several_outputs_and_nesting():
  x = F64(2, 3)
  inner = adx.jit(lambda y: (anp.sum(y, 0), y * 2.))
  middle = adx.jit(lambda y: inner(y)[0] + 1.)
  outer = adx.jit(lambda y: (middle(y), inner(y)[1]))
  text = outer.lower(x).as_text()
  runtime.verify(text)
  assert text.count("func.func private @") == 2, text
  a, b = outer(x)
  np.testing.assert_allclose(a, x.sum(0) + 1.)
  np.testing.assert_allclose(b, x * 2.)


# --- Literals ---------------------------------------------------------------------------------

def _constant_module(x: np.ndarray) -> str:
  t = lowering.mlir_type(core.ShapedArray(x.shape, x.dtype))
  return (f"module @consts {{\n  func.func public @main() -> ({t}) {{\n"
          f"    %0 = stablehlo.constant {lowering.dense_literal(x)} : {t}\n"
          f"    return %0 : {t}\n  }}\n}}\n")


def _roundtrip(x):
  text = _constant_module(x)
  runtime.verify(text)
  (buf,) = runtime.compile(text, "cpu").execute([])
  return runtime.to_numpy(buf), text


def _assert_bitwise_equal(got, want, text):
  assert got.dtype == want.dtype and got.shape == want.shape, text
  if want.dtype.kind == "f":   # NaN == NaN and -0.0 != 0.0 here
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=text)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok], err_msg=text)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]), err_msg=text)
  else:
    np.testing.assert_array_equal(got, want, err_msg=text)


SPECIAL = [
    np.array(np.inf, np.float32), np.array(-np.inf, np.float64), np.array(np.nan, np.float32),
    np.array([np.inf, -np.inf, np.nan, 0.1], np.float32),
    np.array([np.nan, np.nan], np.float64),
    np.array([1e300, -1e-300, 5e-324], np.float64),
    np.array(np.finfo(np.float32).max, np.float32), np.array(np.finfo(np.float32).tiny, np.float32),
    np.array([0.0, -0.0], np.float32), np.array([-0.0, -0.0], np.float64),
    np.array([0.0, -0.0, np.inf], np.float16),
    np.array(True), np.array([False, True, True]), np.array([False, False]),
    np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64),
    np.array(-7, np.int32), np.array([255, 0], np.uint8), np.array(2**32 - 1, np.uint32),
    np.array([[1, 2], [3, 4]], np.int8),
]


@pytest.mark.parametrize("x", SPECIAL, ids=lambda x: f"{x.dtype}{list(x.ravel())}")
def test_dense_literal_roundtrips(x):
  got, text = _roundtrip(x)
  _assert_bitwise_equal(got, x, text)


@st.composite
def literal_arrays(draw):
  dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]))
  shape = draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
  n = math.prod(shape)
  if dtype == np.bool_:
    elems = st.booleans()
  elif np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    elems = st.integers(int(info.min), int(info.max))
  else:
    width = 32 if dtype == np.float32 else 64
    elems = st.floats(width=width, allow_nan=True, allow_infinity=True)
  vals = draw(st.lists(elems, min_size=n, max_size=n))
  if n > 1 and draw(st.booleans()):
    vals = [vals[0]] * n   # a splat: dense<v>
  return np.array(vals, dtype).reshape(shape)


@settings(max_examples=30)
@given(literal_arrays())
def test_dense_literal_roundtrips_random(x):
  got, text = _roundtrip(x)
  _assert_bitwise_equal(got, x, text)


@pytest.mark.parametrize("c", [np.inf, -np.inf, np.nan, -0.0, 1e-8, 3, -2, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_literals_in_jitted_code(c, dtype):
  """Python scalars become Lits in the jaxpr: inline constants in StableHLO."""
  x = np.array([1.5, -2.0, 0.0], dtype)
  f = lambda x: anp.add(anp.multiply(x, c), c)   # noqa: E731
  g = lambda x: jnp.add(jnp.multiply(x, c), c)   # noqa: E731
  text = adx.jit(f).lower(x).as_text()
  runtime.verify(text)
  out = adx.jit(f)(x)
  with np.errstate(invalid="ignore"):
    want = np.asarray(jax.jit(g)(x))
  assert out.dtype == want.dtype == dtype
  _assert_bitwise_equal(np.asarray(out), want, text)


@pytest.mark.parametrize("c,dtype", [(True, np.bool_), (False, np.bool_), (7, np.int32),
                                     (-3, np.int64), (2**40, np.int64), (200, np.uint8)])
def test_bool_and_int_literals_in_jitted_code(c, dtype):
  x = np.array([1, 0, 1], dtype)
  f = lambda x: lax.max(x, c)                         # noqa: E731
  g = lambda x: jax.lax.max(x, jnp.asarray(c, dtype))  # noqa: E731
  text = adx.jit(f).lower(x).as_text()
  runtime.verify(text)
  out = adx.jit(f)(x)
  assert out.dtype == dtype
  np.testing.assert_array_equal(out, jax.jit(g)(x))


def test_module_names_are_mlir_symbols():
  def weird(x):
    return x * 2.
  weird.__name__ = "my fun<lambda>-1"
  text = adx.jit(weird).lower(F32(2)).as_text()
  runtime.verify(text)


def test_verify_rejects_bad_text():
  text = adx.jit(lax.sin).lower(F32(3)).as_text().replace("tensor<3xf32>", "tensor<4xf32>", 1)
  with pytest.raises(Exception):
    runtime.verify(text)
