"""jit: compiled results agree with eager evaluation and with jax.jit, jit
composes with jvp/vmap/vjp (both ways round) and with itself, traces once per
input signature, keeps dtypes, returns ndarray-like device Arrays, exposes the
AOT API, and fails with clear errors.

Random programs come from test_programs (the same generator the eager
transformation tests use), plus contractions (dot/matmul/dot_general).
"""
import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, lax, runtime, xla
from autodidax.core import ConcretizationError
from test_programs import (B, assert_trees_close, in_axes_for, inputs_for, programs, seeds,
                           tangents_like, tol)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

small_programs = programs(n_inputs=(1, 2), n_ops=(1, 4), max_in_size=12)


# --- Differential: random programs --------------------------------------------------------------

@given(small_programs, seeds)
def test_jit_matches_eager_and_jax(program, seed):
  note(str(program))
  xs = inputs_for(program, seed)
  f = adx.jit(program.ours)
  ours = f(*xs)
  for leaf in adx.tree_util.tree_leaves(ours):
    assert isinstance(leaf, adx.Array), type(leaf)
  assert_trees_close(ours, program.ours(*xs), tol(program))
  assert_trees_close(ours, jax.jit(program.theirs)(*xs), tol(program))
  assert f.trace_count == 1
  f(*[x + 1. for x in xs])   # new values, same types: no retrace
  assert f.trace_count == 1


COMPOSITIONS = ["jvp(jit)", "vmap(jit)", "jit(jvp)", "jit(vmap)", "jit(jit)", "vjp(jit)",
                "jit(vjp)"]


def _compose(mode, program, xs, ts, cts, in_axes):
  """(ours, theirs) for one way of combining jit with another transformation."""
  fo, ft = program.ours, program.theirs
  xs = tuple(xs)
  if mode == "jvp(jit)":
    return adx.jvp(adx.jit(fo), xs, ts), jax.jvp(ft, xs, ts)
  if mode == "vmap(jit)":
    return adx.vmap(adx.jit(fo), in_axes)(*xs), jax.vmap(ft, in_axes)(*xs)
  if mode == "jit(jvp)":
    return (adx.jit(lambda xs, ts: adx.jvp(fo, xs, ts))(xs, ts),
            jax.jvp(ft, xs, ts))
  if mode == "jit(vmap)":
    return adx.jit(adx.vmap(fo, in_axes))(*xs), jax.vmap(ft, in_axes)(*xs)
  if mode == "jit(jit)":
    inner = adx.jit(fo)
    return adx.jit(lambda *a: inner(*a))(*xs), ft(*xs)
  if mode == "vjp(jit)":
    return adx.vjp(adx.jit(fo), *xs)[1](cts), jax.vjp(ft, *xs)[1](cts)
  if mode == "jit(vjp)":
    return (adx.jit(lambda xs, c: adx.vjp(fo, *xs)[1](c))(xs, cts),
            jax.vjp(ft, *xs)[1](cts))
  raise ValueError(mode)


@given(small_programs, seeds, st.sampled_from(COMPOSITIONS), st.data())
def test_jit_composes_with_transformations(program, seed, mode, data):
  note(str(program))
  note(mode)
  in_axes = (data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
             if "vmap" in mode else None)
  xs = inputs_for(program, seed, [(in_axes, B)] if in_axes else [])
  ts = tangents_like(xs, seed + 1)
  cts = None
  if "vjp" in mode:
    outs = jax.eval_shape(program.theirs, *xs)
    cts = jax.tree_util.tree_map(
        lambda s: np.random.default_rng(seed + 2).uniform(-1, 1, s.shape).astype(s.dtype), outs)
  ours, theirs = _compose(mode, program, xs, ts, cts, in_axes)
  assert_trees_close(ours, theirs, tol(program))


# --- Differential: contractions ----------------------------------------------------------------

