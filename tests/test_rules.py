"""Every primitive of autodidax.lax, rule by rule: evaluation against
jax.lax/NumPy, JVP against jax.jvp and central finite differences, batching
against a Python loop and jax.vmap (batch axes 0, 1, -1, unmapped operands)."""
import itertools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import autodidax as adx
from autodidax import lax, primitives

jlax = jax.lax
B = 3   # batch size


class Case(NamedTuple):
  id: str
  prim: str                 # name of the autodidax primitive it exercises
  ours: Callable            # autodidax function of the array operands
  theirs: Callable          # the same with jax.lax
  shapes: tuple             # operand shapes
  domain: tuple = ()        # per operand: "any", "pos" (log) or "nonzero" (div)
  smooth: bool = True       # differentiable at the sampled points
  dtype: type = np.float64


def _binary_cases():
  ops = [("add", lax.add, jlax.add), ("sub", lax.sub, jlax.sub), ("mul", lax.mul, jlax.mul),
         ("div", lax.div, jlax.div), ("max", lax.max, jlax.max),
         ("greater", lax.greater, jlax.gt), ("less", lax.less, jlax.lt),
         ("greater_equal", lax.greater_equal, jlax.ge), ("less_equal", lax.less_equal, jlax.le)]
  for (name, ours, theirs), shapes in itertools.product(
      ops, [((2, 3), (2, 3)), ((), (2, 3)), ((2, 3), ()), ((), ()), ((4,), (4,))]):
    dom = ("any", "nonzero") if name == "div" else ("any", "any")
    yield Case(f"{name}-{shapes[0]}-{shapes[1]}", name, ours, theirs, shapes, dom)


def _unary_cases():
  for name in ["neg", "sin", "cos", "exp", "log", "tanh"]:
    for shape in [(), (5,), (2, 3)]:
      yield Case(f"{name}-{shape}", name, getattr(lax, name), getattr(jlax, name), (shape,),
                 ("pos",) if name == "log" else ("any",))


def _shape_cases():
  for name, ours, theirs in [("reduce_sum", lax.reduce_sum, jlax.reduce_sum),
                             ("reduce_max", lax.reduce_max, jlax.reduce_max)]:
    for shape, axis in [((5,), 0), ((2, 3, 4), 1), ((2, 3, 4), (0, 2)), ((2, 3, 4), (2, 0)),
                        ((2, 3, 4), -1), ((2, 3), (0, 1)), ((2, 3), ()), ((2, 3, 4), None)]:
      jaxes = tuple(range(len(shape))) if axis is None else (
          (axis % len(shape),) if isinstance(axis, int) else tuple(axis))
      yield Case(f"{name}-{shape}-{axis}", name, lambda x, ours=ours, axis=axis: ours(x, axis),
                 lambda x, theirs=theirs, a=jaxes: theirs(x, a), (shape,))
  for shape_in, shape, axes in [((3,), (2, 3), (0,)), ((3,), (3, 2), (1,)), ((3,), (3, 2), (-1,)),
                                ((), (2, 3), (0, 1)), ((2, 3), (2, 4, 3, 5), (1, 3)),
                                ((2, 3), (4, 2, 3), (0,)), ((2, 3), (2, 3), ())]:
    kept = tuple(i for i in range(len(shape)) if i not in {a % len(shape) for a in axes})
    yield Case(f"broadcast-{shape_in}-{shape}-{axes}", "broadcast",
               lambda x, s=shape, a=axes: lax.broadcast(x, s, a),
               lambda x, s=shape, k=kept: jlax.broadcast_in_dim(x, s, k), (shape_in,))
  for shape, perm in [((2, 3), (1, 0)), ((2, 3, 4), (0, 1, 2)), ((2, 3, 4), (2, 0, 1)),
                      ((2, 3, 4), (1, 2, 0)), ((2, 3, 4), (2, 1, 0)), ((), ())]:
    yield Case(f"transpose-{shape}-{perm}", "transpose",
               lambda x, p=perm: lax.transpose(x, p),
               lambda x, p=perm: jlax.transpose(x, p), (shape,))
  for shape, new in [((2, 3), (6,)), ((2, 3), (3, 2)), ((6,), (1, 2, 3, 1)), ((), (1,)),
                     ((2, 3, 4), (4, 6)), ((1,), ())]:
    yield Case(f"reshape-{shape}-{new}", "reshape", lambda x, n=new: lax.reshape(x, n),
               lambda x, n=new: jlax.reshape(x, n), (shape,))
  for dtype_in, dtype_out in [(np.float64, np.float32), (np.float32, np.float64),
                              (np.float64, np.int32), (np.int32, np.float64),
                              (np.float64, np.float64)]:
    yield Case(f"convert_element_type-{np.dtype(dtype_in)}-{np.dtype(dtype_out)}",
               "convert_element_type",
               lambda x, d=dtype_out: lax.convert_element_type(x, d),
               lambda x, d=dtype_out: jlax.convert_element_type(x, d), ((2, 3),),
               smooth=np.issubdtype(dtype_out, np.floating), dtype=dtype_in)


