"""Reverse-mode autodiff (Part 4): linearize, vjp, grad against JAX and finite
differences on random programs; transpose rules by their defining property;
symbolic zero cotangents; the linear cost of the backward pass; has_aux,
argnums, and the errors the user-facing functions raise.

The random programs are test_programs.py's, extended with contractions
(dot_general with random batch/contracting axes, and matmul), and their inputs
are packed into pytrees. Compositions (grad of vmap, jit of grad, ...) are in
test_autodiff_compose.py, which imports the helpers from here.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, core, lax, viz
from autodidax.core import ShapedArray
from conftest import stack_is_clean
from test_programs import (MAX_SIZE, OURS, THEIRS, Const, Program, apply_op,
                           assert_trees_close, inputs_for, programs, seeds, tol)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")


# --- Programs with contractions, over pytree inputs ----------------------------------------

def apply_ad_op(bk, name, params, args):
  if name == "dot_general":
    x, y = args
    dot = jax.lax.dot_general if bk is THEIRS else lax.dot_general
    return dot(x, y, params["dn"])
  if name == "matmul":
    return bk.np.matmul(*args)
  return apply_op(bk, name, params, args)


def run_env(program, bk, *inputs):
  env = list(inputs)
  for name, args, params in program.ops:
    vals = [a.value if isinstance(a, Const) else env[a] for a in args]
    env.append(apply_ad_op(bk, name, params, vals))
  return env


def run(program, bk, *inputs):
  """The program's outputs, always as a tuple."""
  env = run_env(program, bk, *inputs)
  return tuple(env[i] for i in program.outs)


def env_avals(program):
  """(shape, dtype) of every value of the program (from an eager run on zeros)."""
  env = run_env(program, OURS, *[np.zeros(s) for s in program.in_shapes])
  return [(np.shape(v), np.result_type(v)) for v in env]


@st.composite
def dimension_numbers(draw, sa, sb):
  """Random valid dot_general dimension numbers for shapes sa, sb: each axis of
  the left operand may pair with an unused equal-sized axis of the right one,
  as a contracting or a batch pair (in any order)."""
  lc, rc, lb, rb = [], [], [], []
  used = set()
  for i in draw(st.permutations(range(len(sa)))):
    cands = [k for k in range(len(sb)) if sb[k] == sa[i] and k not in used]
    if not cands or draw(st.integers(0, 2)) == 0:
      continue
    k = draw(st.sampled_from(cands))
    used.add(k)
    if draw(st.booleans()):
      lc.append(i), rc.append(k)
    else:
      lb.append(i), rb.append(k)
  return ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))


def _dot_out_shape(sa, sb, dn):
  (lc, rc), (lb, rb) = dn
  return (tuple(sa[i] for i in lb) + tuple(d for i, d in enumerate(sa) if i not in lc + lb)
          + tuple(d for i, d in enumerate(sb) if i not in rc + rb))


@st.composite
def ad_programs(draw, n_inputs=(1, 3), n_ops=(1, 5), max_in_size=MAX_SIZE, f32=True,
                contractions=True):
  """test_programs' programs, maybe followed by a contraction (and an op after it)."""
  base = draw(programs(n_inputs=n_inputs, n_ops=n_ops, max_in_size=max_in_size, f32=f32))
  if not contractions or draw(st.integers(0, 2)) == 0:
    return base
  env = env_avals(base)
  ops = list(base.ops)
  i = draw(st.integers(0, len(env) - 1))
  (sa, da) = env[i]
  j = draw(st.sampled_from([k for k, (_, d) in enumerate(env) if d == da]))
  sb = env[j][0]
  matmul_ok = len(sa) >= 1 and len(sb) >= 1
  if matmul_ok:
    try:
      np.matmul(np.zeros(sa), np.zeros(sb))
    except ValueError:
      matmul_ok = False
  if matmul_ok and draw(st.booleans()):
    ops.append(("matmul", (i, j), {}))
  else:
    dn = draw(dimension_numbers(sa, sb))
    if int(np.prod(_dot_out_shape(sa, sb, dn), dtype=int)) > 4 * MAX_SIZE:
      return base
    ops.append(("dot_general", (i, j), {"dn": dn}))
  last = len(base.in_shapes) + len(ops) - 1
  if draw(st.booleans()):
    ops.append((draw(st.sampled_from(["tanh", "sin", "log_sq"])), (last,), {}))
    last += 1
  outs = (last,) + (base.outs[:1] if draw(st.booleans()) else ())
  return Program(base.in_shapes, tuple(ops), outs, base.has_f32)


