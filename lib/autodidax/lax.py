"""The primitives, their evaluation (impl) rules, and one wrapper per primitive.

Wrappers follow the `bind` convention: array operands are positional, static
metadata (axes, shapes, dtypes) goes in keyword params, normalized here so that
every interpreter sees one canonical form (e.g. `axes` is a sorted tuple).

Binary operators take operands of equal shape, or one rank-0 operand that
stands for all elements (JAX prints these as `mul c 3.0`). General NumPy
broadcasting and dtype promotion belong to `autodidax.numpy`.
"""
from __future__ import annotations

import math

import numpy as np

from .core import Primitive, ShapedArray, abstract_eval_rules, impl_rules
from .jaxpr import as_shaped
from .util import canonicalize_axis


# --- Elementwise ------------------------------------------------------------------

def _binary_impl(name, np_fn):
  def impl(x, y):
    sx, sy = np.shape(x), np.shape(y)
    if sx != sy and sx and sy:
      raise ShapeError(f"{name}: shapes {sx} and {sy} are incompatible. lax "
                       "operations need equal shapes (or a scalar); use "
                       "autodidax.numpy for NumPy-style broadcasting.")
    return np_fn(x, y)
  return impl


class ShapeError(TypeError):
  pass


add_p = Primitive("add")
sub_p = Primitive("sub")
mul_p = Primitive("mul")
div_p = Primitive("div")
max_p = Primitive("max")
greater_p = Primitive("greater")
less_p = Primitive("less")
greater_equal_p = Primitive("greater_equal")
less_equal_p = Primitive("less_equal")

neg_p = Primitive("neg")
exp_p = Primitive("exp")
log_p = Primitive("log")
tanh_p = Primitive("tanh")
sin_p = Primitive("sin")
cos_p = Primitive("cos")


def _div(x, y):
  """Division as lax.div: integers divide with truncation toward zero (C style,
  like StableHLO's divide), keeping their dtype; NumPy's `/` would give floats."""
  if np.result_type(x, y).kind not in "iu":
    return np.divide(x, y)
  q = np.floor_divide(x, y)   # rounds down: add one where that went past zero
  return q + ((np.remainder(x, y) != 0) & ((np.less(x, 0)) != (np.less(y, 0))))


binary_primitives = {
    add_p: np.add, sub_p: np.subtract, mul_p: np.multiply, div_p: _div,
    max_p: np.maximum, greater_p: np.greater, less_p: np.less,
    greater_equal_p: np.greater_equal, less_equal_p: np.less_equal}
comparison_primitives = {greater_p, less_p, greater_equal_p, less_equal_p}
unary_primitives = {neg_p: np.negative, sin_p: np.sin, cos_p: np.cos,
                    exp_p: np.exp, log_p: np.log, tanh_p: np.tanh}

for _p, _fn in binary_primitives.items():
  impl_rules[_p] = _binary_impl(_p.name, _fn)
for _p, _fn in unary_primitives.items():
  impl_rules[_p] = _fn


def add(x, y): return add_p.bind(x, y)
def sub(x, y): return sub_p.bind(x, y)
def mul(x, y): return mul_p.bind(x, y)
def div(x, y): return div_p.bind(x, y)
def max(x, y): return max_p.bind(x, y)  # noqa: A001 (elementwise, as lax.max)
def greater(x, y): return greater_p.bind(x, y)
def less(x, y): return less_p.bind(x, y)
def greater_equal(x, y): return greater_equal_p.bind(x, y)
def less_equal(x, y): return less_equal_p.bind(x, y)
def neg(x): return neg_p.bind(x)
def sin(x): return sin_p.bind(x)
def cos(x): return cos_p.bind(x)
def exp(x): return exp_p.bind(x)
def log(x): return log_p.bind(x)
def tanh(x): return tanh_p.bind(x)


# --- Reductions -----------------------------------------------------------------------

reduce_sum_p = Primitive("reduce_sum")
reduce_max_p = Primitive("reduce_max")
# np.asarray: np.sum would call an array-like's own .sum(axis, out=...) method;
# dtype: NumPy sums small ints as int64, lax keeps the operand's dtype.
impl_rules[reduce_sum_p] = lambda x, *, axes: np.sum(np.asarray(x), axes,
                                                      dtype=np.result_type(x))
impl_rules[reduce_max_p] = lambda x, *, axes: np.max(np.asarray(x), axes)


def _canonical_axes(axis, ndim) -> tuple:
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  axes = tuple(sorted(canonicalize_axis(int(a), ndim) for a in axes))
  if len(set(axes)) != len(axes):
    raise ValueError(f"repeated axis in {axis}")
  return axes


def reduce_sum(x, axis=None):
  """Sum over `axis`: an int, a tuple of ints, or None for all axes."""
  return reduce_sum_p.bind(x, axes=_canonical_axes(axis, np.ndim(x)))


