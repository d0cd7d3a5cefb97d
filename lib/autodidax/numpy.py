"""A small NumPy-flavoured layer over the primitives, like `jax.numpy`.

lax is strict (equal shapes, explicit dtypes); here we add NumPy's habits:
broadcasting, dtype promotion as JAX does it (its lattice, in
`autodidax.dtypes`, with weakly-typed Python scalars: `x * 2.` keeps x's
float32), reductions over `axis=None`, indexing, and the operators of Tracers.
A jax.numpy function that is not here raises an error saying so.
"""
from __future__ import annotations

import builtins
import math

import numpy as _np

from . import dtypes, state
from . import primitives as lax
from . import core
from .core import ConcretizationError, Tracer, is_array
from . import named_sharding
from . import util
from .util import canonicalize_axis
from .xla import Array, jit

float16, float32, float64 = _np.float16, _np.float32, _np.float64
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
bool_, complex64, complex128 = _np.bool_, _np.complex64, _np.complex128
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
shape, ndim, size = _np.shape, _np.ndim, _np.size
promote_types = dtypes.promote_types

_PY_SCALARS = (bool, int, float)
_WEAK = (int, float)   # the Python scalars that are weakly typed
_FLOATS = frozenset(map(_np.dtype, (float16, float32, float64)))


def _plain_float(x) -> bool:
  """Whether `x` is a NumPy float array (or scalar): the eager common case,
  which the fast paths below take as it is."""
  return type(x) in lax.NUMPY_TYPES and x.dtype in _FLOATS
_PY_TYPE = {"b": bool, "i": int, "u": int, "f": float, "c": complex}


def _dtype_of(x):
  if not is_array(x) and not hasattr(x, "aval"):
    raise TypeError(f"autodidax.numpy can't use a value of type "
                    f"{type(x).__name__}: {x!r:.60}")
  return dtypes.dtype_and_weak(x)


def result_type(*xs):
  """The dtype JAX's promotion lattice gives `xs` (see autodidax.dtypes)."""
  return dtypes.join_types(*(_dtype_of(x) for x in xs))[0]


def asarray(x, dtype=None):
  """`x` as an array: a NumPy array, or under a transformation one of its
  values (so that it indexes as ours do, e.g. with a traced index)."""
  if isinstance(x, Tracer):
    return x if dtype is None else astype(x, dtype)
  if isinstance(x, (list, tuple)) and any(isinstance(v, Tracer) for v in x):
    return stack([asarray(v) for v in x]) if dtype is None else astype(stack(x), dtype)
  out = lax.supported(_np.asarray(x, dtype))
  main = core.trace_stack[-1]
  return out if main.level == 0 else core.full_raise(main.trace_type(main), out)


array = asarray


def astype(x, dtype):
  return _as_type(x, dtypes.check(dtype), False)


def _as_type(x, dtype, weak):
  """`x` converted to `dtype` (weakly typed if `weak`), as JAX converts:
  out-of-range integers wrap around, floats saturate, floats to bool test
  for nonzero."""
  if type(x) in _PY_SCALARS:
    if weak:
      return _PY_TYPE[dtype.kind](x)   # stays a Python scalar: weakly typed
    with _np.errstate(over="ignore", invalid="ignore"):
      return lax.convert_values(x, dtype)[()]
  if _dtype_of(x) == (dtype, weak):
    return x
  return lax.convert_element_type(x, dtype, weak)


def _promote(*xs):
  """Convert `xs` to their common dtype, as JAX's promotion lattice says. A
  weakly typed operand already of that dtype needs no conversion: lax ops
  take weak and strong operands together (as in JAX's jaxprs)."""
  types = [_dtype_of(x) for x in xs]
  dtype, weak = dtypes.join_types(*types)
  return [x if t[0] == dtype and not weak else _as_type(x, dtype, weak)
          for x, t in zip(xs, types)]


def _promote_numeric(*xs):
  """Like _promote, but bools become int32 (as jax.numpy's floor_divide,
  remainder, square and power treat them)."""
  dtype, weak = dtypes.join_types(*(_dtype_of(x) for x in xs))
  dtype = _np.dtype(int32) if dtype == _np.bool_ else dtype
  return [_as_type(x, dtype, weak) for x in xs]


def _promote_inexact(*xs):
  """Like _promote, but integers and bools go to a float (for sin, /, sqrt)."""
  dtype, weak = dtypes.join_types(*(_dtype_of(x) for x in xs))
  return [_as_type(x, dtypes.to_inexact(dtype), weak) for x in xs]


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
  """Python ints and floats in, a Python scalar out: it stays weakly typed,
  as in JAX (see lax.python_scalar)."""
  if type(out) in _PY_SCALARS or isinstance(out, Tracer):
    return out
  return lax.python_scalar(out, *xs)