def describe(program):
  return str(program)   # Program.__str__ (test_programs) lists the ops


def pack(xs):
  """The flat inputs as a pytree (its shape depends on how many there are)."""
  xs = list(xs)
  if len(xs) == 1:
    return {"w": xs[0]}
  if len(xs) == 2:
    return (xs[0], {"v": xs[1]})
  return [xs[0], {"a": xs[1], "b": (xs[2],)}]


def unpack(tree):
  if isinstance(tree, dict):
    return [tree["w"]]
  if isinstance(tree, tuple):
    return [tree[0], tree[1]["v"]]
  return [tree[0], tree[1]["a"], tree[1]["b"][0]]


def tree_fun(program, bk):
  """The program as a function of one pytree, returning a tuple of outputs."""
  return lambda tree: run(program, bk, *unpack(tree))


def out_avals(program):
  env = env_avals(program)
  return [env[i] for i in program.outs]


def weights_for(program, seed):
  rng = np.random.default_rng(seed)
  return [rng.uniform(-1.0, 1.0, s) for s, _ in out_avals(program)]


def scalar_fun(program, bk, weights):
  """sum_i <w_i, out_i>: a scalar function of one pytree."""
  def f(tree):
    outs = run(program, bk, *unpack(tree))
    terms = [bk.np.sum(bk.np.multiply(o, w)) for o, w in zip(outs, weights)]
    return functools.reduce(bk.np.add, terms)
  return f


def like(xs, seed, scale=1.0):
  """Random float64 values shaped (and, for floats, typed) like the leaves `xs`."""
  rng = np.random.default_rng(seed)
  return [np.asarray(rng.uniform(-scale, scale, np.shape(x))).astype(np.result_type(x))
          for x in xs]


def vdot(xs, ys):
  return sum(float(np.sum(np.asarray(x, np.float64) * np.asarray(y, np.float64)))
             for x, y in zip(xs, ys))


def leaves(tree):
  return adx.tree_util.tree_leaves(tree)


# --- grad, vjp, linearize on random programs ---------------------------------------------

@given(ad_programs(), seeds)
def test_grad_matches_jax(program, seed):
  note(describe(program))
  tree = pack(inputs_for(program, seed))
  w = weights_for(program, seed + 1)
  val, g = adx.value_and_grad(scalar_fun(program, OURS, w))(tree)
  val_j, g_j = jax.jit(jax.value_and_grad(scalar_fun(program, THEIRS, w)))(tree)
  assert_trees_close(val, val_j, tol(program))
  assert_trees_close(g, g_j, tol(program))
  assert_trees_close(adx.grad(scalar_fun(program, OURS, w))(tree), g_j, tol(program))


@given(ad_programs(f32=False), seeds)
def test_grad_matches_finite_differences(program, seed):
  note(describe(program))
  xs = inputs_for(program, seed)
  w = weights_for(program, seed + 1)
  f = scalar_fun(program, OURS, w)
  g = leaves(adx.grad(f)(pack(xs)))
  ts = like(xs, seed + 2)
  eps = 1e-6
  fd = (np.asarray(f(pack([x + eps * t for x, t in zip(xs, ts)]))) -
        np.asarray(f(pack([x - eps * t for x, t in zip(xs, ts)])))) / (2 * eps)
  np.testing.assert_allclose(vdot(g, ts), fd, rtol=1e-5, atol=1e-5)


@given(ad_programs(), seeds)
def test_vjp_matches_jax(program, seed):
  note(describe(program))
  tree = pack(inputs_for(program, seed))
  cts = tuple(like([np.zeros(s, d) for s, d in out_avals(program)], seed + 1))
  y, f_vjp = adx.vjp(tree_fun(program, OURS), tree)
  ct_in = f_vjp(cts)
  y_j, ct_j = jax.jit(lambda t, c: (lambda r: (r[0], r[1](c)))(
      jax.vjp(tree_fun(program, THEIRS), t)))(tree, cts)
  assert_trees_close(y, y_j, tol(program))
  assert_trees_close(ct_in, ct_j, tol(program))