def _dot_general_cases():
  for xs, ys, dn in [((2, 3), (3, 4), (((1,), (0,)), ((), ()))),             # matmul
                     ((3,), (3,), (((0,), (0,)), ((), ()))),                 # inner product
                     ((2,), (3,), (((), ()), ((), ()))),                     # outer product
                     ((3, 2), (4, 3), (((0,), (1,)), ((), ()))),             # contract x^T
                     ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),   # batched matmul
                     ((3, 2, 4), (4, 2), (((2,), (0,)), ((1,), (1,)))),      # batch not leading
                     ((2, 3), (3, 2), (((0, 1), (1, 0)), ((), ())))]:        # full contraction
    yield Case(f"dot_general-{xs}-{ys}-{dn}", "dot_general",
               lambda x, y, dn=dn: lax.dot_general(x, y, dn),
               lambda x, y, dn=dn: jlax.dot_general(x, y, dn), (xs, ys))


def _numpy_subset_cases():
  """The primitives behind autodidax.numpy's jax.numpy subset."""
  for name, ours, theirs, dom, smooth in [
      ("eq", lax.eq, jlax.eq, ("any", "any"), True), ("ne", lax.ne, jlax.ne, ("any", "any"), True),
      ("min", lax.min, jlax.min, ("any", "any"), True),
      ("pow", lax.pow, jlax.pow, ("pos", "any"), True),
      ("rem", lax.rem, jlax.rem, ("any", "nonzero"), False)]:
    for shapes in [((2, 3), (2, 3)), ((), (2, 3))]:
      yield Case(f"{name}-{shapes[0]}-{shapes[1]}", name, ours, theirs, shapes, dom, smooth)
  for name, ours, theirs in [("and", lax.bitwise_and, jlax.bitwise_and),
                             ("or", lax.bitwise_or, jlax.bitwise_or),
                             ("xor", lax.bitwise_xor, jlax.bitwise_xor)]:
    yield Case(f"{name}-int32", name, ours, theirs, ((2, 3), (2, 3)), dtype=np.int32)
  yield Case("not-int32", "not", lax.bitwise_not, jlax.bitwise_not, ((2, 3),), dtype=np.int32)
  for name, dom, smooth in [("abs", "any", True), ("sign", "any", False), ("sqrt", "pos", True),
                            ("rsqrt", "pos", True), ("floor", "any", False),
                            ("stop_gradient", "any", False)]:
    theirs = getattr(jlax, name)
    for shape in [(), (2, 3)]:
      yield Case(f"{name}-{shape}", name, getattr(lax, name), theirs, (shape,), (dom,), smooth)
  yield Case("round-even", "round", lambda x: lax.round(x, lax.ROUND_TO_NEAREST_EVEN),
             lambda x: jlax.round(x, jlax.RoundingMethod.TO_NEAREST_EVEN), ((2, 3),), smooth=False)
  yield Case("round-away", "round", lambda x: lax.round(x * 2), lambda x: jlax.round(x * 2),
             ((2, 3),), smooth=False)
  for y, dom in [(3, "any"), (2, "any"), (-2, "pos"), (0, "any"), (1, "any")]:
    yield Case(f"integer_pow-{y}", "integer_pow", lambda x, y=y: lax.integer_pow(x, y),
               lambda x, y=y: jlax.integer_pow(x, y), ((2, 3),), (dom,))
  for name in ["reduce_min", "reduce_prod"]:
    for shape, axis in [((5,), 0), ((2, 3, 4), (0, 2)), ((2, 3), ())]:
      yield Case(f"{name}-{shape}-{axis}", name,
                 lambda x, f=getattr(lax, name), a=axis: f(x, a),
                 lambda x, f=getattr(jlax, name), a=axis: f(x, (a,) if isinstance(a, int) else a),
                 (shape,))
  for name in ["argmax", "argmin"]:
    for shape, axis in [((5,), 0), ((2, 3, 4), 1), ((2, 3), -1)]:
      yield Case(f"{name}-{shape}-{axis}", name,
                 lambda x, f=getattr(lax, name), a=axis: f(x, a, np.int64),
                 lambda x, f=getattr(jlax, name), a=axis, n=len(shape): f(x, a % n, np.int64),
                 (shape,), smooth=False)
  for shape, axis, reverse in [((5,), 0, False), ((2, 3, 4), 1, True), ((2, 3), -1, False)]:
    yield Case(f"cumsum-{shape}-{axis}-{reverse}", "cumsum",
               lambda x, a=axis, r=reverse: lax.cumsum(x, a, r),
               lambda x, a=axis, r=reverse, n=len(shape): jlax.cumsum(x, a % n, r), (shape,))
  for shapes, dim in [(((2, 3), (4, 3)), 0), (((2, 3), (2, 1)), 1), (((3,), (3,)), 0)]:
    yield Case(f"concatenate-{shapes}-{dim}", "concatenate",
               lambda *xs, d=dim: lax.concatenate(xs, d),
               lambda *xs, d=dim: jlax.concatenate(xs, d), shapes)
  for shape, config in [((2, 3), [(1, 2, 0), (0, 0, 1)]), ((5,), [(-1, 2, 1)]),
                        ((4, 2), [(0, -2, 0), (2, -1, 2)])]:
    yield Case(f"pad-{shape}-{config}", "pad", lambda x, v, c=config: lax.pad(x, v, c),
               lambda x, v, c=config: jlax.pad(x, v, c), (shape, ()))
  for shape, start, limit, strides in [((5,), (1,), (4,), None), ((4, 6), (0, 1), (3, 6), (2, 2)),
                                       ((3, 4), (1, 0), (1, 4), None)]:
    yield Case(f"slice-{shape}-{start}-{limit}-{strides}", "slice",
               lambda x, a=start, b=limit, s=strides: lax.slice(x, a, b, s),
               lambda x, a=start, b=limit, s=strides: jlax.slice(x, a, b, s), (shape,))
  for shape, dims in [((5,), (0,)), ((2, 3, 4), (0, 2)), ((3, 2), ())]:
    yield Case(f"rev-{shape}-{dims}", "rev", lambda x, d=dims: lax.rev(x, d),
               lambda x, d=dims: jlax.rev(x, d), (shape,))
  for shape, start, sizes in [((5,), (1,), (3,)), ((4, 3), (3, 1), (2, 2)), ((4, 3), (-1, 0), (1, 3))]:
    yield Case(f"dynamic_slice-{shape}-{start}-{sizes}", "dynamic_slice",
               lambda x, s=start, n=sizes: lax.dynamic_slice(x, s, n),
               lambda x, s=start, n=sizes: jlax.dynamic_slice(x, s, n), (shape,))
  for shape, ushape, start in [((5,), (2,), (1,)), ((4, 3), (2, 2), (3, 1)), ((4, 3), (4, 3), (0, 0))]:
    yield Case(f"dynamic_update_slice-{shape}-{ushape}-{start}", "dynamic_update_slice",
               lambda x, u, s=start: lax.dynamic_update_slice(x, u, s),
               lambda x, u, s=start: jlax.dynamic_update_slice(x, u, s), (shape, ushape))
  mask = np.array([[True, False, True], [False, False, True]])
  for name, which in [("bool", mask), ("int32", mask.astype(np.int32))]:
    yield Case(f"select_n-{name}", "select_n", lambda x, y, w=which: lax.select_n(w, x, y),
               lambda x, y, w=which: jlax.select_n(w, x, y), ((2, 3), (2, 3)))
  lo, hi = np.float64(-0.5), np.float64(0.7)
  yield Case("clamp", "clamp", lambda x: lax.clamp(lo, x, hi), lambda x: jlax.clamp(lo, x, hi),
             ((2, 3),), smooth=False)


