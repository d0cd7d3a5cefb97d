"""The dtype and weak-type audit: every function of autodidax.numpy,
autodidax.lax and autodidax.nn, on every dtype and on weakly typed Python
scalars, against JAX. Each result's value, dtype and weak type must be JAX's,
eagerly and under jit, with JAX's x64 on and off; where JAX raises, ours
raises the same kind of error (TypeError, ValueError, IndexError ...).

How the expectations are set, and why:

- autodidax keeps 64-bit types, as NumPy does and as JAX does with x64 on
  (README). With x64 on, each result must be JAX's exactly.
- With x64 off, JAX narrows every 64-bit type to 32 bits (a Python float is
  a weak float32, `sum` of int8 is int32). autodidax has no such switch, so
  the claim we test is that JAX with x64 off computes our answer narrowed:
  our dtype with 64 bits made 32 must be JAX's, and our value cast to it must
  be JAX's value. We feed JAX only what it can hold with x64 off (arrays of 32
  bits or fewer, Python scalars); a 64-bit input would be narrowed on entry,
  and the question would change (float32 + float64 is an error in lax with
  x64 on, but not once the float64 is a float32).
- Each case runs twice in each library, all cases in one jitted program (a
  try/except per case at trace time keeps one case's error from the
  others): with its inputs as arguments, traced, for the types and errors
  (a Python scalar argument is a weak tracer); and with its inputs closed
  over, for the values, which XLA folds into constants while compiling (a
  few seconds, where compiling code for every case takes minutes). The
  closed-over run sees Python scalars as eager code does, so it is also
  the oracle for our eager results (`test_jax_eager_agrees_with_jax_jit`
  checks JAX eagerly against it on a sample; FOLDING_DIFFERS lists the case
  where folding and JAX's compiled code disagree). Signed zeros, NaN and
  infinities are test_edge_cases' business, with JAX's run-time results.
- Two differences are deliberate, and Part 2 says why. autodidax.lax lets a
  Python scalar adopt the other operand's dtype, where jax.lax asks for a
  cast: the expected result is jax.lax's on the scalar cast first (and a
  TypeError where the cast would change the array's kind, as JAX's).
  Eagerly, autodidax's values are NumPy arrays and Python scalars, and only
  a Python scalar is weakly typed: an eager result can be weak only where
  JAX's is a 0-d int or float of a Python scalar's dtype (under jit, every
  weak type must match); so `asarray(2.)` is a strong NumPy array.
  (Where JAX itself crashes, see _CRASH; jnp.dot's scalar case, see np.dot.)
- bfloat16: NumPy has no bfloat16, so autodidax leaves it out; every
  function raises a TypeError that says so (test_bfloat16_is_refused).
"""
from __future__ import annotations

import collections
import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.numpy.util import promote_dtypes_inexact

import autodidax as adx
import autodidax.numpy as anp
from autodidax import dtypes, lax, lowering, nn, runtime
from autodidax.jaxpr import Jaxpr, Lit, Var
from autodidax.tree_util import tree_flatten

# --- Inputs ------------------------------------------------------------------

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "float16", "float32", "float64"]
WEAK = ["int", "float", "pybool"]   # Python scalars (a bool is never weak)
SPECS = DTYPES + WEAK
WIDE = {"int64", "uint64", "float64"}   # what JAX can't hold with x64 off

# Two values per spec: the first operand's, and the second's (never zero,
# so that divisions and remainders are defined).
_X = {"b": [True, False, True], "i": [-5, 0, 7], "u": [5, 0, 7],
      "f": [-1.5, 0., 2.5]}
_Y = {"b": [True, True, True], "i": [3, -2, 1], "u": [3, 2, 1],
      "f": [0.5, -2., 4.]}
_PY = {"int": (3, 2), "float": (1.5, -0.5), "pybool": (True, True)}


def value(spec: str, position: int = 0):
  if spec in _PY:
    return _PY[spec][position]
  kind = np.dtype(spec).kind
  return np.array((_X if position == 0 else _Y)[kind], spec)


# --- The functions, each with JAX's twin -------------------------------------

class Fn(NamedTuple):
  ours: Callable
  theirs: Callable
  arity: int = 1           # array operands (each drawn from SPECS)
  by_dtype: bool = False   # one more, static argument: a dtype from DTYPES
  arrays_only: bool = False   # no Python scalar operands
  makes_numpy: bool = False   # a Python scalar becomes a (strong) NumPy array