def _binary(op, bool_op=None):
  """A NumPy-style binary function from a lax one: promote, then broadcast.
  `bool_op` replaces `op` on bools (add is `or` there, multiply `and`)."""
  def fn(x, y):
    # Fast paths (the common cases, eagerly and while tracing): two arrays or
    # tracers of one type, or a strong float one and a Python float. Same
    # result as the general path below.
    if type(x) in lax.NUMPY_TYPES:
      if type(y) in lax.NUMPY_TYPES:
        if x.dtype == y.dtype and x.dtype.kind != "b":
          if x.shape == y.shape or not x.shape or not y.shape:
            return op(x, y)   # (lax lets a scalar stand for all elements)
          if x.shape[-y.ndim:] == y.shape:   # (y is a row: a bias, say)
            return op(x, lax.broadcast_p.bind(
                y, shape=x.shape, axes=tuple(range(x.ndim - y.ndim))))
          if y.shape[-x.ndim:] == x.shape:
            return op(lax.broadcast_p.bind(
                x, shape=y.shape, axes=tuple(range(y.ndim - x.ndim))), y)
      elif type(y) is float and x.dtype in _FLOATS:
        return op(x, y)   # (lax lets the Python float take x's dtype)
    elif type(x) in _WEAK and type(y) in _WEAK:   # two Python scalars
      return op(x, y) if type(x) is type(y) else op(float(x), float(y))
    elif type(x) is float and type(y) in lax.NUMPY_TYPES and y.dtype in _FLOATS:
      return op(x, y)
    elif isinstance(x, Tracer):
      ax = x.aval
      if isinstance(y, Tracer):
        ay = y.aval
        if (ax.shape == ay.shape and ax.dtype == ay.dtype and ax.weak_type == ay.weak_type
            and ax.dtype.kind != "b"):
          return op(x, y)
      elif type(y) is float and ax.dtype.kind == "f" and not ax.weak_type:
        return op(x, ax.dtype.type(y))
    elif type(x) is float and isinstance(y, Tracer):
      ay = y.aval
      if ay.dtype.kind == "f" and not ay.weak_type:
        return op(ay.dtype.type(x), y)
    x0, y0 = x, y
    x, y = _broadcast_arrays(*_promote(x, y))
    use = bool_op if bool_op is not None and result_type(x, y) == _np.bool_ else op
    return _weak(use(x, y), x0, y0)
  fn.__name__ = op.__name__
  return fn


def _broadcast_arrays(*xs):
  """NumPy broadcasting; rank-0 operands stay as they are (lax lets a scalar
  stand for all elements)."""
  out_shape = _np.broadcast_shapes(*map(_np.shape, xs))
  return [broadcast_to(x, out_shape) if _np.ndim(x) and _np.shape(x) != out_shape else x
          for x in xs]


add = _binary(lax.add, lax.bitwise_or)
multiply = _binary(lax.mul, lax.bitwise_and)
subtract, maximum, minimum = _binary(lax.sub), _binary(lax.max), _binary(lax.min)
greater, less = _binary(lax.greater), _binary(lax.less)
greater_equal, less_equal = _binary(lax.greater_equal), _binary(lax.less_equal)
equal, not_equal = _binary(lax.eq), _binary(lax.ne)
bitwise_and, bitwise_or = _binary(lax.bitwise_and), _binary(lax.bitwise_or)
bitwise_xor = _binary(lax.bitwise_xor)
_divide, _rem = _binary(lax.div), _binary(lax.rem)


def divide(x, y):
  """True division: integers and bools are divided as floats (int32 as float32)."""
  if _plain_float(x) and (_plain_float(y) and x.dtype == y.dtype
                          or type(y) is float):
    return _divide(x, y)   # (a fast path: floats divide as they are)
  x0, y0 = x, y
  return _weak(_divide(*_promote_inexact(x, y)), x0, y0)


true_divide = divide


def floor_divide(x, y):
  """`x // y`: division rounded down (lax.div rounds toward zero), computed
  as jax.numpy computes it."""
  x0, y0 = x, y
  x, y = _broadcast_arrays(*_promote_numeric(x, y))
  kind = _dtype_of(x)[0].kind
  if kind == "u":
    q = lax.div(x, y)
  elif kind == "i":   # toward zero is one too high where the signs differ
    q = lax.div(x, y)
    fix = lax.bitwise_and(lax.ne(lax.sign(x), lax.sign(y)),
                          lax.ne(lax.rem(x, y), 0))
    q = lax.select_n(fix, q, lax.sub(q, 1))
  else:
    q = _float_divmod(x, y)[0]
  return _weak(q, x0, y0)


