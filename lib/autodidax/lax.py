"""The primitives, their evaluation (impl) rules, and one wrapper per primitive.

Wrappers follow the `bind` convention: array operands are positional, static
metadata (axes, shapes, dtypes) goes in keyword params, normalized here so that
every interpreter sees one canonical form (e.g. `axes` is a sorted tuple).

Binary operators take operands of equal shape, or one rank-0 operand that
stands for all elements (JAX prints these as `mul c 3.0`). General NumPy
broadcasting and dtype promotion belong to `autodidax.numpy`.
"""
from __future__ import annotations

import numpy as np

from .core import Primitive, impl_rules
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
sin_p = Primitive("sin")
cos_p = Primitive("cos")
exp_p = Primitive("exp")
log_p = Primitive("log")
tanh_p = Primitive("tanh")

binary_primitives = {
    add_p: np.add, sub_p: np.subtract, mul_p: np.multiply, div_p: np.divide,
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
impl_rules[reduce_sum_p] = lambda x, *, axes: np.sum(x, axes)
impl_rules[reduce_max_p] = lambda x, *, axes: np.max(x, axes)


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
  for axis in axes:
    x = np.expand_dims(x, axis)
  return np.broadcast_to(x, shape)


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
  if int(np.prod(new_sizes, dtype=int)) != int(np.prod(np.shape(x), dtype=int)):
    raise ShapeError(f"reshape: can't reshape {np.shape(x)} to {new_sizes}: "
                     "the number of elements differs")
  return reshape_p.bind(x, new_sizes=new_sizes)


def convert_element_type(x, new_dtype):
  return convert_element_type_p.bind(x, new_dtype=np.dtype(new_dtype))
