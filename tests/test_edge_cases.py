"""Edge cases against JAX: every function of the audit's table (each
autodidax.numpy, lax and nn function, see test_dtype_audit) on empty arrays,
0-d arrays, ±0, ±inf, NaN and extreme integers, and on out-of-range indices,
eagerly and under jit, vmap, jvp and grad. Values, dtypes, weak types and
the signs of zeros must be JAX's (derivatives to the square root of their
precision, and zeros' signs aside: their terms may cancel, and JAX's come
from fused, compiled code); where JAX raises, ours raises the same kind of
error.

Each input set packs its special values into one array, so that a function
meets all of them in one call (a binary function gets every pair of them).

JAX's results are recorded in tests/fixtures/edge_cases_jax.npz, computed as
JAX computes them at run time: eagerly, and compiled under jit. (Folding them
into constants, as test_dtype_audit does for ordinary values, gets special
values wrong: XLA's constant folder makes sign(-0.) 0. and crashes on an
integer divided by 0, so it is no oracle here; and compiling every case anew
takes minutes.) `test_records_are_jax` recomputes a sample live, and
`test_records_cover_every_case` fails when a case is added or changed:
`python tests/test_edge_cases.py --record` records them again.

Two differences are deliberate (Part 2 says why): an out-of-bounds static
index raises IndexError here, where JAX clamps it; and the tangent of an
integer output is zeros of its dtype here, where JAX has a float0 array.
"""
from __future__ import annotations

import builtins
import json
import pathlib
import random
import sys
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import lax, nn
from autodidax.tree_util import tree_flatten
from test_dtype_audit import (FUNCTIONS, Err, Fn, _Batch, _kind, _types_ours,
                              mismatch)

RECORD = pathlib.Path(__file__).parent / "fixtures" / "edge_cases_jax.npz"

# --- Inputs: special values, packed ------------------------------------------

# (1e30 overflows float32 when squared; -1e-3 keeps derivatives of x / y at
# x == y clear of cancellation, where rounding alone decides the result)
_F = [-0., 0., np.inf, -np.inf, np.nan, 1.5, -2.5, 1e30, -1e-3, 3.]
_I32 = np.iinfo(np.int32)
SPECIAL = {
    "f64": np.array(_F), "f32": np.array(_F, np.float32),
    "i32": np.array([_I32.min, -7, -1, 0, 1, 2, _I32.max], np.int32),
    "u8": np.array([0, 1, 2, 200, 255], np.uint8),
    "empty": np.zeros(0), "0d": np.array(-0.),
}
FLOATS = {"f64", "f32", "empty", "0d"}
_IDX = [-20, -1, 0, 9, 20]   # out-of-range and edge indices into 10 elements


def operands(inputs: str, arity: int):
  """`arity` operands from one set; for two, every pair of its values."""
  if inputs.startswith("i="):   # (x, an index)
    i = _IDX if inputs == "i=all" else int(inputs[2:])
    return SPECIAL["f64"], np.array(i)
  if inputs == "labels":
    return (np.array(_IDX),)
  x = SPECIAL[inputs]
  if arity == 1:
    return (x,)
  if inputs == "0d":
    return np.array(np.inf), x
  return np.repeat(x, len(x)), np.tile(x, len(x))


class _M(NamedTuple):
  np: object
  lax: object
  nn: object


_OURS, _THEIRS = _M(anp, lax, nn), _M(jnp, jax.lax, jax.nn)

# Indexing out of range, with a traced index (the second operand) or a
# static one; one_hot of labels out of range.
_INDEXING = {
    "getitem_traced": (lambda m: lambda x, i: m.np.asarray(x)[i], 2),
    "dynamic_slice": (lambda m: lambda x, i: m.lax.dynamic_slice(
        x, (i,), (3,)), 2),
    "dynamic_update_slice": (lambda m: lambda x, i: (
        m.lax.dynamic_update_slice(x, x[:3] * 2., (i,))), 2),
    "switch": (lambda m: lambda x, i: m.lax.switch(
        i, [lambda v: v, lambda v: -v, lambda v: v * 2.], x), 2),
    "one_hot": (lambda m: lambda i: m.nn.one_hot(i, 3), 1),
    "getitem_static": (lambda m: lambda x: m.np.asarray(x)[20], 1),
    "getitem_static_negative": (lambda m: lambda x: m.np.asarray(x)[-20], 1),
}
ALL = {**{n: f for n, f in FUNCTIONS.items() if f.arity},
       **{f"index.{n}": Fn(make(_OURS), make(_THEIRS), arity)
          for n, (make, arity) in _INDEXING.items()}}



def deliberate(case):
  """What ours does instead of JAX's, where it differs on purpose (Part 2
  says why): an index out of range that is known when the code runs (a
  static one, or a concrete one, even under jvp) raises IndexError;
  JAX clamps it."""
  if case.fn.startswith("index.getitem_static") or (
      case.fn == "index.getitem_traced" and case.how != "jit"
      and case.inputs in ("i=-20", "i=20")):
    return IndexError
  return None