def _float_divmod(x, y):
  """(x // y, x % y) for floats, from the truncated remainder (as JAX)."""
  shape = _np.broadcast_shapes(_np.shape(x), _np.shape(y))
  x, y = broadcast_to(x, shape), broadcast_to(y, shape)
  mod = lax.rem(x, y)
  div = lax.div(lax.select_n(lax.eq(y, 0.), lax.sub(x, mod), x), y)
  fix = lax.bitwise_and(lax.ne(mod, 0.), lax.ne(lax.sign(y), lax.sign(mod)))
  mod = lax.select_n(fix, mod, lax.add(mod, y))
  div = lax.select_n(fix, div, lax.sub(div, 1.))
  return lax.round(div), mod


def remainder(x, y):
  """`x % y`: the remainder with the sign of `y`, as Python's (an integer
  `x % 0` is 0, as in JAX)."""
  x0, y0 = x, y
  x, y = _broadcast_arrays(*_promote_numeric(x, y))
  if _dtype_of(y)[0].kind in "iu":
    y = lax.select_n(lax.eq(y, 0), y, lax.add(lax.mul(y, 0), 1))
  r = lax.rem(x, y)
  wrong_sign = lax.bitwise_and(lax.ne(lax.less(r, 0), lax.less(y, 0)),
                               lax.ne(r, 0))
  return _weak(lax.select_n(wrong_sign, r, lax.add(r, y)), x0, y0)


mod = remainder


def _to_bool(x):
  """`x != 0`, as JAX's logical functions compute it."""
  return x if _dtype_of(x)[0] == _np.bool_ else lax.ne(x, _const_like(x, 0))


def _const_like(x, value):
  """`value` to combine with `x`: a Python scalar (weak) where `x` is a
  weakly typed scalar, else of x's dtype (strong), as JAX's lax._const."""
  dtype, weak = _dtype_of(x)
  if weak and _np.ndim(x) == 0:
    return _PY_TYPE[dtype.kind](value)
  return dtype.type(value)


def _logical(op):
  def fn(x, y):
    return op(*map(_to_bool, _promote(x, y)))
  fn.__name__ = f"logical_{op.__name__.replace('bitwise_', '')}"
  return fn


logical_and, logical_or = _logical(lax.bitwise_and), _logical(lax.bitwise_or)
logical_xor = _logical(lax.bitwise_xor)


def logical_not(x): return lax.bitwise_not(_to_bool(x))


def invert(x):
  """`~x`: logical not on bools, bitwise not on integers."""
  if result_type(x).kind not in "biu":
    raise TypeError(f"invert (~) needs bool or integer operands, got {result_type(x).name}")
  return _weak(lax.bitwise_not(x), x)


bitwise_not = invert


def _unary(op):
  """A float function (sin, sqrt, ...): integers and bools become floats first."""
  def fn(x):
    if type(x) is float or type(x) in lax.NUMPY_TYPES and x.dtype in _FLOATS:
      return op(x)   # (a fast path: a float needs no conversion)
    (x1,) = _promote_inexact(x)
    return _weak(op(x1), x)
  fn.__name__ = op.__name__
  return fn


sin, cos, exp, log, tanh = map(_unary, (lax.sin, lax.cos, lax.exp, lax.log, lax.tanh))
sqrt, rsqrt = _unary(lax.sqrt), _unary(lax.rsqrt)


def negative(x):
  return _weak(lax.neg(x), x)


def abs(x):  # noqa: A001
  if result_type(x).kind in "bu":   # already nonnegative
    return x
  return _weak(lax.abs(x), x)


absolute = abs


def sign(x):
  return _weak(lax.sign(x), x)   # (lax.sign refuses bools, as JAX's)


def floor(x):
  return x if result_type(x).kind in "biu" else _weak(lax.floor(x), x)


def round(x, decimals: int = 0):  # noqa: A001
  """Round half to even, as NumPy (and jnp.round)."""
  if result_type(x).kind == "b":
    raise ValueError("round: bools can't be rounded (JAX refuses them too); "
                     "convert to an int or a float first")
  if result_type(x).kind in "iu":
    return x
  if decimals == 0:
    return _weak(lax.round(x, lax.ROUND_TO_NEAREST_EVEN), x)
  scale = 10. ** decimals
  return divide(round(multiply(x, scale)), scale)


def square(x):
  (x,) = _promote_numeric(x)   # bools square as int32s, as in JAX
  return multiply(x, x)


def where(condition, x=None, y=None):
  """`x` where `condition` holds, else `y` (elementwise; all three broadcast)."""
  if x is None or y is None:
    raise TypeError("where(condition) with one argument is not in autodidax (its "
                    "output shape depends on the data); pass x and y")
  if (type(condition) is _np.ndarray and condition.dtype == _np.bool_
      and _plain_float(x) and condition.shape == x.shape and (
          type(y) is float or _plain_float(y) and y.dtype == x.dtype
          and y.shape == x.shape)):   # (a fast path: the common eager case)
    y = _np.full(x.shape, y, x.dtype) if type(y) is float else y
    return lax.select_n(condition, y, x)
  if any(isinstance(v, Tracer) for v in (condition, x, y)):   # staged: in a jit of
    return _where_jit(condition, x, y)   # its own, as JAX's where (named _where)
  return _where(condition, x, y)