@given(ad_programs(), seeds)
def test_linearize_matches_jax_and_is_adjoint_to_vjp(program, seed):
  note(describe(program))
  xs = inputs_for(program, seed)
  tree = pack(xs)
  ts = like(xs, seed + 1)
  ts2 = like(xs, seed + 2)
  y, f_lin = adx.linearize(tree_fun(program, OURS), tree)
  out = f_lin(pack(ts))

  def theirs(t, d1, d2):
    y, f_jvp = jax.linearize(tree_fun(program, THEIRS), t)
    return y, f_jvp(d1), f_jvp(d2)
  y_j, out_j, out2_j = jax.jit(theirs)(tree, pack(ts), pack(ts2))
  assert_trees_close(y, y_j, tol(program))
  assert_trees_close(out, out_j, tol(program))
  # The linear function can be applied again, to other tangents.
  assert_trees_close(f_lin(pack(ts2)), out2_j, tol(program))
  # <ct, L t> == <L^T ct, t>: the vjp is the transpose of the linearized function.
  cts = tuple(like([np.zeros(s, d) for s, d in out_avals(program)], seed + 3))
  _, f_vjp = adx.vjp(tree_fun(program, OURS), tree)
  lhs, rhs = vdot(cts, out), vdot(leaves(f_vjp(cts)), ts)
  np.testing.assert_allclose(lhs, rhs, rtol=50 * tol(program), atol=50 * tol(program))


@given(ad_programs(f32=False), seeds)
def test_linearize_matches_finite_differences(program, seed):
  note(describe(program))
  xs = inputs_for(program, seed)
  ts = like(xs, seed + 1)
  f = tree_fun(program, OURS)
  _, f_lin = adx.linearize(f, pack(xs))
  out = f_lin(pack(ts))
  eps = 1e-6
  plus = f(pack([x + eps * t for x, t in zip(xs, ts)]))
  minus = f(pack([x - eps * t for x, t in zip(xs, ts)]))
  for a, p, m in zip(out, plus, minus):
    np.testing.assert_allclose(a, (np.asarray(p) - np.asarray(m)) / (2 * eps),
                               rtol=1e-5, atol=1e-5)


FIXED = [   # contractions the strategy may rarely draw, always run
    Program(in_shapes=((2, 3, 2), (3, 2, 2)),
            ops=(("sin", (0,), {}),
                 ("dot_general", (2, 1), {"dn": (((1, 2), (0, 2)), ((0,), (1,)))}),
                 ("tanh", (3,), {})),
            outs=(4, 2), has_f32=False),
    Program(in_shapes=((2, 3), (3, 3)),
            ops=(("matmul", (0, 1), {}), ("matmul", (2, 1), {}),
                 ("maximum", (3, 0), {})),
            outs=(4,), has_f32=False),
    Program(in_shapes=((3,), (2, 3)),
            ops=(("dot_general", (1, 0), {"dn": (((1,), (0,)), ((), ()))}),
                 ("dot_general", (2, 2), {"dn": (((), ()), ((0,), (0,)))})),
            outs=(3,), has_f32=False),
]


@pytest.mark.parametrize("program", FIXED, ids=["batched_dot", "matmul_chain", "vector_dots"])
def test_fixed_programs_with_contractions(program):
  xs = inputs_for(program, 0)
  tree = pack(xs)
  w = weights_for(program, 1)
  assert_trees_close(adx.grad(scalar_fun(program, OURS, w))(tree),
                     jax.grad(scalar_fun(program, THEIRS, w))(tree), 1e-12)
  cts = tuple(like([np.zeros(s, d) for s, d in out_avals(program)], 2))
  _, f_vjp = adx.vjp(tree_fun(program, OURS), tree)
  assert_trees_close(f_vjp(cts), jax.vjp(tree_fun(program, THEIRS), tree)[1](cts), 1e-12)


# --- Transpose rules: <ct, L(t)> == <L^T(ct), t>, and L^T matches jax.vjp -------------------

def _bcast_theirs(t, shape, axes):
  kept = [i for i in range(len(shape)) if i not in axes]
  return jax.lax.broadcast_in_dim(t, shape, kept)


_rng = np.random.default_rng(1234)
C23 = _rng.uniform(0.5, 2.0, (2, 3))
C3 = _rng.uniform(0.5, 2.0, (3,))
DN_BATCH = (((3, 0), (0, 3)), ((1,), (2,)))   # x: (4, 2, 5, 3) with y: (3, 6, 2, 4)
DN_PLAIN = (((1,), (0,)), ((), ()))
M35 = _rng.uniform(-1.0, 1.0, (3, 5))
X4253 = _rng.uniform(-1.0, 1.0, (4, 2, 5, 3))
Y3624 = _rng.uniform(-1.0, 1.0, (3, 6, 2, 4))

