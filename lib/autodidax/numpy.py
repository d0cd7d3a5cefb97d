"""A small NumPy-flavoured layer over `autodidax.lax`, like `jax.numpy`.

lax is strict (equal shapes, explicit dtypes); here we add NumPy's habits:
broadcasting, dtype promotion with weakly-typed Python scalars (`x * 2.`
keeps x's float32), reductions over `axis=None`, and the operators of Tracers.
"""
from __future__ import annotations

import builtins

import numpy as _np

from . import lax
from .core import Tracer, is_array
from .util import canonicalize_axis

float32, float64, int32, int64, bool_ = (
    _np.float32, _np.float64, _np.int32, _np.int64, _np.bool_)
pi, e, inf, nan = _np.pi, _np.e, _np.inf, _np.nan
shape, ndim, size = _np.shape, _np.ndim, _np.size

_PY_SCALARS = (bool, int, float)


_WEAK_STANDIN = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}


def _dtype_of(x):
  """A dtype, or a Python scalar for weakly-typed values (NumPy treats those
  as weak too: they adopt the other operand's dtype)."""
  if type(x) in _PY_SCALARS:
    return x
  if isinstance(x, Tracer) or _is_weak(x):   # a tracer, or a weakly-typed device Array
    aval = x.aval
    return _WEAK_STANDIN[aval.dtype.kind] if aval.weak_type else aval.dtype
  if not is_array(x):
    raise TypeError(f"autodidax.numpy can't use a value of type "
                    f"{type(x).__name__}: {x!r:.60}")
  return _np.result_type(x)


def result_type(*xs):
  return _np.result_type(*(_dtype_of(x) for x in xs))


def asarray(x, dtype=None):
  if isinstance(x, Tracer):
    return x if dtype is None else astype(x, dtype)
  return _np.asarray(x, dtype)


array = asarray


def astype(x, dtype):
  dtype = _np.dtype(dtype)
  if type(x) in _PY_SCALARS:
    return dtype.type(x)
  return x if _np.result_type(_dtype_of(x)) == dtype else lax.convert_element_type(x, dtype)


def _is_weak(x) -> bool:
  return type(x) in _PY_SCALARS or getattr(getattr(x, "aval", None), "weak_type", False)


def _promote(*xs):
  if all(_is_weak(x) for x in xs):
    return list(xs)   # all weakly typed: lax promotes them, and the result stays weak (as JAX)
  dtype = result_type(*xs)
  return [astype(x, dtype) for x in xs]


def broadcast_to(x, shape):
  """NumPy broadcasting of `x` to `shape`, with lax.reshape and lax.broadcast."""
  shape, xs = tuple(shape), _np.shape(x)
  if xs == shape:
    return x
  if _np.broadcast_shapes(xs, shape) != shape:
    raise ValueError(f"can't broadcast shape {xs} to {shape}")
  lead = len(shape) - len(xs)
  keep = [i for i, d in enumerate(xs) if d == shape[lead + i]]   # not stretched
  if len(keep) < len(xs):
    x = lax.reshape(x, [xs[i] for i in keep])
  kept = {lead + i for i in keep}
  return lax.broadcast(x, shape, [i for i in range(len(shape)) if i not in kept])


def _weak(out, *xs):
  """Python scalars in, a Python scalar out: it stays weakly typed, as in JAX."""
  if all(type(x) in _PY_SCALARS for x in xs) and not isinstance(out, Tracer):
    return out.item()
  return out


