"""The primitives, their evaluation (impl) rules, and one wrapper per primitive.

Wrappers follow the `bind` convention: array operands are positional, static
metadata (axes, shapes, dtypes) goes in keyword params, normalized here so that
every interpreter sees one canonical form (e.g. `axes` is a sorted tuple).

Binary operators take operands of equal shape, or one rank-0 operand that
stands for all elements (JAX prints these as `mul c 3.0`). General NumPy
broadcasting and dtype promotion belong to `autodidax.numpy`.
"""
from __future__ import annotations

import builtins
import math
from typing import NamedTuple

import numpy as np

from . import dtypes
from . import sharding_rules as sr
from .core import (Primitive, ShapedArray, abstract_eval_rules, get_aval, impl_rules,
                   sharding_rules)
from .jaxpr import as_shaped
from . import named_sharding
from .util import canonicalize_axis


# --- Elementwise ------------------------------------------------------------------

def _binary_impl(prim, np_fn):
  def impl(x, y):
    if type(x) in NUMPY_TYPES and _plain_kind(prim, x.dtype) and (
        type(y) in NUMPY_TYPES and x.dtype == y.dtype
        or type(y) is float and x.dtype.kind == "f"):   # the common cases,
      _check_shapes(prim, x.shape, np.shape(y))          # checked quickly
      return np_fn(x, y)
    if type(x) is type(y) and type(x) in _PY_DTYPE and _plain_kind(
        prim, _PY_DTYPE[type(x)]):   # two Python ints or floats (quickly)
      return python_scalar(np_fn(x, y), x, y)
    _check_shapes(prim, np.shape(x), np.shape(y))
    tx, ty = OperandType.of(x), OperandType.of(y)   # reject what jit rejects
    _check_kinds(prim, tx, ty)
    if tx.dtype != ty.dtype:
      binary_dtype(prim.name, tx, ty)
    return python_scalar(np_fn(x, y), x, y)
  return impl


def _check_shapes(prim, sx, sy):
  if sx != sy and sx and sy:
    raise ShapeError(f"{prim.name}: shapes {sx} and {sy} are incompatible. lax "
                     "operations need equal shapes (or a scalar); use "
                     "autodidax.numpy for NumPy-style broadcasting.")


def _unary_impl(prim, np_fn):
  def impl(x):
    if type(x) in NUMPY_TYPES and _plain_kind(prim, x.dtype):   # (quickly)
      return np_fn(x)
    _check_kinds(prim, OperandType.of(x))
    return python_scalar(np_fn(x), x)
  return impl


_PY_DTYPE = {int: np.dtype(np.int64), float: np.dtype(np.float64)}
# NumPy's arrays and scalars (of the dtypes autodidax has): eager values.
NUMPY_TYPES = frozenset({np.ndarray, *(d.type for d in dtypes.SUPPORTED)})


def _plain_kind(prim, dtype) -> bool:
  """Whether `prim` takes arrays of `dtype` as they are (else the full
  checks run, and raise where they should)."""
  kinds = operand_kinds.get(prim)
  return dtype in dtypes.SUPPORTED and (kinds is None or dtype.kind in kinds)


def python_scalar(out, *operands):
  """`out` as a Python scalar where it is weakly typed, that is where the
  operands are Python scalars, not only bools (a bool is never weak): so
  eagerly, a weakly typed value is a Python scalar, as JAX's `lax.sin(2.)`
  is weakly typed."""
  weak = False
  for x in operands:
    if type(x) is int or type(x) is float:
      weak = True
    elif type(x) is not bool:
      return out
  if weak and isinstance(out, (np.ndarray, np.generic)) and out.ndim == 0:
    return out.item()
  return out


def typed_impl(prim, impl):
  """`impl`, after `prim`'s typing rule has checked the operands, so that an
  eager call rejects what jit rejects (as _binary_impl does, more cheaply)."""
  def checked(*args, **params):
    abstract_eval_rules[prim](*map(get_aval, args), **params)
    return impl(*args, **params)
  return checked


class OperandType(NamedTuple):
  """What the dtype checks read of an operand (an aval has both fields too):
  eager impl rules check concrete operands with it, without building avals."""
  dtype: np.dtype
  weak_type: bool

  @classmethod
  def of(cls, x):
    if type(x) is np.ndarray:   # the common case, made quick
      if x.dtype not in dtypes.SUPPORTED:
        raise dtypes.unsupported(x.dtype)
      return cls(x.dtype, False)
    return cls(*dtypes.dtype_and_weak(x))


class ShapeError(TypeError):
  pass


def supported(x):
  """`x`, checked to be of a dtype autodidax has: a NumPy array may hold
  one it hasn't (bfloat16, from ml_dtypes)."""
  if type(x) is np.ndarray and x.dtype not in dtypes.SUPPORTED:
    raise dtypes.unsupported(x.dtype)
  return x


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

eq_p = Primitive("eq")
ne_p = Primitive("ne")
min_p = Primitive("min")
pow_p = Primitive("pow")
rem_p = Primitive("rem")
and_p = Primitive("and")
or_p = Primitive("or")
xor_p = Primitive("xor")
not_p = Primitive("not")
abs_p = Primitive("abs")
sign_p = Primitive("sign")
sqrt_p = Primitive("sqrt")
rsqrt_p = Primitive("rsqrt")
floor_p = Primitive("floor")
stop_gradient_p = Primitive("stop_gradient")


def _div(x, y):
  """Division as lax.div: integers divide with truncation toward zero (C style,
  like StableHLO's divide), keeping their dtype; NumPy's `/` would give floats.
  As in XLA, an integer divided by 0 is -1 (all bits set), and MIN / -1 is
  MIN."""
  dtype = np.result_type(x, y)
  if dtype.kind not in "iu":
    return np.divide(x, y)
  with np.errstate(all="ignore"):
    q = np.floor_divide(x, y)   # rounds down: add one where that went past zero
    q = q + ((np.remainder(x, y) != 0) & ((np.less(x, 0)) != (np.less(y, 0))))
    q = np.where(np.equal(y, -1), np.negative(x), q) if dtype.kind == "i" else q
  return np.where(np.equal(y, 0), np.array(-1).astype(dtype), q).astype(dtype)