# name, primitive that must appear, shapes (and dtypes) of the linear inputs, ours, theirs
LINEAR = [
    ("add", "add", [(2, 3), (2, 3)], lambda a, b: lax.add(a, b), lambda a, b: a + b),
    ("add_scalar", "add", [(), (2, 3)], lambda a, b: lax.add(a, b), lambda a, b: a + b),
    ("sub", "sub", [(2, 3), (2, 3)], lambda a, b: lax.sub(a, b), lambda a, b: a - b),
    ("sub_scalar", "sub", [(2, 3), ()], lambda a, b: lax.sub(a, b), lambda a, b: a - b),
    ("neg", "neg", [(2, 3)], lax.neg, lambda a: -a),
    ("mul_const_right", "mul", [(2, 3)], lambda a: lax.mul(a, C23), lambda a: a * C23),
    ("mul_const_left", "mul", [(2, 3)], lambda a: lax.mul(C23, a), lambda a: C23 * a),
    ("mul_scalar_const", "mul", [(2, 3)], lambda a: lax.mul(a, 1.5), lambda a: a * 1.5),
    ("mul_scalar_t_by_array", "mul", [()], lambda a: lax.mul(a, C23), lambda a: a * C23),
    ("div_const", "div", [(2, 3)], lambda a: lax.div(a, C23), lambda a: a / C23),
    ("div_scalar_t_by_array", "div", [()], lambda a: lax.div(a, C23), lambda a: a / C23),
    ("reduce_sum_all", "reduce_sum", [(2, 3, 4)], lambda a: lax.reduce_sum(a),
     lambda a: jnp.sum(a)),
    ("reduce_sum_axes", "reduce_sum", [(2, 3, 4)], lambda a: lax.reduce_sum(a, (0, 2)),
     lambda a: jnp.sum(a, (0, 2))),
    ("broadcast", "broadcast", [(2, 3)], lambda a: lax.broadcast(a, (4, 2, 5, 3), (0, 2)),
     lambda a: _bcast_theirs(a, (4, 2, 5, 3), (0, 2))),
    ("broadcast_scalar", "broadcast", [()], lambda a: lax.broadcast(a, (2, 3), (0, 1)),
     lambda a: _bcast_theirs(a, (2, 3), (0, 1))),
    ("transpose", "transpose", [(2, 3, 4)], lambda a: lax.transpose(a, (2, 0, 1)),
     lambda a: jnp.transpose(a, (2, 0, 1))),
    ("reshape", "reshape", [(2, 3, 4)], lambda a: lax.reshape(a, (4, 6)),
     lambda a: jnp.reshape(a, (4, 6))),
    ("convert_f32_to_f64", "convert_element_type", [((2, 3), np.float32)],
     lambda a: lax.convert_element_type(a, np.float64), lambda a: a.astype(np.float64)),
    ("convert_f64_to_f32", "convert_element_type", [(2, 3)],
     lambda a: lax.convert_element_type(a, np.float32), lambda a: a.astype(np.float32)),
    ("dot_lhs", "dot_general", [(2, 3)], lambda a: lax.dot_general(a, M35, DN_PLAIN),
     lambda a: jax.lax.dot_general(a, M35, DN_PLAIN)),
    ("dot_rhs", "dot_general", [(5, 2)], lambda b: lax.dot_general(M35, b, DN_PLAIN),
     lambda b: jax.lax.dot_general(M35, b, DN_PLAIN)),
    ("dot_batch_lhs", "dot_general", [(4, 2, 5, 3)],
     lambda a: lax.dot_general(a, Y3624, DN_BATCH),
     lambda a: jax.lax.dot_general(a, Y3624, DN_BATCH)),
    ("dot_batch_rhs", "dot_general", [(3, 6, 2, 4)],
     lambda b: lax.dot_general(X4253, b, DN_BATCH),
     lambda b: jax.lax.dot_general(X4253, b, DN_BATCH)),
    ("dot_vector_rhs", "dot_general", [(3,)], lambda b: lax.dot_general(C23, b, DN_PLAIN),
     lambda b: jax.lax.dot_general(C23, b, DN_PLAIN)),
    ("xla_call", "xla_call", [(2, 3), (3,)],
     adx.jit(lambda a, b: lax.reduce_sum(lax.mul(anp.subtract(a, b), C23), (1,))),
     lambda a, b: jnp.sum((a - b) * C23, 1)),
    ("xla_call_one_linear_input_used", "xla_call", [(2, 3), (3,)],
     adx.jit(lambda a, b: lax.transpose(lax.neg(a), (1, 0))),
     lambda a, b: jnp.transpose(-a, (1, 0))),
    ("nested_xla_call", "xla_call", [(2, 3)],
     adx.jit(lambda a: adx.jit(lambda c: lax.reshape(lax.mul(c, C23), (3, 2)))(a)),
     lambda a: jnp.reshape(a * C23, (3, 2))),
]