@st.composite
def matmul_cases(draw):
  """Shapes for a @ b with NumPy's rules: vectors, matrices, broadcast stacks."""
  n, k, m = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
  batch = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
  kind = draw(st.sampled_from(["vec@vec", "mat@vec", "vec@mat", "mat@mat", "stack@mat",
                               "stack@stack", "vec@stack", "bcast"]))
  a, b = {"vec@vec": ((k,), (k,)), "mat@vec": ((n, k), (k,)), "vec@mat": ((k,), (k, m)),
          "mat@mat": ((n, k), (k, m)), "stack@mat": ((*batch, n, k), (k, m)),
          "stack@stack": ((*batch, n, k), (*batch, k, m)), "vec@stack": ((k,), (2, k, m)),
          "bcast": ((2, 1, n, k), (3, k, m))}[kind]
  op = draw(st.sampled_from(["matmul", "dot", "@"] if len(b) <= 2 else ["matmul", "@"]))
  dtype = draw(st.sampled_from([np.float32, np.float64, np.int32]))
  tail = draw(st.sampled_from(["none", "sin", "sum", "scale", "transpose"]))
  if dtype == np.int32 and tail == "sin":
    tail = "scale"
  return a, b, op, np.dtype(dtype), tail


def _matmul_program(m, op, tail):
  def f(a, b):
    y = m.matmul(a, b) if op == "matmul" else m.dot(a, b) if op == "dot" else a @ b
    if tail == "sin":
      y = m.sin(y)
    elif tail == "sum":
      y = m.sum(y, axis=-1) if m.ndim(y) else y
    elif tail == "scale":
      y = y * 2 + 1
    elif tail == "transpose":
      y = m.transpose(y)
    return y
  return f


def _rand(rng, shape, dtype):
  if np.dtype(dtype).kind == "i":
    return rng.integers(-5, 6, shape).astype(dtype)
  return rng.uniform(-2, 2, shape).astype(dtype)


@settings(max_examples=30)
@given(matmul_cases(), seeds)
def test_jit_matmul_matches_eager_numpy_and_jax(case, seed):
  a_shape, b_shape, op, dtype, tail = case
  rng = np.random.default_rng(seed)
  a, b = _rand(rng, a_shape, dtype), _rand(rng, b_shape, dtype)
  ours = adx.jit(_matmul_program(anp, op, tail))(a, b)
  eager = _matmul_program(anp, op, tail)(a, b)
  numpy = _matmul_program(np, op, tail)(a, b)
  theirs = jax.jit(_matmul_program(jnp, op, tail))(a, b)
  t = 1e-5 if dtype == np.float32 else 1e-12
  for other in (eager, numpy, theirs):
    other = np.asarray(other)
    assert ours.shape == other.shape and ours.dtype == other.dtype, (ours, other)
    np.testing.assert_allclose(ours, other, rtol=t, atol=t)


@st.composite
def dot_general_cases(draw):
  nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
  nfl, nfr = draw(st.integers(0, 1)), draw(st.integers(0, 2))
  sizes = [draw(st.integers(1, 3)) for _ in range(nb + nc + nfl + nfr)]
  bs, cs = sizes[:nb], sizes[nb:nb + nc]
  fl, fr = sizes[nb + nc:nb + nc + nfl], sizes[nb + nc + nfl:]
  # Lay each side's axes out in a random order; remember where batch/contract went.
  lroles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nfl)]
  rroles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nfr)]
  lroles, rroles = draw(st.permutations(lroles)), draw(st.permutations(rroles))
  size = {"b": bs, "c": cs}
  lshape = [size.get(r, fl)[i] for r, i in lroles]
  rshape = [size.get(r, fr)[i] for r, i in rroles]
  pos = lambda roles, kind: tuple(roles.index((kind, i)) for i in range(nb if kind == "b" else nc))
  dn = ((pos(lroles, "c"), pos(rroles, "c")), (pos(lroles, "b"), pos(rroles, "b")))
  dtype = draw(st.sampled_from([np.float32, np.float64, np.int64]))
  return tuple(lshape), tuple(rshape), dn, np.dtype(dtype)