def _rem(x, y):
  """The remainder of lax.div: it has the sign of `x` (C's fmod); as in XLA,
  an integer's remainder by 0 is itself."""
  if np.result_type(x, y).kind not in "iu":
    return np.fmod(x, y)
  with np.errstate(all="ignore"):
    return np.where(np.equal(y, 0), x,
                    np.fmod(x, y)).astype(np.result_type(x, y))


def _max(x, y):
  """np.maximum, with XLA's signed zeros: max(-0., 0.) is 0. either way."""
  out = np.maximum(x, y)
  if out.dtype.kind == "f" and not out.all():   # (a zero: look closer)
    zeros = np.equal(x, 0) & np.equal(y, 0)
    if zeros.any():
      out = np.where(zeros, np.add(x, y), out)   # -0 + 0 == 0, -0 + -0 == -0
  return out


def _min(x, y):
  """np.minimum; min(-0., 0.) is -0. either way."""
  out = np.minimum(x, y)
  if out.dtype.kind == "f" and not out.all():   # (a zero: look closer)
    zeros = np.equal(x, 0) & np.equal(y, 0)
    if zeros.any():
      out = np.where(zeros, np.negative(np.add(np.negative(x), np.negative(y))),
                     out)
  return out


def _sign(x):
  """np.sign, but the sign of -0. is -0., as in XLA."""
  out = np.sign(x)
  return np.where(np.equal(x, 0), x, out) if out.dtype.kind == "f" else out


binary_primitives = {
    add_p: np.add, sub_p: np.subtract, mul_p: np.multiply, div_p: _div,
    max_p: _max, min_p: _min, pow_p: np.power, rem_p: _rem,
    greater_p: np.greater, less_p: np.less, greater_equal_p: np.greater_equal,
    less_equal_p: np.less_equal, eq_p: np.equal, ne_p: np.not_equal,
    and_p: np.bitwise_and, or_p: np.bitwise_or, xor_p: np.bitwise_xor}
comparison_primitives = {greater_p, less_p, greater_equal_p, less_equal_p, eq_p, ne_p}
unary_primitives = {neg_p: np.negative, sin_p: np.sin, cos_p: np.cos,
                    exp_p: np.exp, log_p: np.log, tanh_p: np.tanh,
                    not_p: np.invert, abs_p: np.abs, sign_p: _sign,
                    sqrt_p: np.sqrt, rsqrt_p: lambda x: 1 / np.sqrt(x),
                    floor_p: np.floor, stop_gradient_p: lambda x: x}
# The dtype kinds each primitive accepts (b: bool, i/u: ints, f/c: floats),
# checked by abstract evaluation; the others take any dtype.
_NUMBERS, _FLOATS, _INTEGRAL, _SIGNED = "iufc", "fc", "biu", "ifc"
operand_kinds = {
    add_p: _NUMBERS, sub_p: _NUMBERS, mul_p: _NUMBERS, div_p: _NUMBERS,
    rem_p: _NUMBERS, pow_p: _FLOATS, neg_p: _NUMBERS, abs_p: _SIGNED,
    sign_p: _NUMBERS, and_p: _INTEGRAL, or_p: _INTEGRAL, xor_p: _INTEGRAL,
    not_p: _INTEGRAL, **{p: _FLOATS for p in (sin_p, cos_p, exp_p, log_p,
                                             tanh_p, sqrt_p, rsqrt_p, floor_p)}}

for _p, _fn in binary_primitives.items():
  impl_rules[_p] = _binary_impl(_p, _fn)
for _p, _fn in unary_primitives.items():
  impl_rules[_p] = _unary_impl(_p, _fn)


_float_pow_impl = impl_rules[pow_p]


def _pow_impl(x, y):
  tx, ty = OperandType.of(x), OperandType.of(y)
  if not integer_exponent(tx, ty):
    return _float_pow_impl(x, y)
  _check_shapes(pow_p, np.shape(x), np.shape(y))
  return python_scalar(np.power(x, np.asarray(y).astype(tx.dtype)), x, y)


def integer_exponent(x, y) -> bool:
  """Whether pow(x, y) raises floats to integer powers: JAX's lax.pow takes
  an integer `y` as it is, and the result has x's dtype."""
  return x.dtype.kind in "fc" and y.dtype.kind in "iu"


impl_rules[pow_p] = _pow_impl


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
def eq(x, y): return eq_p.bind(x, y)
def ne(x, y): return ne_p.bind(x, y)
def min(x, y): return min_p.bind(x, y)  # noqa: A001
def pow(x, y): return pow_p.bind(x, y)  # noqa: A001
def rem(x, y): return rem_p.bind(x, y)
def bitwise_and(x, y): return and_p.bind(x, y)
def bitwise_or(x, y): return or_p.bind(x, y)
def bitwise_xor(x, y): return xor_p.bind(x, y)
def bitwise_not(x): return not_p.bind(x)
def abs(x): return abs_p.bind(x)  # noqa: A001
def sign(x): return sign_p.bind(x)
def sqrt(x): return sqrt_p.bind(x)
def rsqrt(x): return rsqrt_p.bind(x)
def floor(x): return floor_p.bind(x)


def stop_gradient(x):
  """`x`, but derivatives treat it as a constant."""
  return stop_gradient_p.bind(x)


integer_pow_p = Primitive("integer_pow")
round_p = Primitive("round")


def _integer_pow_impl(x, *, y):
  """By squaring and multiplying, as XLA computes it (so rounding agrees)."""
  _check_integer_pow(OperandType.of(x), y)
  base = np.asarray(x)
  acc, n = np.ones_like(base), abs(y)
  with np.errstate(over="ignore"):
    while n:
      if n & 1:
        acc = acc * base
      n >>= 1
      if n:
        base = base * base
  out = np.divide(np.ones_like(acc), acc) if y < 0 else acc
  return python_scalar(out, x)


impl_rules[integer_pow_p] = _integer_pow_impl


def integer_pow(x, y: int):
  """`x ** y` for a Python int `y`, by repeated multiplication."""
  return integer_pow_p.bind(x, y=int(y))


ROUND_AWAY_FROM_ZERO, ROUND_TO_NEAREST_EVEN = 0, 1


def _round_impl(x, *, rounding_method):
  if rounding_method == ROUND_TO_NEAREST_EVEN:
    return python_scalar(np.round(x), x)
  away = np.asarray(np.copysign(np.floor(np.abs(x) + 0.5), x),
                    np.result_type(x))   # (copysign: -0. stays -0.)
  return python_scalar(away, x)