def _linear_inputs(specs, seed):
  rng = np.random.default_rng(seed)
  out = []
  for s in specs:
    shape, dtype = s if (s and isinstance(s[-1], type)) else (s, np.float64)
    out.append(np.asarray(rng.uniform(-1.0, 1.0, shape)).astype(dtype))
  return out


def _transpose(closed, ts, ct):
  undefined = [ad.UndefPrimal(ShapedArray(np.shape(t), np.result_type(t))) for t in ts]
  cts = ad.backward_pass(closed.jaxpr, [*closed.consts, *undefined], [ct])
  return [ad.instantiate_zeros(c) for c in cts]


@pytest.mark.parametrize("name,prim,specs,ours,theirs", LINEAR, ids=[c[0] for c in LINEAR])
@pytest.mark.parametrize("seed", [0, 1])
def test_transpose_rule(name, prim, specs, ours, theirs, seed):
  ts = _linear_inputs(specs, seed)
  out_j = theirs(*ts)
  ct = np.asarray(np.random.default_rng(seed + 100).uniform(-1.0, 1.0, np.shape(out_j))
                  ).astype(out_j.dtype)
  ct_j = jax.vjp(theirs, *ts)[1](ct)
  # (1) The linear function itself, staged, then run backwards.
  closed = adx.make_jaxpr(ours)(*ts)
  assert prim in [e.primitive.name for e in closed.eqns], closed
  (out,) = closed(*ts)
  np.testing.assert_allclose(out, out_j, rtol=1e-6)
  cts_in = _transpose(closed, ts, ct)
  t2 = 1e-5 if any(np.result_type(x) == np.float32 for x in [*ts, out_j.dtype]) else 1e-12
  np.testing.assert_allclose(vdot([ct], [out]), vdot(cts_in, ts), rtol=t2, atol=t2)
  for a, b, t in zip(cts_in, ct_j, ts):
    assert np.shape(a) == np.shape(t) and np.result_type(a) == np.result_type(t)
    np.testing.assert_allclose(a, b, rtol=t2, atol=t2)
  # (2) The linear jaxpr that linearize produces, run backwards. (sub's JVP
  # is neg and add, so its linear jaxpr has no sub.)
  _, f_lin = adx.linearize(ours, *ts)
  if prim != "sub":
    assert prim in [e.primitive.name for e in f_lin.jaxpr.eqns], f_lin.jaxpr
  for a, b in zip(_transpose(f_lin.jaxpr, ts, ct), ct_j):
    np.testing.assert_allclose(a, b, rtol=t2, atol=t2)
  # (3) And vjp, which does both.
  _, f_vjp = adx.vjp(ours, *ts)
  for a, b in zip(f_vjp(ct), ct_j):
    np.testing.assert_allclose(a, b, rtol=t2, atol=t2)


@pytest.mark.parametrize("fun, msg", [
    (lambda x, y: lax.mul(x, y), "mul"),
    (lambda x, y: lax.dot_general(x, y, DN_PLAIN), "dot_general"),
    (lambda x, y: lax.div(x, y), "div"),
])
def test_transposing_a_nonlinear_equation_is_a_clear_error(fun, msg):
  x, y = np.ones((2, 2)), np.ones((2, 2))
  closed = adx.make_jaxpr(fun)(x, y)
  with pytest.raises(ValueError, match=msg) as e:
    _transpose(closed, [x, y], np.ones((2, 2)))
  assert "linear" in str(e.value)
  assert stack_is_clean()


# --- Symbolic zeros ------------------------------------------------------------------------

def test_grad_of_unused_argument_is_zeros_of_its_type():
  f = lambda x, y, z: anp.sum(anp.sin(x)) * 2.
  x, y, z = np.arange(3.), np.ones((4, 5), np.float32), np.float32(2.)
  gx, gy, gz = adx.grad(f, argnums=(0, 1, 2))(x, y, z)
  jx, jy, jz = jax.grad(f_j := (lambda x, y, z: jnp.sum(jnp.sin(x)) * 2.), (0, 1, 2))(x, y, z)
  del f_j
  np.testing.assert_allclose(gx, jx)
  for ours, theirs in ((gy, jy), (gz, jz)):
    assert not isinstance(ours, (core.Tracer, ad.Zero))
    assert np.shape(ours) == np.shape(theirs) and np.result_type(ours) == theirs.dtype
    assert not np.any(ours)