# --- Cases -------------------------------------------------------------------

TRANSFORMS = ["eager", "jit", "vmap", "jvp", "grad"]


class EdgeCase(NamedTuple):
  fn: str
  inputs: str   # a key of SPECIAL, or "i=<index>", "i=all", "labels"
  how: str      # one of TRANSFORMS
  dtype: str = ""

  @property
  def id(self) -> str:
    extra = f", {self.dtype}" if self.dtype else ""
    return f"{self.how} {self.fn}({self.inputs}{extra})"

  def args(self):
    return operands(self.inputs, ALL[self.fn].arity)

  def call(self, lib, args):
    f = getattr(ALL[self.fn], lib)
    if self.dtype:
      f = (lambda f, d: lambda *a: f(*a, d))(f, np.dtype(self.dtype))
    return transform(lib, self.how, f, args)(*args)


def transform(lib, how, f, args):
  """`f` under `how`, in our library or JAX's. jvp and grad differentiate
  with respect to the float operands (the others are held fixed)."""
  ours = lib == "ours"
  if how in ("eager", "jit"):   # (jit: the caller compiles it)
    return f
  if how == "vmap":   # a scalar index is mapped alone
    axes = (None, 0) if len(args) == 2 and args[1].dtype.kind == "i" else 0
    return (adx.vmap if ours else jax.vmap)(f, in_axes=axes)
  wrt = [i for i, a in enumerate(args) if a.dtype.kind == "f"]

  def of_floats(*args):
    def g(*floats):
      full = list(args)
      for i, v in zip(wrt, floats):
        full[i] = v
      return f(*full)
    return g, [args[i] for i in wrt]

  if how == "jvp":
    def jvp(*args):
      g, floats = of_floats(*args)
      return (adx.jvp if ours else jax.jvp)(
          g, tuple(floats), tuple(np.ones_like(x) for x in floats))
    return jvp
  # grad of the sum of the first output
  total = anp.sum if ours else jnp.sum
  leaves = (lambda t: tree_flatten(t)[0]) if ours else jax.tree_util.tree_leaves

  def grad(*args):
    g, floats = of_floats(*args)
    return (adx.grad if ours else jax.grad)(
        lambda *v: total(leaves(g(*v))[0]), tuple(range(len(floats))))(*floats)
  return grad


def _input_sets(name, fn):
  if name.startswith("index."):
    if fn.arity == 1:
      return ["labels"] if "one_hot" in name else ["f64"]
    return [f"i={i}" for i in _IDX] + ["i=all"]
  return [s for s in SPECIAL if not (fn.arrays_only and s == "0d")]


def _applies(how, inputs):
  if inputs.startswith("i="):   # vmap maps a batch of indices
    return (how == "vmap") == (inputs == "i=all")
  if how == "jit":   # (compiling takes time: f32, u8 and 0-d run eagerly)
    return inputs in ("f64", "i32", "empty", "labels")
  if how == "vmap":
    return inputs != "0d"
  if how in ("jvp", "grad"):   # (ints have no derivatives: test_dtype_audit)
    return inputs in FLOATS
  return True


CASES = [EdgeCase(name, inputs, how, d)
         for name, fn in ALL.items()
         for inputs in _input_sets(name, fn)
         for how in TRANSFORMS if _applies(how, inputs)
         for d in (["int32", "uint8", "bool", "float16"] if fn.by_dtype
                   else [""])]

# --- Running them ------------------------------------------------------------
# An outcome is an Err or a list of (value, dtype, weak_type, shape).


def _leaves(lib, out):
  if lib == "ours":
    return [(np.asarray(x), *_types_ours(x), np.shape(x))
            for x in tree_flatten(out)[0]]
  return [(np.asarray(x), np.dtype(x.dtype), getattr(x, "weak_type", False),
           np.shape(x)) for x in jax.tree_util.tree_leaves(out)]


def run(lib, case):
  """One case, eagerly or (how == "jit") compiled, in one library."""
  args = case.args()
  try:
    if case.how == "jit":
      jit = adx.jit if lib == "ours" else jax.jit
      out = jit(lambda *a: case.call(lib, a))(*args)
    else:
      out = case.call(lib, args)
    return _leaves(lib, out)
  except Exception as e:  # noqa: BLE001 (the error is the outcome)
    return Err(_kind(e), str(e))


def _ours_jitted(cases):
  """Our jit on every case at once: one program, compiled (on a failure to
  compile, each half alone, down to the case that fails)."""
  batch = _Batch("ours", cases, as_args=True)
  try:
    flat = adx.jit(batch)([c.args() for c in cases])
  except Exception as e:  # noqa: BLE001
    if len(cases) == 1:
      return {cases[0].id: Err(_kind(e), f"(compiling) {e}")}
    half = len(cases) // 2
    return {**_ours_jitted(cases[:half]), **_ours_jitted(cases[half:])}
  outcomes = {}
  for case_id, o in batch.outcomes.items():
    if isinstance(o, Err):
      outcomes[case_id] = o
    else:
      start, n = batch.where[case_id]
      outcomes[case_id] = [(np.asarray(v), d, w, s) for v, (_, d, w, s)
                           in zip(flat[start:start + n], o)]
  return outcomes


