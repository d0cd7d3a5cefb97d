"""Probes: what an exercise's check measures, as values.

Every exercise has one probe, a function in `coursekit/learner/probes/<part>.py`:

    @probe("1.2", answers=("tanh_jvp",))
    def probe_1_2(p, tanh_jvp):
      x = p.rng.normal(size=7)                       # inputs come from the seeded rng
      with ad.jvp_rules.override(lax.tanh_p, tanh_jvp):
        y, y_dot = p.call("jvp of tanh", adx.jvp, lax.tanh, (x,), (np.ones(7),))
      p.value("primal output", y)
      p.value("tangent output", y_dot)

It runs the learner's answers (looked up by name in the notebook's namespace)
on inputs drawn from `p.rng` and records, in order, labelled values: arrays,
numbers, strings, structures, and the names of exceptions raised. It never
decides whether they are right. That is `compare`'s job, which holds the
learner's records against the reference solution's records for the same
seed, using only the reference's labels and tolerances.

The same probe serves two places:

* In JupyterLab, a check cell calls `checks.check("1.2", globals())`: the probe
  runs in the learner's kernel at seed 0 and is compared with the reference's
  seed-0 records, stored beside the stubs by `make exercises`. Instant feedback.
* The grader runs it in a sandbox per (submission, exercise), at a seed of its
  choosing (never 0), against a learner edition of the library in which the
  exercise's targets are absent, and compares outside the sandbox
  (`coursekit.grader`).

So a learner's notebook can only change its own records: editing a check cell,
or patching anything, can never make a wrong answer's values right. For that,
every probe draws inputs from `p.rng` that change its records (`make
exercises` refuses a probe whose records are the same at two seeds), so that
the records shipped for seed 0 answer nothing at the grader's seed.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field

import numpy as np

RTOL, ATOL = 1e-7, 1e-9
MESSAGE_LIMIT = 600
SHIPPED_SEED = 0
RECURSION_HINT = ("your answer calls itself without end: while the check runs, the rule tables "
                  "and the library functions this exercise asks for hold your own answer, so an "
                  "answer that calls them calls itself")   # the learners' check cells run at it; its records ship with the stubs


class Stop(Exception):
  """Ends a probe early: the learner's code raised (the error is recorded)."""


@dataclass
class Spec:
  exercise: str
  fn: object
  answers: tuple          # names the probe takes from the notebook
  removes: dict           # {"autodidax.module:function": answer name or None}: see edition.py
  optional: tuple = ()    # names passed as None when the notebook lacks them


REGISTRY: dict[str, Spec] = {}


def probe(exercise: str, answers=(), removes=None, optional=()):
  """Register `fn(p, *answers)` as the probe of `exercise`, which asks the learner
  to write the library functions named in `removes` (absent from the grader's
  learner edition; each mapped to the answer that takes its place)."""
  def register(fn):
    REGISTRY[exercise] = Spec(exercise, fn, tuple(answers), dict(removes or {}), tuple(optional))
    return fn
  return register


def module_of(part: str) -> str:
  return f"coursekit.learner.probes.{part}"


def spec(part: str, exercise: str) -> Spec:
  importlib.import_module(module_of(part))
  return REGISTRY[exercise]


# --- Recording -------------------------------------------------------------------------

