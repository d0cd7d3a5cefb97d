"""Learners' mistakes: each gives a message that says what happened and what
to do, and leaves the interpreter stack exactly as it was."""
import contextlib
import re

import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, lax
from autodidax.api import TransformationError

X = np.arange(6.0).reshape(2, 3)


@contextlib.contextmanager
def raises_cleanly(exc, *phrases):
  """Expect `exc` whose message holds every phrase; the stack must be unchanged."""
  before = list(core.trace_stack)
  with pytest.raises(exc) as info:
    yield info
  msg = str(info.value)
  for phrase in phrases:
    assert phrase in msg, f"{phrase!r} not in the message:\n{msg}"
  assert len(core.trace_stack) == len(before)
  assert all(a is b for a, b in zip(core.trace_stack, before))
  assert core.dynamic_trace is None


def within_transformations(f):
  """`f` run eagerly, under jvp, under vmap, and under jvp of vmap."""
  return [
      lambda: f(1.0),
      lambda: adx.jvp(f, (1.0,), (1.0,)),
      lambda: adx.vmap(f)(np.ones(3)),
      lambda: adx.jvp(adx.vmap(f), (np.ones(3),), (np.ones(3),)),
  ]


# --- Missing rules ---------------------------------------------------------------------

foo_p = adx.Primitive("foo")


def foo(x):
  return foo_p.bind(x)


def test_missing_impl_rule():
  with raises_cleanly(adx.MissingRuleError, "Evaluation rule for 'foo' not implemented",
                      "def_impl"):
    foo(1.0)


def test_missing_jvp_rule():
  with core.impl_rules.override(foo_p, lambda x: x):
    with raises_cleanly(adx.MissingRuleError, "JVP rule for 'foo' not implemented",
                        "jvp_rules"):
      adx.jvp(foo, (1.0,), (1.0,))
    # with a zero tangent the rule isn't needed
    assert adx.jvp(lambda x: foo(2.0) * x, (1.0,), (1.0,)) == (2.0, 2.0)


def test_missing_batching_rule():
  with core.impl_rules.override(foo_p, lambda x: x):
    with raises_cleanly(adx.MissingRuleError, "Batching rule for 'foo' not implemented",
                        "vmap_rules"):
      adx.vmap(foo)(np.ones(3))
    with raises_cleanly(adx.MissingRuleError, "Batching rule for 'foo'"):
      adx.jvp(adx.vmap(foo), (np.ones(3),), (np.ones(3),))   # inside another transformation


def test_missing_rule_is_a_not_implemented_error():
  with raises_cleanly(NotImplementedError, "foo"):
    adx.vmap(lambda x: adx.jvp(foo, (x,), (x,)))(np.ones(2))


# --- vmap's arguments ---------------------------------------------------------------------

def test_in_axes_count_mismatch():
  with raises_cleanly(TransformationError, "in_axes=(0,) has 1 entries", "2 positional arguments",
                      "one entry per argument"):
    adx.vmap(lambda a, b: a + b, in_axes=(0,))(X, X)


@pytest.mark.parametrize("in_axes, args", [
    (((0, 0, 0),), ((X, X),)),
    (({"v": 0},), ({"u": X},)),
    (([0, 0],), ((X, X),)),
])
def test_in_axes_structure_mismatch(in_axes, args):
  with raises_cleanly(TransformationError, "in_axes", "doesn't match the structure"):
    adx.vmap(lambda a: a, in_axes=in_axes)(*args)


@pytest.mark.parametrize("ax", [2, -3, 5])
def test_in_axes_out_of_range(ax):
  with raises_cleanly(TransformationError, f"along axis {ax}", "only 2 axes", "shape (2, 3)"):
    adx.vmap(lambda a: a, in_axes=ax)(X)


def test_in_axes_not_an_int():
  with raises_cleanly(TransformationError, "ints or None", "'0'"):
    adx.vmap(lambda a: a, in_axes="0")(X)


def test_inconsistent_sizes():
  with raises_cleanly(TransformationError, "inconsistent sizes", "argument 0 of shape (2, 3) has size 2",
                      "argument 1 of shape (3, 3) has size 3"):
    adx.vmap(lambda a, b: a + b)(X, np.ones((3, 3)))


def test_no_mapped_argument():
  with raises_cleanly(TransformationError, "no argument is mapped", "Map at least one"):
    adx.vmap(lambda a, b: a, in_axes=None)(X, X)