def test_unused_path_costs_nothing_in_the_backward_pass():
  y_shape = (5, 7)   # a shape nothing else has, to spot work on y's path

  def f(x, y):
    return anp.sum(anp.sin(x) * 3.)

  x, y = np.arange(3.), np.ones(y_shape)
  _, vjp_x = adx.vjp(lambda x: f(x, y), x)
  _, vjp_xy = adx.vjp(f, x, y)
  assert len(vjp_xy.jaxpr.eqns) == len(vjp_x.jaxpr.eqns)
  with viz.record() as rec_x:
    vjp_x(1.)
  with viz.record() as rec_xy:
    gx, gy = vjp_xy(1.)
  assert len(rec_x) > 0
  assert len(rec_xy) == len(rec_x), rec_xy
  for e in rec_xy.events:
    assert all(np.shape(a) != y_shape for a in e.args), e
  assert np.shape(gy) == y_shape and not np.any(gy)


@pytest.mark.parametrize("r", [0.3, 2.0, -1.5])
def test_backward_pass_runs_the_known_equations_first(r):
  """A linear jaxpr written by hand that computes cos of its residual before
  using it: the backward pass evaluates that equation forwards, then
  transposes the mul. Checked against jax.vjp of the same linear map."""
  from autodidax.jaxpr import Jaxpr, JaxprEqn, Var
  f64 = ShapedArray((), np.float64)
  res, t, c, out = Var(f64), Var(f64), Var(f64), Var(f64)
  jaxpr = Jaxpr([], [res, t], [JaxprEqn(lax.cos_p, [res], {}, [c]),
                               JaxprEqn(lax.mul_p, [t, c], {}, [out])], [out])
  ct = 1.7
  (got,) = ad.backward_pass(jaxpr, [r, ad.UndefPrimal(f64)], [ct])
  _, jax_vjp = jax.vjp(lambda tt: tt * jnp.cos(r), 0.5)
  np.testing.assert_allclose(got, jax_vjp(ct)[0], rtol=1e-12)


def test_zero_output_cotangent_skips_its_equations():
  """backward_pass with a symbolic Zero cotangent for one output binds nothing
  for the equations that only feed that output."""
  def f(x, y):
    return anp.sin(x) * 2., anp.transpose(anp.cos(y) * 3.)

  x, y = np.arange(3.), np.ones((5, 7))
  _, f_lin = adx.linearize(f, x, y)
  closed = f_lin.jaxpr
  undefined = [ad.UndefPrimal(ShapedArray(np.shape(v), np.float64)) for v in (x, y)]
  ct_y = ad.Zero(ShapedArray((7, 5), np.float64))
  with viz.record() as rec:
    gx, gy = ad.backward_pass(closed.jaxpr, [*closed.consts, *undefined], [np.ones(3), ct_y])
  assert type(gy) is ad.Zero and gy.aval.shape == (5, 7)
  np.testing.assert_allclose(gx, 2. * np.cos(x))
  _, vjp_x = adx.vjp(lambda x: anp.sin(x) * 2., x)
  with viz.record() as rec_x:
    vjp_x(np.ones(3))
  assert len(rec) == len(rec_x) == 2, rec   # the two muls of the x path
  for e in rec.events:
    assert all(np.shape(a) not in ((5, 7), (7, 5)) for a in e.args), e


def test_integer_path_has_no_cotangent_work():
  """A value that reaches the output only through a comparison has a zero
  tangent: nothing about it enters the linear jaxpr."""
  def f(x, y):
    return anp.sum(x * anp.astype(y > 0., np.float64))

  x, y = np.arange(3.), np.array([-1., 2., 3.])
  _, vjp_xy = adx.vjp(f, x, y)
  gx, gy = vjp_xy(1.)
  np.testing.assert_allclose(gx, [0., 1., 1.])
  np.testing.assert_allclose(gy, 0.)
  assert len(vjp_xy.jaxpr.eqns) <= 2, vjp_xy.jaxpr   # mul by the mask, reduce_sum


# --- The backward pass costs as much as the forward pass ---------------------------------------

def _chain(n, a=None):
  def f(z, *maybe_a):
    aa = maybe_a[0] if maybe_a else a
    for _ in range(n):
      z = aa * (z + z)
    return z
  return f


def _costs(n, a_is_arg):
  f = _chain(n) if a_is_arg else _chain(n, 0.5)
  args = (1.0, 0.5) if a_is_arg else (1.0,)
  y, f_vjp = adx.vjp(f, *args)
  with viz.record() as rec:
    cts = f_vjp(1.0)
  return len(f_vjp.jaxpr.eqns), len(rec), y, cts