def reduce_max(x, axis=None):
  return reduce_max_p.bind(x, axes=_canonical_axes(axis, np.ndim(x)))


# --- Shape and type manipulation -------------------------------------------------------

broadcast_p = Primitive("broadcast")
transpose_p = Primitive("transpose")
reshape_p = Primitive("reshape")
convert_element_type_p = Primitive("convert_element_type")


def _broadcast_impl(x, *, shape, axes):
  # Size-1 axes where the new ones go (one reshape, cheaper than an
  # expand_dims per axis), then a read-only broadcast view.
  expanded = tuple(1 if i in axes else d for i, d in enumerate(shape))
  return np.broadcast_to(np.reshape(x, expanded), shape)


impl_rules[broadcast_p] = _broadcast_impl
impl_rules[transpose_p] = lambda x, *, permutation: np.transpose(x, permutation)
impl_rules[reshape_p] = lambda x, *, new_sizes: np.reshape(x, new_sizes)
impl_rules[convert_element_type_p] = (
    lambda x, *, new_dtype: np.asarray(x).astype(new_dtype))


def broadcast(x, shape, axes):
  """Insert new axes at positions `axes` of the result, of sizes from `shape`.

  The remaining dimensions of `shape` must equal `x`'s, in order.
  """
  shape = tuple(int(d) for d in shape)
  axes = tuple(sorted(canonicalize_axis(int(a), len(shape)) for a in axes))
  kept = tuple(d for i, d in enumerate(shape) if i not in axes)
  if kept != np.shape(x):
    raise ShapeError(f"broadcast: can't broadcast shape {np.shape(x)} to "
                     f"{shape} by inserting axes {axes}: the other dimensions "
                     f"would be {kept}.")
  return broadcast_p.bind(x, shape=shape, axes=axes)


def transpose(x, permutation):
  permutation = tuple(int(p) for p in permutation)
  if sorted(permutation) != list(range(np.ndim(x))):
    raise ValueError(f"transpose: {permutation} is not a permutation of the "
                     f"{np.ndim(x)} axes of an array of shape {np.shape(x)}")
  return transpose_p.bind(x, permutation=permutation)


def reshape(x, new_sizes):
  new_sizes = tuple(int(d) for d in new_sizes)
  if math.prod(new_sizes) != math.prod(np.shape(x)):   # math.prod: fast on ints
    raise ShapeError(f"reshape: can't reshape {np.shape(x)} to {new_sizes}: "
                     "the number of elements differs")
  return reshape_p.bind(x, new_sizes=new_sizes)


def convert_element_type(x, new_dtype):
  return convert_element_type_p.bind(x, new_dtype=np.dtype(new_dtype))


# --- Abstract evaluation (typing) rules: Part 2 --------------------------------------------
# Each maps input avals (ShapedArray or ConcreteArray alike) to the output aval,
# or raises a ShapeError/TypeError that names the primitive and the problem.

_WEAK_REPRESENTATIVE = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}


def binary_dtype(name, x, y):
  """The result dtype, with JAX's weak typing: a weakly-typed operand (from a
  Python scalar) adopts the other operand's dtype."""
  if x.weak_type != y.weak_type:
    strong, weak = (y, x) if x.weak_type else (x, y)
    return np.result_type(strong.dtype, _WEAK_REPRESENTATIVE[weak.dtype.kind]), False
  if x.dtype != y.dtype:
    if x.weak_type:   # two Python scalars: promote as Python would
      return np.result_type(x.dtype, y.dtype), True
    raise TypeError(f"{name}: dtypes {x.dtype} and {y.dtype} differ. lax "
                    "operations need equal dtypes: convert one with "
                    "lax.convert_element_type (autodidax.numpy promotes for you).")
  return x.dtype, x.weak_type


def _binary_abstract_eval(prim, comparison: bool):
  def rule(x, y):
    if x.shape != y.shape and x.shape and y.shape:
      raise ShapeError(f"{prim.name}: shapes {x.shape} and {y.shape} are "
                       "incompatible. lax operations need equal shapes (or a "
                       "scalar); use autodidax.numpy for broadcasting.")
    dtype, weak = binary_dtype(prim.name, x, y)
    if comparison:
      dtype, weak = np.dtype(np.bool_), False
    return ShapedArray(x.shape or y.shape, dtype, weak)
  return rule


def _unary_abstract_eval(prim, floats_only: bool):
  def rule(x):
    if floats_only and x.dtype.kind not in "fc":   # np.inexact: float or complex
      raise TypeError(f"{prim.name} needs a floating-point operand, got "
                      f"{x.str_short()}; convert it with lax.convert_element_type.")
    return as_shaped(x)   # the output has the input's type
  return rule


for _p in binary_primitives:
  abstract_eval_rules[_p] = _binary_abstract_eval(_p, _p in comparison_primitives)
for _p in unary_primitives:
  abstract_eval_rules[_p] = _unary_abstract_eval(_p, _p is not neg_p)