impl_rules[round_p] = typed_impl(round_p, _round_impl)


def round(x, rounding_method=ROUND_AWAY_FROM_ZERO):  # noqa: A001
  return round_p.bind(x, rounding_method=int(rounding_method))


# --- Reductions -----------------------------------------------------------------------

reduce_sum_p = Primitive("reduce_sum")
reduce_max_p = Primitive("reduce_max")
reduce_min_p = Primitive("reduce_min")
reduce_prod_p = Primitive("reduce_prod")
# np.asarray: np.sum would call an array-like's own .sum(axis, out=...) method;
# dtype: NumPy sums small ints as int64, lax keeps the operand's dtype.
def _sum_impl(x, *, axes):
  if type(x) not in NUMPY_TYPES or not _plain_kind(reduce_sum_p, x.dtype):
    _check_kinds(reduce_sum_p, OperandType.of(x))
  x = np.asarray(x)
  if all(x.shape[a] == 1 for a in axes):   # one element: nothing to add up
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])
  # From 0, as XLA's sum (so -0. + -0. is 0.)
  return np.add.reduce(x, axes, dtype=x.dtype, initial=0)


def _prod_impl(x, *, axes):
  _check_kinds(reduce_prod_p, OperandType.of(x))
  return np.prod(np.asarray(x), axes, dtype=np.result_type(x))


impl_rules[reduce_sum_p], impl_rules[reduce_prod_p] = _sum_impl, _prod_impl


def lowest(dtype):
  """The identity of max: -inf, or the smallest integer (False for bool)."""
  dtype = np.dtype(dtype)
  if dtype.kind == "b":
    return False
  return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def highest(dtype):
  """The identity of min."""
  dtype = np.dtype(dtype)
  if dtype.kind == "b":
    return True
  return np.iinfo(dtype).max if dtype.kind in "iu" else np.inf


def _extremum_impl(np_fn, identity, zero_sign):
  def impl(x, *, axes):
    x = supported(np.asarray(x))
    # `initial`: an empty axis reduces to the identity, as in XLA.
    out = np_fn.reduce(x, axes, initial=identity(x.dtype))
    if x.dtype.kind == "f" and not out.all():   # (a zero: look closer)
      # Signed zeros as XLA's: the max of -0. and 0. is 0., the min -0.
      signed = np.any(np.equal(x, 0) & (np.signbit(x) == zero_sign), axes)
      out = np.where(np.equal(out, 0) & signed, -0. if zero_sign else 0.,
                     np.where(np.equal(out, 0), 0. if zero_sign else -0., out))
      out = out.astype(x.dtype)
    return out
  return impl


impl_rules[reduce_max_p] = _extremum_impl(np.maximum, lowest, False)
impl_rules[reduce_min_p] = _extremum_impl(np.minimum, highest, True)


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


def reduce_min(x, axis=None):
  return reduce_min_p.bind(x, axes=_canonical_axes(axis, np.ndim(x)))


def reduce_prod(x, axis=None):
  return reduce_prod_p.bind(x, axes=_canonical_axes(axis, np.ndim(x)))


argmax_p = Primitive("argmax")
argmin_p = Primitive("argmin")
cumsum_p = Primitive("cumsum")
impl_rules[argmax_p] = lambda x, *, axes, index_dtype: np.argmax(
    supported(np.asarray(x)), axes[0]).astype(index_dtype)
impl_rules[argmin_p] = lambda x, *, axes, index_dtype: np.argmin(
    supported(np.asarray(x)), axes[0]).astype(index_dtype)


def argmax(x, axis: int, index_dtype=np.int64):
  """The index of the first largest element (or first NaN) along `axis`."""
  axis = canonicalize_axis(axis, np.ndim(x))
  return argmax_p.bind(x, axes=(axis,), index_dtype=_index_dtype(
      index_dtype, x, axis))


def argmin(x, axis: int, index_dtype=np.int64):
  axis = canonicalize_axis(axis, np.ndim(x))
  return argmin_p.bind(x, axes=(axis,), index_dtype=_index_dtype(
      index_dtype, x, axis))


def _index_dtype(dtype, x, axis) -> np.dtype:
  if np.shape(x)[axis] == 0:
    raise ValueError("argmax and argmin need a non-empty axis to reduce, "
                     f"got shape {np.shape(x)} and axis {axis}")
  dtype = np.dtype(dtype)
  if dtype.kind not in "iu":
    raise TypeError(f"index_dtype must be an integer type, got {dtype.name}")
  return dtype


def _cumsum_impl(x, *, axis, reverse):
  x = np.asarray(x)
  if x.shape[axis] < 2:
    return x
  flip = (lambda v: np.flip(v, axis)) if reverse else (lambda v: v)
  # Each sum starts from 0, as XLA's window does (so -0. sums to 0.).
  return flip(np.cumsum(flip(x), axis, dtype=x.dtype) + x.dtype.type(0))


impl_rules[cumsum_p] = typed_impl(cumsum_p, _cumsum_impl)


def cumsum(x, axis: int = 0, reverse: bool = False):
  """Running sums along `axis` (from the end if `reverse`), in x's dtype."""
  return cumsum_p.bind(x, axis=canonicalize_axis(axis, np.ndim(x)), reverse=bool(reverse))


# --- Shape and type manipulation -------------------------------------------------------

broadcast_p = Primitive("broadcast")
transpose_p = Primitive("transpose")
reshape_p = Primitive("reshape")
convert_element_type_p = Primitive("convert_element_type")


def _broadcast_impl(x, *, shape, axes):
  # Size-1 axes where the new ones go (one reshape, cheaper than an
  # expand_dims per axis), then a read-only broadcast view, or for a small
  # result a copy (quicker than np.broadcast_to's own checks).
  x = supported(np.asarray(x))
  if axes != tuple(range(len(axes))):   # (new leading axes need no reshape)
    x = np.reshape(x, tuple(1 if i in axes else d for i, d in enumerate(shape)))
  if math.prod(shape) > 1024:
    return np.broadcast_to(x, shape)
  out = np.empty(shape, x.dtype)
  out[...] = x
  return out