@pytest.mark.parametrize("a_is_arg", [False, True])
def test_backward_pass_cost_is_linear_in_program_size(a_is_arg):
  eqns_100, binds_100, y100, cts = _costs(100, a_is_arg)
  eqns_800, binds_800, _, _ = _costs(800, a_is_arg)
  assert eqns_100 >= 100 and binds_100 >= 100
  assert eqns_800 / eqns_100 == pytest.approx(8, rel=0.03), (eqns_100, eqns_800)
  assert binds_800 / binds_100 == pytest.approx(8, rel=0.03), (binds_100, binds_800)
  # And it is right: z_n = (2a)^n z, here with 2a = 1.
  np.testing.assert_allclose(y100, 1.0)
  np.testing.assert_allclose(cts[0], 1.0)
  if a_is_arg:
    np.testing.assert_allclose(cts[1], 100 * 2.0)   # d/da (2a)^n = 2n (2a)^(n-1)


# --- has_aux, argnums, value_and_grad --------------------------------------------------------

def _aux_fun(np_):
  def f(x, y):
    loss = np_.sum(np_.sin(x) * y)
    return loss, {"cos": np_.cos(x), "loss_twice": loss * 2., "n": 3}
  return f


def _check_aux(aux, aux_j):
  assert set(aux) == set(aux_j)
  for k in aux:
    assert not isinstance(aux[k], core.Tracer), aux
    np.testing.assert_allclose(aux[k], aux_j[k])


def test_grad_has_aux():
  x, y = np.array([0.3, -1.2, 2.0]), 1.5
  g, aux = adx.grad(_aux_fun(anp), has_aux=True)(x, y)
  g_j, aux_j = jax.grad(_aux_fun(jnp), has_aux=True)(x, y)
  np.testing.assert_allclose(g, g_j)
  _check_aux(aux, aux_j)


def test_value_and_grad_has_aux():
  x, y = np.array([0.3, -1.2, 2.0]), 1.5
  (val, aux), g = adx.value_and_grad(_aux_fun(anp), argnums=(0, 1), has_aux=True)(x, y)
  (val_j, aux_j), g_j = jax.value_and_grad(_aux_fun(jnp), argnums=(0, 1), has_aux=True)(x, y)
  np.testing.assert_allclose(val, val_j)
  assert isinstance(g, tuple) and len(g) == 2
  for a, b in zip(g, g_j):
    np.testing.assert_allclose(a, b)
  _check_aux(aux, aux_j)


def test_vjp_has_aux():
  x, y = np.array([0.3, -1.2, 2.0]), 1.5
  f = lambda np_: lambda x: (np_.sin(x) * y, {"sq": x * x})
  out, f_vjp, aux = adx.vjp(f(anp), x, has_aux=True)
  out_j, f_vjp_j, aux_j = jax.vjp(f(jnp), x, has_aux=True)
  np.testing.assert_allclose(out, out_j)
  ct = np.array([1., -2., 0.5])
  np.testing.assert_allclose(f_vjp(ct)[0], f_vjp_j(ct)[0])
  _check_aux(aux, aux_j)


def test_has_aux_under_an_outer_transformation():
  """Inside an outer grad, the aux is a tracer of the outer one (and works)."""
  def inner(x):
    g, aux = adx.grad(lambda x: (anp.sin(x) * x, anp.cos(x) * x), has_aux=True)(x)
    return g + aux
  def inner_j(x):
    g, aux = jax.grad(lambda x: (jnp.sin(x) * x, jnp.cos(x) * x), has_aux=True)(x)
    return g + aux
  np.testing.assert_allclose(adx.grad(inner)(0.7), jax.grad(inner_j)(0.7))
  np.testing.assert_allclose(adx.jit(adx.grad(inner))(0.7), jax.grad(inner_j)(0.7))


@pytest.mark.parametrize("argnums", [0, 1, 2, -1, (0,), (2, 0), (0, 1, 2), (1, -1)])
def test_argnums(argnums):
  def f(np_):
    return lambda x, y, z: np_.sum(np_.sin(x) * y) + np_.sum(np_.tanh(z) * x)
  args = (np.array([0.1, 0.5]), 1.5, np.array([[2., 0.3], [-1., 0.2]]))
  val, g = adx.value_and_grad(f(anp), argnums)(*args)
  val_j, g_j = jax.value_and_grad(f(jnp), argnums)(*args)
  np.testing.assert_allclose(val, val_j)
  assert isinstance(g, tuple) == isinstance(argnums, tuple)
  assert_trees_close(g, g_j, 1e-12)
  assert_trees_close(adx.grad(f(anp), argnums)(*args), g_j, 1e-12)