def _reduce_abstract_eval(prim):
  def rule(x, *, axes):
    if any(not 0 <= a < x.ndim for a in axes):
      raise ShapeError(f"{prim.name}: axes {axes} out of range for {x.str_short()}")
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return ShapedArray(shape, x.dtype, x.weak_type)
  return rule


abstract_eval_rules[reduce_sum_p] = _reduce_abstract_eval(reduce_sum_p)
abstract_eval_rules[reduce_max_p] = _reduce_abstract_eval(reduce_max_p)


def _reshape_abstract_eval(x, *, new_sizes):
  if math.prod(new_sizes) != math.prod(x.shape):
    raise ShapeError(f"reshape: can't reshape {x.str_short()} to {new_sizes}")
  return ShapedArray(new_sizes, x.dtype, x.weak_type)


abstract_eval_rules[reshape_p] = _reshape_abstract_eval


def _broadcast_abstract_eval(x, *, shape, axes):
  kept = tuple(d for i, d in enumerate(shape) if i not in axes)
  if kept != x.shape:
    raise ShapeError(f"broadcast: can't broadcast {x.str_short()} to {shape} "
                     f"by inserting axes {axes}")
  return ShapedArray(shape, x.dtype, x.weak_type)


abstract_eval_rules[broadcast_p] = _broadcast_abstract_eval


def _transpose_abstract_eval(x, *, permutation):
  if sorted(permutation) != list(range(x.ndim)):
    raise ShapeError(f"transpose: {permutation} is not a permutation of the axes of {x.str_short()}")
  return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.weak_type)


abstract_eval_rules[transpose_p] = _transpose_abstract_eval


def _convert_element_type_abstract_eval(x, *, new_dtype):
  return ShapedArray(x.shape, new_dtype, False)


abstract_eval_rules[convert_element_type_p] = _convert_element_type_abstract_eval


# --- Contractions: dot_general (Part 3) ------------------------------------------------------
# dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)),
# as in jax.lax.dot_general. The result's axes are: batch, lhs free, rhs free.

dot_general_p = Primitive("dot_general")


def _dot_free_axes(ndim, contracting, batch):
  return [i for i in range(ndim) if i not in contracting and i not in batch]


def _dot_general_impl(x, y, *, dimension_numbers):
  (lc, rc), (lb, rb) = dimension_numbers
  x, y = np.asarray(x), np.asarray(y)
  lf, rf = _dot_free_axes(x.ndim, lc, lb), _dot_free_axes(y.ndim, rc, rb)
  shape = lambda a, axes: [a.shape[i] for i in axes]
  # (batch, free, contract) @ (batch, contract, free), as one batched matmul.
  xt = np.transpose(x, (*lb, *lf, *lc)).reshape(
      math.prod(shape(x, lb)), math.prod(shape(x, lf)), math.prod(shape(x, lc)))
  yt = np.transpose(y, (*rb, *rc, *rf)).reshape(
      math.prod(shape(y, rb)), math.prod(shape(y, rc)), math.prod(shape(y, rf)))
  out = np.matmul(xt, yt)
  return out.reshape((*shape(x, lb), *shape(x, lf), *shape(y, rf)))


impl_rules[dot_general_p] = _dot_general_impl


def _canonical_dimension_numbers(dimension_numbers, x_ndim, y_ndim):
  (lc, rc), (lb, rb) = dimension_numbers
  fix = lambda axes, n: tuple(canonicalize_axis(int(a), n) for a in axes)
  return ((fix(lc, x_ndim), fix(rc, y_ndim)), (fix(lb, x_ndim), fix(rb, y_ndim)))


def dot_general(x, y, dimension_numbers):
  """Contract `x` and `y` over the given axes, batching over others."""
  dn = _canonical_dimension_numbers(dimension_numbers, np.ndim(x), np.ndim(y))
  return dot_general_p.bind(x, y, dimension_numbers=dn)


def _dot_general_abstract_eval(x, y, *, dimension_numbers):
  (lc, rc), (lb, rb) = dimension_numbers
  if len(lc) != len(rc) or len(lb) != len(rb):
    raise ShapeError(f"dot_general: dimension_numbers {dimension_numbers} pair up "
                     "different numbers of axes")
  for what, la, ra in (("contracting", lc, rc), ("batch", lb, rb)):
    ls, rs = [x.shape[i] for i in la], [y.shape[i] for i in ra]
    if ls != rs:
      raise ShapeError(f"dot_general: {what} axes have sizes {ls} in {x.str_short()} "
                       f"but {rs} in {y.str_short()}")
  dtype, weak = binary_dtype("dot_general", x, y)
  shape = ([x.shape[i] for i in lb] + [x.shape[i] for i in _dot_free_axes(x.ndim, lc, lb)]
           + [y.shape[i] for i in _dot_free_axes(y.ndim, rc, rb)])
  return ShapedArray(shape, dtype, weak)


abstract_eval_rules[dot_general_p] = _dot_general_abstract_eval