def _where(condition, x, y):
  x0, y0 = x, y
  dtype, weak = dtypes.join_types(_dtype_of(x), _dtype_of(y))
  c, x, y = astype(condition, bool), _as_type(x, dtype, weak), _as_type(y, dtype, weak)
  shape = _np.broadcast_shapes(_np.shape(c), _np.shape(x), _np.shape(y))
  x, y = broadcast_to(x, shape), broadcast_to(y, shape)   # cases alike;
  c = c if _np.ndim(c) == 0 else broadcast_to(c, shape)   # c: a scalar too
  return _weak(lax.select_n(c, y, x), x0, y0)


_where_jit = jit(_where)


def clip(x, min=None, max=None):  # noqa: A002
  """`x` limited to [min, max] (either may be None)."""
  if min is not None:
    x = maximum(x, min)
  if max is not None:
    x = minimum(x, max)
  return x


def power(x, y):
  """`x ** y`, as jax.numpy computes it: integer_pow for a concrete integer
  `y`, squaring for integers to integer arrays, else the pow primitive."""
  n = _concrete_int(y)
  if n is not None:
    (x1,) = _promote_numeric(x)   # (bools are powered as int32s)
    return _weak(lax.integer_pow(x1, n), x)
  x0, y0 = x, y
  (dx, wx), (dy, wy) = _dtype_of(x), _dtype_of(y)
  x, y = _broadcast_arrays(*_promote_numeric(x, y))
  if result_type(x, y).kind in "iu":
    return _weak(_integer_power(x, y), x0, y0)
  if dx.kind in "fc" and dy.kind in "iu" and wx and not wy:
    # a float to integer powers: weak only if both are, as in JAX
    x, y = (_as_type(v, result_type(x, y), False) for v in (x, y))
  return _weak(lax.pow(x, y), x0, y0)


def _concrete_int(y):
  """`y` as a Python int if it is a known integer scalar (not a tracer)."""
  if isinstance(y, Tracer) or _np.ndim(y) or result_type(y).kind not in "biu":
    return None
  return int(y)


def _integer_power(x, y):
  """An integer to an integer power, as JAX computes it: square `x` once for
  each bit of `y`, multiplying in the powers whose bit is set. Six bits are
  enough (a larger power of anything but -1, 0 and 1 overflows int64), so
  only `y mod 64` counts, for a negative `y` too."""
  dtype, shape = result_type(x, y), _np.broadcast_shapes(_np.shape(x), _np.shape(y))
  x, y = (broadcast_to(astype(v, dtype), shape) for v in (x, y))
  zero = dtype.type(0)
  acc = lax.select_n(lax.bitwise_and(lax.eq(x, zero), lax.ne(y, zero)),
                     _np.ones(shape, dtype), _np.zeros(shape, dtype))
  for bit in range(6):
    is_set = lax.ne(lax.bitwise_and(y, dtype.type(1 << bit)), zero)
    acc = lax.select_n(is_set, acc, lax.mul(acc, x))
    x = lax.mul(x, x)
  return acc


def _axes(x, axis):
  if axis is None:
    return tuple(range(_np.ndim(x)))
  axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
  return tuple(canonicalize_axis(a, _np.ndim(x)) for a in axes)


def _keepdims(out, x, axes):
  return lax.reshape(out, [1 if i in axes else d for i, d in enumerate(_np.shape(x))])


def _reduction(reduce, x, axis, keepdims, dtype):
  axes = _axes(x, axis)
  x = astype(x, dtype or result_type(x))   # strongly typed, as JAX's reductions
  out = reduce(x, axes)
  return _keepdims(out, x, axes) if keepdims else out


def sum(x, axis=None, keepdims=False, dtype=None):  # noqa: A001
  """Sum over `axis`; bools and small integers are summed as 64-bit, as JAX."""
  if _plain_float(x) and not keepdims and dtype is None:
    return lax.reduce_sum(x, axis)   # (a fast path: floats sum as they are)
  return _reduction(lax.reduce_sum, x, axis, keepdims,
                    dtype or dtypes.sum_dtype(result_type(x)))


def prod(x, axis=None, keepdims=False, dtype=None):
  return _reduction(lax.reduce_prod, x, axis, keepdims,
                    dtype or dtypes.sum_dtype(result_type(x)))


def _no_empty(name, x, axis):
  if any(_np.shape(x)[a] == 0 for a in _axes(x, axis)):
    raise ValueError(f"zero-size array to reduction operation {name} which has no identity")