@settings(max_examples=30)
@given(dot_general_cases(), seeds)
def test_jit_dot_general_matches_jax(case, seed):
  lshape, rshape, dn, dtype = case
  note(f"{lshape} x {rshape} {dn} {dtype}")
  rng = np.random.default_rng(seed)
  x, y = _rand(rng, lshape, dtype), _rand(rng, rshape, dtype)
  ours = adx.jit(lambda x, y: lax.dot_general(x, y, dn))(x, y)
  eager = lax.dot_general(x, y, dn)
  theirs = jax.jit(lambda x, y: jax.lax.dot_general(x, y, dn))(x, y)
  t = 1e-5 if dtype == np.float32 else 1e-12
  for other in (eager, theirs):
    other = np.asarray(other)
    assert ours.shape == other.shape and ours.dtype == other.dtype, (ours, other)
    np.testing.assert_allclose(ours, other, rtol=t, atol=t)


def test_enough_examples():
  """The hypothesis tests here run well over 100 examples in total."""
  from hypothesis import settings as s
  assert 2 * s.default.max_examples + 30 + 30 >= 100


# --- Pytrees and static arguments ---------------------------------------------------------------

def test_jit_pytree_inputs_and_outputs():
  def f(m, params, xs):
    w, b = params["w"], params["b"]
    y = m.tanh(m.matmul(xs[0], w) + b)
    return {"y": y, "aux": (m.sum(y), [xs[1] * 2., None])}

  rng = np.random.default_rng(0)
  params = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=(2,)).astype(np.float64)}
  xs = [rng.normal(size=(4, 3)), np.float32(1.5)]
  ours = adx.jit(lambda p, x: f(anp, p, x))(params, xs)
  theirs = jax.jit(lambda p, x: f(jnp, p, x))(params, xs)
  assert_trees_close(ours, theirs, 1e-12)


def test_jit_pytree_structure_is_part_of_the_signature():
  f = adx.jit(lambda t: sum(adx.tree_util.tree_leaves(t)))
  x = np.ones(2)
  np.testing.assert_allclose(f((x, x)), 2 * x)
  np.testing.assert_allclose(f([x, x]), 2 * x)
  np.testing.assert_allclose(f({"a": x, "b": x}), 2 * x)
  np.testing.assert_allclose(f((x, x, x)), 3 * x)
  assert f.trace_count == 4
  f({"a": 2 * x, "b": x})
  assert f.trace_count == 4


@pytest.mark.parametrize("static_argnums", [(1, 2), (-2, -1), (2, 1), [1, -1]])
def test_jit_static_argnums(static_argnums):
  def f(m, x, n, axes):
    y = x
    for _ in range(n):              # Python control flow on a static value
      y = m.sin(y) * 2.
    return m.sum(y, axis=axes)

  x = np.random.default_rng(1).normal(size=(2, 3))
  jf = adx.jit(lambda x, n, axes: f(anp, x, n, axes), static_argnums=static_argnums)
  jjf = jax.jit(lambda x, n, axes: f(jnp, x, n, axes), static_argnums=(1, 2))
  for n, axes in [(1, 0), (3, 0), (3, (0, 1)), (1, 0), (3, (0, 1))]:
    assert_trees_close(jf(x, n, axes), jjf(x, n, axes), 1e-12)
  assert jf.trace_count == 3   # (1, 0), (3, 0), (3, (0, 1)); the repeats are cached
  x2 = x + 1.
  assert_trees_close(jf(x2, 3, 0), jjf(x2, 3, 0), 1e-12)
  assert jf.trace_count == 3


def test_jit_static_arg_in_the_middle_and_strings():
  jf = adx.jit(lambda x, mode, y: x * y if mode == "mul" else x + y, static_argnums=1)
  x, y = np.arange(3.), np.full(3, 2.)
  np.testing.assert_allclose(jf(x, "mul", y), x * y)
  np.testing.assert_allclose(jf(x, "add", y), x + y)
  np.testing.assert_allclose(jf(x, "mul", y + 1), x * (y + 1))
  assert jf.trace_count == 2


def test_jit_of_closure_over_outer_tracer():
  """jit inside jvp/vmap closing over the outer transformation's tracer."""
  f_ours = lambda x: adx.jit(lambda y: anp.sin(y * x))(np.arange(3.))   # noqa: E731
  f_theirs = lambda x: jax.jit(lambda y: jnp.sin(y * x))(jnp.arange(3.))  # noqa: E731
  assert_trees_close(adx.jvp(f_ours, (0.7,), (1.,)), jax.jvp(f_theirs, (0.7,), (1.,)), 1e-12)
  xs = np.array([0.1, 0.2])
  assert_trees_close(adx.vmap(f_ours)(xs), jax.vmap(f_theirs)(xs), 1e-12)


