"""autodidax.numpy and the API options against jax.numpy (x64 on): dtype
promotion over the lattice with weak types, operators on tracers and device
Arrays, indexing, the new functions, each eagerly and under jit, grad and
vmap; and the wrong answers and crashes of issue 12, one test each."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import dtypes, lax, nn
from autodidax.tree_util import tree_structure

DTYPES = [np.bool_, np.uint8, np.int8, np.int32, np.float32, np.float64]
WEAK = [2, 2.5, True, -1]


def value(dtype, shape=(3,), seed=0):
  rng = np.random.default_rng(seed)
  if np.dtype(dtype) == np.bool_:
    return rng.integers(0, 2, shape).astype(bool)
  if np.dtype(dtype).kind in "iu":
    return rng.integers(0 if np.dtype(dtype).kind == "u" else -5, 6, shape).astype(dtype)
  return rng.uniform(-2, 2, shape).astype(dtype)


def same(ours, theirs, tol=1e-6):
  """Equal values and dtypes, and equal weak types where ours is a device Array."""
  o, t = np.asarray(ours), np.asarray(theirs)
  assert o.shape == t.shape, (o.shape, t.shape)
  assert o.dtype == t.dtype, (o.dtype, t.dtype)
  if isinstance(ours, adx.Array):
    assert ours.weak_type == getattr(theirs, "weak_type", False), ours.aval
  np.testing.assert_allclose(o.astype(np.float64) if o.dtype != bool else o,
                             t.astype(np.float64) if t.dtype != bool else t, rtol=tol, atol=tol)


# --- Promotion --------------------------------------------------------------------------------

ALL = [np.dtype(d) for d in ["bool", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8",
                             "f2", "f4", "f8", "c8", "c16"]]


def test_promote_types_is_jaxs_lattice():
  for a in ALL:
    for b in ALL:
      assert dtypes.promote_types(a, b) == jnp.promote_types(a, b), (a, b)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("scalar", [1, 1.0, 1j, True])
def test_weak_scalars_join_like_jax(dtype, scalar):
  theirs = jnp.asarray(np.ones(1, dtype)) + scalar
  assert dtypes.result_type(np.ones(1, dtype), scalar) == (theirs.dtype, theirs.weak_type)


OPS = {"add": (anp.add, jnp.add), "multiply": (anp.multiply, jnp.multiply),
       "subtract": (anp.subtract, jnp.subtract), "divide": (anp.divide, jnp.divide),
       "maximum": (anp.maximum, jnp.maximum), "minimum": (anp.minimum, jnp.minimum),
       "equal": (anp.equal, jnp.equal), "less": (anp.less, jnp.less),
       "power": (anp.power, jnp.power)}


@settings(max_examples=15)
@given(st.sampled_from(DTYPES + WEAK), st.sampled_from(DTYPES + WEAK),
       st.sampled_from(sorted(OPS)), st.sampled_from(["eager", "jit", "vmap"]))
def test_binary_ops_promote_like_jax(a, b, op, how):
  ours_f, theirs_f = OPS[op]
  x = a if not isinstance(a, type) else value(a, seed=1)
  y = b if not isinstance(b, type) else value(b, seed=2)
  try:
    theirs = theirs_f(x, y)
  except TypeError:   # e.g. bool subtraction, an integer to a negative Python int
    with pytest.raises(TypeError):
      ours_f(x, y) if how == "eager" else adx.jit(ours_f)(x, y)
    return
  if how == "eager":
    same(ours_f(x, y), theirs)
  elif how == "jit":
    same(adx.jit(ours_f)(x, y), theirs)
  elif np.ndim(x) and np.ndim(y):
    same(adx.vmap(ours_f)(x, y), jax.vmap(theirs_f)(x, y))


INT_POWERS = [  # (base, exponent): overflow, negative and large exponents, bools
    (np.array([1, -1, 2, 0, 3, -2, 2, 0, 5]), np.array([-1, -1, 70, 0, 3, 5, 63, -3, -2])),
    (np.array([2, 3, 0, 1], np.uint8), np.array([9, 3, 0, 200], np.uint8)),
    (np.array([True, False]), np.array([True, True])),
    (3, np.array([2, 3], np.int8)),
    (np.array([-2, 3], np.int16), np.array([3, 1], np.int64)),
]


@pytest.mark.parametrize("k", range(len(INT_POWERS)))
def test_integer_powers_as_jax(k):
  x, y = INT_POWERS[k]
  theirs = jnp.power(x, y)
  same(anp.power(x, y), theirs)
  same(adx.jit(anp.power)(x, y), theirs)
  if np.ndim(x):
    same(adx.vmap(anp.power)(x, y), jax.vmap(jnp.power)(x, y))


@pytest.mark.parametrize("dtype", DTYPES + [np.uint16])
@pytest.mark.parametrize("fn", ["sin", "sqrt", "mean", "sum", "prod", "max", "min", "abs",
                                "sign", "floor", "round", "cumsum", "argmax"])
def test_unary_dtypes_like_jax(dtype, fn):
  x = np.abs(value(dtype, seed=3)) if fn == "sqrt" else value(dtype, seed=3)
  theirs_f = getattr(jnp, fn)
  try:
    theirs = jax.jit(theirs_f)(x)
  except (TypeError, ValueError):
    return   # JAX rejects it (e.g. round of bools)
  same(getattr(anp, fn)(x), theirs)
  same(adx.jit(getattr(anp, fn))(x), theirs)


def test_vmap_keeps_weak_type():
  w = adx.jit(lambda: lax.broadcast(2., (3,)))()
  jw = jax.jit(lambda: jax.lax.broadcast(2., (3,)))()
  assert w.weak_type and jw.weak_type
  same(adx.jit(adx.vmap(anp.sin))(w), jax.jit(jax.vmap(jnp.sin))(jw))


WEAK_IN = ["sum", "mean", "max", "min", "prod", "cumsum", "argmax", "abs", "sqrt", "exp",
           "sign", "floor", "square", "ravel", "squeeze", "transpose"]


@pytest.mark.parametrize("fn", WEAK_IN)
def test_weak_inputs_keep_or_lose_weakness_as_in_jax(fn):
  # Elementwise functions and shape changes keep a weak type; reductions make
  # it strong (jax.numpy converts first), even where the dtype is unchanged.
  ours, theirs = getattr(anp, fn), getattr(jnp, fn)
  w, jw = adx.jit(lambda: 2.0)(), jax.jit(lambda: 2.0)()
  same(adx.jit(ours)(w), jax.jit(theirs)(jw))
  v, jv = adx.jit(lambda: lax.broadcast(2., (3,)))(), jax.jit(lambda: jax.lax.broadcast(2., (3,)))()
  assert v.weak_type and jv.weak_type
  same(adx.jit(adx.vmap(ours))(v), jax.jit(jax.vmap(theirs))(jv))


BRANCHES = {   # (true branch, false branch) outputs, built from these
    "f64 and weak f64": (lambda: np.float64(1.), lambda: 2.),
    "weak f64 and f64": (lambda: 2., lambda: np.float64(1.)),
    "f32 and weak f64": (lambda: np.float32(1.), lambda: 2.),
    "weak int and weak float": (lambda: 2, lambda: 2.),
    "f32 and f32": (lambda: np.float32(1.), lambda: np.float32(3.)),
}


@pytest.mark.parametrize("name", sorted(BRANCHES))
@pytest.mark.parametrize("how", ["eager", "jit"])
def test_cond_branch_types_as_jax(name, how):
  # Dtypes must be equal; weak types may differ (the result's weak type is
  # branch 0's: false_fun's, as in JAX).
  t, f = BRANCHES[name]
  run = (lambda g: g) if how == "eager" else (lambda g: adx.jit(g))
  jrun = (lambda g: g) if how == "eager" else (lambda g: jax.jit(g))
  try:
    theirs = jrun(lambda p: jax.lax.cond(p, t, f))(True)
  except TypeError:
    with pytest.raises(TypeError, match="every branch must return the same types"):
      run(lambda p: lax.cond(p, t, f))(True)
    return
  same(run(lambda p: lax.cond(p, t, f))(True), theirs)


EAGER_REJECTS = {   # each takes the lax module: ours or JAX's
    "f32 + strong f64": lambda L: L.add(np.ones(3, np.float32), np.float64(2.)),
    "f64 * int64": lambda L: L.mul(np.ones(3), np.arange(3)),
    "sin of ints": lambda L: L.sin(np.arange(3)),
    "neg of bools": lambda L: L.neg(np.array([True, False])),
    "and of floats": lambda L: L.bitwise_and(np.ones(2), np.ones(2)),
    "concatenate f32, f64": lambda L: L.concatenate([np.ones(2, np.float32), np.ones(2)], 0),
    "select_n f32, f64": lambda L: L.select_n(np.array(True), np.ones(2, np.float32), np.ones(2)),
    "clamp f64 bounds, f32": lambda L: L.clamp(np.float64(0), np.ones(2, np.float32), np.float64(1)),
    "cumsum of bools": lambda L: L.cumsum(np.array([True, False]), 0),
    "dynamic_update_slice f64 into f32": lambda L: L.dynamic_update_slice(
        np.ones(3, np.float32), np.ones(1), (np.int32(0),)),
    "pad f32 with f64": lambda L: L.pad(np.ones(2, np.float32), np.float64(0), [(1, 1, 0)]),
    "round of ints": lambda L: L.round(np.arange(3)),
}


DOT_PAIRS = [(np.float32, np.float64), (np.int32, np.float32), (np.int8, np.uint8),
             (np.bool_, np.int32), (np.uint8, np.int16), (np.float16, np.int64)]


@pytest.mark.parametrize("a, b", DOT_PAIRS)
def test_dot_general_of_two_dtypes_as_jax(a, b):
  # XLA's rule (the more precise dtype), not the promotion lattice.
  dn = (((1,), (0,)), ((), ()))
  x, y = np.arange(4).reshape(2, 2).astype(a), (np.arange(4).reshape(2, 2) + 1).astype(b)
  theirs = jax.lax.dot_general(x, y, dn)
  same(lax.dot_general(x, y, dn), theirs)
  same(adx.jit(lambda x, y: lax.dot_general(x, y, dn))(x, y), theirs)
  if np.dtype(a).kind == np.dtype(b).kind == "f":   # cotangents in each operand's dtype
    loss = lambda L: lambda x, y: (L.dot_general(x, y, dn) ** 2).sum()
    for ours, ref in zip(adx.jit(adx.grad(loss(lax), (0, 1)))(x, y),
                         jax.grad(loss(jax.lax), (0, 1))(x, y)):
      same(ours, ref, tol=1e-5)


@pytest.mark.parametrize("name", sorted(EAGER_REJECTS))
def test_eager_lax_rejects_what_jit_and_jax_reject(name):
  # lax takes equal dtypes (a weak Python scalar aside: see the chapter on
  # the jaxpr language) of the kinds each primitive accepts, eagerly too.
  f = EAGER_REJECTS[name]
  with pytest.raises(TypeError):
    f(jax.lax)
  with pytest.raises(TypeError) as eager:
    f(lax)
  with pytest.raises(TypeError) as jitted:
    adx.jit(lambda: f(lax))()
  assert str(eager.value) == str(jitted.value)


# --- Wrong answers and crashes of issue 12 -------------------------------------------------

def test_eq_and_ne_compare_elementwise():
  v = np.array([1., 2., 3.])
  same(adx.jit(lambda v: v * (v == 2.))(v), jax.jit(lambda v: v * (v == 2.))(v))
  same(adx.jit(lambda v: v != 2.)(v), jax.jit(lambda v: v != 2.)(v))
  a = adx.jit(lambda v: v)(v)
  np.testing.assert_array_equal(a == a, [True, True, True])


def test_reductions_of_bools_and_small_ints():
  same(anp.sum(np.array([1., 2.]) > 1.5), jnp.sum(jnp.array([1., 2.]) > 1.5))
  same(anp.mean(np.array([True, False, True])), jnp.mean(jnp.array([True, False, True])))
  same(anp.sum(np.array([100, 100], np.int8)), jnp.sum(jnp.array([100, 100], np.int8)))
  same(anp.min(np.array([3, 200], np.uint8)), jnp.min(jnp.array([3, 200], np.uint8)))
  same(anp.abs(np.array([3, 200], np.uint8)), jnp.abs(jnp.array([3, 200], np.uint8)))


@pytest.mark.parametrize("y", [2.0, 0.5, 3.0, -1.5])
def test_pow_with_float_exponents(y):
  x = np.array([-2., 2., 0.5])
  same(anp.power(x, y), jnp.power(x, y))
  for at in [-2., 0., 1.5]:
    if y == 0.5 and at < 0:
      continue
    same(adx.grad(lambda x: x ** y)(at), jax.grad(lambda x: x ** y)(at))
  same(adx.grad(lambda y: 0. ** y)(2.), jax.grad(lambda y: 0. ** y)(2.))


def test_jit_cache_keeps_static_types_apart():
  f = adx.jit(lambda x, n: x * n if isinstance(n, int) else x - n, static_argnums=1)
  assert float(f(1., 2)) == 2. and float(f(1., 2.0)) == -1.


def test_linearize_rejects_wrong_tangent_shape():
  _, f_lin = adx.linearize(anp.sin, np.ones(3))
  with pytest.raises(adx.TransformationError, match="tangent"):
    f_lin(np.ones(4))


KINKS = [(anp.abs, jnp.abs, 0.), (anp.sqrt, jnp.sqrt, 0.),
         (lambda x: lax.clamp(0., x, 1.), lambda x: jax.lax.clamp(0., x, 1.), 0.),
         (lambda x: lax.clamp(0., x, 1.), lambda x: jax.lax.clamp(0., x, 1.), 1.),
         (lambda x: anp.clip(x, 0., 1.), lambda x: jnp.clip(x, 0., 1.), 0.),
         (lambda x: anp.maximum(x, 0.), lambda x: jnp.maximum(x, 0.), 0.),
         (lambda x: anp.min(anp.stack([x, 0. * x])), lambda x: jnp.min(jnp.stack([x, 0. * x])), 0.)]


@pytest.mark.parametrize("ours, theirs, at", KINKS)
def test_derivatives_at_kinks_as_jax(ours, theirs, at):
  same(adx.grad(ours)(at), jax.grad(theirs)(at))


def test_namedtuples_with_one_name_are_different_trees():
  A, B = collections.namedtuple("P", "a"), collections.namedtuple("P", "a")
  assert tree_structure(A(1)) != tree_structure(B(1))
  assert tree_structure(A(1)) == tree_structure(A(2))


CRASHES = {
    "scan of length 0 under jit": (
        lambda: adx.jit(lambda: lax.scan(lambda c, x: (c + x, c), 0., np.ones(0)))(),
        lambda: jax.jit(lambda: jax.lax.scan(lambda c, x: (c + x, c), 0., jnp.ones(0)))()),
    "fori_loop with a float32 carry using the index": (
        lambda: lax.fori_loop(0, 3, lambda i, c: c + i, np.float32(0)),
        lambda: jax.lax.fori_loop(0, 3, lambda i, c: c + i, jnp.float32(0))),
    "minimum of bools": (
        lambda: anp.minimum(np.array([True, False]), np.array([False, False])),
        lambda: jnp.minimum(jnp.array([True, False]), jnp.array([False, False]))),
    "bool divide under jit": (
        lambda: adx.jit(anp.divide)(np.array([True, False]), np.array([True, True])),
        lambda: jax.jit(jnp.divide)(np.array([True, False]), np.array([True, True]))),
    "reduce_max over an empty axis": (
        lambda: lax.reduce_max(np.zeros((0, 3)), 0),
        lambda: jax.lax.reduce_max(jnp.zeros((0, 3)), (0,))),
    "sin of bools under jit": (
        lambda: adx.jit(anp.sin)(np.array([True, False])),
        lambda: jax.jit(jnp.sin)(np.array([True, False]))),
    "jit on uint16": (lambda: adx.jit(lambda x: x + 1)(np.ones(2, np.uint16)),
                      lambda: jax.jit(lambda x: x + 1)(np.ones(2, np.uint16))),
    "keyword arguments to jit": (lambda: adx.jit(lambda x, y: x * y)(1., y=2.),
                                 lambda: jax.jit(lambda x, y: x * y)(1., y=2.)),
    "keyword arguments to grad": (lambda: adx.grad(lambda x, y: x * y)(1., y=3.),
                                  lambda: jax.grad(lambda x, y: x * y)(1., y=3.)),
    "jacrev of a one-leaf dict": (lambda: adx.jacrev(lambda x: {"a": x * 2.})(np.ones(2))["a"],
                                  lambda: jax.jacrev(lambda x: {"a": x * 2.})(jnp.ones(2))["a"]),
    "jacrev of a one-leaf tuple": (lambda: adx.jacrev(lambda x: (x * 2.,))(np.ones(2))[0],
                                   lambda: jax.jacrev(lambda x: (x * 2.,))(jnp.ones(2))[0]),
    "negative axes in transpose": (lambda: anp.transpose(np.ones((2, 3)), (-1, 0)),
                                   lambda: jnp.transpose(jnp.ones((2, 3)), (-1, 0))),
    "scan body returning a list pair": (
        lambda: lax.scan(lambda c, x: [c + x, c], 0., np.ones(3))[1],
        lambda: jax.lax.scan(lambda c, x: [c + x, c], 0., jnp.ones(3))[1]),
    "uint8 compared with a negative int": (lambda: anp.less(np.ones(2, np.uint8), -1),
                                           lambda: jnp.less(jnp.ones(2, np.uint8), -1)),
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_valid_programs_run_as_in_jax(name):
  ours, theirs = CRASHES[name]
  a, b = ours(), theirs()
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64))
    assert np.asarray(x).dtype == np.asarray(y).dtype


GRAD_PROGRAMS = {
    "index": lambda x: x[1] * 2, "abs": lambda x: abs(x).sum(), "floordiv": lambda x: ((x // 2.) * x).sum(),
    "mod": lambda x: (x % 2.).sum(), "iter": lambda x: sum(v for v in x), "min": lambda x: x.min(),
    "int": lambda x: x[0] * int(x[0]), "and": lambda x: (x * ((x > 0) & (x < 4))).sum(),
    "invert": lambda x: (x * ~(x > 3.5)).sum(), "slice": lambda x: (x[1:] * x[:-1]).sum(),
    "newaxis": lambda x: (x[:, None] * x[None, :]).sum(), "traced index": lambda x: x[(x > 3.5).sum()] * 2,
    "negative index": lambda x: x[-1] ** 3}


@pytest.mark.parametrize("name", sorted(GRAD_PROGRAMS))
def test_grad_of_python_operators_on_tracers(name):
  f = GRAD_PROGRAMS[name]
  x = np.array([3., 4., 1.5])
  same(adx.grad(f)(x), jax.grad(f)(jnp.asarray(x)))
  if name != "int":   # int() of a traced value fails under jit, in both
    same(adx.jit(adx.grad(f))(x), jax.jit(jax.grad(f))(jnp.asarray(x)))


def test_unclear_errors_are_clear():
  with pytest.raises(TypeError, match="neg does not accept dtype bool"):
    adx.jit(lax.neg)(np.array([True]))
  with pytest.raises(TypeError, match="tracer"):
    adx.jit(lambda x: float(x))(2.)
  with pytest.raises(TypeError, match=r"true_fun: \(f32\[\]\); false_fun: \(i32\[\]\)"):
    lax.cond(True, lambda: np.float32(1.), lambda: np.int32(1))
  with pytest.raises(TypeError, match=r"array of integers \(a gather\) is not in autodidax"):
    adx.jit(lambda x: x[np.array([0, 2])])(np.arange(3.))
  with pytest.raises(TypeError, match="boolean mask makes the result's shape depend on the data"):
    adx.jit(lambda x: x[x > 1.])(np.arange(3.))
  with pytest.raises(AttributeError, match="jax.numpy.fft is not in autodidax"):
    anp.fft
  with pytest.raises(AttributeError, match="jax.lax.conv is not in autodidax"):
    lax.conv


# --- The new functions under every transformation -------------------------------------------

X = np.linspace(-1.5, 2., 12).reshape(3, 4)
FUNCS = {
    "where": (lambda x: anp.where(x > 0, x, 2. * x), lambda x: jnp.where(x > 0, x, 2. * x)),
    "where with a scalar": (lambda x: anp.where(x > 0, x, 0.) + anp.where(x[0, 0] > 0, 1., x),
                            lambda x: jnp.where(x > 0, x, 0.) + jnp.where(x[0, 0] > 0, 1., x)),
    "clip": (lambda x: anp.clip(x, -1., 1.), lambda x: jnp.clip(x, -1., 1.)),
    "sign*x": (lambda x: anp.sign(x) * x, lambda x: jnp.sign(x) * x),
    "rsqrt": (lambda x: lax.rsqrt(x * x + 1.), lambda x: jax.lax.rsqrt(x * x + 1.)),
    "integer_pow": (lambda x: lax.integer_pow(x, 3), lambda x: jax.lax.integer_pow(x, 3)),
    "floor+round": (lambda x: x * anp.floor(x) + anp.round(x), lambda x: x * jnp.floor(x) + jnp.round(x)),
    "logical": (lambda x: x * anp.logical_or(x > 1, anp.logical_not(x > -1)),
                lambda x: x * jnp.logical_or(x > 1, jnp.logical_not(x > -1))),
    "prod": (lambda x: anp.prod(x, axis=1), lambda x: jnp.prod(x, axis=1)),
    "prod with a zero": (lambda x: anp.prod(x - X[0, 0], axis=0), lambda x: jnp.prod(x - X[0, 0], axis=0)),
    "cumsum": (lambda x: anp.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1)),
    "argmax": (lambda x: x[0] * anp.argmax(x, axis=0), lambda x: x[0] * jnp.argmax(x, axis=0)),
    "argmin": (lambda x: anp.argmin(x, axis=1) * 1., lambda x: jnp.argmin(x, axis=1) * 1.),
    "concatenate": (lambda x: anp.concatenate([x, 2 * x], axis=1), lambda x: jnp.concatenate([x, 2 * x], axis=1)),
    "stack": (lambda x: anp.stack([x, x * x], axis=-1), lambda x: jnp.stack([x, x * x], axis=-1)),
    "slicing": (lambda x: x[1:3, ::2] + x[0, 1::2], lambda x: x[1:3, ::2] + x[0, 1::2]),
    "negative steps": (lambda x: x[::-1, 3:0:-2] * x[:, ::-2], lambda x: x[::-1, 3:0:-2] * x[:, ::-2]),
    "newaxis and ...": (lambda x: x[..., None] * x[None, 0], lambda x: x[..., None] * x[None, 0]),
    "expand/squeeze": (lambda x: anp.squeeze(anp.expand_dims(x, 0) * 2., 0),
                       lambda x: jnp.squeeze(jnp.expand_dims(x, 0) * 2., 0)),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (1, 2), (2, 2)),
                      lambda x: jax.lax.dynamic_slice(x, (1, 2), (2, 2))),
    "dynamic_update_slice": (lambda x: lax.dynamic_update_slice(x, x[:1, :2] * 3., (2, 1)),
                             lambda x: jax.lax.dynamic_update_slice(x, x[:1, :2] * 3., (2, 1))),
    "full_like/ones/eye": (lambda x: x * anp.full_like(x, 2.) + anp.ones((3, 4)) + anp.eye(3, 4),
                           lambda x: x * jnp.full_like(x, 2.) + jnp.ones((3, 4)) + jnp.eye(3, 4)),
    "arange/linspace": (lambda x: x * anp.arange(4.) + anp.linspace(0., 1., 4),
                        lambda x: x * jnp.arange(4.) + jnp.linspace(0., 1., 4)),
    "softmax": (lambda x: nn.softmax(x), lambda x: jax.nn.softmax(x)),
    "logsumexp": (lambda x: nn.logsumexp(x, axis=0), lambda x: jax.nn.logsumexp(x, axis=0)),
    "stop_gradient": (lambda x: x * lax.stop_gradient(x), lambda x: x * jax.lax.stop_gradient(x)),
    "mod and floordiv": (lambda x: x % 0.7 + x // 0.7, lambda x: x % 0.7 + x // 0.7),
    "broadcast": (lambda x: lax.broadcast(x, (2,)) * 1., lambda x: jax.lax.broadcast(x, (2,)) * 1.),
    "one_hot cross-entropy": (
        lambda x: -anp.sum(nn.log_softmax(x) * nn.one_hot(np.array([0, 3, -1]), 4), axis=1),
        lambda x: -jnp.sum(jax.nn.log_softmax(x) * jax.nn.one_hot(np.array([0, 3, -1]), 4), axis=1)),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_new_functions_under_transformations(name):
  ours, theirs = FUNCS[name]
  ref = theirs(jnp.asarray(X))
  same(ours(X), ref)
  same(adx.jit(ours)(X), ref)
  xs = np.stack([X, X + .25])
  same(adx.vmap(ours)(xs), jnp.stack([ref, theirs(jnp.asarray(xs[1]))]))
  w = np.cos(np.arange(np.size(ref))).reshape(np.shape(ref))
  loss = lambda f: lambda x: (f(x) * w).sum()
  g = jax.grad(loss(theirs))(jnp.asarray(X))
  same(adx.grad(loss(ours))(X), g)
  same(adx.jit(adx.grad(loss(ours)))(X), g)


@pytest.mark.parametrize("labels, k, kw", [
    (np.array([0, 2, -1, 3]), 3, {}), (np.array([[0, 2]]), 3, dict(axis=0)),
    (np.array([0, 1], np.int32), 3, dict(dtype=np.int32)), (np.array([[1, 0], [2, 2]]), 3, dict(axis=1))])
def test_one_hot_as_jax(labels, k, kw):
  theirs = jax.nn.one_hot(labels, k, **kw)
  same(nn.one_hot(labels, k, **kw), theirs)
  same(adx.jit(lambda v: nn.one_hot(v, k, **kw))(labels), theirs)


def test_vmap_of_traced_indices():
  xs, idx = np.arange(12.).reshape(4, 3), np.array([2, 0, 1, 2])
  f = lambda x, i: x[i] * x[0]
  same(adx.vmap(f)(xs, idx), jax.vmap(f)(xs, idx))
  same(adx.jit(adx.vmap(adx.grad(f)))(xs, idx), jax.jit(jax.vmap(jax.grad(f)))(xs, idx))
  g = lambda x, i: lax.dynamic_update_slice(x, x[:1] * 5., (i,))
  jg = lambda x, i: jax.lax.dynamic_update_slice(x, x[:1] * 5., (i,))
  same(adx.vmap(g, in_axes=(None, 0))(xs[0], idx), jax.vmap(jg, in_axes=(None, 0))(xs[0], idx))
  same(adx.jit(adx.vmap(g))(xs, idx), jax.jit(jax.vmap(jg))(xs, idx))


@settings(max_examples=15)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_static_indexing_matches_numpy(shape, data):
  x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
  idx = []
  for d in shape:
    idx.append(data.draw(st.one_of(
        st.integers(-d, d - 1),
        st.builds(slice, st.none() | st.integers(-d, d), st.none() | st.integers(-d, d),
                  st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3])))))
  if data.draw(st.booleans()):
    idx.insert(data.draw(st.integers(0, len(idx))), None)
  idx = tuple(idx)
  np.testing.assert_array_equal(adx.jit(lambda x: x[idx])(x), x[idx])   # NumPy's = JAX's here
  np.testing.assert_array_equal(adx.vmap(lambda x: x[idx])(np.stack([x, x + 1])),
                                np.stack([x[idx], (x + 1)[idx]]))


def test_api_options():
  f = adx.jit(lambda x, n, scale=1.: x * n * scale, static_argnames="n")
  assert float(f(2., n=3, scale=2.)) == 12.
  assert f.static_argnums == (1,)
  same(adx.hessian(lambda x: (x ** 3).sum())(np.array([1., 2.])),
       jax.hessian(lambda x: (x ** 3).sum())(jnp.array([1., 2.])))
  a = adx.jit(lambda x: x * 2.)(np.array([1.5, 2.]))
  assert a[0].item() == 3.0 and a.tolist() == [3.0, 4.0]
  same(adx.vmap(lambda x, y: x * y)(np.ones(2), y=np.arange(2.)), jnp.arange(2.))
  same(lax.broadcast(np.ones(3), (2, 4)), jax.lax.broadcast(jnp.ones(3), (2, 4)))
  same(lax.broadcast_in_dim(np.ones(3), (2, 3), (1,)),
       jax.lax.broadcast_in_dim(jnp.ones(3), (2, 3), (1,)))


def test_flops_counts_the_new_primitives():
  f = lambda x: (anp.cumsum(x) + nn.softmax(x) + x[1:].sum() + anp.prod(x) + x ** 3).sum()
  assert int(adx.flops(f)(np.ones(4))) > 0


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]), ("ijk,kl->lj", [(2, 3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ab,cd->", [(2, 3), (4, 5)]),
    ("bij,jk->bki", [(2, 3, 4), (4, 5)])])
def test_einsum_as_numpy_and_jax(subscripts, shapes):
  xs = [np.random.default_rng(0).normal(size=s).astype(np.float32) for s in shapes]
  want = jnp.einsum(subscripts, *xs)
  for got in (anp.einsum(subscripts, *xs), adx.jit(lambda *a: anp.einsum(subscripts, *a))(*xs)):
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, np.einsum(subscripts, *xs), rtol=1e-5, atol=1e-5)


def test_einsum_says_what_it_leaves_out():
  with pytest.raises(NotImplementedError, match="no '...', traces or diagonals"):
    anp.einsum("ii->i", np.ones((2, 2)))