def _quiet():
  warnings.simplefilter("ignore")
  return np.errstate(all="ignore")


# --- The records of JAX's results --------------------------------------------

def as_recorded(outcome):
  """JAX's outcome as the records hold it: a float0 leaf (JAX's tangent of
  an integer) as the dtype name "float0" and bool zeros."""
  if isinstance(outcome, Err):
    return outcome
  return [(np.zeros(v.shape, bool), "float0", w, s) if _is_float0(d)
          else (v, d, w, s) for v, d, w, s in outcome]


def record():
  """Run every case in JAX and store the outcomes (a few minutes)."""
  meta, arrays = {}, {}
  with warnings.catch_warnings(), _quiet():
    for i, case in enumerate(CASES):
      o = as_recorded(run("theirs", case))
      if isinstance(o, Err):
        meta[case.id] = ["error", o.kind.__name__, o.message[:300]]
        continue
      meta[case.id] = [[_dtype_name(d), bool(w), list(s)] for _, d, w, s in o]
      for k, (v, _, _, _) in enumerate(o):
        arrays[f"{i}/{k}"] = v
  header = {"jax": jax.__version__, "ids": [c.id for c in CASES],
            "outcomes": meta}
  np.savez_compressed(RECORD, header=np.array(json.dumps(header)), **arrays)


def _is_float0(dtype) -> bool:
  return not isinstance(dtype, str) and dtype == jax.dtypes.float0


def _dtype_name(dtype) -> str:
  return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def load_records():
  with np.load(RECORD, allow_pickle=False) as data:
    header = json.loads(str(data["header"]))
    outcomes = {}
    for i, case_id in enumerate(header["ids"]):
      o = header["outcomes"][case_id]
      if o[0] == "error":
        outcomes[case_id] = Err(getattr(builtins, o[1], Exception), o[2])
      else:
        outcomes[case_id] = [
            (data[f"{i}/{k}"], "float0" if d == "float0" else np.dtype(d), w,
             tuple(s)) for k, (d, w, s) in enumerate(o)]
  return header, outcomes


@pytest.fixture(scope="module")
def results():
  header, theirs = load_records()
  with warnings.catch_warnings(), _quiet():
    ours = {c.id: run("ours", c) for c in CASES if c.how != "jit"}
    ours.update(_ours_jitted([c for c in CASES if c.how == "jit"]))
  return header, ours, theirs


def _float0_as_zeros(ours, theirs):
  """JAX's float0 tangent of an integer output, as ours is: zeros of the
  output's dtype (autodidax has no float0)."""
  if isinstance(ours, Err) or isinstance(theirs, Err) or len(ours) != len(
      theirs):
    return theirs
  return [(np.zeros_like(o[0]), o[1], o[2], t[3])
          if isinstance(t[1], str) and o[1].kind in "biu" else t
          for o, t in zip(ours, theirs)]


def compare(case, ours, theirs):
  kind = deliberate(case)
  if kind is not None:
    if isinstance(ours, Err) and ours.kind is kind:
      return None
    return f"expected {kind.__name__} (JAX clamps), got {ours}"
  return mismatch(ours, _float0_as_zeros(ours, theirs), narrow=False,
                  eager=case.how != "jit",
                  makes_numpy=ALL[case.fn].makes_numpy,
                  zeros=case.how not in ("jvp", "grad"),
                  loose=case.how in ("jvp", "grad"))


# --- Tests -------------------------------------------------------------------

@pytest.mark.parametrize("how", TRANSFORMS)
@pytest.mark.parametrize("name", sorted(ALL))
def test_edge_cases_as_jax(results, name, how):
  _, ours, theirs = results
  cases = [c for c in CASES if c.fn == name and c.how == how]
  problems = [f"{c.id}: {why}" for c in cases
              if (why := compare(c, ours[c.id], theirs[c.id]))]
  assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(
      problems[:20])


def test_records_cover_every_case(results):
  header, _, _ = results
  assert header["jax"] == jax.__version__, "recorded with another JAX"
  assert header["ids"] == [c.id for c in CASES], (
      "the cases changed: run `python tests/test_edge_cases.py --record`")


def test_records_are_jax(results):
  """A sample of the records, recomputed with the installed JAX."""
  _, _, theirs = results
  sample = random.Random(0).sample(CASES, 40)
  problems = []
  with warnings.catch_warnings(), _quiet():
    for case in sample:
      why = mismatch(as_recorded(run("theirs", case)), theirs[case.id],
                     narrow=False, eager=False, zeros=True)
      if why:
        problems.append(f"{case.id}: {why}")
  assert not problems, "\n".join(problems)


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
  jax.config.update("jax_enable_x64", True)
  record()
  print(f"recorded {len(CASES)} cases in {RECORD}")
