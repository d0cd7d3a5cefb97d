"""Jaxprs (Part 2): the type checker. Each error names the (printed) equation
and the variable; the jaxprs of every transformation type-check.

Expectations come from first principles (a hand-built jaxpr with a known flaw)
or from real JAX, never from our own output.
"""
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, lax
from autodidax.core import ShapedArray
from autodidax.jaxpr import (Jaxpr, JaxprEqn, JaxprTypeError, Lit, Var, pp_jaxpr, typecheck_jaxpr)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

F64 = ShapedArray((), np.float64)
F32 = ShapedArray((), np.float32)

def raises_typeerror(jaxpr, *fragments):
  """typecheck_jaxpr(jaxpr) raises a JaxprTypeError whose message holds every fragment."""
  with pytest.raises(JaxprTypeError) as info:
    typecheck_jaxpr(jaxpr)
  msg = str(info.value)
  for frag in fragments:
    assert frag in msg, f"{frag!r} not in {msg!r}"
  return msg


# ============================================================================================
# Type checking: each error names the (printed) equation and the variable
# ============================================================================================

def test_typecheck_accepts_a_hand_built_jaxpr():
  x, y, z = Var(F64), Var(F64), Var(F64)
  j = Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y]),
                      JaxprEqn(lax.mul_p, [y, Lit(2.)], {}, [z])], [z])
  ty = typecheck_jaxpr(j)
  assert ty.in_types == [F64] and ty.out_types == [F64]


def test_typecheck_unbound_variable():
  x, y, w = Var(F64), Var(F64), Var(F64)
  # names in order of appearance: binders first (a = x, b = y), then w = c
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [w], {}, [y])], [y]),
                   "`b:f64[] = sin c`", "variable c is unbound")


def test_typecheck_variable_used_before_its_equation():
  x, y, z = Var(F64), Var(F64), Var(F64)
  eqns = [JaxprEqn(lax.cos_p, [y], {}, [z]), JaxprEqn(lax.sin_p, [x], {}, [y])]
  # names in order of binding: x = a, then the out binders z = b, y = c
  raises_typeerror(Jaxpr([], [x], eqns, [z]), "`b:f64[] = cos c`", "variable c is unbound")


def test_typecheck_unbound_output_variable():
  x, y, w = Var(F64), Var(F64), Var(F64)
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y])], [w]),
                   "outputs", "variable c is unbound")


def test_typecheck_input_rebound_by_an_equation():
  x = Var(F64)
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [x])], [x]),
                   "`a:f64[] = sin a`", "variable a is bound twice")


def test_typecheck_two_equations_bind_the_same_variable():
  x, y = Var(F64), Var(F64)
  eqns = [JaxprEqn(lax.sin_p, [x], {}, [y]), JaxprEqn(lax.cos_p, [x], {}, [y])]
  raises_typeerror(Jaxpr([], [x], eqns, [y]), "`b:f64[] = cos a`", "variable b is bound twice")


def test_typecheck_constvar_and_invar_are_the_same_variable():
  x = Var(F64)
  raises_typeerror(Jaxpr([x], [x], [], [x]), "variable a is bound twice")


def test_typecheck_declared_shape_mismatch():
  x, y = Var(F64), Var(ShapedArray((3,), np.float64))
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y])], [y]),
                   "`b:f64[3] = sin a`", "b is declared f64[3]", "sin produces f64[]")


def test_typecheck_declared_dtype_mismatch():
  x, y = Var(F64), Var(F32)
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y])], [y]),
                   "`b:f32[] = sin a`", "b is declared f32[]", "sin produces f64[]")


def test_typecheck_declared_weak_type_mismatch_is_explained():
  # Only weak_type differs: the message must not read "f64[] but ... f64[]".
  x, y = Var(F64), Var(ShapedArray((), np.float64, weak_type=True))
  msg = raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y])], [y]),
                         "`b:f64[] = sin a`", "b is declared", "weak_type")
  assert "declared f64[] but sin produces f64[]" not in msg


def test_typecheck_declared_type_of_a_later_output():
  # reduce_sum over axis 0 of f32[2,3] is f32[3]; the second equation lies about it.
  a = Var(ShapedArray((2, 3), np.float32))
  b, c = Var(ShapedArray((2, 3), np.float32)), Var(ShapedArray((2,), np.float32))
  eqns = [JaxprEqn(lax.sin_p, [a], {}, [b]), JaxprEqn(lax.reduce_sum_p, [b], {"axes": (0,)}, [c])]
  raises_typeerror(Jaxpr([], [a], eqns, [c]), "`c:f32[2] = reduce_sum[axes=(0,)] b`",
                   "c is declared f32[2]", "produces f32[3]")