def _adopting(f, into=None):
  """jax.lax's `f` on Python scalars cast first, as autodidax.lax casts them
  (Part 2): to the array operands' dtype (or operand `into`'s), if that
  doesn't change it, else a TypeError; scalars alone to their join."""
  def g(*xs):
    try:
      return f(*xs)   # JAX takes them as they are (or raises, not for types)
    except TypeError:
      pass
    weak = [_is_weak(x) for x in xs]
    targets = [i for i, w in enumerate(weak)
               if (i == into if into is not None else not w)] or range(len(xs))
    dtype = jnp.result_type(*[xs[i] for i in targets])
    if jnp.result_type(*xs) != dtype:
      raise TypeError(f"a Python scalar can't adopt {dtype}")
    to_weak = all(weak[i] for i in targets)   # (int + 0. is a weak float)
    cast = (lambda x: jnp.add(x, 0.)) if to_weak else (
        lambda x: jnp.asarray(x, dtype))
    return f(*[cast(x) if w and jnp.result_type(x) != dtype else x
               for x, w in zip(xs, weak)])
  return g


def _is_weak(x) -> bool:
  return type(x) in (int, float) or getattr(getattr(x, "aval", None),
                                             "weak_type", False)


def _np_fn(name, arity=1, **kw):
  return Fn(getattr(anp, name), getattr(jnp, name), arity, **kw)


_JAX_LAX_NAMES = {"greater": "gt", "greater_equal": "ge", "less": "lt",
                  "less_equal": "le"}


def _lax_fn(name, arity=1):
  theirs = getattr(jax.lax, _JAX_LAX_NAMES.get(name, name))
  return Fn(getattr(lax, name), _adopting(theirs) if arity > 1 else theirs,
            arity)


def _both(f, arity=1, **kw):
  """`f(module)` for ours (anp, lax, nn) and JAX's: one spelling for both."""
  ours = f(collections.namedtuple("M", "np lax nn")(anp, lax, nn))
  theirs = f(collections.namedtuple("M", "np lax nn")(jnp, jax.lax, jax.nn))
  return Fn(ours, theirs, arity, **kw)


_COND = np.array([True, False, True])