def test_out_axes_none_for_a_mapped_output():
  with raises_cleanly(TransformationError, "out_axes=None", "varies across the batch"):
    adx.vmap(lambda a: a * 2.0, out_axes=None)(X)
  # fine for an output that doesn't depend on the mapped argument
  assert adx.vmap(lambda a, b: (a, b), in_axes=(0, None), out_axes=(0, None))(X, 5.0)[1] == 5.0


def test_out_axes_out_of_range_and_structure():
  with raises_cleanly(TransformationError, "out_axes=3 is out of range", "rank 2"):
    adx.vmap(lambda a: a, out_axes=3)(X)
  with raises_cleanly(TransformationError, "out_axes (0, 0, 0) doesn't match the structure (*, *)"):
    adx.vmap(lambda a: (a, a), out_axes=(0, 0, 0))(X)


# --- Unsupported types ----------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: adx.vmap(lambda a: a)("abc"),
    lambda: adx.jvp(lambda a: a, ("abc",), ("abc",)),
    lambda: adx.jvp(lambda a: "s", (1.0,), (1.0,)),          # returned from the function
    lambda: adx.vmap(lambda a: (a, "s"))(X),
    lambda: lax.sin("abc"),
    lambda: adx.jacfwd(lambda a: a)("abc"),
    lambda: adx.vmap(lambda a: lax.add(a, "x"))(X),
], ids=["vmap-arg", "jvp-arg", "jvp-out", "vmap-out", "eager", "jacfwd", "inside-vmap"])
def test_unsupported_input_type(call):
  with raises_cleanly(TypeError, "type str", "Pass numpy arrays or Python scalars"):
    call()


def test_numpy_function_on_a_tracer():
  def f(a):
    return np.sin(a) * 2.
  with raises_cleanly(TypeError, "reached NumPy in f()", "np.sin(a)", "use autodidax.numpy"):
    adx.vmap(f)(X)


def test_a_tracer_at_an_impl_rule_is_not_blamed_on_numpy():
  """A tracer that an impl rule meets came from the library's side (a rule that
  evaluates instead of binding): no advice about the user's NumPy calls."""
  from autodidax import ad

  def sin_jvp_that_evaluates(primals, tangents):
    (x,), (t,) = primals, tangents
    return core.impl_rules[lax.sin_p](x), lax.mul(lax.cos(x), t)
  with ad.jvp_rules.override(lax.sin_p, sin_jvp_that_evaluates):
    with raises_cleanly(TypeError, "reached NumPy in", "autodidax/primitives.py", "bind primitives"):
      adx.jvp(lambda x: adx.jvp(lax.sin, (x,), (1.,))[1], (1.,), (1.,))


# --- jvp's arguments ---------------------------------------------------------------------------

@pytest.mark.parametrize("primals, tangents, got", [
    (1.0, 1.0, "got float and float"), (X, X, "got ndarray and ndarray"),
    ((1.0,), 1.0, "got tuple and float"),
])
def test_jvp_primals_not_a_tuple(primals, tangents, got):
  with raises_cleanly(TransformationError, "must be tuples", "jvp(f, (x,), (1.,))", got):
    adx.jvp(lambda a: a, primals, tangents)


@pytest.mark.parametrize("primals, tangents, expected, got", [
    (((1.0, 2.0),), ([1.0, 2.0],), "((*, *),)", "([*, *],)"),
    ((1.0, 2.0), (1.0,), "(*, *)", "(*,)"),
    (({"a": 1.0},), ({"b": 1.0},), "({'a': *},)", "({'b': *},)"),
])
def test_jvp_mismatched_pytrees(primals, tangents, expected, got):
  with raises_cleanly(ValueError, "pytree structures differ", f"expected {expected}", f"got {got}"):
    adx.jvp(lambda *a: a[0], primals, tangents)


def test_jvp_mismatched_tangent_shape():
  with raises_cleanly(TransformationError, "tangent must have its primal's shape",
                      "primal f64[3] with tangent f64[4]"):
    adx.jvp(anp.sin, (np.ones(3),), (np.ones(4),))
  with raises_cleanly(TransformationError, "primal f64[] with tangent f64[3]"):
    adx.jvp(anp.sin, (1.0,), (np.ones(3),))


# --- Escaped tracers ------------------------------------------------------------------------------

def leak(transform):
  saved = []

  def f(x):
    saved.append(x)
    return x * 2.0
  transform(f)
  return saved[0]


LEAKERS = {
    "jvp": lambda f: adx.jvp(f, (1.0,), (1.0,)),
    "vmap": lambda f: adx.vmap(f)(np.ones(3)),
    "jvp-of-vmap": lambda f: adx.jvp(adx.vmap(f), (np.ones(3),), (np.ones(3),)),
}