CASES = [*_binary_cases(), *_unary_cases(), *_shape_cases(), *_dot_general_cases(),
         *_numpy_subset_cases()]
ALL_PRIMITIVES = ["add", "sub", "mul", "div", "max", "greater", "less", "greater_equal",
                  "less_equal", "neg", "sin", "cos", "exp", "log", "tanh", "reduce_sum",
                  "reduce_max", "broadcast", "transpose", "reshape", "convert_element_type"]


def test_every_primitive_is_covered():
  lax_prims = {v.name for v in vars(primitives).values() if isinstance(v, adx.Primitive)}
  lax_prims -= {"reshard"}   # it needs a mesh: tests/many_devices_cases.py, against JAX
  assert set(ALL_PRIMITIVES) <= lax_prims
  untested = lax_prims - {c.prim for c in CASES}
  assert not untested, f"add cases for {sorted(untested)} to CASES in tests/test_rules.py"


def sample(rng, shape, domain="any", dtype=np.float64):
  x = rng.uniform(-2.0, 2.0, shape)
  if domain == "pos":
    x = rng.uniform(0.3, 2.5, shape)
  elif domain == "nonzero":
    x = np.sign(x + (x == 0)) * rng.uniform(0.5, 2.0, shape)
  if np.issubdtype(dtype, np.integer):
    x = np.round(x * 3)
  return np.asarray(x, dtype)