FUNCTIONS: dict[str, Fn] = {
    **{f"np.{n}": _np_fn(n) for n in [
        "abs", "absolute", "negative", "sign", "floor", "round", "square",
        "sin", "cos", "exp", "log", "tanh", "sqrt", "invert", "bitwise_not",
        "logical_not", "ravel", "transpose", "squeeze", "sum", "prod", "max",
        "min", "amax", "amin", "mean", "argmax", "argmin", "cumsum",
        "zeros_like", "ones_like"]},
    # asarray(2.) is a NumPy array, and NumPy arrays have no weak type (Part 2)
    **{f"np.{n}": _np_fn(n, makes_numpy=True) for n in ["asarray", "array"]},
    **{f"np.{n}": _np_fn(n, 2) for n in [
        "add", "subtract", "multiply", "divide", "true_divide",
        "floor_divide", "remainder", "mod", "power", "maximum", "minimum",
        "equal", "not_equal", "greater", "greater_equal", "less",
        "less_equal", "bitwise_and", "bitwise_or", "bitwise_xor",
        "logical_and", "logical_or", "logical_xor", "matmul"]},
    # jnp.dot of an int array and a Python int trips over its own
    # preferred_element_type check (a TypeError, in JAX 0.10.2); with any
    # other scalar it multiplies, as NumPy and autodidax do with every one.
    "np.dot": Fn(anp.dot, lambda a, b: jnp.multiply(a, b) if 0 in (
        jnp.ndim(a), jnp.ndim(b)) else jnp.dot(a, b), 2),
    "np.rsqrt": Fn(anp.rsqrt, lambda x: jax.lax.rsqrt(
        promote_dtypes_inexact(x)[0])),   # (jax.numpy has no rsqrt)
    "np.expand_dims": _both(lambda m: lambda x: m.np.expand_dims(x, 0)),
    "np.reshape": _both(lambda m: lambda x: m.np.reshape(x, (-1, 1))),
    "np.moveaxis": _both(
        lambda m: lambda x: m.np.moveaxis(m.np.reshape(x, (1, -1)), 0, 1)),
    "np.broadcast_to": _both(lambda m: lambda x: m.np.broadcast_to(x, (2, 3))),
    "np.full_like": _both(lambda m: lambda x: m.np.full_like(x, 2)),
    "np.clip": _both(lambda m: lambda x, y: m.np.clip(x, y), 2),
    "np.clip_both": _both(lambda m: lambda x: m.np.clip(x, 0, 2)),
    "np.where": _both(lambda m: lambda x, y: m.np.where(_COND, x, y), 2),
    "np.where_relu": _both(lambda m: lambda x: m.np.where(x > 0, x, 0.)),
    "np.concatenate": _both(lambda m: lambda x, y: m.np.concatenate([x, y]), 2),
    "np.stack": _both(lambda m: lambda x, y: m.np.stack([x, y]), 2),
    "np.getitem_int": _both(lambda m: lambda x: m.np.asarray(x)[1],
                            arrays_only=True),
    "np.getitem_slice": _both(lambda m: lambda x: m.np.asarray(x)[::-1],
                              arrays_only=True),
    "np.getitem_none": _both(lambda m: lambda x: m.np.asarray(x)[None],
                             arrays_only=True),
    "np.astype": _both(lambda m: lambda x, d: m.np.astype(x, d), by_dtype=True),
    "np.zeros": _both(lambda m: lambda d: m.np.zeros(3, d), 0, by_dtype=True),
    "np.ones": _both(lambda m: lambda d: m.np.ones(3, d), 0, by_dtype=True),
    "np.full": _both(lambda m: lambda d: m.np.full(3, 2, d), 0, by_dtype=True),
    "np.full_weak": _both(lambda m: lambda x: m.np.full(3, x)),
    "np.arange": _both(lambda m: lambda d: m.np.arange(3, dtype=d), 0,
                       by_dtype=True),
    "np.linspace": _both(lambda m: lambda d: m.np.linspace(0, 2, 3, dtype=d),
                         0, by_dtype=True),
    "np.eye": _both(lambda m: lambda d: m.np.eye(2, dtype=d), 0, by_dtype=True),
    "np.defaults": _both(lambda m: lambda: (
        m.np.zeros(2), m.np.ones(2), m.np.arange(3), m.np.arange(1.5),
        m.np.linspace(0, 1, 3), m.np.eye(2)), 0),
    **{f"nn.{n}": _both(lambda m, n=n: getattr(m.nn, n)) for n in [
        "softmax", "log_softmax", "logsumexp"]},
    "nn.one_hot": _both(lambda m: lambda x: m.nn.one_hot(x, 3)),
    **{f"lax.{n}": _lax_fn(n) for n in [
        "neg", "sign", "floor", "sqrt", "rsqrt", "exp", "log", "tanh", "sin",
        "cos", "abs", "bitwise_not", "stop_gradient"]},
    **{f"lax.{n}": _lax_fn(n, 2) for n in [
        "add", "sub", "mul", "div", "rem", "pow", "max", "min", "eq", "ne",
        "greater", "greater_equal", "less", "less_equal", "bitwise_and",
        "bitwise_or", "bitwise_xor"]},
    "lax.round": _both(lambda m: lambda x: m.lax.round(x)),
    "lax.round_even": _both(lambda m: lambda x: m.lax.round(x, 1)),
    "lax.integer_pow": _both(lambda m: lambda x: m.lax.integer_pow(x, 3)),
    "lax.integer_pow_neg": _both(lambda m: lambda x: m.lax.integer_pow(x, -2)),
    **{f"lax.{n}": _both(lambda m, n=n: lambda x: getattr(m.lax, n)(
        m.np.reshape(x, (1, -1)), (1,))) for n in [
        "reduce_sum", "reduce_max", "reduce_min", "reduce_prod"]},
    "lax.argmax": _both(lambda m: lambda x, d: m.lax.argmax(
        m.np.reshape(x, (-1,)), 0, d), by_dtype=True),
    "lax.argmin": _both(lambda m: lambda x: m.lax.argmin(
        m.np.reshape(x, (-1,)), 0, np.int32)),
    "lax.cumsum": _both(lambda m: lambda x: m.lax.cumsum(
        m.np.reshape(x, (-1,)), 0, reverse=True)),
    "lax.broadcast": _both(lambda m: lambda x: m.lax.broadcast(x, (2,))),
    "lax.broadcast_in_dim": _both(lambda m: lambda x: m.lax.broadcast_in_dim(
        m.np.reshape(x, (-1,)), (2, np.size(x)), (1,))),
    "lax.transpose": _both(lambda m: lambda x: m.lax.transpose(
        m.np.reshape(x, (1, -1)), (1, 0))),
    "lax.reshape": _both(lambda m: lambda x: m.lax.reshape(x, (1, np.size(x)))),
    "lax.squeeze": _both(lambda m: lambda x: m.lax.squeeze(
        m.np.reshape(x, (1, -1)), (0,))),
    "lax.expand_dims": _both(lambda m: lambda x: m.lax.expand_dims(x, (0,))),
    "lax.rev": _both(lambda m: lambda x: m.lax.rev(
        m.np.reshape(x, (-1,)), (0,))),
    "lax.slice": _both(lambda m: lambda x: m.lax.slice(
        m.np.reshape(x, (-1,)), (1,), (np.size(x),))),
    "lax.dynamic_slice": _both(lambda m: lambda x: m.lax.dynamic_slice(
        m.np.reshape(x, (-1,)), (1,), (1,))),
    "lax.dynamic_update_slice": _both(
        lambda m: lambda x, y: m.lax.dynamic_update_slice(x, y, (0,)), 2),
    "lax.pad": Fn(lambda x, y: lax.pad(x, y, [(1, 0, 1)] * np.ndim(x)),
                  lambda x, y: _adopting(lambda a, b: jax.lax.pad(
                      a, b, [(1, 0, 1)] * np.ndim(x)), 0)(x, y), 2),
    "lax.concatenate": _both(
        lambda m: lambda x, y: m.lax.concatenate([x, y], 0), 2),
    "lax.convert_element_type": _both(
        lambda m: lambda x, d: m.lax.convert_element_type(x, d), by_dtype=True),
    "lax.dot_general": _both(lambda m: lambda x, y: m.lax.dot_general(
        x, y, (((0,), (0,)), ((), ()))), 2),
    "lax.select_n": _both(lambda m: lambda x, y: m.lax.select_n(_COND, x, y),
                          2),
    # clamp's Python scalars keep their dtype, as in JAX (not adopting x's)
    "lax.clamp": _both(lambda m: lambda x, y: m.lax.clamp(y, x, y), 2),
    "lax.cond": _both(lambda m: lambda x, y: m.lax.cond(
        True, lambda a, b: a, lambda a, b: b, x, y), 2),
    "lax.switch": _both(lambda m: lambda x: m.lax.switch(
        1, [lambda a: a, lambda a: a], x)),
    "lax.while_loop": _both(lambda m: lambda x: m.lax.while_loop(
        lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1]), (0, x))),
    "lax.fori_loop": _both(lambda m: lambda x: m.lax.fori_loop(
        0, 2, lambda i, c: c, x)),
    "lax.scan": _both(lambda m: lambda x, y: m.lax.scan(
        lambda c, a: (c, (a, c)), x, m.np.stack([y, y]))[1], 2),
}