impl_rules[broadcast_p] = _broadcast_impl
impl_rules[transpose_p] = lambda x, *, permutation: python_scalar(
    np.transpose(supported(np.asarray(x)), permutation), x)
impl_rules[reshape_p] = lambda x, *, new_sizes, out_sharding=None: python_scalar(
    np.reshape(supported(np.asarray(x)), new_sizes), x)


def _convert_element_type_impl(x, *, new_dtype, weak_type):
  out = convert_values(x, new_dtype)
  return out.item() if weak_type and out.ndim == 0 else out


impl_rules[convert_element_type_p] = _convert_element_type_impl


def convert_values(x, dtype) -> np.ndarray:
  """`x` as an array of `dtype`, converted as XLA converts: floats to
  integers saturate (NaN gives 0), other integers wrap around, and anything
  to bool tests for nonzero."""
  x, dtype = supported(np.asarray(x)), dtypes.check(dtype)
  if x.dtype.kind not in "fc" or dtype.kind not in "iu":
    return x.astype(dtype)
  x = x.real
  info = np.iinfo(dtype)
  if (np.abs(x) < -float(info.min)).all() if info.min else (
      (x > -1) & (x <= info.max)).all():
    return x.astype(dtype)   # (every value in range: no NaN to map, no clip)
  with np.errstate(invalid="ignore"):
    out = np.where(np.isnan(x), 0, x).astype(dtype)   # wrong where too big:
  return np.where(x >= info.max, info.max,
                  np.where(x <= info.min, info.min, out)).astype(dtype)


def broadcast(x, shape, axes=None):
  """Insert new axes at positions `axes` of the result, of sizes from `shape`.

  The remaining dimensions of `shape` must equal `x`'s, in order. Called as
  `broadcast(x, sizes)`, it is jax.lax.broadcast: new leading axes `sizes`.
  """
  if axes is None:
    sizes = tuple(shape)
    return broadcast(x, (*sizes, *np.shape(x)), range(len(sizes)))
  shape = tuple(int(d) for d in shape)
  axes = tuple(sorted(canonicalize_axis(int(a), len(shape)) for a in axes))
  kept = tuple(d for i, d in enumerate(shape) if i not in axes)
  if kept != np.shape(x):
    raise ShapeError(f"broadcast: can't broadcast shape {np.shape(x)} to "
                     f"{shape} by inserting axes {axes}: the other dimensions "
                     f"would be {kept}.")
  if not axes:   # nothing to insert: no equation (nor a no-op in a jaxpr)
    return supported(x)
  return broadcast_p.bind(x, shape=shape, axes=axes)


def broadcast_in_dim(x, shape, broadcast_dimensions):
  """jax.lax.broadcast_in_dim: axis i of `x` becomes axis
  `broadcast_dimensions[i]` of the result (sizes equal, or 1 to stretch)."""
  shape, dims = tuple(int(d) for d in shape), tuple(int(d) for d in broadcast_dimensions)
  xs = np.shape(x)
  if len(dims) != len(xs) or any(xs[i] not in (1, shape[d]) for i, d in enumerate(dims)):
    raise ShapeError(f"broadcast_in_dim: can't put {xs} at dimensions {dims} of {shape}")
  keep = [i for i, d in enumerate(dims) if xs[i] == shape[d]]   # not stretched
  if len(keep) < len(xs):
    x = reshape(x, [xs[i] for i in keep])
  kept = {dims[i] for i in keep}
  return broadcast(x, shape, [i for i in range(len(shape)) if i not in kept])


def transpose(x, permutation):
  permutation = tuple(int(p) for p in permutation)
  if sorted(permutation) != list(range(np.ndim(x))):
    raise ValueError(f"transpose: {permutation} is not a permutation of the "
                     f"{np.ndim(x)} axes of an array of shape {np.shape(x)}")
  if permutation == tuple(range(len(permutation))):   # (no no-op equation)
    return supported(x)
  return transpose_p.bind(x, permutation=permutation)


def reshape(x, new_sizes, out_sharding=None):
  """`out_sharding` (on Explicit axes): the result's sharding, where the
  operand's layout can't be carried over (the chapter Many devices)."""
  new_sizes = tuple(int(d) for d in new_sizes)
  if math.prod(new_sizes) != math.prod(np.shape(x)):   # math.prod: fast on ints
    raise ShapeError(f"reshape: can't reshape {np.shape(x)} to {new_sizes}: "
                     "the number of elements differs")
  if out_sharding is not None:
    return reshape_p.bind(x, new_sizes=new_sizes,
                          out_sharding=named_sharding.canonicalize_sharding(out_sharding, "reshape"))
  if new_sizes == np.shape(x):   # (no no-op equation)
    return supported(x)
  return reshape_p.bind(x, new_sizes=new_sizes)


def convert_element_type(x, new_dtype, weak_type: bool = False):
  return convert_element_type_p.bind(x, new_dtype=dtypes.check(new_dtype),
                                     weak_type=bool(weak_type))


def squeeze(x, dimensions):
  dims = {canonicalize_axis(int(d), np.ndim(x)) for d in dimensions}
  if any(np.shape(x)[d] != 1 for d in dims):
    raise ShapeError(f"squeeze: dimensions {tuple(dimensions)} of shape {np.shape(x)} "
                     "must all have size 1")
  return reshape(x, [d for i, d in enumerate(np.shape(x)) if i not in dims])


def expand_dims(x, dimensions):
  shape = list(np.shape(x))
  for d in sorted(canonicalize_axis(int(d), len(shape) + len(dimensions))
                  for d in dimensions):
    shape.insert(d, 1)
  return reshape(x, shape)


# --- Concatenation, padding and slicing ------------------------------------------------

concatenate_p = Primitive("concatenate")
pad_p = Primitive("pad")
slice_p = Primitive("slice")
rev_p = Primitive("rev")
dynamic_slice_p = Primitive("dynamic_slice")
dynamic_update_slice_p = Primitive("dynamic_update_slice")

impl_rules[concatenate_p] = typed_impl(concatenate_p, lambda *xs, dimension: np.concatenate(
    [np.asarray(x) for x in xs], dimension))