def encode(x, depth=0):
  """A JSON-able description of a value, for `compare`."""
  if depth > 20:
    return {"k": "other", "type": "too deeply nested"}
  if x is None or isinstance(x, (bool, str)):
    return {"k": "py", "v": x}
  if isinstance(x, int) and not isinstance(x, bool):
    return {"k": "py", "v": int(x)} if abs(x) < 2**62 else {"k": "py", "v": float(x)}
  if isinstance(x, float):   # np.float64 too: recorded (and shown) as the plain float
    return {"k": "py", "v": float(x) if math.isfinite(x) else repr(float(x)), "float": True}
  if isinstance(x, (tuple, list)):
    return {"k": type(x).__name__, "items": [encode(v, depth + 1) for v in x]}
  if isinstance(x, dict):
    return {"k": "dict", "items": {str(k): encode(v, depth + 1) for k, v in x.items()}}
  if type(x).__name__.endswith("Tracer"):
    return {"k": "other", "type": f"a tracer ({type(x).__name__})"}
  if isinstance(x, np.ndarray | np.generic) or hasattr(x, "__array__"):
    try:
      a = np.asarray(x)
    except Exception as e:  # noqa: BLE001 (a learner's object)
      return {"k": "other", "type": f"{type(x).__name__} (np.asarray raised {type(e).__name__})"}
    if a.dtype == object:
      return {"k": "other", "type": f"an object array ({type(x).__name__})"}
    data = a.astype(np.float64) if a.dtype.kind in "fc" and a.dtype.kind != "c" else a
    flat = [v if not isinstance(v, float) or math.isfinite(v) else repr(v)
            for v in data.ravel().tolist()]
    return {"k": "array", "dtype": str(a.dtype), "shape": list(a.shape), "data": flat}
  return {"k": "other", "type": type(x).__name__}


def short(text) -> str:
  text = " ".join(str(text).split())
  return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 1] + "…"