# Names of autodidax.numpy/lax/nn that are not functions of arrays, or are
# checked elsewhere: what each one is.
NOT_AUDITED = {
    "np.result_type": "a dtype, not an array (test_numpy_api's promotion tests)",
    "np.promote_types": "a dtype (test_numpy_api: the whole lattice)",
    "np.install_tracer_methods": "installs operators (the functions above)",
    "np.canonicalize_axis": "an axis helper", "np.is_array": "a predicate",
    "lax.binary_dtype": "the typing helper every binary op above uses",
    "lax.dot_dtype": "dot_general's typing helper (lax.dot_general above)",
    "lax.typed_impl": "a rule helper", "lax.not_in_autodidax": "an error",
    "lax.as_shaped": "an aval helper", "lax.get_aval": "an aval helper",
    "lax.canonicalize_axis": "an axis helper",
    "lax.lowest": "a dtype's identity of max", "lax.highest": "of min",
    "lax.python_scalar": "the impl rules' helper for weak results",
    "lax.integer_exponent": "pow's typing helper (lax.pow above)",
    "lax.convert_values": "convert_element_type's impl (above)",
    "lax.supported": "the impl rules' dtype check (test_bfloat16_is_refused)",
}


# --- Cases -------------------------------------------------------------------

class Case(NamedTuple):
  fn: str
  specs: tuple     # the operands' specs
  dtype: str = ""  # the static dtype argument, for by_dtype functions

  @property
  def id(self) -> str:
    return f"{self.fn}({', '.join(self.specs + ((self.dtype,) if self.dtype else ()))})"

  def args(self):
    return tuple(value(s, i) for i, s in enumerate(self.specs))

  def call(self, which: str, args):
    fn = getattr(FUNCTIONS[self.fn], which)
    return fn(*args, np.dtype(self.dtype)) if self.dtype else fn(*args)