def _binary(op):
  def fn(x, y):
    # Fast paths (the common cases while tracing): two tracers of one type, or
    # a strong float tracer and a Python float. Same result as the general path.
    if isinstance(x, Tracer):
      ax = x.aval
      if isinstance(y, Tracer):
        ay = y.aval
        if ax.shape == ay.shape and ax.dtype == ay.dtype and ax.weak_type == ay.weak_type:
          return op(x, y)
      elif type(y) is float and ax.dtype.kind == "f" and not ax.weak_type:
        return op(x, ax.dtype.type(y))
    elif type(x) is float and isinstance(y, Tracer):
      ay = y.aval
      if ay.dtype.kind == "f" and not ay.weak_type:
        return op(ay.dtype.type(x), y)
    x0, y0 = x, y
    x, y = _promote(x, y)
    out_shape = _np.broadcast_shapes(_np.shape(x), _np.shape(y))
    # Rank-0 operands need no broadcast: lax lets a scalar stand for all.
    if _np.ndim(x) and _np.shape(x) != out_shape:
      x = broadcast_to(x, out_shape)
    if _np.ndim(y) and _np.shape(y) != out_shape:
      y = broadcast_to(y, out_shape)
    return _weak(op(x, y), x0, y0)
  fn.__name__ = op.__name__
  return fn


add, subtract, multiply, maximum = map(_binary, (lax.add, lax.sub, lax.mul, lax.max))
greater, less = _binary(lax.greater), _binary(lax.less)
greater_equal, less_equal = _binary(lax.greater_equal), _binary(lax.less_equal)
_divide = _binary(lax.div)


def divide(x, y):
  """True division: integers are divided as floats, as in NumPy."""
  if _np.issubdtype(result_type(x, y), _np.integer):
    return _weak(_divide(astype(x, float64), astype(y, float64)), x, y)
  return _divide(x, y)


true_divide = divide


def minimum(x, y):
  return negative(maximum(negative(x), negative(y)))


def _unary(op):
  def fn(x):
    if _np.issubdtype(result_type(x), _np.integer):
      return _weak(op(astype(x, float64)), x)
    return _weak(op(x), x)
  fn.__name__ = op.__name__
  return fn


sin, cos, exp, log, tanh = map(_unary, (lax.sin, lax.cos, lax.exp, lax.log, lax.tanh))


def negative(x):
  return _weak(lax.neg(x), x)


def abs(x):  # noqa: A001
  return maximum(x, negative(x))


def square(x):
  return multiply(x, x)


def sqrt(x):
  return power(x, 0.5)


def power(x, y):
  """`x ** y`: repeated multiplication for integer `y`, exp(y log x) otherwise."""
  if type(y) is int:
    if y < 0:
      return divide(1., power(x, -y))
    acc, base = ones_like(x), x
    while y:                      # square-and-multiply
      if y & 1:
        acc = multiply(acc, base)
      y >>= 1
      if y:
        base = multiply(base, base)
    return acc
  return exp(multiply(y, log(x)))


def _axes(x, axis):
  if axis is None:
    return tuple(range(_np.ndim(x)))
  axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
  return tuple(canonicalize_axis(a, _np.ndim(x)) for a in axes)


def _keepdims(out, x, axes):
  return lax.reshape(out, [1 if i in axes else d for i, d in enumerate(_np.shape(x))])


def sum(x, axis=None, keepdims=False):  # noqa: A001
  axes = _axes(x, axis)
  out = lax.reduce_sum(x, axes)
  return _keepdims(out, x, axes) if keepdims else out


def max(x, axis=None, keepdims=False):  # noqa: A001
  axes = _axes(x, axis)
  out = lax.reduce_max(x, axes)
  return _keepdims(out, x, axes) if keepdims else out


def min(x, axis=None, keepdims=False):  # noqa: A001
  return negative(max(negative(x), axis, keepdims))


def mean(x, axis=None, keepdims=False):
  axes = _axes(x, axis)
  count = int(_np.prod([_np.shape(x)[a] for a in axes], dtype=int))
  return divide(sum(x, axis, keepdims), float(count))


def zeros_like(x, dtype=None):
  return _np.zeros(_np.shape(x), dtype or result_type(x))


def ones_like(x, dtype=None):
  return _np.ones(_np.shape(x), dtype or result_type(x))


def transpose(x, axes=None):
  return lax.transpose(x, tuple(reversed(range(_np.ndim(x)))) if axes is None else axes)


