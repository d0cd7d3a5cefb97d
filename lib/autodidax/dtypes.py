"""Dtype promotion as JAX does it: the least upper bound in a small lattice.

NumPy promotes `int32 + float32` to float64 and looks at Python scalars'
values; JAX instead walks a fixed graph of dtypes and picks the lowest node
above both operands. Python scalars enter the graph as the *weak* nodes `i*`,
`f*` and `c*`, which sit below every concrete int, float and complex dtype,
so `x * 2.` keeps x's float32. A result that lands on a weak node stays
weakly typed, with the widest dtype of its kind (64 bits, as JAX with x64).
"""
from __future__ import annotations

import functools

import numpy as np

WEAK_INT, WEAK_FLOAT, WEAK_COMPLEX = "i*", "f*", "c*"
_WEAK_NODE = {"b": np.dtype(bool), "i": WEAK_INT, "u": WEAK_INT, "f": WEAK_FLOAT,
              "c": WEAK_COMPLEX}
_WEAK_DTYPE = {WEAK_INT: np.dtype(np.int64), WEAK_FLOAT: np.dtype(np.float64),
               WEAK_COMPLEX: np.dtype(np.complex128)}

_d = np.dtype
# Each node and the nodes directly above it.
LATTICE: dict = {
    _d(bool): [WEAK_INT],
    WEAK_INT: [_d("u1"), _d("i1")],
    _d("u1"): [_d("u2"), _d("i2")], _d("u2"): [_d("u4"), _d("i4")],
    _d("u4"): [_d("u8"), _d("i8")], _d("u8"): [WEAK_FLOAT],
    _d("i1"): [_d("i2")], _d("i2"): [_d("i4")], _d("i4"): [_d("i8")],
    _d("i8"): [WEAK_FLOAT],
    WEAK_FLOAT: [_d("f2"), WEAK_COMPLEX], _d("f2"): [_d("f4")],
    _d("f4"): [_d("f8"), _d("c8")], _d("f8"): [_d("c16")],
    WEAK_COMPLEX: [_d("c8")], _d("c8"): [_d("c16")], _d("c16"): [],
}


@functools.cache
def _above(node) -> frozenset:
  """`node` and every node reachable upwards from it."""
  return frozenset({node}).union(*(_above(n) for n in LATTICE[node]))


def _join(a, b):
  common = _above(a) & _above(b)
  # The least upper bound is the common node that all the others are above.
  least = [n for n in common if common <= _above(n)]
  return least[0]


_join_cached = functools.cache(_join)


def _node(dtype, weak: bool):
  dtype = np.dtype(dtype)
  return _WEAK_NODE[dtype.kind] if weak and dtype.kind != "b" else dtype


def promote_types(a, b) -> np.dtype:
  """The dtype two strongly typed dtypes promote to (jnp.promote_types)."""
  return _strong(_join(np.dtype(a), np.dtype(b)))


def _strong(node) -> np.dtype:
  return _WEAK_DTYPE.get(node, node) if isinstance(node, str) else node


_PYTHON_SCALARS = {int: (np.dtype(np.int64), True), float: (np.dtype(np.float64), True),
                   complex: (np.dtype(np.complex128), True), bool: (np.dtype(bool), False)}


SUPPORTED = frozenset(map(np.dtype, ["bool", "i1", "i2", "i4", "i8", "u1", "u2",
                                    "u4", "u8", "f2", "f4", "f8", "c8", "c16"]))


def check(dtype) -> np.dtype:
  """`dtype` as a np.dtype, if autodidax supports it; else a TypeError."""
  dtype = np.dtype(dtype)
  if dtype not in SUPPORTED:
    raise unsupported(dtype)
  return dtype


def unsupported(dtype) -> TypeError:
  why = ("NumPy has no bfloat16, and autodidax computes with NumPy. Use "
         "float16 or float32 (JAX has bfloat16)" if dtype.name == "bfloat16"
         else "it has bool, (u)int8 to 64, float16 to 64, complex64/128")
  return TypeError(f"autodidax does not support dtype {dtype.name}: {why}.")


def dtype_and_weak(x) -> tuple:
  """(dtype, weak_type) of an array-like: a Python scalar is weak, bool aside."""
  if type(x) is np.ndarray:   # (the common case, made quick)
    if x.dtype not in SUPPORTED:
      raise unsupported(x.dtype)
    return x.dtype, False
  known = _PYTHON_SCALARS.get(type(x))
  if known is not None:
    return known
  aval = getattr(x, "aval", None)
  if aval is not None:
    return aval.dtype, aval.weak_type
  return check(np.result_type(x)), False


def result_type(*xs) -> tuple:
  """(dtype, weak_type) of the result of combining `xs` elementwise."""
  return join_types(*(dtype_and_weak(x) for x in xs))


def join_types(*types) -> tuple:
  """Join (dtype, weak) pairs; the result is weak if it is a weak node."""
  node = functools.reduce(_join_cached, (_node(d, w) for d, w in types))
  return _strong(node), isinstance(node, str)


def to_inexact(dtype) -> np.dtype:
  """The float dtype that sin, division or mean give for `dtype`: integers up
  to 32 bits and bool give float32, 64-bit ones float64."""
  dtype = np.dtype(dtype)
  if dtype.kind in "fc":
    return dtype
  return np.dtype(np.float64 if dtype.itemsize == 8 else np.float32)


def sum_dtype(dtype) -> np.dtype:
  """The accumulator of sum and prod: bool and ints widen to 64 bits."""
  dtype = np.dtype(dtype)
  return {"b": np.dtype(np.int64), "i": np.dtype(np.int64),
          "u": np.dtype(np.uint64)}.get(dtype.kind, dtype)


def is_float(dtype) -> bool:
  return np.dtype(dtype).kind in "fc"