@pytest.mark.parametrize("how", LEAKERS)
def test_escaped_tracer_used_later(how):
  t = leak(LEAKERS[how])
  with raises_cleanly(core.EscapedTracerError, "escaped tracer", "already finished",
                      "Return values from transformed functions"):
    anp.sin(t) + 1.0


@pytest.mark.parametrize("how", LEAKERS)
@pytest.mark.parametrize("then", ["jvp", "vmap"])
@pytest.mark.parametrize("order", ["leaked-first", "leaked-second"])
def test_tracer_from_a_finished_transformation(how, then, order):
  t = leak(LEAKERS[how])
  g = (lambda x: lax.add(t, x)) if order == "leaked-first" else (lambda x: lax.add(x, t))
  with raises_cleanly(core.EscapedTracerError) as info:
    if then == "jvp":
      adx.jvp(g, (1.0,), (1.0,))
    else:
      adx.vmap(g)(np.ones(3))
  msg = str(info.value)
  assert "finished" in msg, msg


def test_inner_tracer_returned_to_outer_transformation():
  inner = []

  def outer(x):
    adx.vmap(lambda y: inner.append(y) or y)(np.ones(2))
    return x * inner[0]

  with raises_cleanly(core.EscapedTracerError, "finished"):
    adx.jvp(outer, (1.0,), (1.0,))


# --- Control flow on traced values --------------------------------------------------------------

@pytest.mark.parametrize("f", [
    lambda x: 1.0 if x > 0 else -1.0,
    lambda x: x if bool(x > 0) else -x,
    lambda x: [x for _ in range(3) if x < 2],
], ids=["if", "bool", "comprehension"])
def test_batch_tracer_in_if(f):
  with raises_cleanly(core.ConcretizationError, "BatchTrace", "bool[]", "`if x > 0:`",
                      "blend them with a mask", "in_axes=None"):
    adx.vmap(f)(np.arange(3.0))


def test_the_advice_in_the_message_works():
  """The fix the message suggests runs, and agrees with the Python `if`."""
  def f(x):
    m = (x > 0).astype(x.dtype)
    return m * anp.sin(x) + (1 - m) * anp.cos(x)
  xs = np.linspace(-2, 2, 5)
  expected = np.where(xs > 0, np.sin(xs), np.cos(xs))
  np.testing.assert_allclose(adx.vmap(f)(xs), expected)
  # ... and so does the other: a value kept out of vmap can steer Python.
  out = adx.vmap(lambda x, s: x * 2.0 if s > 0 else x, in_axes=(0, None))(xs, 1.0)
  np.testing.assert_allclose(out, 2 * xs)


def test_jvp_tracer_in_if_is_fine():
  assert adx.jvp(lambda x: anp.sin(x) if x > 0 else x, (1.0,), (1.0,))[1] == np.cos(1.0)


# --- lax shape errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: lax.add(np.ones(3), np.ones(4)),
    lambda: adx.jvp(lambda x: lax.add(x, np.ones(4)), (np.ones(3),), (np.ones(3),)),
], ids=["eager", "jvp"])
def test_lax_shape_mismatch(call):
  with raises_cleanly(lax.ShapeError, "add: shapes (3,) and (4,) are incompatible",
                      "use autodidax.numpy for NumPy-style broadcasting"):
    call()


def test_lax_shape_mismatch_under_vmap_names_the_unbatched_shapes():
  with raises_cleanly(lax.ShapeError, "add: shapes", "are incompatible"):
    adx.vmap(lambda x: lax.add(x, np.ones(4)))(np.ones((2, 3)))


@pytest.mark.parametrize("call, phrases", [
    (lambda: lax.broadcast(np.ones(3), (2, 4), [0]), ["broadcast", "(3,)", "(2, 4)"]),
    (lambda: lax.reshape(np.ones(6), (4, 2)), ["reshape", "(6,)", "(4, 2)"]),
    (lambda: lax.transpose(np.ones((2, 3)), (0, 0)), ["not a permutation"]),
    (lambda: lax.reduce_sum(np.ones((2, 3)), 2), ["axis 2 is out of bounds"]),
    (lambda: lax.reduce_sum(np.ones((2, 3)), (0, 0)), ["repeated axis"]),
])
def test_other_lax_errors(call, phrases):
  with raises_cleanly(Exception, *phrases):
    call()