def operands(case, seed=0, batch=None):
  """Operands for `case`; with `batch=in_axes`, each mapped one gets a batch axis."""
  rng = np.random.default_rng(seed)
  doms = case.domain or ("any",) * len(case.shapes)
  out = []
  for i, (shape, dom) in enumerate(zip(case.shapes, doms)):
    ax = None if batch is None else batch[i]
    if ax is not None:
      shape = list(shape)
      shape.insert(ax % (len(shape) + 1), B)
    out.append(sample(rng, tuple(shape), dom, case.dtype))
  return out


def assert_close(ours, theirs, dtype=np.float64):
  ours, theirs = np.asarray(ours), np.asarray(theirs)
  assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
  if theirs.dtype == jax.dtypes.float0:   # JAX's tangent type of integers/bools
    assert not np.any(ours)
    return
  assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
  tol = 1e-5 if np.dtype(dtype) == np.float32 or ours.dtype == np.float32 else 1e-11
  np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)


def ids(cases):
  return [c.id for c in cases]


# --- Evaluation --------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_impl(case):
  args = operands(case)
  out = case.ours(*args)
  assert not isinstance(out, adx.core.Tracer)
  assert_close(out, case.theirs(*args), case.dtype)


NUMPY_REFERENCES = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "greater": np.greater, "less": np.less,
    "greater_equal": np.greater_equal, "less_equal": np.less_equal,
    "neg": np.negative, "sin": np.sin, "cos": np.cos, "exp": np.exp, "log": np.log,
    "tanh": np.tanh}


@pytest.mark.parametrize("case", [c for c in CASES if c.prim in NUMPY_REFERENCES],
                         ids=ids(c for c in CASES if c.prim in NUMPY_REFERENCES))
def test_impl_matches_numpy(case):
  args = operands(case, seed=1)
  np.testing.assert_array_equal(case.ours(*args), NUMPY_REFERENCES[case.prim](*args))


def test_impl_keeps_float32():
  x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
  for f in [lax.sin, lax.exp, lambda x: lax.mul(x, 2.0), lambda x: lax.add(1.0, x),
            lambda x: lax.reduce_sum(x, 0), lambda x: lax.broadcast(x, (4, 2, 3), [0])]:
    assert np.result_type(f(x)) == np.float32


def test_impl_of_ties_and_edge_values():
  x = np.array([1.0, -0.0, 2.0, 2.0])
  y = np.array([1.0, 0.0, -1.0, 3.0])
  np.testing.assert_array_equal(lax.max(x, y), jlax.max(x, y))
  np.testing.assert_array_equal(lax.greater_equal(x, y), jlax.ge(x, y))
  np.testing.assert_array_equal(lax.less_equal(x, y), jlax.le(x, y))
  np.testing.assert_array_equal(lax.reduce_max(np.array([[1.0, 5.0], [5.0, 2.0]]), 0), [5.0, 5.0])


# --- JVP -----------------------------------------------------------------------------------

def float_operands(case):
  return [i for i, _ in enumerate(case.shapes) if np.issubdtype(case.dtype, np.floating)]


JVP_CASES = [(c, which) for c in CASES for which in ("all", "first", "last")
             if float_operands(c) and (which == "all" or len(c.shapes) == 2)]