def test_typecheck_too_many_out_binders():
  x, y, z = Var(F64), Var(F64), Var(F64)
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [y, z])], [y]),
                   "`b:f64[] c:f64[] = sin a`", "1 outputs", "2 are bound")


def test_typecheck_no_out_binders():
  x = Var(F64)
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [x], {}, [])], [x]),
                   "sin a`", "1 outputs", "0 are bound")


def test_typecheck_abstract_eval_failure_inside():
  a, b = Var(ShapedArray((3,), np.float32)), Var(ShapedArray((4,), np.float32))
  c = Var(ShapedArray((3,), np.float32))
  raises_typeerror(Jaxpr([], [a, b], [JaxprEqn(lax.add_p, [a, b], {}, [c])], [c]),
                   "`c:f32[3] = add a b`", "add: shapes (3,) and (4,) are incompatible")


def test_typecheck_dtype_failure_inside():
  a, b, c = Var(F32), Var(F64), Var(F64)
  raises_typeerror(Jaxpr([], [a, b], [JaxprEqn(lax.mul_p, [a, b], {}, [c])], [c]),
                   "`c:f64[] = mul a b`", "float32", "float64")


def test_typecheck_bad_atom_python_scalar():
  x, y = Var(F64), Var(F64)
  msg = raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [3.0], {}, [y])], [y]),
                         "b:f64[] = sin", "3.0 is not an atom")
  assert "sin c" not in msg   # the non-atom is not printed as if it were a variable


def test_typecheck_bad_atom_array():
  # An array where an atom belongs (it should have been a constvar): the
  # error must still print, not fail with "unhashable type".
  x, y = Var(ShapedArray((3,), np.float64)), Var(ShapedArray((3,), np.float64))
  raises_typeerror(Jaxpr([], [x], [JaxprEqn(lax.sin_p, [np.ones(3)], {}, [y])], [y]),
                   "b:f64[3] = sin", "is not an atom")


def test_typecheck_bad_atom_in_outputs():
  x = Var(F64)
  raises_typeerror(Jaxpr([], [x], [], [2.0]), "outputs", "2.0 is not an atom")


def test_typecheck_literal_outputs_are_fine():
  x = Var(F64)
  ty = typecheck_jaxpr(Jaxpr([], [x], [], [x, Lit(1.0)]))
  assert ty.out_types == [F64, ShapedArray((), np.float64, weak_type=True)]


def test_typecheck_missing_rule_is_not_a_type_error():
  foo_p = core.Primitive("foo_for_test_jaxpr")
  x, y = Var(F64), Var(F64)
  with pytest.raises(core.MissingRuleError, match="foo_for_test_jaxpr"):
    typecheck_jaxpr(Jaxpr([], [x], [JaxprEqn(foo_p, [x], {}, [y])], [y]))


def test_typecheck_error_names_use_the_printed_names():
  # 30 inputs: the 28th is "bb" both in the printout and in the error.
  xs = [Var(F64) for _ in range(30)]
  out = Var(F64)
  w = Var(F64)
  j = Jaxpr([], xs, [JaxprEqn(lax.add_p, [xs[27], w], {}, [out])], [out])
  raises_typeerror(j, "`be:f64[] = add bb bf`", "variable bf is unbound")
  assert pp_jaxpr(Jaxpr([], xs, [], xs[27:28])).endswith("in (bb,) }")


@pytest.mark.parametrize("name, make", [
    ("jit", lambda: adx.make_jaxpr(lambda x: lax.cos(adx.jit(lambda y: lax.mul(y, 2.0))(x)))(
        np.ones(3))),
    ("jvp", lambda: adx.make_jaxpr(lambda x: adx.jvp(lambda y: anp.sin(y) * y, (x,), (1.,)))(3.)),
    ("vmap", lambda: adx.make_jaxpr(adx.vmap(lambda v: anp.sum(v * v)))(np.ones((4, 3)))),
    ("grad", lambda: adx.make_jaxpr(adx.grad(lambda x: anp.sum(anp.tanh(x))))(np.ones(3))),
])
def test_typecheck_accepts_jaxprs_of_transformations(name, make):
  closed = make()
  ty = typecheck_jaxpr(closed.jaxpr)
  assert ty.out_types == closed.out_avals
  assert ty.in_types == closed.in_avals