def reshape(x, newshape):
  newshape = (newshape,) if isinstance(newshape, int) else tuple(newshape)
  if -1 in newshape:   # infer the one missing size
    known = int(_np.prod([d for d in newshape if d != -1], dtype=int))
    newshape = tuple(_np.size(x) // builtins.max(known, 1) if d == -1 else d
                     for d in newshape)
  return lax.reshape(x, newshape)


def moveaxis(x, source: int, destination: int):
  n = _np.ndim(x)
  source, destination = canonicalize_axis(source, n), canonicalize_axis(destination, n)
  perm = [i for i in range(n) if i != source]
  perm.insert(destination, source)
  return lax.transpose(x, perm)


def expand_dims(x, axis: int):
  shape = list(_np.shape(x))
  shape.insert(canonicalize_axis(axis, len(shape) + 1), 1)
  return lax.reshape(x, shape)


def dot(a, b):
  """NumPy's dot: contract the last axis of `a` with the second-to-last of `b`."""
  a, b = _promote(a, b)
  if _np.ndim(a) == 0 or _np.ndim(b) == 0:
    return multiply(a, b)
  rc = 0 if _np.ndim(b) == 1 else _np.ndim(b) - 2
  return lax.dot_general(a, b, (((_np.ndim(a) - 1,), (rc,)), ((), ())))


def matmul(a, b):
  """`a @ b`: like dot, but leading axes of stacked matrices are batch axes."""
  a, b = _promote(a, b)
  na, nb = _np.ndim(a), _np.ndim(b)
  if na == 0 or nb == 0:
    raise ValueError("matmul: operands must not be scalars; use multiply")
  if nb <= 2:
    return dot(a, b)
  batch_shape = _np.broadcast_shapes(_np.shape(a)[:-2], _np.shape(b)[:-2])
  if na == 1:   # a vector times a stack of matrices: (k,) @ (..., k, m)
    return lax.dot_general(a, b, (((0,), (nb - 2,)), ((), ())))
  a = broadcast_to(a, (*batch_shape, *_np.shape(a)[-2:]))
  b = broadcast_to(b, (*batch_shape, *_np.shape(b)[-2:]))
  nbatch = len(batch_shape)
  batch = tuple(range(nbatch))
  return lax.dot_general(a, b, (((nbatch + 1,), (nbatch,)), (batch, batch)))


# --- Operators and methods of Tracers (as jax/_src/numpy/array_methods.py) -----------

def _swap(f):
  return lambda self, other: f(other, self)


def _reduction_method(fn):
  """`x.sum(...)` with NumPy's method signature: np.sum(x) calls x.sum(axis=, out=)."""
  def method(self, axis=None, dtype=None, out=None, keepdims=False):
    if out is not None:
      raise TypeError(f"{fn.__name__}: out= is not supported (arrays are immutable)")
    y = fn(self, axis, keepdims)
    return y if dtype is None else astype(y, dtype)
  method.__name__ = fn.__name__
  return method


def install_tracer_methods(cls):
  cls.__add__, cls.__radd__ = add, _swap(add)
  cls.__sub__, cls.__rsub__ = subtract, _swap(subtract)
  cls.__mul__, cls.__rmul__ = multiply, _swap(multiply)
  cls.__truediv__, cls.__rtruediv__ = divide, _swap(divide)
  cls.__pow__, cls.__rpow__ = power, _swap(power)
  cls.__matmul__, cls.__rmatmul__ = matmul, _swap(matmul)
  cls.__neg__ = negative
  cls.__pos__ = lambda self: self
  cls.__gt__, cls.__lt__ = greater, less
  cls.__ge__, cls.__le__ = greater_equal, less_equal
  cls.T = property(transpose)
  cls.sum, cls.max, cls.mean = map(_reduction_method, (sum, max, mean))
  cls.reshape = lambda self, *shape: reshape(
      self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
  cls.astype = astype


install_tracer_methods(Tracer)