class Probe:
  """What a probe function receives: the seeded rng and the recording methods."""

  def __init__(self, exercise: str, seed: int, want=None):
    self.exercise, self.seed = exercise, seed
    self.rng = np.random.default_rng(seed)
    self.records: list[dict] = []
    self.inputs = ""
    self._want = want   # the reference's records: stop at the first that differs (tests)

  def given(self, **inputs):
    """Name the seeded inputs of the records that follow (until the next `given`):
    a failing case shows them, e.g. `p.given(x=x, t=t)` gives "(x = 0.42, t = -1.3)".
    Labels themselves must not depend on the seed."""
    self.inputs = ", ".join(f"{k} = {show_input(v)}" for k, v in inputs.items())

  def shuffled(self, cases):
    """`(k, case)` for each case, in an order drawn from the seed: a probe labels a
    case by its position `k`, so that the same kinds of case come at every seed but
    no record at a given place is the same at every seed."""
    for k, i in enumerate(self.rng.permutation(len(cases))):
      yield k, cases[i]

  def _record(self, record: dict):
    if self.inputs:
      record["inputs"] = self.inputs
    self.records.append(record)
    i = len(self.records) - 1
    if self._want is not None and (i >= len(self._want)
                                   or not compare([record], [self._want[i]]).passed):
      raise Stop

  def value(self, label: str, x, rtol=RTOL, atol=ATOL, dtype=True, secret=False, detail=""):
    """Record `x` (compared with tolerances `rtol`/`atol`; `dtype=False` ignores dtypes).
    `secret`: an answer to a question, left out of the records that ship with the stubs
    (the notebook's check can't judge it; the grader does). `detail`: what this run
    measured to get `x` (a yes/no, say), shown when `x` is wrong."""
    record = {"label": label, "value": encode(x), "rtol": rtol, "atol": atol, "dtype": dtype}
    if secret:
      record["secret"] = True
    if detail:
      record["detail"] = short(detail)
    self._record(record)
    return x

  def call(self, label: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, code that runs the learner's answer. If it raises,
    the error is recorded under `label` and the probe stops."""
    try:
      return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 (the learner's code may raise anything)
      self.error(label, e)
      raise Stop from None

  def error(self, label, e):
    kind = "todo" if isinstance(e, NotImplementedError) else "error"
    message = short(e)
    if isinstance(e, RecursionError):
      message = short(f"{RECURSION_HINT} ({e})")   # first: a long reason is cut at its end
    elif isinstance(e, KeyError) and (why := library_key_error(e)):
      message = short(why)
    self._record({"label": label, "value": {"k": kind, "type": type(e).__name__,
                                             "message": message}})

  def raises(self, label: str, fn, *args, **kwargs):
    """Record the name of the exception `fn(...)` raises ("no error" if none)."""
    try:
      fn(*args, **kwargs)
    except NotImplementedError as e:
      self.error(label, e)
      raise Stop from None
    except Exception as e:  # noqa: BLE001
      return self.value(label, f"raises {type(e).__name__}")
    return self.value(label, "no error")


def library_key_error(e: KeyError) -> str:
  """What the learner's code did, for a KeyError of a jaxpr's variable that no input or
  equation bound (raised by the library's evaluator, or by one of the learner's own);
  "" for any other KeyError."""
  import traceback
  frames = traceback.extract_tb(e.__traceback__)
  if not (e.args and type(e.args[0]).__name__ == "Var"):
    return ""
  if not (frames and frames[-1].filename.replace("\\", "/").endswith("autodidax/jaxpr.py")):
    return (f"running a jaxpr, your code read the variable {e.args[0]} before anything bound "
            "it: bind each constvar to its const and each invar to its input before the "
            "equations run, and each equation's outputs as it goes")
  return (f"running a jaxpr, an equation read the variable {e.args[0]}, which nothing bound: "
          "the jaxpr got fewer inputs than it takes (zip stops at the shorter list), or "
          "they came in another order. Pass every group of operands the jaxpr takes, in its "
          "order (eval_jaxpr(jaxpr, consts, *inputs)).")


def run(spec: Spec, namespace: dict, seed: int, want=None) -> list[dict]:
  """Run a probe on the answers found in `namespace`; its records. Given the reference's
  records `want`, it stops at the first record that differs (the verdict is known)."""
  p = Probe(spec.exercise, seed, want)
  args = []
  for name in spec.answers + spec.optional:
    if name in namespace:
      args.append(namespace[name])
    elif name in spec.optional:
      args.append(None)
    else:
      p.records.append({"label": f"the notebook defines `{name}`", "value": {
          "k": "todo", "type": "NameError",
          "message": f"no `{name}` in the notebook: Exercise {spec.exercise} asks you to "
                     f"define it (run its cell first)"}})
      return p.records
  try:
    spec.fn(p, *args)
  except Stop:
    pass
  except Exception as e:  # noqa: BLE001 (outside p.call: still the learner's doing, or a bug)
    try:
      p.error("running the check", e)
    except Stop:
      pass
  return p.records


# --- Comparing -----------------------------------------------------------------------------

ULPS = 8   # values of a float dtype agree to at least this many units in the last place
SPECIAL = ("nan", "inf", "-inf")   # how `encode` writes non-finite floats


def malformed(v: dict) -> str:
  """Why an array record (from an untrusted run) is not one `encode` could have written:
  its shape is a list of sizes, its data has exactly as many items as the shape says, and
  each is a number or one of the encoder's special values. "" when it is well formed."""
  shape, data = v.get("shape"), v.get("data")
  if not isinstance(shape, list) or not all(type(n) is int and 0 <= n < 2**40 for n in shape):
    return "an array record whose shape is not a list of sizes"
  if not isinstance(data, list) or len(data) != math.prod(shape):
    return (f"an array record of shape {tuple(shape)} with "
            f"{len(data) if isinstance(data, list) else 'no'} items")
  if not all(type(x) in (int, float, bool, complex) or x in SPECIAL for x in data):
    return "an array record with items that are not numbers"
  if type(v.get("dtype")) is not str:
    return "an array record without a dtype"
  return ""


def _values_close(got, want, rtol, atol) -> bool:
  """Within the tolerances, and never stricter than `ULPS` units in the last place of the
  reference's dtype: XLA's results round differently from one CPU to the next."""
  g = np.array([_number(v) for v in got["data"]], dtype=np.float64)
  w = np.array([_number(v) for v in want["data"]], dtype=np.float64)
  try:
    eps = float(np.finfo(np.dtype(want["dtype"])).eps)
  except (TypeError, ValueError):
    eps = float(np.finfo(np.float64).eps)
  return bool(np.allclose(g, w, rtol=max(rtol, ULPS * eps), atol=atol, equal_nan=True))


def describe(v, values=True) -> str:
  """An encoded value in words, with its numbers (unless `values` is false):
  the one style in which messages show both what was expected and what came."""
  k = v.get("k")
  if k == "array":
    shape = tuple(v["shape"])
    if not shape:
      return f"a {v['dtype']} scalar array" + (f", {_num(v['data'][0])}" if values else "")
    return (f"an array of shape {shape} and dtype {v['dtype']}"
            + (f": {_oneline(v['data'], shape)}" if values else ""))
  if k == "py":
    x = v["v"]
    if v.get("float") or isinstance(x, float):
      return f"the float {_num(x)}" if values else "a float"
    return repr(x)
  if k in ("tuple", "list"):
    return f"a {k} of length {len(v['items'])}"
  if k == "dict":
    return f"a dict with keys {sorted(v['items'])}"
  if k in ("error", "todo"):
    return f"{v.get('type')}: {v.get('message')}"
  if v.get("type") == "Zero":
    return "a symbolic Zero (ad.instantiate_zeros(z) makes it an array)"
  return str(v.get("type", k))


def show(v, depth=0) -> str:
  """An encoded value, short, as Python would write it (lists item by item)."""
  k = v.get("k")
  if depth > 3:
    return "…"
  if k == "py":
    x = v["v"]
    return _num(x) if v.get("float") or isinstance(x, float) else repr(x)
  if k in ("tuple", "list"):
    inner = ", ".join(show(c, depth + 1) for c in v["items"][:12])
    inner += ", …" if len(v["items"]) > 12 else ""
    return f"({inner}{',' if len(v['items']) == 1 else ''})" if k == "tuple" else f"[{inner}]"
  if k == "dict":
    return "{" + ", ".join(f"{key!r}: {show(c, depth + 1)}" for key, c in v["items"].items()) + "}"
  if k == "array":
    return _oneline(v["data"], v["shape"]) if v["shape"] else _num(v["data"][0])
  return describe(v)


def show_input(x) -> str:
  """A probe's input, short, for `Probe.given`: numbers to 4 digits."""
  if isinstance(x, str):
    return repr(x)
  if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0:
    x = np.asarray(x).item()
  if isinstance(x, float):
    return f"{x:.4g}"
  if isinstance(x, (np.ndarray, np.generic)):
    with np.printoptions(precision=4, suppress=True, threshold=12, edgeitems=2):
      return " ".join(str(np.asarray(x)).split())
  if isinstance(x, (tuple, list)):
    inner = ", ".join(show_input(c) for c in x)
    return f"({inner}{',' if len(x) == 1 else ''})" if isinstance(x, tuple) else f"[{inner}]"
  if isinstance(x, dict):
    return "{" + ", ".join(f"{k!r}: {show_input(c)}" for k, c in x.items()) + "}"
  return short(repr(x))


def _number(x) -> float:
  try:
    return float(x)   # numbers, and "nan", "inf", "-inf" as encoded
  except (TypeError, ValueError):
    return np.nan


def _num(x, digits=6) -> str:
  if isinstance(x, str) or isinstance(x, bool) or x is None:
    return str(x)
  if isinstance(x, int):
    return str(x)
  return f"{x:.{digits}g}"


def _two_numbers(w, g) -> tuple[str, str]:
  """Expected and got, with as many digits as it takes to tell them apart."""
  for digits in (6, 9, 12, 17):
    a, b = _num(w, digits), _num(g, digits)
    if a != b:
      break
  return a, b


def _preview(data, shape) -> str:
  a = np.array([_number(x) for x in data])
  with np.printoptions(precision=6, suppress=True, threshold=20):
    return str(a.reshape(shape)) if a.size else "[]"


def _oneline(data, shape) -> str:
  return short(" ".join(_preview(data, shape).split()))


def _likely_cause(g: np.ndarray, w: np.ndarray, rtol, atol) -> str:
  """What a wrong array most likely is, when it is a simple relative of the
  right one: the same values with the axes in another order, or (for the same
  shape, two entries or more) negated, scaled, shifted, zero or reordered."""
  close = lambda a, b: a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))
  if g.shape != w.shape:
    if g.ndim == w.ndim and g.size == w.size and 1 < g.ndim <= 5:
      import itertools
      for perm in itertools.permutations(range(g.ndim)):
        if close(np.transpose(g, perm), w):
          return (f"got the right values with the axes in another order "
                  f"(np.transpose(got, {perm}) is right): is an axis, say the batch axis, "
                  "in the wrong place?")
    if g.size == w.size and close(g.reshape(w.shape), w):
      return "got the right values in another shape"
    return ""
  if w.size < 2 or not np.all(np.isfinite(w)) or not np.all(np.isfinite(g)) \
      or np.allclose(w, 0, atol=atol):
    return ""
  if np.allclose(g, 0, atol=atol):
    return "got zeros everywhere"
  if close(g, -w):
    return "the sign is flipped"
  ratio = float(np.median(g[w != 0] / w[w != 0]))
  if close(g, ratio * w):
    return f"got the expected values times {ratio:.4g}"
  offset = float(np.median(g - w))
  if close(g, w + offset):
    return f"got the expected values plus {offset:.4g}"
  if len(np.unique(w)) == w.size and close(np.sort(g, axis=None), np.sort(w, axis=None)):
    return "got the right values in another order"
  return ""