# --- Trace counting and caching ------------------------------------------------------------------

def test_trace_count_once_per_signature():
  f = adx.jit(lambda x: anp.sin(x) * 2.)
  x32 = np.ones(3, np.float32)
  f(x32)
  f(x32 + 1)
  f(np.zeros(3, np.float32))
  assert f.trace_count == 1
  f(np.ones(3, np.float64))          # new dtype
  assert f.trace_count == 2
  f(np.ones(4, np.float32))          # new shape
  assert f.trace_count == 3
  f(np.ones((3, 1), np.float32))     # new rank
  assert f.trace_count == 4
  f(2.0)                             # weakly-typed f64[]
  f(3.0)
  assert f.trace_count == 5
  f(np.float64(2.0))                 # strongly-typed f64[]: a different signature
  assert f.trace_count == 6
  f(np.float64(5.0))
  assert f.trace_count == 6
  for x in (x32, np.ones(3), np.ones(4, np.float32), 7.0):
    f(x)
  assert f.trace_count == 6


def test_array_outputs_fed_back_do_not_retrace():
  f = adx.jit(lambda x: anp.tanh(x) + 1.)
  y = f(np.ones(3, np.float32))
  for _ in range(3):
    y = f(y)
  assert f.trace_count == 1
  assert isinstance(y, adx.Array) and y.dtype == np.float32


def test_weak_array_outputs_fed_back_do_not_retrace():
  f = adx.jit(lambda x: lax.mul(x, 2.))
  y = f(3.0)
  assert y.aval.weak_type          # as jax.jit(lambda x: x * 2.)(3.).weak_type
  f(y)
  assert f.trace_count == 1
  g = adx.jit(lambda a, b: a * b)
  assert g(y, np.ones(2, np.float32)).dtype == np.float32


def test_repeated_calls_do_not_recompile(monkeypatch):
  compiles = []
  real = runtime.compile
  monkeypatch.setattr(runtime, "compile", lambda *a, **k: compiles.append(1) or real(*a, **k))
  f = adx.jit(lambda x: anp.cos(x) * 3.)
  x = np.ones(5)
  for _ in range(3):
    f(x)
  assert len(compiles) == 1
  for _ in range(2):   # jvp of jit: the jvp jaxpr is built and compiled once
    adx.jvp(f, (x,), (x,))
  assert f.trace_count == 1
  assert len(compiles) == 2
  for _ in range(2):
    adx.vmap(f)(np.ones((2, 5)))
  assert len(compiles) == 3
  f.lower(x).compile()   # AOT reuses the executable of the same trace
  assert len(compiles) == 3


# --- Dtypes ----------------------------------------------------------------------------------------

DTYPE_PROGRAMS = [
    ("affine", lambda m, x: x * 2 + 1),
    ("affine_float_consts", lambda m, x: x * 2.5 - 1.),
    ("sin", lambda m, x: m.sin(x)),
    ("max_reduce", lambda m, x: m.max(x, axis=0)),
    ("transpose_reshape", lambda m, x: m.reshape(m.transpose(x), (-1,))),
    ("compare", lambda m, x: m.greater(x, 1)),
    ("maximum_scalar", lambda m, x: m.maximum(x, 0)),
    ("matmul", lambda m, x: m.matmul(x, m.transpose(x))),
    ("identity", lambda m, x: x),
    ("divide", lambda m, x: x / 2.),
]
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16]


def _skip(name, dtype):
  kind = np.dtype(dtype).kind
  return ((name in ("sin",) and kind in "biu") or
          (name in ("affine", "affine_float_consts", "matmul", "divide") and kind == "b") or
          (name == "affine_float_consts" and kind in "iu") or
          (name == "matmul" and dtype == np.float16))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name,prog", DTYPE_PROGRAMS, ids=[p[0] for p in DTYPE_PROGRAMS])