def _partial(f, args, which):
  """`f` as a function of the operands in `which` only (the rest closed over)."""
  def g(*dyn):
    full = list(args)
    for i, v in zip(which, dyn):
      full[i] = v
    return f(*full)
  return g


def _which(case, which):
  n = len(case.shapes)
  return {"all": list(range(n)), "first": [0], "last": [n - 1]}[which]


@pytest.mark.parametrize("case, which", JVP_CASES, ids=[f"{c.id}-{w}" for c, w in JVP_CASES])
def test_jvp_matches_jax(case, which):
  args = operands(case, seed=2)
  idx = _which(case, which)
  rng = np.random.default_rng(3)
  primals = tuple(args[i] for i in idx)
  tangents = tuple(sample(rng, np.shape(p), "any", case.dtype) for p in primals)
  out, tan = adx.jvp(_partial(case.ours, args, idx), primals, tangents)
  jout, jtan = jax.jvp(_partial(case.theirs, args, idx), primals, tangents)
  assert_close(out, jout, case.dtype)
  assert_close(tan, jtan, case.dtype)


def central_difference(f, primals, tangents, eps=1e-6):
  plus = f(*[p + eps * t for p, t in zip(primals, tangents)])
  minus = f(*[p - eps * t for p, t in zip(primals, tangents)])
  return (np.asarray(plus, np.float64) - np.asarray(minus, np.float64)) / (2 * eps)


FD_CASES = [(c, w) for c, w in JVP_CASES if c.smooth and c.dtype == np.float64
            and c.ours(*operands(c)).dtype == np.float64]


@pytest.mark.parametrize("case, which", FD_CASES, ids=[f"{c.id}-{w}" for c, w in FD_CASES])
def test_jvp_matches_finite_differences(case, which):
  args = operands(case, seed=4)
  idx = _which(case, which)
  rng = np.random.default_rng(5)
  primals = tuple(args[i] for i in idx)
  tangents = tuple(sample(rng, np.shape(p)) for p in primals)
  f = _partial(case.ours, args, idx)
  _, tan = adx.jvp(f, primals, tangents)
  np.testing.assert_allclose(tan, central_difference(f, primals, tangents), rtol=1e-6, atol=1e-7)


def test_comparisons_have_zero_tangents():
  for f in [lax.greater, lax.less, lax.greater_equal, lax.less_equal]:
    out, tan = adx.jvp(f, (np.arange(3.0), np.ones(3)), (np.ones(3), np.ones(3)))
    assert out.dtype == np.bool_ and not np.any(tan) and np.shape(tan) == (3,)


@pytest.mark.parametrize("x, y", [(1.0, 1.0), (np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])),
                                  (2.0, np.array([2.0, 1.0, 3.0]))])
def test_max_jvp_at_ties_matches_jax(x, y):
  tx, ty = np.ones_like(x) * 3.0, np.ones_like(y) * 5.0
  ours = adx.jvp(lax.max, (x, y), (tx, ty))
  theirs = jax.jvp(jlax.max, (x, y), (tx, ty))
  for a, b in zip(ours, theirs):
    assert_close(a, b)


@pytest.mark.parametrize("axis", [0, 1, (0, 1)])
def test_reduce_max_jvp_at_ties_matches_jax(axis):
  x = np.array([[1.0, 3.0, 3.0], [3.0, 0.0, 3.0]])
  t = np.arange(6.0).reshape(2, 3) + 1
  jaxes = (axis,) if isinstance(axis, int) else axis
  ours = adx.jvp(lambda x: lax.reduce_max(x, axis), (x,), (t,))
  theirs = jax.jvp(lambda x: jlax.reduce_max(x, jaxes), (x,), (t,))
  for a, b in zip(ours, theirs):
    assert_close(a, b)


# --- Batching ---------------------------------------------------------------------------------

def _in_axes_options(case):
  options = ([(0,), (1,), (-1,)] if len(case.shapes) == 1 else
             [(0, 0), (1, -1), (None, -1), (-1, None), (None, 0)])
  fits = lambda ax, shape: ax is None or -len(shape) - 1 <= ax <= len(shape)
  return [o for o in options if all(fits(a, s) for a, s in zip(o, case.shapes))]


# (Each JAX call compiles for its shapes: keep the binary shape combinations few.)
VMAP_CASES = [(c, ax) for c in CASES if not c.id.endswith("-(4,)-(4,)")
              for ax in _in_axes_options(c)]