def concatenate(operands, dimension: int):
  if not operands:
    raise ValueError("concatenate needs at least one operand")
  ranks = [np.ndim(x) for x in operands]
  if len(set(ranks)) > 1:
    raise TypeError("concatenate: the operands must have one rank, got "
                    f"shapes {[np.shape(x) for x in operands]}")
  if ranks[0] == 0:
    raise TypeError("concatenate: 0-d operands have no axis to join along")
  return concatenate_p.bind(
      *operands, dimension=canonicalize_axis(dimension, ranks[0]))


def _pad_impl(x, padding_value, *, padding_config):
  """Each axis gets (low, high, interior) elements of `padding_value`:
  before, after, and between every two elements. Negative low/high cut."""
  x = np.asarray(x)
  for axis, (lo, hi, mid) in enumerate(padding_config):
    n = x.shape[axis]
    spread = n + builtins.max(n - 1, 0) * mid   # the elements with their gaps
    shape = list(x.shape)
    shape[axis] = builtins.max(lo, 0) + spread + builtins.max(hi, 0)
    out = np.full(shape, padding_value, x.dtype)
    where = [builtins.slice(None)] * x.ndim
    where[axis] = builtins.slice(builtins.max(lo, 0), builtins.max(lo, 0) + spread, mid + 1)
    out[tuple(where)] = x
    where[axis] = builtins.slice(-builtins.min(lo, 0), shape[axis] + builtins.min(hi, 0))
    x = out[tuple(where)]
  return x


impl_rules[pad_p] = typed_impl(pad_p, lambda x, v, **params: python_scalar(
    _pad_impl(x, v, **params), x, v))


def pad(x, padding_value, padding_config):
  if np.ndim(padding_value):
    raise ValueError(f"pad: the padding value must be a scalar, got shape "
                     f"{np.shape(padding_value)}")
  config = tuple((int(lo), int(hi), int(mid)) for lo, hi, mid in padding_config)
  if len(config) != np.ndim(x) or any(mid < 0 for _, _, mid in config):
    raise ValueError(f"pad: padding_config {padding_config} needs one "
                     f"(low, high, interior>=0) per axis of {np.shape(x)}")
  return pad_p.bind(x, padding_value, padding_config=config)


impl_rules[slice_p] = lambda x, *, start_indices, limit_indices, strides: (
    supported(np.asarray(x))[tuple(builtins.slice(a, b, s) for a, b, s in
                                   zip(start_indices, limit_indices, strides))])


def slice(x, start_indices, limit_indices, strides=None):  # noqa: A001
  """x[start:limit:stride] on every axis, with static (Python int) bounds."""
  shape = np.shape(x)
  start, limit = tuple(map(int, start_indices)), tuple(map(int, limit_indices))
  strides = (1,) * len(shape) if strides is None else tuple(map(int, strides))
  if not (len(start) == len(limit) == len(strides) == len(shape)) or any(
      not 0 <= a <= b <= d or s < 1 for a, b, s, d in zip(start, limit, strides, shape)):
    raise ShapeError(f"slice: start {start}, limit {limit}, strides {strides} don't "
                     f"fit an array of shape {shape} (0 <= start <= limit <= size, "
                     "strides >= 1)")
  return slice_p.bind(x, start_indices=start, limit_indices=limit, strides=strides)


impl_rules[rev_p] = lambda x, *, dimensions: np.flip(
    supported(np.asarray(x)), dimensions)


def rev(x, dimensions):
  """Reverse the order of the elements along each axis in `dimensions`."""
  dims = tuple(sorted(canonicalize_axis(int(d), np.ndim(x)) for d in dimensions))
  if len(set(dims)) < len(dims):
    raise ValueError(f"rev: dimensions {tuple(dimensions)} name an axis twice")
  return rev_p.bind(x, dimensions=dims)


def _clamped_starts(shape, starts, sizes):
  """XLA clamps start indices so the slice stays inside the array."""
  return tuple(int(np.clip(int(np.asarray(i)), 0, d - n)) for i, d, n in zip(starts, shape, sizes))


def _dynamic_slice_impl(x, *starts, slice_sizes):
  starts = _clamped_starts(np.shape(x), starts, slice_sizes)
  return np.asarray(x)[tuple(builtins.slice(i, i + n) for i, n in zip(starts, slice_sizes))]


def _dynamic_update_slice_impl(x, update, *starts):
  starts = _clamped_starts(np.shape(x), starts, np.shape(update))
  out = np.array(x, copy=True)
  out[tuple(builtins.slice(i, i + n) for i, n in zip(starts, np.shape(update)))] = update
  return out


impl_rules[dynamic_slice_p] = typed_impl(dynamic_slice_p, _dynamic_slice_impl)
impl_rules[dynamic_update_slice_p] = typed_impl(dynamic_update_slice_p,
                                                    _dynamic_update_slice_impl)


def _check_starts(name, x, starts):
  if len(starts) != np.ndim(x):
    raise ValueError(f"{name}: got {len(starts)} start indices for an array of "
                     f"rank {np.ndim(x)}; give one per axis")


def dynamic_slice(x, start_indices, slice_sizes):
  """A slice of static size `slice_sizes` at start indices that may be traced
  (negative ones count from the end; then clamped into range, as XLA does)."""
  _check_starts("dynamic_slice", x, start_indices)
  starts = [_index(i, d) for i, d in zip(start_indices, np.shape(x))]
  return dynamic_slice_p.bind(x, *starts, slice_sizes=tuple(map(int, slice_sizes)))


def dynamic_update_slice(x, update, start_indices):
  """`x` with `update` written at (possibly traced) start indices."""
  _check_starts("dynamic_update_slice", x, start_indices)
  starts = [_index(i, d) for i, d in zip(start_indices, np.shape(x))]
  return dynamic_update_slice_p.bind(x, update, *starts)


def _index(i, size: int):
  """An index into an axis of `size` as an int64 scalar; a negative one
  counts from the end (for a traced one: i + size * (i < 0))."""
  if type(i) is int or isinstance(i, np.integer):
    return np.int64(i + size if i < 0 else i)
  aval = getattr(i, "aval", None)
  dtype = aval.dtype if aval is not None else np.result_type(i)
  if np.shape(i) != () or dtype.kind not in "iu":
    raise TypeError(f"indices must be integer scalars, got {i!r:.60}")
  i = i if dtype == np.int64 else convert_element_type(i, np.int64)
  if dtype.kind == "u":
    return i
  return add(i, mul(convert_element_type(less(i, np.int64(0)), np.int64), np.int64(size)))