def test_jit_preserves_dtypes_like_numpy_and_jax(name, prog, dtype):
  if _skip(name, dtype):
    pytest.skip("not defined for this dtype")
  x = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
  ours = adx.jit(lambda x: prog(anp, x))(x)
  eager = np.asarray(prog(anp, x))
  numpy = np.asarray(prog(np, x))
  theirs = np.asarray(jax.jit(lambda x: prog(jnp, x))(x))
  assert ours.dtype == eager.dtype == numpy.dtype == theirs.dtype, (
      ours.dtype, eager.dtype, numpy.dtype, theirs.dtype)
  for other in (eager, numpy, theirs):
    np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(other, np.float64),
                               rtol=1e-3)


@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8])
def test_weak_python_scalars_adopt_the_array_dtype(scalar, dtype):
  if isinstance(scalar, float) and np.dtype(dtype).kind in "iu":
    pytest.skip("a float scalar promotes an int array to float")
  x = np.ones(3, dtype)
  fs = [lambda x: x * scalar, lambda x: scalar + x, lambda x: anp.maximum(scalar, x)]
  if not isinstance(scalar, bool):   # a Python bool is strong, as in JAX
    fs.append(lambda x: lax.mul(x, scalar))
  for f in fs:
    out = adx.jit(f)(x)
    assert out.dtype == dtype, (f, out.dtype)
  assert adx.jit(lambda x: x * 2)(3).dtype == np.asarray(jax.jit(lambda x: x * 2)(3)).dtype


def test_scalar_and_constant_outputs():
  x = np.ones(2, np.float32)
  assert adx.jit(lambda x: np.float32(2.))(x).dtype == np.float32
  assert adx.jit(lambda x: np.int32(2))(x).dtype == np.int32
  a, b = adx.jit(lambda x: (x, x))(x)
  np.testing.assert_array_equal(a, b)
  assert adx.jit(lambda x: ())(x) == ()
  out = adx.jit(lambda: np.arange(3, dtype=np.int32) * 2)()
  assert out.dtype == np.int32
  np.testing.assert_array_equal(out, [0, 2, 4])
  c = np.arange(4.)
  np.testing.assert_allclose(adx.jit(lambda x: anp.sum(x * c))(np.ones(4)), 6.)


# --- AOT ------------------------------------------------------------------------------------------

def test_aot_lower_compile_and_call():
  f = adx.jit(lambda x, w: anp.tanh(x @ w) * 2.)
  x, w = np.ones((4, 3), np.float32), np.full((3, 2), 0.5, np.float32)
  lowered = f.lower(x, w)
  text = lowered.as_text()
  assert "stablehlo." in text and "func.func public @main" in text
  runtime.verify(text)
  compiled = lowered.compile()
  hlo = compiled.as_text()
  assert "ENTRY" in hlo and "HloModule" in hlo
  costs = compiled.cost_analysis()
  assert costs["flops"] >= 4 * 3 * 2 * 2   # the matmul alone: 2 * m * k * n
  out = compiled(x, w)
  assert isinstance(out, adx.Array) and out.dtype == np.float32
  np.testing.assert_allclose(out, np.tanh(x @ w) * 2., rtol=1e-6)
  np.testing.assert_allclose(out, jax.jit(lambda x, w: jnp.tanh(x @ w) * 2.)(x, w), rtol=1e-6)
  assert f.trace_count == 1
  f(x, w)
  assert f.trace_count == 1


def test_aot_lower_with_abstract_specs_and_pytrees():
  f = adx.jit(lambda d: {"s": anp.sum(d["a"]), "p": d["a"] * d["b"]})
  spec = {"a": core.ShapedArray((2, 3), np.float32), "b": core.ShapedArray((2, 3), np.float32)}
  lowered = f.lower(spec)
  assert "tensor<2x3xf32>" in lowered.as_text()
  assert "ENTRY" in lowered.compile().as_text()
  a, b = np.ones((2, 3), np.float32), np.full((2, 3), 3., np.float32)
  out = lowered.compile()({"a": a, "b": b})
  np.testing.assert_allclose(out["s"], 6.)
  np.testing.assert_allclose(out["p"], a * b)
  lowered.jaxpr   # a ClosedJaxpr for the same trace


def test_aot_static_argnums():
  f = adx.jit(lambda x, n: x * n, static_argnums=1)
  c = f.lower(np.ones(2), 3).compile()
  np.testing.assert_allclose(c(np.ones(2)), [3., 3.])