def test_stack_is_clean_after_an_error_deep_inside():
  def f(x):
    return adx.vmap(lambda y: adx.jvp(lambda z: lax.add(z, np.ones(7)), (y,), (y,)))(x)
  with raises_cleanly(lax.ShapeError, "incompatible"):
    adx.jvp(f, (np.ones((2, 3)),), (np.ones((2, 3)),))


def test_a_stackless_tracer_with_no_current_trace():
  """JAX today's tracers at Parts 1-4's `bind` (no trace current): a clear error
  that says to make the trace current, not an internal AttributeError."""
  from autodidax import stackless as sl
  with sl.running(sl.DynamicJaxprTrace()) as trace:
    x = trace.new_arg(core.ShapedArray((3,), np.dtype("float64")))
    with raises_cleanly(core.NoCurrentTraceError, "no trace was current", "set_current_trace"):
      anp.sin(x)


def test_an_escaped_stackless_tracer_says_it_escaped():
  """Not "make the trace current": its trace has finished."""
  from autodidax import stackless as sl
  leak = []
  sl.jvp(lambda x: leak.append(x) or x, (1.,), (1.,))
  with raises_cleanly(core.EscapedTracerError, "escaped", "finished"):
    anp.sin(leak[0])


def test_a_stackless_tracer_at_the_evaluator():
  """An operation on a stackless tracer while the evaluator is current (a rule
  run without its parent current): the message says so, not "use anp"."""
  from autodidax import stackless as sl
  with sl.running(sl.DynamicJaxprTrace()) as trace:
    x = trace.new_arg(core.ShapedArray((3,), np.dtype("float64")))
    with sl.set_current_trace(sl.eval_trace):
      with raises_cleanly(core.TracerArrayConversionError, "the evaluator was the current trace",
                          "set_current_trace(self.parent)"):
        anp.sin(x)


# --- Round 3: errors where JAX raises, and collectives' axes -----------------------------

@pytest.mark.parametrize("call, match", [
    (lambda: anp.reshape(np.arange(6.), (-1, -1)), "only specify one unknown dimension"),
    (lambda: anp.concatenate([]), "at least one array"),
    (lambda: adx.grad(lambda x: x * 2., argnums=())(1.), "argnums=()"),
])
def test_errors_jax_also_raises(call, match):
  with pytest.raises(ValueError, match=re.escape(match)):
    call()


def test_arange_takes_numpy_scalar_bounds_dtype():
  assert anp.arange(np.int32(0), np.int32(5)).dtype == np.int32
  assert anp.arange(0, 5).dtype == np.int64
  assert anp.arange(np.float32(0), 2.).dtype == np.float32


@pytest.mark.parametrize("f", [
    lambda x: lax.all_gather(x, "i", axis=2),           # rank 1: axes -2..1
    lambda x: lax.all_gather(x, "i", axis=-3),
    lambda x: lax.all_gather(x, "i", axis=1, tiled=True),
    lambda x: lax.psum_scatter(x, "i", scatter_dimension=3),
    lambda x: lax.all_gather(x.sum(), "i", tiled=True),  # rank 0
    lambda x: lax.psum_scatter(x.sum(), "i"),
])
def test_collective_axis_out_of_range_raises_as_jax(f):
  """They wrapped around (axis % rank) to a plausible array, or divided by 0."""
  with pytest.raises(ValueError, match="out of bounds for array of dimension"):
    adx.vmap(f, axis_name="i")(np.ones((2, 2)))


def test_psum_over_no_axes_is_the_identity():
  x = np.arange(3.)
  np.testing.assert_array_equal(lax.psum(x, ()), x)
  np.testing.assert_array_equal(adx.vmap(lambda v: lax.pmax(v, []), axis_name="i")(x), x)


def test_a_jit_sharding_longer_than_the_rank_raises_as_jax():
  from autodidax.sharding import NamedSharding, P
  s = NamedSharding(adx.make_mesh((1,), ("x",)), P("x", None))
  with pytest.raises(ValueError, match=r"argument 0 \(f64\[3\]\) has 2 entries"):
    adx.jit(lambda v: v * 2, in_shardings=s)(np.ones(3))
  with pytest.raises(ValueError, match=r"output 0 \(f64\[3\]\) has 2 entries"):
    adx.jit(lambda v: v * 2, out_shardings=s)(np.ones(3))


def test_device_put_of_a_scalar_to_a_mesh():
  from autodidax.sharding import NamedSharding, P
  a = adx.device_put(np.float64(2.), NamedSharding(adx.make_mesh((1,), ("x",)), P()))
  assert np.asarray(a).shape == () and float(np.asarray(a)) == 2.