def _arrays_differ(got, want, rtol, atol) -> str:
  g = np.array([_number(x) for x in got["data"]], dtype=np.float64).reshape(got["shape"])
  w = np.array([_number(x) for x in want["data"]], dtype=np.float64).reshape(want["shape"])
  if not w.shape:
    a, b = _two_numbers(want["data"][0], got["data"][0])
    return f"expected {a}, got {b}"
  wrong = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
  first = tuple(int(i) for i in np.argwhere(wrong)[0]) if wrong.any() else (0,) * w.ndim
  a, b = _two_numbers(want["data"][np.ravel_multi_index(first, w.shape)],
                      got["data"][np.ravel_multi_index(first, g.shape)])
  cause = _likely_cause(g, w, rtol, atol)
  return (f"values differ in {int(wrong.sum())} of {w.size} entries (at index "
          f"{first[0] if len(first) == 1 else first}: expected {a}, got {b})"
          + (f"; likely, {cause}" if cause else "")
          + f"\nexpected:\n{_preview(want['data'], want['shape'])}\n"
          f"got:\n{_preview(got['data'], got['shape'])}")


def diff(got: dict, want: dict, rtol, atol, dtype=True) -> str | None:
  """None if `got` matches `want`, else what differs."""
  kg, kw = got.get("k"), want.get("k")
  if kw == "withheld":   # a secret answer, not shipped: only the grader can judge it
    return f"it raised {describe(got)}" if kg == "error" else None
  if kw in ("error", "todo"):
    if kg == kw and got.get("type") == want.get("type"):
      return None
    return f"expected {want.get('type')} to be raised, got {describe(got)}"
  if kg in ("error", "todo"):
    return f"expected {describe(want, values=False)}, but it raised {describe(got)}"
  if kg != kw:
    return f"expected {describe(want)}, got {describe(got)}"
  if kw == "array":
    if (bad := malformed(got)):
      return f"expected {describe(want)}, got {bad}"
    if got["shape"] != want["shape"]:
      g = np.array([_number(x) for x in got["data"]], dtype=np.float64).reshape(got["shape"])
      w = np.array([_number(x) for x in want["data"]], dtype=np.float64).reshape(want["shape"])
      cause = _likely_cause(g, w, rtol, atol)
      return (f"expected shape {tuple(want['shape'])}, got shape {tuple(got['shape'])}"
              + (f"; likely, {cause}" if cause else ""))
    if dtype and got["dtype"] != want["dtype"]:
      return f"expected dtype {want['dtype']}, got dtype {got['dtype']}"
    if want["dtype"] in ("bool",) or want["dtype"].startswith(("int", "uint")):
      same = got["data"] == want["data"]
    else:
      same = _values_close(got, want, rtol, atol)
    if same:
      return None
    return _arrays_differ(got, want, rtol, atol)
  if kw == "py":
    g, w = got.get("v"), want.get("v")
    if want.get("float") and isinstance(g, (int, float)) and isinstance(w, (int, float)):
      if math.isclose(g, w, rel_tol=rtol, abs_tol=atol):
        return None
      a, b = _two_numbers(w, g)
      return f"expected {a}, got {b}"
    if type(g) is type(w) and g == w:
      return None
    if isinstance(g, str) and isinstance(w, str) and "\n" in g + w:   # a printout
      return f"expected:\n{w}\ngot:\n{g}"
    return f"expected {describe(want)}, got {describe(got)}"
  if kw in ("tuple", "list"):
    gi, wi = got["items"], want["items"]
    if len(gi) != len(wi):
      return short(f"expected a {kw} of length {len(wi)}, got one of length {len(gi)}: "
                   f"expected {show(want)}, got {show(got)}")
    for i, (g, w) in enumerate(zip(gi, wi)):
      d = diff(g, w, rtol, atol, dtype)
      if d:
        return f"item {i}: {d}"
    return None
  if kw == "dict":
    if sorted(got["items"]) != sorted(want["items"]):
      return f"expected keys {sorted(want['items'])}, got {sorted(got['items'])}"
    for key, w in want["items"].items():
      d = diff(got["items"][key], w, rtol, atol, dtype)
      if d:
        return f"[{key!r}]: {d}"
    return None
  return None if got.get("type") == want.get("type") else (
      f"expected {describe(want)}, got {describe(got)}")