def max(x, axis=None, keepdims=False, initial=None):  # noqa: A001
  """The largest element along `axis`, not below `initial` if given (an
  empty axis then gives `initial`)."""
  if initial is None:
    if _plain_float(x) and x.size and not keepdims:
      return lax.reduce_max(x, axis)   # (a fast path)
    _no_empty("max", x, axis)
    return _reduction(lax.reduce_max, x, axis, keepdims, None)
  out = _reduction(lax.reduce_max, x, axis, keepdims, None)
  return maximum(out, _as_type(initial, result_type(out), False))


def min(x, axis=None, keepdims=False, initial=None):  # noqa: A001
  if initial is None:
    if _plain_float(x) and x.size and not keepdims:
      return lax.reduce_min(x, axis)   # (a fast path)
    _no_empty("min", x, axis)
    return _reduction(lax.reduce_min, x, axis, keepdims, None)
  out = _reduction(lax.reduce_min, x, axis, keepdims, None)
  return minimum(out, _as_type(initial, result_type(out), False))


amax, amin = max, min


def mean(x, axis=None, keepdims=False):
  """The mean, in a float dtype (int32 and bool give float32, as JAX)."""
  axes = _axes(x, axis)
  count = math.prod(_np.shape(x)[a] for a in axes)
  if _plain_float(x) and not keepdims:   # (a fast path)
    total = lax.reduce_sum_p.bind(x, axes=tuple(sorted(axes)))
    return lax.div(total, x.dtype.type(count))
  total = _reduction(lax.reduce_sum, x, axis, keepdims, dtypes.to_inexact(result_type(x)))
  return divide(total, float(count))


def _arg_reduce(lax_fn, x, axis, keepdims):
  if axis is None:
    x, axis = (x if _np.ndim(x) == 1 else reshape(x, -1)), 0
  axis = canonicalize_axis(axis, _np.ndim(x))
  if _np.shape(x)[axis] == 0:
    raise ValueError("attempt to get argmax/argmin of an empty sequence")
  out = lax_fn(x, axis, int64)
  return _keepdims(out, x, (axis,)) if keepdims else out