def loop_reference(f, in_axes, args, out_axis=0):
  """vmap by hand: slice each mapped operand, apply `f`, stack."""
  outs = []
  for b in range(B):
    sliced = [x if ax is None else np.take(x, b, axis=ax) for x, ax in zip(args, in_axes)]
    outs.append(np.asarray(f(*sliced)))
  return np.stack(outs, axis=out_axis)


@pytest.mark.parametrize("case, in_axes", VMAP_CASES,
                         ids=[f"{c.id}-{ax}" for c, ax in VMAP_CASES])
def test_vmap_matches_loop_and_jax(case, in_axes):
  args = operands(case, seed=6, batch=in_axes)
  ours = adx.vmap(case.ours, in_axes=in_axes)(*args)
  assert not isinstance(ours, adx.core.Tracer)
  assert_close(ours, loop_reference(case.ours, in_axes, args), case.dtype)
  assert_close(ours, jax.vmap(case.theirs, in_axes=in_axes)(*args), case.dtype)


OUT_AXES_CASES = [c for c in CASES if c.id in {
    "add-(2, 3)-(2, 3)", "mul-()-(2, 3)", "sin-(2, 3)", "reduce_sum-(2, 3, 4)-(0, 2)",
    "broadcast-(3,)-(3, 2)-(1,)", "transpose-(2, 3, 4)-(2, 0, 1)", "reshape-(2, 3)-(6,)",
    "reduce_max-(2, 3)-()"}]


@pytest.mark.parametrize("out_axes", [1, -1])
@pytest.mark.parametrize("case", OUT_AXES_CASES, ids=ids(OUT_AXES_CASES))
def test_vmap_out_axes(case, out_axes):
  in_axes = (-1,) * len(case.shapes)
  args = operands(case, seed=7, batch=in_axes)
  ours = adx.vmap(case.ours, in_axes=in_axes, out_axes=out_axes)(*args)
  theirs = jax.vmap(case.theirs, in_axes=in_axes, out_axes=out_axes)(*args)
  assert_close(ours, theirs)
  assert_close(ours, loop_reference(case.ours, in_axes, args, out_axes % np.ndim(ours)))


def test_vmap_of_unmapped_result_broadcasts():
  # The output doesn't depend on the mapped input: it's broadcast along the batch.
  ours = adx.vmap(lambda x, y: lax.sin(y), in_axes=(0, None))(np.ones(4), np.arange(3.0))
  theirs = jax.vmap(lambda x, y: jlax.sin(y), in_axes=(0, None))(np.ones(4), np.arange(3.0))
  assert_close(ours, theirs)


def _first_per_primitive(cases):
  seen = {}
  for c in cases:
    seen.setdefault(c.prim, []).append(c)
  return [cs[0] for cs in seen.values()] + [cs[-1] for cs in seen.values() if len(cs) > 1]


COMPOSE_CASES = _first_per_primitive(
    c for c in CASES if c.smooth and np.issubdtype(c.dtype, np.floating))


@pytest.mark.parametrize("case", COMPOSE_CASES, ids=ids(COMPOSE_CASES))
def test_jvp_of_vmap_and_vmap_of_jvp(case):
  """The JVP rules meet batched operands and vice versa."""
  n = len(case.shapes)
  xs = operands(case, seed=8, batch=(-1,) * n)
  rng = np.random.default_rng(9)
  ts = tuple(sample(rng, x.shape, "any", case.dtype) for x in xs)
  ours = adx.jvp(adx.vmap(case.ours, in_axes=-1), tuple(xs), ts)
  theirs = jax.jvp(jax.vmap(case.theirs, in_axes=-1), tuple(xs), ts)
  for a, b in zip(ours, theirs):
    assert_close(a, b, case.dtype)
  ts0 = [np.moveaxis(t, -1, 0) for t in ts]   # tangents batched along axis 0
  ours = adx.vmap(lambda *a: adx.jvp(case.ours, a[:n], a[n:]),
                  in_axes=(-1,) * n + (0,) * n)(*xs, *ts0)
  theirs = jax.vmap(lambda *a: jax.jvp(case.theirs, a[:n], a[n:]),
                    in_axes=(-1,) * n + (0,) * n)(*xs, *ts0)
  for a, b in zip(ours, theirs):
    assert_close(a, b, case.dtype)