@dataclass
class Verdict:
  passed: bool
  count: int                 # records that matched
  label: str = ""            # the first record that did not
  message: str = ""
  todo: bool = False         # the learner's answer says "not done yet"
  notes: list = field(default_factory=list)
  withheld: int = 0          # records that only the grader can judge (secret answers)


def case(record: dict) -> str:
  """A record's label, with the inputs it was given (see `Probe.given`)."""
  label = str(record.get("label"))
  return f"{label} ({record['inputs']})" if record.get("inputs") else label


def compare(got: list, want: list) -> Verdict:
  """Hold the learner's records `got` against the reference's `want`.

  Only `want` supplies labels, inputs and tolerances; `got` supplies values.
  Records are matched in order."""
  if not isinstance(got, list):
    return Verdict(False, 0, "the probe", "returned no records")
  for i, w in enumerate(want):
    g = got[i] if i < len(got) and isinstance(got[i], dict) else None
    gv = g.get("value") if g is not None else None
    if not isinstance(gv, dict):
      return Verdict(False, i, case(w), "the check stopped before this point")
    if gv.get("k") == "todo" and w["value"].get("k") != "todo":
      return Verdict(False, i, g.get("label") or w["label"], short(gv.get("message")), todo=True)
    if g.get("label") != w["label"]:
      if gv.get("k") == "error":   # under the step that was running, with its inputs
        return Verdict(False, i, case(w), f"{short(g.get('label'))} raised {describe(gv)}")
      return Verdict(False, i, case(w), "the check did something else here "
                     f"(recorded {short(g.get('label'))!r})")
    d = diff(gv, w["value"], w.get("rtol", RTOL), w.get("atol", ATOL), w.get("dtype", True))
    if d:   # an answer to a question is never shown
      if w.get("secret"):
        d = "that is not the right answer"
      elif isinstance(g.get("detail"), str):   # what the learner's run measured
        d = f"{d} ({short(g['detail'])})"
      return Verdict(False, i, case(w), d)
  if len(got) > len(want):
    return Verdict(False, len(want), "the check", "recorded more than the reference did")
  withheld = sum(w["value"].get("k") == "withheld" for w in want)
  return Verdict(True, len(want) - withheld, withheld=withheld)