def test_aot_compiled_rejects_mismatched_arguments():
  c = adx.jit(lambda x: x * 2.).lower(np.ones(3, np.float32)).compile()
  with pytest.raises(TypeError):
    c(np.ones(3, np.float64))
  with pytest.raises(TypeError):
    c(np.ones(4, np.float32))


# --- Array ---------------------------------------------------------------------------------------

def _array(x):
  return adx.jit(lambda x: x)(np.asarray(x))


def test_array_behaves_like_an_ndarray():
  host = np.arange(6, dtype=np.float32).reshape(2, 3)
  a = _array(host)
  assert isinstance(a, adx.Array)
  assert a.shape == (2, 3) and a.dtype == np.float32 and a.ndim == 2 and a.size == 6
  assert len(a) == 2
  np.testing.assert_array_equal(np.asarray(a), host)
  assert np.asarray(a).dtype == np.float32
  assert np.asarray(a, np.float64).dtype == np.float64
  r = repr(a)
  assert r.startswith("Array(") and "float32" in r and "5." in r
  np.testing.assert_array_equal(a[1], host[1])
  np.testing.assert_array_equal(a[:, 1:], host[:, 1:])
  assert a[1, 2] == 5.
  np.testing.assert_array_equal([np.asarray(row) for row in a], list(host))
  for op in (operator.add, operator.sub, operator.mul, operator.truediv):
    np.testing.assert_allclose(op(a, 2.), op(host, 2.))
    np.testing.assert_allclose(op(2., a + 1.), op(2., host + 1.))
    np.testing.assert_allclose(op(a, a + 1.), op(host, host + 1.))
    assert np.asarray(op(a, 2.)).dtype == np.float32
  np.testing.assert_allclose(-a, -host)
  np.testing.assert_allclose(a ** 2, host ** 2)
  np.testing.assert_allclose(a @ a.T, host @ host.T)
  np.testing.assert_array_equal(a > 2., host > 2.)
  np.testing.assert_allclose(a.T, host.T)
  np.testing.assert_allclose(a.reshape(3, 2), host.reshape(3, 2))
  np.testing.assert_allclose(np.sin(a), np.sin(host))
  np.testing.assert_allclose(a + host, 2 * host)
  np.testing.assert_allclose(host + a, 2 * host)


def test_array_reductions():
  """Array.sum/.max/.mean and anp.sum(Array): NumPy's reductions call an array
  -like's own .sum(axis=, out=) method, which must not break the impl rules."""
  host = np.arange(6, dtype=np.float32).reshape(2, 3)
  a = _array(host)
  np.testing.assert_allclose(a.sum(), host.sum())
  np.testing.assert_allclose(a.max(0), host.max(0))
  np.testing.assert_allclose(a.mean(), host.mean())
  np.testing.assert_allclose(anp.sum(a, 1), host.sum(1))
  np.testing.assert_allclose(anp.max(a), host.max())
  np.testing.assert_allclose(np.sum(a), host.sum())


def test_array_scalars_convert_to_python():
  s = _array(np.float32(2.5))
  assert float(s) == 2.5 and int(s) == 2 and bool(s) is True
  assert not bool(_array(np.float64(0.)))
  assert int(_array(np.int32(-7))) == -7
  assert bool(_array(np.bool_(True))) is True
  assert f"{s:.2f}" == "2.50"
  assert s.ndim == 0 and s.shape == ()


def test_array_inputs_go_to_jit_without_host_copies(monkeypatch):
  f = adx.jit(lambda x: x * 2.)
  x = np.arange(4.)
  y = f(x)
  assert xla.device_buffer(y, y.aval, "cpu") is y._buf
  puts = []
  real = runtime.device_put
  monkeypatch.setattr(runtime, "device_put", lambda *a, **k: puts.append(1) or real(*a, **k))
  z = f(y)
  assert puts == []                        # the device buffer went straight in
  assert y._npy is None and z._npy is None  # nothing was fetched to the host either
  np.testing.assert_allclose(z, x * 4.)
  f(x)
  assert puts == [1]                       # a host array is copied once