def _operand_specs(arity, arrays_only):
  if arity == 0:
    return [()]
  if arity == 1:
    return [(s,) for s in (DTYPES if arrays_only else SPECS)]
  return ([(d, d) for d in DTYPES] + [(d, w) for d in DTYPES for w in WEAK]
          + [("float", d) for d in DTYPES] + [(a, b) for a in WEAK for b in WEAK])


CASES = [Case(name, specs, d)
         for name, f in FUNCTIONS.items()
         for specs in _operand_specs(f.arity, f.arrays_only)
         for d in (DTYPES if f.by_dtype else [""])]


def _fits_x32(case: Case) -> bool:
  if case.fn == "lax.clamp" and set(WEAK) & set(case.specs):
    return False   # clamp's Python scalars keep their own dtype: 32 bits in JAX without x64
  return not WIDE & set(case.specs)


# --- Running them ------------------------------------------------------------
# An outcome is an Err, or a list of (value, dtype, weak_type) per output leaf
# (the value is None where only the types were computed).

KINDS = (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError,
         NotImplementedError)


def _kind(e: BaseException) -> type:
  return next((k for k in KINDS if isinstance(e, k)), type(e))


class Err(NamedTuple):
  kind: type
  message: str


def _types_ours(x):
  return dtypes.dtype_and_weak(x)


def _types_theirs(x):
  x = jnp.asarray(x)   # (JAX's loops may return an input as it is)
  return x.dtype, x.aval.weak_type


class _Batch:
  """Every case of `cases` in one function of `lib` ("ours" or "theirs") for
  its jit to trace: with `as_args`, the inputs are its arguments (traced:
  a Python scalar becomes a weakly typed tracer); else it closes over them,
  as eager code sees them. It returns all outputs as one flat list, and
  records where each case's outputs are, their types, and each error."""

  def __init__(self, lib, cases, as_args):
    self.lib, self.cases, self.as_args = lib, cases, as_args
    self.where, self.outcomes = {}, {}

  def __call__(self, all_args=None):
    flat = []
    leaves, types = ((lambda t: tree_flatten(t)[0], _types_ours)
                     if self.lib == "ours" else
                     (jax.tree_util.tree_leaves, _types_theirs))
    for i, case in enumerate(self.cases):
      args = all_args[i] if self.as_args else case.args()
      try:
        out = leaves(case.call(self.lib, args))
      except Exception as e:  # noqa: BLE001 (the error is the outcome)
        self.outcomes[case.id] = Err(_kind(e), str(e))
        continue
      self.where[case.id] = (len(flat), len(out))
      self.outcomes[case.id] = [(None, *types(x), np.shape(x)) for x in out]
      flat.extend(out)
    return flat


def _types(lib, cases):
  """Types and errors under jit, the inputs traced (staging only)."""
  batch = _Batch(lib, cases, as_args=True)
  args = [c.args() for c in cases]
  (adx.make_jaxpr if lib == "ours" else jax.make_jaxpr)(batch)(args)
  return batch.outcomes