def argmax(x, axis=None, keepdims=False):
  return _arg_reduce(lax.argmax, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
  return _arg_reduce(lax.argmin, x, axis, keepdims)


def cumsum(x, axis=None, dtype=None):
  """Running sums (of the flattened array when `axis` is None); bools count as int64."""
  if axis is None:
    x, axis = reshape(x, -1), 0
  dtype = dtype or (int64 if result_type(x) == _np.bool_ else result_type(x))
  return lax.cumsum(astype(x, dtype), axis)


# --- Building arrays -----------------------------------------------------------------------

def _static(name, *values):
  for v in values:
    if isinstance(v, Tracer):
      raise ConcretizationError(v, f"the arguments of {name}")


def _shape_tuple(shape):
  return (int(shape),) if isinstance(shape, (int, _np.integer)) else tuple(map(int, shape))


def zeros(shape, dtype=None):
  return _np.zeros(_shape_tuple(shape), dtypes.check(dtype or float64))


def ones(shape, dtype=None):
  return _np.ones(_shape_tuple(shape), dtypes.check(dtype or float64))


def full(shape, fill_value, dtype=None):
  shape = _shape_tuple(shape)
  if isinstance(fill_value, Tracer) or (dtype is None and _is_weak(fill_value)):
    fill = fill_value if dtype is None else astype(fill_value, dtype)
    return broadcast_to(fill, shape)   # (keeps a Python scalar's weak type)
  dtype = dtypes.check(dtype or result_type(fill_value))
  return _np.full(shape, fill_value, dtype)


def _is_weak(x) -> bool:
  return type(x) is int or type(x) is float


def zeros_like(x, dtype=None):
  return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
  return full_like(x, 1, dtype)


def full_like(x, fill_value, dtype=None):
  """`fill_value` in x's shape, dtype and weak type (or a strong `dtype`)."""
  dtype, weak = (dtypes.check(dtype), False) if dtype else _dtype_of(x)
  fill = _as_type(fill_value, dtype, weak)
  if weak or isinstance(fill, Tracer):   # broadcast: keeps the weak type
    return broadcast_to(fill, _np.shape(x))
  return _np.full(_np.shape(x), fill, dtype)


def arange(start, stop=None, step=None, dtype=None):
  """Evenly spaced values; the bounds must be concrete (the size is static)."""
  _static("arange", start, stop, step)
  args = [a for a in (start, stop, step) if a is not None]
  kind = "f" if any(isinstance(a, float) or _np.result_type(a).kind == "f" for a in args) else "i"
  if dtype is None:   # Python numbers are weak: NumPy scalars' dtypes win, as in JAX
    strong = [_np.result_type(a) for a in args if not isinstance(a, (int, float))]
    strong = [d for d in strong if d.kind == kind]
    dtype = _np.result_type(*strong) if strong else (float64 if kind == "f" else int64)
  return _np.arange(*args, dtype=dtypes.check(dtype))


def linspace(start, stop, num=50, endpoint=True, dtype=None):
  _static("linspace", start, stop, num)
  return _np.linspace(start, stop, int(num), endpoint=endpoint,
                      dtype=dtypes.check(dtype or float64))


def eye(N, M=None, k=0, dtype=None):  # noqa: N803 (NumPy's names)
  return _np.eye(N, M, k, dtype=dtypes.check(dtype or float64))


def concatenate(arrays, axis=0):
  arrays = list(arrays)
  if axis is None:
    arrays, axis = [reshape(a, -1) for a in arrays], 0
  if not arrays:
    raise ValueError("concatenate: need at least one array to concatenate")
  if _np.ndim(arrays[0]) == 0:
    raise ValueError("concatenate: zero-dimensional arrays can't be "
                     "concatenated (stack them instead)")
  arrays = _promote(*arrays)   # (lax.concatenate checks the ranks agree)
  return lax.concatenate(arrays, canonicalize_axis(axis, _np.ndim(arrays[0])))


def stack(arrays, axis=0):
  arrays = list(arrays)
  if not arrays:
    raise ValueError("need at least one array to stack")
  if len({_np.shape(a) for a in arrays}) > 1:
    raise ValueError("stack: the arrays must have one shape, got "
                     f"{[_np.shape(a) for a in arrays]}")
  nd = _np.ndim(arrays[0]) + 1
  return concatenate([expand_dims(a, axis) for a in _promote(*arrays)],
                     canonicalize_axis(axis, nd))


# --- Shapes ----------------------------------------------------------------------------------

def transpose(x, axes=None):
  n = _np.ndim(x)
  axes = tuple(reversed(range(n))) if axes is None else tuple(canonicalize_axis(a, n) for a in axes)
  return lax.transpose(x, axes)


def reshape(x, newshape, *, out_sharding=None):
  newshape = (newshape,) if isinstance(newshape, int) else tuple(newshape)
  if newshape.count(-1) > 1:
    raise ValueError(f"reshape: can only specify one unknown dimension (-1), got {newshape}")
  if -1 in newshape:   # infer the one missing size
    known = math.prod(d for d in newshape if d != -1)
    newshape = tuple(_np.size(x) // builtins.max(known, 1) if d == -1 else d
                     for d in newshape)
  return lax.reshape(x, newshape, out_sharding)


def ravel(x):
  return reshape(x, -1)


def moveaxis(x, source: int, destination: int):
  n = _np.ndim(x)
  source, destination = canonicalize_axis(source, n), canonicalize_axis(destination, n)
  perm = [i for i in range(n) if i != source]
  perm.insert(destination, source)
  return lax.transpose(x, perm)


def expand_dims(x, axis):
  axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
  return lax.expand_dims(x, axes)


def squeeze(x, axis=None):
  if axis is None:
    axis = [i for i, d in enumerate(_np.shape(x)) if d == 1]
  return lax.squeeze(x, (axis,) if isinstance(axis, (int, _np.integer)) else axis)


def dot(a, b, *, out_sharding=None):
  """NumPy's dot: contract the last axis of `a` with the second-to-last of `b`.
  `out_sharding`, as in JAX: the result's sharding on Explicit axes."""
  a, b = _promote(a, b)
  if _np.ndim(a) == 0 or _np.ndim(b) == 0:
    return multiply(a, b)
  rc = 0 if _np.ndim(b) == 1 else _np.ndim(b) - 2
  return lax.dot_general(a, b, (((_np.ndim(a) - 1,), (rc,)), ((), ())), out_sharding)


def matmul(a, b, *, out_sharding=None):
  """`a @ b`: like dot, but leading axes of stacked matrices are batch axes."""
  a, b = _promote(a, b)
  na, nb = _np.ndim(a), _np.ndim(b)
  if na == 0 or nb == 0:
    raise ValueError("matmul: operands must not be scalars; use multiply")
  if nb <= 2:
    return dot(a, b, out_sharding=out_sharding)
  batch_shape = _np.broadcast_shapes(_np.shape(a)[:-2], _np.shape(b)[:-2])
  if na == 1:   # a vector times a stack of matrices: (k,) @ (..., k, m)
    return lax.dot_general(a, b, (((0,), (nb - 2,)), ((), ())), out_sharding)
  a = broadcast_to(a, (*batch_shape, *_np.shape(a)[-2:]))
  b = broadcast_to(b, (*batch_shape, *_np.shape(b)[-2:]))
  nbatch = len(batch_shape)
  batch = tuple(range(nbatch))
  return lax.dot_general(a, b, (((nbatch + 1,), (nbatch,)), (batch, batch)), out_sharding)


def einsum(subscripts: str, *operands, out_sharding=None):
  """Einstein summation, e.g. `einsum("bij,bjk->bik", a, b)`, as sums and
  `dot_general`s of two operands at a time, then a transpose. `out_sharding`,
  as in JAX: the sharding of the last product's result on Explicit axes (JAX
  ignores it without one). (No `...` and no letter twice in one operand:
  autodidax leaves out traces and diagonals.)"""
  ins, _, out = subscripts.replace(" ", "").partition("->")
  ins = ins.split(",")
  if len(ins) != len(operands) or not operands:
    raise ValueError(f"einsum: {subscripts!r} names {len(ins)} operands, got {len(operands)}")
  if not _:   # implicit output: the letters used once, in order
    letters = "".join(ins)
    out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
  for s, x in zip(ins, operands):
    if "." in s or len(set(s)) < len(s) or len(s) != _np.ndim(x):
      raise NotImplementedError(
          f"einsum: {s!r} for an operand of rank {_np.ndim(x)}: autodidax's einsum takes one "
          "distinct letter per dimension (no '...', traces or diagonals)")

  def keep_only(x, s, keep):   # sum out the letters no one needs any more
    axes = tuple(i for i, c in enumerate(s) if c not in keep)
    return (lax.reduce_sum(x, axes) if axes else x), "".join(c for c in s if c in keep)

  if out_sharding is not None:
    out_sharding = named_sharding.canonicalize_sharding(out_sharding, "einsum")
    spec = out_sharding.spec.padded(len(out))
  acc, s = keep_only(operands[0], ins[0], set(out) | set("".join(ins[1:])))
  for k in range(1, len(operands)):
    later = set(out) | set("".join(ins[k + 1:]))
    b, sb = keep_only(operands[k], ins[k], later | set(s))
    acc, b = _promote(acc, b)
    acc, s = keep_only(acc, s, later | set(sb))
    batch = [c for c in s if c in sb and c in later]
    contract = [c for c in s if c in sb and c not in later]
    dn = (([s.index(c) for c in contract], [sb.index(c) for c in contract]),
          ([s.index(c) for c in batch], [sb.index(c) for c in batch]))
    s = "".join(batch) + "".join(c for c in s if c not in sb) + "".join(
        c for c in sb if c not in s)
    last = None   # the last product's letters are all the result's: its layout is given
    if out_sharding is not None and k == len(operands) - 1:
      last = type(out_sharding)(out_sharding.mesh, type(spec)(*[spec[out.index(c)] for c in s]))
    acc = lax.dot_general(acc, b, dn, last)
  acc, s = keep_only(acc, s, set(out))
  acc = lax.transpose(acc, tuple(s.index(c) for c in out)) if s != out else acc
  return acc


# --- Indexing ------------------------------------------------------------------------------

def _getitem(x, idx):
  """`x[idx]` for ints (static or traced), slices with static bounds, None
  and `...`: one `slice`, a `rev` of the axes sliced with negative steps,
  one `dynamic_slice` for traced indices, then a reshape that drops the
  indexed axes and adds the new ones."""
  idx = idx if isinstance(idx, tuple) else (idx,)
  shape = _np.shape(x)
  for i in idx:
    if not (i is None or i is Ellipsis or isinstance(i, builtins.slice)
            or type(i) is int or isinstance(i, _np.integer) or _is_int_scalar(i)):
      raise TypeError(_unsupported_index(i))
  # (a 0-d integer array is a known index, as a Python int is)
  idx = tuple(int(i) if type(i) is _np.ndarray else i for i in idx)
  if builtins.sum(i is Ellipsis for i in idx) > 1:
    raise IndexError("an index can only have a single ellipsis ('...')")
  used = builtins.sum(i is not None and i is not Ellipsis for i in idx)
  if used > len(shape):
    raise IndexError(f"too many indices for an array of rank {len(shape)}")
  # `...` stands for as many full slices as needed; so do missing trailing ones.
  k = next((j for j, i in enumerate(idx) if i is Ellipsis), len(idx))
  idx = idx[:k] + (builtins.slice(None),) * (len(shape) - used) + idx[k + 1:]
  start, limit, strides, dyn, out_shape, flips, axis = [], [], [], {}, [], [], 0
  for i in idx:
    if i is None:
      out_shape.append(1)
      continue
    d = shape[axis]
    if isinstance(i, builtins.slice):
      a, b, s = i.indices(d)
      n = builtins.max(0, -(-(b - a) // s))
      if s < 0:   # the same elements in a forward slice, then reversed
        flips.append(axis)
        a, s = (a + (n - 1) * s if n else 0), -s
      start.append(a); limit.append(a + (n - 1) * s + 1 if n else a); strides.append(s)
      out_shape.append(n)
    elif isinstance(i, Tracer):
      start.append(0); limit.append(d); strides.append(1)
      dyn[axis] = i
    else:
      i = int(i)
      if not -d <= i < d:   # (Part 2 says why we differ from JAX here)
        raise IndexError(
            f"index {i} is out of bounds for axis {axis} with size {d} (JAX "
            "would clamp it; autodidax raises, as NumPy does)")
      i %= d
      start.append(i); limit.append(i + 1); strides.append(1)
    axis += 1
  if (start, limit, strides) != ([0] * len(shape), list(shape), [1] * len(shape)):
    x = lax.slice(x, start, limit, strides)
  if flips:
    x = lax.rev(x, flips)
  if dyn:
    sizes = list(_np.shape(x))
    starts = [_np.int64(0)] * len(sizes)
    for a, i in dyn.items():
      sizes[a] = 1
      starts[a] = i
    x = lax.dynamic_slice(x, starts, sizes)
  return x if _np.shape(x) == tuple(out_shape) else lax.reshape(x, out_shape)


def _unsupported_index(i) -> str:
  what = f"autodidax indexes with ints, slices, None and ... only, got {i!r:.60}"
  dtype = getattr(getattr(i, "aval", None), "dtype", None) or getattr(i, "dtype", None)
  if dtype == _np.bool_:   # (a traced mask: JAX rejects it under jit too)
    return (f"{what}: a boolean mask makes the result's shape depend on the data. "
            "Keep the shape instead: where(mask, x, 0)")
  if dtype is not None and dtype.kind in "iu" or isinstance(i, list):
    return (f"{what}: indexing with an array of integers (a gather) is not in autodidax. "
            "Pick the elements one by one, stack([x[j] for j in idx]); for class "
            "labels, x[arange(n), labels] is sum(x * nn.one_hot(labels, k), axis=-1)")
  return what


def _is_int_scalar(i) -> bool:
  if type(i) is _np.ndarray:
    return i.shape == () and i.dtype.kind in "iu"
  aval = getattr(i, "aval", None)
  return aval is not None and aval.shape == () and aval.dtype.kind in "iu"


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


def _iter(x):
  if not _np.shape(x):
    raise TypeError("iteration over a 0-d array")
  return (_getitem(x, i) for i in range(_np.shape(x)[0]))


def install_tracer_methods(cls):
  cls.__add__, cls.__radd__ = add, _swap(add)
  cls.__sub__, cls.__rsub__ = subtract, _swap(subtract)
  cls.__mul__, cls.__rmul__ = multiply, _swap(multiply)
  cls.__truediv__, cls.__rtruediv__ = divide, _swap(divide)
  cls.__floordiv__, cls.__rfloordiv__ = floor_divide, _swap(floor_divide)
  cls.__mod__, cls.__rmod__ = remainder, _swap(remainder)
  cls.__pow__, cls.__rpow__ = power, _swap(power)
  cls.__matmul__, cls.__rmatmul__ = matmul, _swap(matmul)
  cls.__and__, cls.__rand__ = bitwise_and, _swap(bitwise_and)
  cls.__or__, cls.__ror__ = bitwise_or, _swap(bitwise_or)
  cls.__xor__, cls.__rxor__ = bitwise_xor, _swap(bitwise_xor)
  cls.__invert__ = invert
  cls.__neg__ = negative
  cls.__pos__ = lambda self: self
  cls.__abs__ = abs
  cls.__gt__, cls.__lt__ = greater, less
  cls.__ge__, cls.__le__ = greater_equal, less_equal
  cls.__eq__, cls.__ne__ = equal, not_equal
  cls.__hash__ = None   # arrays compare elementwise, so they can't be dict keys
  cls.__getitem__ = _getitem
  cls.T = property(transpose)
  cls.sum, cls.max, cls.min, cls.mean, cls.prod = map(
      _reduction_method, (sum, max, min, mean, prod))
  cls.argmax = lambda self, axis=None, keepdims=False: argmax(self, axis, keepdims)
  cls.argmin = lambda self, axis=None, keepdims=False: argmin(self, axis, keepdims)
  cls.reshape = lambda self, *shape: reshape(
      self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
  cls.astype = astype
  cls.squeeze = squeeze
  cls.ravel = ravel
  cls.clip = clip


install_tracer_methods(Tracer)
state.install_ref_indexing(Tracer)   # `ref[...]` on a traced Ref reads it, `ref[i] = v` writes it
install_tracer_methods(Array)   # device arrays: `a + b` binds add, as on tracers
Tracer.__iter__ = _iter   # (device Arrays iterate over their fetched values)


def __getattr__(name):
  raise util.not_in_autodidax("jax.numpy", name)