def test_array_inside_other_transformations():
  y = _array(np.array([0.5, 1.0]))
  t = adx.jvp(anp.sin, (y,), (np.ones(2),))
  np.testing.assert_allclose(t[1], np.cos([0.5, 1.0]))
  np.testing.assert_allclose(adx.vmap(lambda v: v * 3.)(y), [1.5, 3.0])
  np.testing.assert_allclose(adx.grad(lambda v: anp.sum(v * v))(y), [1.0, 2.0])


# --- Errors ----------------------------------------------------------------------------------------

def test_traced_value_in_if_raises_concretization_error():
  def f(x):
    if x > 0:
      return x
    return -x

  jf = adx.jit(f)
  with pytest.raises(ConcretizationError, match="no concrete value"):
    jf(1.)
  assert core.trace_stack[0].level == 0 and len(core.trace_stack) == 1
  assert core.dynamic_trace is None
  with pytest.raises(ConcretizationError):   # and again: nothing was left half-cached
    jf(1.)
  g = adx.jit(lambda x: anp.abs(x))          # the machinery still works afterwards
  np.testing.assert_allclose(g(-2.), 2.)


def test_errors_inside_nested_jit_leave_the_stack_clean():
  def bad(x):
    return lax.add(x, np.ones(4))   # shape mismatch while tracing
  outer = adx.jit(lambda x: adx.jit(bad)(x) * 2.)
  with pytest.raises(TypeError, match="shapes"):
    outer(np.ones(3))
  with pytest.raises(ConcretizationError):
    adx.jvp(adx.jit(lambda x: x if x > 0 else -x), (1.,), (1.,))
  assert len(core.trace_stack) == 1 and core.dynamic_trace is None


@pytest.mark.parametrize("bad", [[1, 2], np.arange(2), {"a": 1}])
def test_unhashable_static_args_give_a_clear_type_error(bad):
  f = adx.jit(lambda x, n: x, static_argnums=1)
  with pytest.raises(TypeError, match="static arguments must be hashable"):
    f(np.ones(2), bad)
  assert f.trace_count == 0


def test_static_argnums_out_of_range():
  f = adx.jit(lambda x: x, static_argnums=3)
  with pytest.raises((TypeError, ValueError), match="static_argnums"):
    f(np.ones(2))


def test_unavailable_platform_gives_a_clear_runtime_error():
  missing = next(p for p in ("rocm", "tpu", "cuda") if p not in runtime.available_platforms())
  f = adx.jit(lambda x: x * 2., platform=missing)
  with pytest.raises(RuntimeError, match=f"(?i)no XLA backend for platform '{missing}'"):
    f(np.ones(2))
  with pytest.raises(RuntimeError, match=missing):
    f.lower(np.ones(2)).compile()
  assert len(core.trace_stack) == 1 and core.dynamic_trace is None


def test_non_array_arguments_are_rejected():
  with pytest.raises(TypeError, match="can't treat a value of type str"):
    adx.jit(lambda x: x)("hello")


# --- block_until_ready: a pytree of arrays in, the same pytree out --------------------------------

@pytest.mark.parametrize("make", [
    lambda m: {"a": m.jit(lambda x: x * 2.)(np.arange(3.)), "b": [np.float32(1.), 2, None]},
    lambda m: (m.jit(lambda x: (x, x + 1.))(np.ones((2, 2))), "text"),
    lambda m: m.jit(lambda x: x.sum())(np.arange(4.)),
], ids=["dict", "tuple", "array"])
def test_block_until_ready_as_jax(make):
  ours, theirs = make(adx), make(jax)
  got, want = adx.block_until_ready(ours), jax.block_until_ready(theirs)
  assert got is ours and want is theirs   # the same object back, as JAX returns it
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    if isinstance(b, str):
      assert a == b
    else:
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_block_until_ready_waits_on_every_leaf(monkeypatch):
  waited = []
  monkeypatch.setattr(xla.Array, "block_until_ready", lambda self: waited.append(self) or self)
  x = adx.jit(lambda x: (x, x * 3.))(np.arange(2.))
  adx.block_until_ready({"k": x, "n": np.arange(2.)})
  assert len(waited) == 2 and all(any(w is leaf for leaf in x) for w in waited)