# --- Abstract evaluation (typing) rules: Part 2 --------------------------------------------
# Each maps input avals (ShapedArray or ConcreteArray alike) to the output aval,
# or raises a ShapeError/TypeError that names the primitive and the problem.

def binary_dtype(name, x, y):
  """The result dtype, with JAX's weak typing: a weakly-typed operand (from a
  Python scalar) adopts the other operand's dtype, if the lattice allows."""
  if x.dtype == y.dtype:
    return x.dtype, x.weak_type and y.weak_type
  dtype, weak = dtypes.join_types((x.dtype, x.weak_type),
                                  (y.dtype, y.weak_type))
  if any(a.dtype != dtype and not a.weak_type for a in (x, y)):
    raise TypeError(f"{name}: dtypes {x.dtype} and {y.dtype} differ. lax "
                    "operations need equal dtypes (a Python scalar may take "
                    "an array's dtype, not change it): convert one with "
                    "lax.convert_element_type (autodidax.numpy promotes for "
                    "you).")
  return dtype, weak


def _check_kinds(prim, *avals):
  kinds = operand_kinds.get(prim)
  if not kinds:
    return
  for a in avals:   # (the common case: every operand is of a kind it takes)
    if a.dtype.kind not in kinds:
      break
  else:
    return
  # A weak Python scalar takes a strong operand's dtype; two weak ones join.
  dts = [a.dtype for a in avals if not a.weak_type] or [
      binary_dtype(prim.name, *avals)[0] if len(avals) > 1 else avals[0].dtype]
  for dtype in dts:
    if dtype.kind not in kinds:
      accepted = {_NUMBERS: "numbers (ints or floats)", _FLOATS: "floating-point",
                  _INTEGRAL: "bool or integer",
                  _SIGNED: "signed integer or floating-point"}[kinds]
      raise TypeError(f"{prim.name} does not accept dtype {dtype.name}: it "
                      f"takes {accepted} operands. Convert with "
                      "lax.convert_element_type.")


def _binary_abstract_eval(prim, comparison: bool):
  def rule(x, y):
    if x.shape != y.shape and x.shape and y.shape:
      raise ShapeError(f"{prim.name}: shapes {x.shape} and {y.shape} are "
                       "incompatible. lax operations need equal shapes (or a "
                       "scalar); use autodidax.numpy for broadcasting.")
    _check_kinds(prim, x, y)
    dtype, weak = binary_dtype(prim.name, x, y)
    if comparison:   # weak when both operands are, as in JAX
      dtype = np.dtype(np.bool_)
    return ShapedArray(x.shape or y.shape, dtype, weak)
  return rule


def _unary_abstract_eval(prim):
  def rule(x, **params):
    _check_kinds(prim, x)
    return as_shaped(x)   # the output has the input's type
  return rule


for _p in binary_primitives:
  abstract_eval_rules[_p] = _binary_abstract_eval(_p, _p in comparison_primitives)


def _pow_abstract_eval(x, y):
  if not integer_exponent(x, y):
    return _binary_abstract_eval(pow_p, False)(x, y)
  _check_shapes(pow_p, x.shape, y.shape)
  return ShapedArray(x.shape or y.shape, x.dtype, x.weak_type and y.weak_type)


abstract_eval_rules[pow_p] = _pow_abstract_eval
for _p in (*unary_primitives, integer_pow_p, round_p):
  abstract_eval_rules[_p] = _unary_abstract_eval(_p)
operand_kinds.update({integer_pow_p: _NUMBERS, round_p: _FLOATS})


def _reduce_abstract_eval(prim, index_dtype=False):
  def rule(x, *, axes, **params):
    _check_kinds(prim, x)
    if any(not 0 <= a < x.ndim for a in axes):
      raise ShapeError(f"{prim.name}: axes {axes} out of range for {x.str_short()}")
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if index_dtype:
      if x.shape[axes[0]] == 0:
        raise ValueError(f"{prim.name}: an empty axis has no index to return")
      return ShapedArray(shape, params["index_dtype"])
    return ShapedArray(shape, x.dtype, x.weak_type)
  return rule


for _p in (reduce_sum_p, reduce_max_p, reduce_min_p, reduce_prod_p):
  abstract_eval_rules[_p] = _reduce_abstract_eval(_p)
operand_kinds.update({reduce_sum_p: _NUMBERS, reduce_prod_p: _NUMBERS})
for _p in (argmax_p, argmin_p):
  abstract_eval_rules[_p] = _reduce_abstract_eval(_p, index_dtype=True)


def _check_integer_pow(x, y):
  _check_kinds(integer_pow_p, x)
  if y < 0 and x.dtype.kind in "iu":
    raise TypeError("integer_pow: integers to negative powers are not integers; "
                    "convert the base to a float first")


def _integer_pow_abstract_eval(x, *, y):
  _check_integer_pow(x, y)
  return as_shaped(x)


abstract_eval_rules[integer_pow_p] = _integer_pow_abstract_eval


def _cumsum_abstract_eval(x, *, axis, reverse):
  if x.dtype.kind == "b":
    raise TypeError("cumsum does not accept dtype bool; convert to an integer first")
  return as_shaped(x)


abstract_eval_rules[cumsum_p] = _cumsum_abstract_eval


def _reshape_abstract_eval(x, *, new_sizes, out_sharding=None):
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


def _convert_element_type_abstract_eval(x, *, new_dtype, weak_type):
  return ShapedArray(x.shape, new_dtype, weak_type)


abstract_eval_rules[convert_element_type_p] = _convert_element_type_abstract_eval


def _concatenate_abstract_eval(*xs, dimension):
  first = xs[0]
  for x in xs[1:]:
    if (x.dtype != first.dtype or x.ndim != first.ndim or any(
        a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != dimension)):
      raise TypeError(f"concatenate: operands {', '.join(a.str_short() for a in xs)} "
                      f"must have one dtype and equal sizes except on axis {dimension}")
  shape = list(first.shape)
  shape[dimension] = sum(x.shape[dimension] for x in xs)
  return ShapedArray(shape, first.dtype, all(x.weak_type for x in xs))


abstract_eval_rules[concatenate_p] = _concatenate_abstract_eval