def test_value_and_grad_returns_the_value():
  f = lambda x: anp.sum(anp.exp(anp.tanh(x)))
  x = np.array([0.2, -0.7])
  val, g = adx.value_and_grad(f)(x)
  np.testing.assert_allclose(val, f(x))
  np.testing.assert_allclose(val, jnp.sum(jnp.exp(jnp.tanh(x))))
  np.testing.assert_allclose(g, jax.grad(lambda x: jnp.sum(jnp.exp(jnp.tanh(x))))(x))


def test_jacrev_with_pytree_input():
  f = lambda np_: lambda d, s: np_.sin(d["a"]) * d["b"][0] * s
  d, s = {"a": np.array([0.3, 1.0]), "b": [np.array([2.0, -1.0])]}, 0.5
  for argnums in (0, (0, 1)):
    assert_trees_close(adx.jacrev(f(anp), argnums)(d, s),
                       jax.jacrev(f(jnp), argnums)(d, s), 1e-12)


# --- Errors ------------------------------------------------------------------------------------

def _raises(fn, exc, *words):
  with pytest.raises(exc) as e:
    fn()
  for w in words:
    assert w.lower() in str(e.value).lower(), (w, str(e.value))
  assert stack_is_clean(), core.trace_stack


def test_grad_of_non_scalar_output():
  _raises(lambda: adx.grad(lambda x: x * 2.)(np.ones(3)), ValueError,
          "scalar", "vjp", "jacrev", "f64[3]")
  _raises(lambda: adx.grad(lambda x: (x, x))(1.), ValueError, "scalar", "vjp")
  _raises(lambda: adx.value_and_grad(lambda x: anp.sin(x))(np.ones(2)), ValueError, "scalar")


def test_grad_of_integer_output():
  _raises(lambda: adx.grad(lambda x: anp.astype(x, np.int32))(1.5), ValueError,
          "scalar", "i32")


def test_grad_of_integer_input():
  _raises(lambda: adx.grad(lambda x: x * 1.0)(3), TypeError, "int")
  _raises(lambda: adx.grad(lambda x, y: x * y, argnums=1)(2., np.int32(3)), TypeError,
          "int32")


def test_argnums_out_of_range():
  _raises(lambda: adx.grad(lambda x: x, argnums=1)(3.), ValueError, "argnums")
  _raises(lambda: adx.grad(lambda x, y: x, argnums=(0, 2))(3., 2.), ValueError, "argnums")
  _raises(lambda: adx.value_and_grad(lambda x: x, argnums=-2)(3.), ValueError, "argnums")


def test_vjp_cotangent_with_wrong_structure():
  _, f_vjp = adx.vjp(lambda x: (x, {"a": x * 2.}), 3.)
  assert f_vjp((1., {"a": 2.})) == (5.,)
  _raises(lambda: f_vjp(1.), ValueError, "cotangent")
  _raises(lambda: f_vjp((1., 2.)), ValueError, "cotangent")
  _raises(lambda: f_vjp([1., {"a": 2.}]), ValueError, "cotangent")
  _raises(lambda: f_vjp((1., {"b": 2.})), ValueError, "cotangent")


def test_vjp_cotangent_with_wrong_shape_or_dtype():
  _, f_vjp = adx.vjp(lambda x: (x, x * 2.), np.ones(2))
  _raises(lambda: f_vjp((np.ones(2), np.ones(3))), ValueError, "cotangent", "f64[3]", "f64[2]")
  _raises(lambda: f_vjp((np.ones(2), np.ones((1, 2)))), ValueError, "cotangent")
  _raises(lambda: f_vjp((np.ones(2), np.ones(2, np.float32))), ValueError, "cotangent", "f32")


def test_has_aux_without_a_pair():
  _raises(lambda: adx.grad(lambda x: x * 2., has_aux=True)(3.), TypeError, "aux", "tuple")
  _raises(lambda: adx.vjp(lambda x: (x, x, x), 3., has_aux=True), TypeError, "aux")


def test_enough_examples():
  """The random-program tests here and in test_autodiff_compose.py run at
  least 200 examples per session (the ci profile: 40 per test)."""
  from hypothesis import settings as s
  import test_autodiff_compose as compose
  n = sum(1 for mod in (globals(), vars(compose)) for name, f in mod.items()
          if name.startswith("test_") and hasattr(f, "hypothesis"))
  assert n >= 10 and s.default.max_examples * n * 5 // 8 >= 200
