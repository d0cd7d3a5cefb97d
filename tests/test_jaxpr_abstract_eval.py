"""Jaxprs (Part 2): abstract evaluation against jax.eval_shape (shapes, dtypes,
weak types, and the errors), for every first-order primitive."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodidax as adx
from autodidax import core, lax, primitives
from autodidax.core import ShapedArray

from conftest import stack_is_clean

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")


# Our primitive names that JAX spells differently.
JAX_NAME = {"greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le",
            "broadcast": "broadcast_in_dim"}


def jax_name(prim_name):
  return JAX_NAME.get(prim_name, prim_name)


# ============================================================================================
# Abstract evaluation against jax.eval_shape
# ============================================================================================

HIGHER_ORDER = {"xla_call", "cond", "while", "scan"}
BINARY = ["add", "sub", "mul", "div", "max", "greater", "less", "greater_equal", "less_equal"]
UNARY = ["neg", "sin", "cos", "exp", "log", "tanh"]
NUMPY_SUBSET = {  # name: (jax function, list of (avals, params))
    **{n: (f, None) for n, f in [
        ("eq", jax.lax.eq), ("ne", jax.lax.ne), ("min", jax.lax.min), ("pow", jax.lax.pow),
        ("rem", jax.lax.rem), ("and", jax.lax.bitwise_and), ("or", jax.lax.bitwise_or),
        ("xor", jax.lax.bitwise_xor), ("not", jax.lax.bitwise_not), ("abs", jax.lax.abs),
        ("sign", jax.lax.sign), ("sqrt", jax.lax.sqrt), ("rsqrt", jax.lax.rsqrt),
        ("floor", jax.lax.floor), ("stop_gradient", jax.lax.stop_gradient)]}}
SHAPED_SUBSET = [   # (name, jax function, avals, params)
    ("integer_pow", lambda x: jax.lax.integer_pow(x, 3), [(2, 3)], dict(y=3)),
    ("round", lambda x: jax.lax.round(x, 1), [(2, 3)], dict(rounding_method=1)),
    ("reduce_min", lambda x: jax.lax.reduce_min(x, (1,)), [(2, 3)], dict(axes=(1,))),
    ("reduce_prod", lambda x: jax.lax.reduce_prod(x, (0, 1)), [(2, 3)], dict(axes=(0, 1))),
    ("argmax", lambda x: jax.lax.argmax(x, 1, np.int64), [(2, 3)],
     dict(axes=(1,), index_dtype=np.dtype(np.int64))),
    ("argmin", lambda x: jax.lax.argmin(x, 0, np.int32), [(2, 3)],
     dict(axes=(0,), index_dtype=np.dtype(np.int32))),
    ("cumsum", lambda x: jax.lax.cumsum(x, 1), [(2, 3)], dict(axis=1, reverse=False)),
    ("concatenate", lambda x, y: jax.lax.concatenate([x, y], 0), [(2, 3), (4, 3)],
     dict(dimension=0)),
    ("pad", lambda x, v: jax.lax.pad(x, v, [(1, -1, 2), (0, 2, 0)]), [(2, 3), ()],
     dict(padding_config=((1, -1, 2), (0, 2, 0)))),
    ("slice", lambda x: jax.lax.slice(x, (0, 1), (2, 3), (1, 2)), [(2, 3)],
     dict(start_indices=(0, 1), limit_indices=(2, 3), strides=(1, 2))),
    ("rev", lambda x: jax.lax.rev(x, (1,)), [(2, 3)], dict(dimensions=(1,))),
]
COVERED = set(BINARY) | set(UNARY) | {"reduce_sum", "reduce_max", "broadcast", "transpose",
                                      "reshape", "convert_element_type", "dot_general",
                                      "clamp", "select_n", "dynamic_slice",
                                      "dynamic_update_slice"} | set(NUMPY_SUBSET) | {
                                          c[0] for c in SHAPED_SUBSET}
DTYPES = [np.float32, np.float64, np.int32, np.int64]
FLOATS = [np.float32, np.float64]

prim_by_name = {p.name: p for p in core.abstract_eval_rules}


def test_every_first_order_primitive_is_checked():
  # the library's primitives (other test files register primitives of their own)
  from autodidax import control_flow, xla
  library = {id(v) for mod in (primitives, control_flow, xla) for v in vars(mod).values()
             if isinstance(v, core.Primitive)}
  names = {p.name for p in core.abstract_eval_rules if id(p) in library} - HIGHER_ORDER
  names -= {"reshard"}   # its types need a mesh: tests/many_devices_cases.py, against JAX
  assert names == COVERED, (names - COVERED, COVERED - names)


@pytest.mark.parametrize("name", sorted(NUMPY_SUBSET))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_numpy_subset_elementwise_abstract_eval_matches_jax(name, dtype):
  jax_fn, _ = NUMPY_SUBSET[name]
  n_args = 1 if name in ("not", "abs", "sign", "sqrt", "rsqrt", "floor", "stop_gradient") else 2
  ours_vs_jax(name, jax_fn, *[ShapedArray((2, 3), dtype)] * n_args)


@pytest.mark.parametrize("case", SHAPED_SUBSET, ids=[c[0] for c in SHAPED_SUBSET])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_numpy_subset_shaped_abstract_eval_matches_jax(case, dtype):
  name, jax_fn, shapes, params = case
  if name == "round" and dtype == np.int32:
    return
  ours_vs_jax(name, jax_fn, *[ShapedArray(s, dtype) for s in shapes], **params)


def test_dynamic_slices_abstract_eval_matches_jax():
  x, u, i = ShapedArray((4, 3), np.float32), ShapedArray((2, 2), np.float32), ShapedArray((), np.int64)
  ours_vs_jax("dynamic_slice", lambda x, i, j: jax.lax.dynamic_slice(x, (i, j), (2, 2)),
              x, i, i, slice_sizes=(2, 2))
  ours_vs_jax("dynamic_update_slice", lambda x, u, i, j: jax.lax.dynamic_update_slice(x, u, (i, j)),
              x, u, i, i)


def _sds(a: ShapedArray):
  return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)


def ours_vs_jax(prim_name, jax_fn, *avals, **params):
  """Our abstract eval rule vs jax.eval_shape: same result, or both raise."""
  try:
    theirs = jax.eval_shape(jax_fn, *map(_sds, avals))
  except (TypeError, ValueError) as e:
    with pytest.raises((TypeError, ValueError)):
      core.abstract_eval_rules[prim_by_name[prim_name]](*avals, **params)
    return str(e)
  ours = core.abstract_eval_rules[prim_by_name[prim_name]](*avals, **params)
  assert isinstance(ours, ShapedArray)
  assert (ours.shape, ours.dtype, ours.weak_type) == (
      theirs.shape, theirs.dtype, theirs.weak_type), (prim_name, avals, ours, theirs)
  return ours


def factorizations(n, max_rank=3):
  """Every shape of rank <= max_rank with n elements."""
  if max_rank == 0:
    return [()] if n == 1 else []
  out = [()] if n == 1 else []
  for d in range(1, n + 1):
    if n % d == 0:
      out += [(d,) + rest for rest in factorizations(n // d, max_rank - 1) if rest or d == n]
  return sorted(set(out))


shapes_0_3 = st.lists(st.integers(1, 4), max_size=3).map(tuple)


@given(st.sampled_from(BINARY), shapes_0_3, st.sampled_from(DTYPES), st.integers(0, 3))
def test_binary_abstract_eval_matches_jax(name, shape, dtype, variant):
  # variant: 0 equal shapes, 1 scalar lhs, 2 scalar rhs, 3 both scalars
  xs = () if variant in (1, 3) else shape
  ys = () if variant in (2, 3) else shape
  x, y = ShapedArray(xs, dtype), ShapedArray(ys, dtype)
  ours_vs_jax(name, getattr(jax.lax, jax_name(name)), x, y)


# (JAX also stretches size-1 axes; we need equal shapes, so mismatches use sizes >= 2)
@given(st.sampled_from(BINARY), st.lists(st.integers(2, 4), min_size=1, max_size=3).map(tuple),
       st.integers(1, 3))
def test_binary_shape_mismatch_errors_like_jax(name, shape, extra):
  other = shape[:-1] + (shape[-1] + extra,)
  x, y = ShapedArray(shape, np.float32), ShapedArray(other, np.float32)
  ours_vs_jax(name, getattr(jax.lax, jax_name(name)), x, y)
  with pytest.raises(TypeError, match=rf"{name}: shapes \(.+\) and \(.+\) are incompatible"):
    core.abstract_eval_rules[prim_by_name[name]](x, y)


@given(st.sampled_from(BINARY), shapes_0_3,
       st.sampled_from(list(itertools.permutations(DTYPES, 2))))
def test_binary_dtype_mismatch_errors_like_jax(name, shape, dtypes):
  x, y = ShapedArray(shape, dtypes[0]), ShapedArray(shape, dtypes[1])
  ours_vs_jax(name, getattr(jax.lax, jax_name(name)), x, y)
  with pytest.raises(TypeError, match=rf"{name}: dtypes \w+ and \w+ differ"):
    core.abstract_eval_rules[prim_by_name[name]](x, y)


@given(st.sampled_from(UNARY), shapes_0_3, st.sampled_from(DTYPES), st.booleans())
def test_unary_abstract_eval_matches_jax(name, shape, dtype, weak):
  ours_vs_jax(name, getattr(jax.lax, name), ShapedArray(shape, dtype, weak))


@given(st.sampled_from(["reduce_sum", "reduce_max"]), shapes_0_3, st.sampled_from(DTYPES),
       st.data())
def test_reduce_abstract_eval_matches_jax(name, shape, dtype, data):
  axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1))))) if shape else ()
  fn = getattr(jax.lax, name)
  ours_vs_jax(name, lambda x: fn(x, axes), ShapedArray(shape, dtype), axes=axes)


@given(shapes_0_3, st.sampled_from(DTYPES), st.data())
def test_broadcast_abstract_eval_matches_jax(shape, dtype, data):
  n_new = data.draw(st.integers(0, 2))
  out_rank = len(shape) + n_new
  axes = tuple(sorted(data.draw(st.permutations(range(out_rank)))[:n_new]))
  sizes = iter(shape)
  out_shape = tuple(data.draw(st.integers(1, 3)) if i in axes else next(sizes)
                    for i in range(out_rank))
  kept = tuple(i for i in range(out_rank) if i not in axes)
  ours_vs_jax("broadcast", lambda x: jax.lax.broadcast_in_dim(x, out_shape, kept),
              ShapedArray(shape, dtype), shape=out_shape, axes=axes)


@given(shapes_0_3, st.sampled_from(DTYPES), st.data())
def test_transpose_abstract_eval_matches_jax(shape, dtype, data):
  perm = tuple(data.draw(st.permutations(range(len(shape)))))
  ours_vs_jax("transpose", lambda x: jax.lax.transpose(x, perm), ShapedArray(shape, dtype),
              permutation=perm)


@given(shapes_0_3, st.sampled_from(DTYPES), st.data())
def test_reshape_abstract_eval_matches_jax(shape, dtype, data):
  size = int(np.prod(shape, dtype=int))
  new = data.draw(st.sampled_from(factorizations(size)))
  ours_vs_jax("reshape", lambda x: jax.lax.reshape(x, new), ShapedArray(shape, dtype),
              new_sizes=new)


def test_reshape_abstract_eval_wrong_size():
  with pytest.raises(TypeError, match="reshape"):
    core.abstract_eval_rules[lax.reshape_p](ShapedArray((2, 3), np.float32), new_sizes=(4,))


@given(shapes_0_3, st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.booleans())
def test_convert_element_type_abstract_eval_matches_jax(shape, dtype, new, weak):
  ours_vs_jax("convert_element_type", lambda x: jax.lax.convert_element_type(x, new),
              ShapedArray(shape, dtype, weak), new_dtype=np.dtype(new), weak_type=False)


@given(st.data(), st.sampled_from(DTYPES))
def test_dot_general_abstract_eval_matches_jax(data, dtype):
  n_batch = data.draw(st.integers(0, 1))
  n_contract = data.draw(st.integers(0, 2))
  batch = [data.draw(st.integers(1, 3)) for _ in range(n_batch)]
  contract = [data.draw(st.integers(1, 3)) for _ in range(n_contract)]
  lfree = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(0, 1)))]
  rfree = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(0, 1)))]
  # lay each side's axes out in a random order
  lroles = [("b", i) for i in range(n_batch)] + [("c", i) for i in range(n_contract)] + [
      ("f", i) for i in range(len(lfree))]
  rroles = [("b", i) for i in range(n_batch)] + [("c", i) for i in range(n_contract)] + [
      ("f", i) for i in range(len(rfree))]
  lroles = data.draw(st.permutations(lroles))
  rroles = data.draw(st.permutations(rroles))
  size = lambda r, free: {"b": batch, "c": contract, "f": free}[r[0]][r[1]]
  lshape = tuple(size(r, lfree) for r in lroles)
  rshape = tuple(size(r, rfree) for r in rroles)
  where = lambda roles, kind, n: tuple(roles.index((kind, i)) for i in range(n))
  dn = ((where(lroles, "c", n_contract), where(rroles, "c", n_contract)),
        (where(lroles, "b", n_batch), where(rroles, "b", n_batch)))
  ours_vs_jax("dot_general", lambda x, y: jax.lax.dot_general(x, y, dn),
              ShapedArray(lshape, dtype), ShapedArray(rshape, dtype), dimension_numbers=dn)


def test_dot_general_abstract_eval_errors():
  rule = core.abstract_eval_rules[lax.dot_general_p]
  x, y = ShapedArray((2, 3), np.float32), ShapedArray((4, 5), np.float32)
  with pytest.raises(TypeError, match="dot_general: contracting axes have sizes"):
    rule(x, y, dimension_numbers=(((1,), (0,)), ((), ())))
  # two dtypes: the more precise one, as XLA and JAX (see test_numpy_api)
  out = rule(x, ShapedArray((3, 5), np.float64), dimension_numbers=(((1,), (0,)), ((), ())))
  assert out == ShapedArray((2, 5), np.float64)


@given(shapes_0_3, st.sampled_from(DTYPES), st.booleans(), st.booleans())
def test_clamp_abstract_eval_matches_jax(shape, dtype, lo_scalar, hi_scalar):
  lo = ShapedArray(() if lo_scalar else shape, dtype)
  hi = ShapedArray(() if hi_scalar else shape, dtype)
  ours_vs_jax("clamp", jax.lax.clamp, lo, ShapedArray(shape, dtype), hi)


@given(shapes_0_3, st.sampled_from(DTYPES), st.integers(1, 3), st.booleans(), st.booleans())
def test_select_n_abstract_eval_matches_jax(shape, dtype, n, bool_pred, scalar_pred):
  pred = ShapedArray(() if scalar_pred else shape, np.bool_ if bool_pred else np.int32)
  cases = [ShapedArray(shape, dtype)] * n
  ours_vs_jax("select_n", jax.lax.select_n, pred, *cases)


# --- weak types ----------------------------------------------------------------------------

WEAK_CASES = [
    # (array aval, Python scalar) -> as jnp: the scalar adopts the array's dtype
    ((3,), np.float32, 2.0), ((3,), np.float32, 2), ((3,), np.float64, 2.0),
    ((2, 2), np.int32, 3), ((), np.float32, 1.5), ((3,), np.float16, 2.0),
    ((3,), np.int8, 2), ((3,), np.uint8, 1),
]


@pytest.mark.parametrize("shape, dtype, scalar", WEAK_CASES)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "max", "greater"])
def test_weak_scalar_adopts_the_arrays_dtype(shape, dtype, scalar, name):
  strong = ShapedArray(shape, dtype)
  weak = core.raise_to_shaped(core.get_aval(scalar))
  assert weak.weak_type
  jfn = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum,
         "greater": jnp.greater}[name]
  for args in ((strong, weak), (weak, strong)):
    ours = core.abstract_eval_rules[prim_by_name[name]](*args)
    theirs = jax.eval_shape(jfn, *(jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
                                   for a in args))
    assert (ours.shape, ours.dtype, ours.weak_type) == (
        theirs.shape, theirs.dtype, theirs.weak_type), (args, ours, theirs)


@pytest.mark.parametrize("a, b", [(2.0, 3.0), (2, 3.0), (3.0, 2), (2, 3)])
def test_two_weak_scalars_stay_weak(a, b):
  # (a Python bool is never weak: test_dtype_audit covers it)
  wa, wb = (core.raise_to_shaped(core.get_aval(v)) for v in (a, b))
  ours = core.abstract_eval_rules[lax.add_p](wa, wb)
  theirs = jax.eval_shape(jnp.add, a, b)
  assert (ours.dtype, ours.weak_type) == (theirs.dtype, theirs.weak_type)


def test_weak_type_through_make_jaxpr():
  x32 = np.ones(3, np.float32)
  closed = adx.make_jaxpr(lambda x: lax.mul(lax.add(x, 2.0), 3))(x32)
  assert [str(a.str_short()) for a in closed.out_avals] == ["f32[3]"]
  assert not closed.out_avals[0].weak_type
  assert "mul" in str(closed) and "f64[3]" not in str(closed)
  # a weak input stays weak through unary ops and reductions, as in JAX
  closed = adx.make_jaxpr(lambda x: lax.sin(x))(1.0)
  assert closed.in_avals[0].weak_type and closed.out_avals[0].weak_type
  theirs = jax.make_jaxpr(lambda x: jax.lax.sin(x))(1.0)
  assert theirs.in_avals[0].weak_type and theirs.out_avals[0].weak_type


def test_weak_dtype_mismatch_still_errors_between_strong_arrays():
  with pytest.raises(TypeError, match="mul: dtypes float32 and float64 differ"):
    adx.make_jaxpr(lambda x, y: lax.mul(x, y))(np.ones(3, np.float32), np.ones(3))
  assert stack_is_clean()


def test_shape_mismatch_errors_while_tracing():
  with pytest.raises(TypeError, match=r"add: shapes \(3,\) and \(4,\) are incompatible"):
    adx.make_jaxpr(lambda x, y: lax.add(x, y))(np.ones(3), np.ones(4))
  assert stack_is_clean()