def _pad_abstract_eval(x, padding_value, *, padding_config):
  if padding_value.shape != ():
    raise ValueError(f"pad: the padding value must be a scalar, got "
                     f"{padding_value.str_short()}")
  if padding_value.dtype != x.dtype and (   # (a Python scalar may adopt it)
      binary_dtype("pad", x, padding_value)[0] != x.dtype):
    raise TypeError(f"pad: the padding value must be a scalar of {x.dtype.name}, got "
                    f"{padding_value.str_short()}")
  shape = [lo + hi + d + builtins.max(d - 1, 0) * mid
           for d, (lo, hi, mid) in zip(x.shape, padding_config)]
  if any(d < 0 for d in shape):
    raise ShapeError(f"pad: {padding_config} cuts more than {x.str_short()} has")
  return ShapedArray(shape, x.dtype, x.weak_type)


abstract_eval_rules[pad_p] = _pad_abstract_eval


def _slice_abstract_eval(x, *, start_indices, limit_indices, strides):
  shape = [-(-(b - a) // s) for a, b, s in zip(start_indices, limit_indices, strides)]
  return ShapedArray(shape, x.dtype, x.weak_type)


abstract_eval_rules[slice_p] = _slice_abstract_eval


def _rev_abstract_eval(x, *, dimensions):
  if any(not 0 <= d < x.ndim for d in dimensions):
    raise ShapeError(f"rev: dimensions {dimensions} out of range for {x.str_short()}")
  return as_shaped(x)


abstract_eval_rules[rev_p] = _rev_abstract_eval


def _check_index_avals(name, x, starts):
  if len(starts) != x.ndim or any(i.shape != () or i.dtype.kind not in "iu" for i in starts):
    raise TypeError(f"{name}: needs {x.ndim} integer scalar start indices, got "
                    f"{[i.str_short() for i in starts]}")


def _dynamic_slice_abstract_eval(x, *starts, slice_sizes):
  _check_index_avals("dynamic_slice", x, starts)
  if len(slice_sizes) != x.ndim or any(not 0 <= n <= d for n, d in zip(slice_sizes, x.shape)):
    raise ShapeError(f"dynamic_slice: slice_sizes {slice_sizes} don't fit {x.str_short()}")
  return ShapedArray(slice_sizes, x.dtype, x.weak_type)


abstract_eval_rules[dynamic_slice_p] = _dynamic_slice_abstract_eval


def _dynamic_update_slice_abstract_eval(x, update, *starts):
  _check_index_avals("dynamic_update_slice", x, starts)
  if update.dtype != x.dtype or update.ndim != x.ndim or any(
      n > d for n, d in zip(update.shape, x.shape)):
    raise TypeError(f"dynamic_update_slice: can't write {update.str_short()} into "
                    f"{x.str_short()}")
  return as_shaped(x)


abstract_eval_rules[dynamic_update_slice_p] = _dynamic_update_slice_abstract_eval


# --- Contractions: dot_general (Part 3) ------------------------------------------------------
# dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)),
# as in jax.lax.dot_general. The result's axes are: batch, lhs free, rhs free.

dot_general_p = Primitive("dot_general")


def _dot_free_axes(ndim, contracting, batch):
  return [i for i in range(ndim) if i not in contracting and i not in batch]


def _dot_general_impl(x, y, *, dimension_numbers, out_sharding=None):
  (lc, rc), (lb, rb) = dimension_numbers
  dtype, _ = dot_dtype(OperandType.of(x), OperandType.of(y))
  x, y = np.asarray(x, dtype), np.asarray(y, dtype)
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

  def fix(axes, n):
    if any(not -n <= int(a) < n for a in axes):
      raise TypeError(f"dot_general: dimension_numbers {dimension_numbers} "
                      f"name axes that operands of ranks {x_ndim} and "
                      f"{y_ndim} don't have")
    return tuple(canonicalize_axis(int(a), n) for a in axes)
  return ((fix(lc, x_ndim), fix(rc, y_ndim)), (fix(lb, x_ndim), fix(rb, y_ndim)))


def dot_general(x, y, dimension_numbers, out_sharding=None):
  """Contract `x` and `y` over the given axes, batching over others.
  `out_sharding` (on Explicit axes): the result's sharding, which a
  contraction over dimensions both operands split needs."""
  dn = _canonical_dimension_numbers(dimension_numbers, np.ndim(x), np.ndim(y))
  if out_sharding is not None:
    return dot_general_p.bind(x, y, dimension_numbers=dn,
                              out_sharding=named_sharding.canonicalize_sharding(out_sharding, "dot_general"))
  return dot_general_p.bind(x, y, dimension_numbers=dn)


def _dot_general_abstract_eval(x, y, *, dimension_numbers, out_sharding=None):
  (lc, rc), (lb, rb) = dimension_numbers
  if len(lc) != len(rc) or len(lb) != len(rb):
    raise ShapeError(f"dot_general: dimension_numbers {dimension_numbers} pair up "
                     "different numbers of axes")
  for what, la, ra in (("contracting", lc, rc), ("batch", lb, rb)):
    ls, rs = [x.shape[i] for i in la], [y.shape[i] for i in ra]
    if ls != rs:
      raise ShapeError(f"dot_general: {what} axes have sizes {ls} in {x.str_short()} "
                       f"but {rs} in {y.str_short()}")
  dtype, weak = dot_dtype(x, y)
  shape = ([x.shape[i] for i in lb] + [x.shape[i] for i in _dot_free_axes(x.ndim, lc, lb)]
           + [y.shape[i] for i in _dot_free_axes(y.ndim, rc, rb)])
  return ShapedArray(shape, dtype, weak)


abstract_eval_rules[dot_general_p] = _dot_general_abstract_eval


def dot_dtype(x, y):
  """dot_general's result dtype, as XLA (and so JAX) picks it: the more
  precise operand dtype (complex over real, then more exponent bits, mantissa
  bits, bits, and signed over unsigned). A weak operand adopts the other's."""
  if x.dtype == y.dtype or x.weak_type or y.weak_type:
    return binary_dtype("dot_general", x, y)
  # (no two different dtypes tie on every property)
  return (x.dtype if _precision(x.dtype) > _precision(y.dtype) else y.dtype), False


def _precision(dtype):
  real = np.finfo(dtype).dtype if dtype.kind == "c" else dtype
  floating = real.kind == "f"
  return (dtype.kind == "c", np.finfo(real).maxexp if floating else -1,
          np.finfo(real).nmant if floating else -1,
          1 if real.kind == "b" else real.itemsize * 8, real.kind != "u")


# --- select_n and clamp (control flow uses them; so do ad and numpy) ----------------------------

select_n_p = Primitive("select_n")
clamp_p = Primitive("clamp")


def select_n(which, *cases):
  """`cases[which]`, elementwise. `which` is bool (two cases) or int32, a
  scalar or of the cases' shape. As jax.lax.select_n."""
  if not cases:
    raise ValueError("select_n needs at least one case")
  return select_n_p.bind(which, *cases)


def _select_n_impl(which, *cases):
  which = np.asarray(which)
  if which.dtype == np.bool_:
    return np.where(which, cases[1], cases[0]) if len(cases) == 2 else np.asarray(cases[0])
  which = np.clip(which, 0, len(cases) - 1)
  return np.choose(which, [np.asarray(c) for c in cases])


def _select_n_abstract_eval(which, *cases):
  c0 = cases[0]
  for c in cases[1:]:
    if c.shape != c0.shape or c.dtype != c0.dtype:
      raise TypeError(f"select_n: cases must have equal types, got {c0.str_short()} "
                      f"and {c.str_short()}")
  if which.dtype != np.bool_ and which.dtype.kind not in "iu":
    raise TypeError(f"select_n: the selector must be bool or an integer, got {which.str_short()}")
  if which.dtype == np.bool_ and len(cases) > 2:
    raise TypeError("select_n: a bool selector picks between at most two cases")
  if which.shape and which.shape != c0.shape:
    raise TypeError(f"select_n: the selector {which.str_short()} must be a scalar or "
                    f"have the cases' shape {c0.str_short()}")
  return ShapedArray(c0.shape, c0.dtype, all(c.weak_type for c in cases))


_typed_select_n_impl = typed_impl(select_n_p, _select_n_impl)


def _select_n_eager(which, *cases):
  """The impl, with a fast path for the common eager case (a bool mask and
  two NumPy arrays of one type, which need no type check)."""
  plain = lambda c: type(c) in NUMPY_TYPES
  if (len(cases) == 2 and type(which) is np.ndarray and which.dtype == np.bool_
      and plain(cases[0]) and plain(cases[1])
      and cases[0].dtype == cases[1].dtype and cases[0].shape == cases[1].shape
      and which.shape in ((), cases[0].shape)
      and cases[0].dtype in dtypes.SUPPORTED):
    return np.where(which, cases[1], cases[0])
  return _typed_select_n_impl(which, *cases)


impl_rules[select_n_p] = _select_n_eager
abstract_eval_rules[select_n_p] = _select_n_abstract_eval


def clamp(lo, x, hi):
  """`min(max(x, lo), hi)`, with scalar bounds. As jax.lax.clamp."""
  return clamp_p.bind(lo, x, hi)


impl_rules[clamp_p] = typed_impl(
    clamp_p, lambda lo, x, hi: python_scalar(
        np.asarray(np.clip(x, lo, hi), np.result_type(x)), lo, x, hi))


def _clamp_abstract_eval(lo, x, hi):
  for b in (lo, hi):
    if b.shape and b.shape != x.shape:
      raise TypeError(f"clamp: bounds must be scalars or shaped like the operand, got "
                      f"{b.str_short()} for {x.str_short()}")
  if not lo.dtype == x.dtype == hi.dtype:   # a Python scalar keeps its own dtype, as in JAX
    raise TypeError(
        f"lax.clamp requires arguments to have the same dtypes, got {lo.dtype}, "
        f"{x.dtype}, {hi.dtype}. Unlike the other lax operations, clamp doesn't let a "
        "Python scalar take the operand's dtype (JAX's neither): give the bounds in "
        "x's dtype (np.float32(1.5)), or use numpy.clip.")
  return ShapedArray(x.shape, x.dtype,
                     lo.weak_type and x.weak_type and hi.weak_type)


abstract_eval_rules[clamp_p] = _clamp_abstract_eval


# --- reshard: change an array's layout (the chapter Many devices) ------------------------------
# Its wrapper (jax.sharding.reshard) and its impl, device_put, are in autodidax.sharding.

reshard_p = Primitive("reshard")


abstract_eval_rules[reshard_p] = lambda x, *, sharding: x.update(sharding=sharding)


# --- Sharding rules: each result's layout, on Explicit axes (the chapter Many devices) ----------

for _p in (*binary_primitives, *unary_primitives, pow_p, integer_pow_p, round_p,
           convert_element_type_p, cumsum_p, select_n_p, clamp_p):
  sharding_rules[_p] = sr.elementwise_rule(_p)
for _p in (reduce_sum_p, reduce_max_p, reduce_min_p, reduce_prod_p, argmax_p, argmin_p):
  sharding_rules[_p] = sr.reduce_rule
sharding_rules[broadcast_p] = sr.broadcast_rule
sharding_rules[transpose_p] = sr.transpose_rule
sharding_rules[reshape_p] = sr.reshape_rule
sharding_rules[concatenate_p] = sr.concatenate_rule
sharding_rules[rev_p] = sr.same_as_operand
sharding_rules[pad_p] = sr.unsplit_dims_rule(
    "pad", lambda x, *, padding_config: [d for d, c in enumerate(padding_config)
                                         if tuple(c) != (0, 0, 0)])
sharding_rules[slice_p] = sr.unsplit_dims_rule(
    "slice", lambda x, *, start_indices, limit_indices, strides: [
        d for d, n in enumerate(x.shape)
        if (start_indices[d], limit_indices[d], strides[d]) != (0, n, 1)])
sharding_rules[dynamic_slice_p] = sr.unsplit_dims_rule(
    "dynamic_slice", lambda x, *, slice_sizes: [
        d for d, (n, m) in enumerate(zip(x.shape, slice_sizes)) if n != m])
sharding_rules[dynamic_update_slice_p] = sr.unsplit_dims_rule(
    "dynamic_update_slice", lambda x: range(x.ndim))
sharding_rules[dot_general_p] = sr.dot_general_rule
sharding_rules[reshard_p] = lambda x, *, sharding: sharding.spec