def _values(lib, cases, chunk=300):
  """Values under jit, the inputs closed over. XLA folds such a program
  into constants while compiling it, which takes a fraction of the time
  that compiling code for every case would; values agree with the compiled
  code's to the tolerances below. A chunk that fails to compile is split
  until the failing case is found."""
  outcomes = {}
  for k in range(0, len(cases), chunk):
    part = cases[k:k + chunk]
    batch = _Batch(lib, part, as_args=False)
    try:
      flat = _compile_and_run(lib, batch)
    except Exception as e:  # noqa: BLE001
      if len(part) == 1:
        outcomes[part[0].id] = Err(_kind(e), f"(compiling) {e}")
      else:
        outcomes.update(_values(lib, part, chunk=max(1, len(part) // 2)))
      continue
    for case_id, o in batch.outcomes.items():
      if isinstance(o, Err):
        outcomes[case_id] = o
      else:
        start, n = batch.where[case_id]
        outcomes[case_id] = [(np.asarray(v), d, w, shape) for v, (_, d, w, shape)
                             in zip(flat[start:start + n], o)]
  return outcomes


def _compile_and_run(lib, batch):
  if lib == "theirs":
    return jax.jit(batch)()
  # Ours: our jit's jaxpr and our lowering, with the constants the jaxpr
  # closes over written into the program (our jit passes them as arguments,
  # which XLA can't fold).
  closed = adx.jit(batch).lower().jaxpr
  sub = {v: Lit(c) for v, c in zip(closed.jaxpr.constvars, closed.consts)}
  inline = lambda xs: [sub.get(x, x) if isinstance(x, Var) else x for x in xs]
  j = closed.jaxpr
  jaxpr = Jaxpr([], [], [e._replace(inputs=inline(e.inputs)) for e in j.eqns],
                inline(j.outvars))
  exe = runtime.compile(lowering.lower_jaxpr(jaxpr))
  return [runtime.to_numpy(b) for b in exe.execute([])]


# Where XLA's constant folding computes something else than its compiled code
# (and so than JAX eagerly), JAX's values are taken eagerly: softmax of uint64
# wraps around to inf, and inf / inf folds to nan but runs as 0.
FOLDING_DIFFERS = {"nn.softmax(uint64)"}


def _eager_theirs(cases):
  outcomes = {}
  for case in cases:
    try:
      out = jax.tree_util.tree_leaves(case.call("theirs", case.args()))
      outcomes[case.id] = [(np.asarray(x), *_types_theirs(x), np.shape(x))
                           for x in out]
    except Exception as e:  # noqa: BLE001
      outcomes[case.id] = Err(_kind(e), str(e))
  return outcomes


def _eager(cases):
  outcomes = {}
  for case in cases:
    try:
      out = tree_flatten(case.call("ours", case.args()))[0]
      outcomes[case.id] = [(np.asarray(x), *_types_ours(x), np.shape(x))
                           for x in out]
    except Exception as e:  # noqa: BLE001
      outcomes[case.id] = Err(_kind(e), str(e))
  return outcomes


@pytest.fixture(scope="module")
def results():
  """Every case, run once each way: ours eagerly; ours and JAX's under jit,
  traced (types) and folded (values); JAX's with x64 on and off."""
  x32_cases = [c for c in CASES if _fits_x32(c)]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # JAX's "int64 is not available" (x64 off)
    out = {"eager": _eager(CASES),
           "jit types": _types("ours", CASES),
           "jit values": _values("ours", CASES),
           ("x64", "types"): _types("theirs", CASES),
           ("x64", "values"): _values("theirs", CASES)}
    with jax.enable_x64(False):
      out["x32", "types"] = _types("theirs", x32_cases)
      out["x32", "values"] = _values("theirs", x32_cases)
    for x64, cases in [("x64", CASES), ("x32", x32_cases)]:
      with jax.enable_x64(x64 == "x64"):
        out[x64, "values"].update(_eager_theirs(
            [c for c in cases if c.id in FOLDING_DIFFERS]))
  return out


# --- Comparing ---------------------------------------------------------------

_NARROW = {np.dtype(a): np.dtype(b)
           for a, b in [("i8", "i4"), ("u8", "u4"), ("f8", "f4"), ("c16", "c8")]}
_PYTHON_DTYPES = {np.dtype("i8"), np.dtype("f8")}
_RTOL = {"f2": 2e-3, "f4": 1e-5, "f8": 1e-12}
# Where JAX itself crashes (lax.dynamic_update_slice of a Python float reads
# its `.ndim`; vmap of select_n with a mismatched selector fails an
# assertion), ours must raise one of the ordinary kinds of error.
_CRASH = {AttributeError: KINDS, AssertionError: KINDS}


def _show(outcome) -> str:
  if isinstance(outcome, Err):
    return f"raises {outcome.kind.__name__}: {outcome.message[:120]}"
  return ", ".join(
      f"{'' if v is None else f'{v!r:.60} '}({d}{list(s)}{', weak' if w else ''})"
      for v, d, w, s in outcome)


def mismatch(ours, theirs, *, narrow: bool, eager: bool,
             makes_numpy: bool = False, zeros: bool = False,
             loose: bool = False) -> str | None:
  """What differs between our outcome and JAX's, or None. With `narrow`,
  our 64-bit dtypes count as their 32-bit ones (JAX with x64 off); with
  `zeros`, the signs of zeros must agree too; with `loose`, floats to the
  square root of their precision (derivatives, whose terms may cancel: XLA
  fuses JAX's compiled ones, and rounds differently)."""
  both = f"ours {_show(ours)}; JAX {_show(theirs)}"
  if isinstance(theirs, Err) or isinstance(ours, Err):
    if (isinstance(theirs, Err) and isinstance(ours, Err)
        and ours.kind in (theirs.kind, *_CRASH.get(theirs.kind, ()))):
      return None
    return both
  if len(ours) != len(theirs):
    return both
  python = {_NARROW[d] for d in _PYTHON_DTYPES} if narrow else _PYTHON_DTYPES
  for (ov, od, ow, oshape), (tv, td, tw, tshape) in zip(ours, theirs):
    od = _NARROW.get(od, od) if narrow else od
    # Eagerly, only a Python scalar (a 0-d int or float) can be weak: unless ours,
    # like JAX's, came out of a compiled call (`where` stages a jit of its own).
    want_weak = tw and not makes_numpy and (
        not eager or (tshape == () and td in python))
    if od != td or ow not in (want_weak, tw) or tuple(oshape) != tuple(tshape):
      return both + (" (eagerly, only a Python int or float is weak)"
                     if eager and tw and not want_weak else "")
    if isinstance(td, str):   # (JAX's float0: no values to compare)
      continue
    if ov is not None and tv is not None and not _same_values(
        ov.astype(td), tv, zeros, loose):
      return f"values differ: {both}"
  return None


def _same_values(o, t, zeros=False, loose=False) -> bool:
  """Equal, or for floats close (NaN equals NaN, inf inf). The signs of
  zeros count only with `zeros` (test_edge_cases)."""
  if t.dtype.kind != "f":
    return np.array_equal(o, t)
  rtol = _RTOL[t.dtype.str[1:]]
  if loose:
    rtol = max(rtol, float(np.sqrt(np.finfo(t.dtype).eps)))
  o, t = o.astype(np.float64), t.astype(np.float64)
  same = np.isclose(o, t, rtol=rtol, atol=rtol, equal_nan=True)
  if zeros:
    same &= (o != 0) | (t != 0) | (np.signbit(o) == np.signbit(t))
  return bool(np.all(same))


MODES = ["eager", "jit"]
X64 = ["x64", "x32"]


@pytest.mark.parametrize("x64", X64)
@pytest.mark.parametrize("how", MODES)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_dtypes_and_weak_types_as_jax(results, name, how, x64):
  cases = [c for c in CASES if c.fn == name and (x64 == "x64" or _fits_x32(c))]
  runs = ([("eager", "values")] if how == "eager" else
          [("jit types", "types"), ("jit values", "values")])
  problems = []
  for ours, theirs in runs:
    for case in cases:
      why = mismatch(results[ours][case.id], results[x64, theirs][case.id],
                     narrow=x64 == "x32", eager=how == "eager",
                     makes_numpy=(FUNCTIONS[name].makes_numpy
                                  and ours != "jit types"))
      if why:
        problems.append(f"{case.id} ({ours}): {why}")
  assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(
      problems[:25])


def test_every_function_is_audited():
  """Every public function of autodidax.numpy, .lax and .nn is a case here
  (or listed in NOT_AUDITED with the reason)."""
  audited = set(FUNCTIONS) | set(NOT_AUDITED)
  prefixes = {"np": anp, "lax": lax, "nn": nn}
  missing = []
  for prefix, module in prefixes.items():
    for name, obj in vars(module).items():
      if (name.startswith("_") or isinstance(obj, type) or not callable(obj)
          or not getattr(obj, "__module__", "").startswith("autodidax")):
        continue
      if not any(a == f"{prefix}.{name}" or a.startswith(f"{prefix}.{name}_")
                 for a in audited):
        missing.append(f"{prefix}.{name}")
  assert not missing, f"not audited: {missing}"


def test_jax_eager_agrees_with_jax_jit(results):
  """The oracle's premise: JAX eagerly gives what its folded program gives.
  One case per function (its float32 case, or its first), run eagerly."""
  sample = {}
  for case in CASES:
    first = sample.setdefault(case.fn, case)
    if "float32" in case.specs and "float32" not in first.specs:
      sample[case.fn] = case
  problems = []
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for case in sample.values():
      eager = _eager_theirs([case])[case.id]
      why = mismatch(eager, results["x64", "values"][case.id], narrow=False,
                     eager=False)
      if why:
        problems.append(f"{case.id}: {why}")
  assert not problems, "\n".join(problems)


BF16 = jnp.bfloat16


@pytest.mark.parametrize("how", MODES)
def test_bfloat16_is_refused(how):
  """NumPy has no bfloat16, so autodidax has none: each function refuses a
  bfloat16 operand (or dtype) with a TypeError that says so, where JAX
  computes."""
  x = np.array([1., 2., 3.], BF16)
  quiet = []
  for name, f in FUNCTIONS.items():
    if f.arity == 0:
      continue
    args = ((x, x[0]) if name == "lax.pad" else (x,) * f.arity) + (
        (np.dtype(BF16),) if f.by_dtype else ())
    run = f.ours if how == "eager" else adx.jit(f.ours, static_argnums=(
        (f.arity,) if f.by_dtype else ()))
    try:
      run(*args)
    except TypeError as e:
      if "bfloat16" not in str(e):
        quiet.append(f"{name}: TypeError without the word bfloat16: {e}")
      continue
    except Exception as e:  # noqa: BLE001
      quiet.append(f"{name}: {type(e).__name__}: {e}")
      continue
    quiet.append(f"{name}: returned a result")
  for name in ["np.astype", "lax.convert_element_type", "np.zeros"]:
    f = FUNCTIONS[name]
    try:
      f.ours(*((np.ones(3, np.float32),) * f.arity), np.dtype(BF16))
      quiet.append(f"{name} to bfloat16: returned a result")
    except TypeError as e:
      if "bfloat16" not in str(e):
        quiet.append(f"{name} to bfloat16: {e}")
  assert not quiet, "\n".join(quiet)



# --- Collectives: over a named vmap axis --------------------------------------------------------

COLLECTIVES = {   # name: (ours, JAX's), each a function of (x, axis name)
    "lax.psum": (lax.psum, jax.lax.psum), "lax.pmean": (lax.pmean, jax.lax.pmean),
    "lax.pmax": (lax.pmax, jax.lax.pmax), "lax.pmin": (lax.pmin, jax.lax.pmin),
    "lax.all_gather": (lax.all_gather, jax.lax.all_gather),
    "lax.psum_scatter": (lambda x, i: lax.psum_scatter(x, i, tiled=True),
                         lambda x, i: jax.lax.psum_scatter(x, i, tiled=True)),
    "lax.ppermute": (lambda x, i: lax.ppermute(x, i, [(0, 1), (1, 0)]),
                     lambda x, i: jax.lax.ppermute(x, i, [(0, 1), (1, 0)])),
    "lax.axis_index": (lambda x, i: lax.axis_index(i) + 0 * x.astype(np.int32),
                       lambda x, i: jax.lax.axis_index(i) + 0 * x.astype(np.int32)),
}
NOT_AUDITED.update({name: "a collective: test_collective_dtypes_match_jax below"
                    for name in COLLECTIVES})
NOT_AUDITED["np.einsum"] = ("sums and dot_generals, whose dtypes are audited (np.sum, np.dot); "
                             "JAX 0.10.2's einsum raises on a narrow int array with a Python "
                             "int (its preferred_element_type check); test_numpy_api checks "
                             "its values")
NOT_AUDITED["lax.pcast"] = ("a cast of a value's varying axes inside shard_map, not of its dtype "
                             "(tests/many_devices_cases.py, against JAX)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_dtypes_match_jax(name, dtype):
  """Each collective on each dtype, under vmap with a named axis of size 2,
  eagerly and under jit: the same values, dtypes and weak types as JAX, or
  both raise."""
  ours_fn, theirs_fn = COLLECTIVES[name]
  x = (np.arange(8).reshape(2, 4) % 3).astype(dtype)
  def run(X, fn, wrap):
    f = X.vmap(lambda v: fn(v, "i"), axis_name="i")
    return (X.jit(f) if wrap else f)(x)
  for wrap in (False, True):
    try:
      want = run(jax, theirs_fn, wrap)
    except (TypeError, ValueError):
      with pytest.raises((TypeError, ValueError)):
        run(adx, ours_fn, wrap)
      continue
    got = run(adx, ours_fn, wrap)
    o, t = np.asarray(got), np.asarray(want)
    assert o.dtype == t.dtype and o.shape == t.shape, (wrap, o.dtype, t.dtype, o.shape, t.shape)
    np.testing.assert_allclose(o.astype(np.float64), t.astype(np.float64), rtol=1e-6)
    assert getattr(got, "weak_type", False) == getattr(want, "weak_type", False), wrap
