"""Probes of the exercises of "Side effects and state".

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import contextlib

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import batching, callback, core, effects, lax, state
from autodidax.jaxpr import eval_jaxpr

from ..probe import probe

F32 = np.dtype("float32")


@contextlib.contextmanager
def _rule(table, prim, rule):
  """`table[prim] = rule` for the block (a plain dict has no `override`)."""
  old = table[prim]
  table[prim] = rule
  try:
    yield
  finally:
    table[prim] = old


# --- S.1: the discharge rule of addupdate ---------------------------------------------------

def _accumulate(x, v):
  r = adx.new_ref(x)
  state.addupdate(r, ..., v[0] * x)
  state.addupdate(r, 1, v[1])
  state.addupdate(r, (slice(0, 2),), v[2:4])
  return r[...] * 2.


def _accumulate_traced(x, v, i):
  r = adx.new_ref(x)
  state.addupdate(r, i, v[0])
  state.addupdate(r, i + 1, v[1] * x[i])
  return r[...]


def _accumulate_loop(x, v):
  r = adx.new_ref(anp.zeros_like(x))

  def body(i, c):
    state.addupdate(r, i, x[i] * c)
    return c + v[0]
  lax.fori_loop(0, x.shape[0], body, v[1])
  return r[...]


@probe("S.1", answers=("discharge_addupdate",),
       removes={"autodidax.state:_discharge_addupdate": "discharge_addupdate"})
def probe_S_1(p, discharge_addupdate):
  x, v = p.rng.normal(size=5), p.rng.normal(size=4)
  i = int(p.rng.integers(0, 4))
  p.given(x=x, v=v, i=i)
  returned = []   # how many outputs the rule gave each addupdate (it has none)

  def counted(eqn, vals, env):
    outs = discharge_addupdate(eqn, vals, env)
    returned.append(len(outs) if isinstance(outs, (list, tuple)) else type(outs).__name__)
    return outs
  with _rule(state.discharge_rules, state.addupdate_p, counted):
    for what, f, args in [("r[...] += ..., r[1] += ..., r[0:2] += ...", _accumulate, (x, v)),
                          ("r[i] += ... with a traced i", _accumulate_traced, (x, v, i)),
                          ("r[i] += ... in a fori_loop", _accumulate_loop, (x, v))]:
      closed = adx.make_jaxpr(f)(*args)
      returned.clear()
      pure = p.call(f"discharging {what}", state.discharge_if_stateful, closed.jaxpr)
      p.value(f"{what}: the discharged jaxpr's effects (none), the number of outputs your "
              "rule returned for each addupdate (0: it has none), and what it computes", {
          "effects": sorted(map(repr, pure.effects)), "outputs of the rule": list(returned),
          "outputs": p.call(f"running the discharged jaxpr of {what}", lambda: [
              np.asarray(y) for y in eval_jaxpr(pure, closed.consts, *args)])})
      p.value(f"{what}: the discharged jaxpr's value",
              p.call(f"running the discharged {what}", adx.jit(f), *args))
      p.value(f"{what}: grad under jit",
              p.call(f"grad of jit({what})",
                     adx.grad(lambda *a: anp.sum(adx.jit(f)(*a) ** 2)), *args))


# --- S.2: the batching rule of debug.callback -------------------------------------------------

def _seen(f, *args):
  """What the callbacks see, in order, when `f(*args)` runs."""
  log = []

  def cb(*vals):
    log.append([np.asarray(v).tolist() for v in vals])
  f(cb, *args)
  return log


@probe("S.2", answers=("debug_callback_vmap",),
       removes={"autodidax.callback:_debug_callback_vmap": "debug_callback_vmap"})
def probe_S_2(p, debug_callback_vmap):
  n = int(p.rng.integers(2, 5))
  xs, ys = p.rng.integers(-9, 9, size=(n, 2)).astype(F32), p.rng.integers(-9, 9, size=3)
  zs = p.rng.integers(-9, 9, size=(n, 5)).astype(F32)   # batched along its axis 1
  p.given(xs=xs, ys=ys, zs=zs)
  cases = {
      "vmap over axis 0":
          lambda cb, xs: adx.vmap(lambda x: adx.debug.callback(cb, x))(xs),
      "vmap over axis 1":
          lambda cb, xs: adx.vmap(lambda z: adx.debug.callback(cb, z), in_axes=1)(zs),
      "vmap with an unbatched argument":
          lambda cb, xs: adx.vmap(lambda x, y: adx.debug.callback(cb, x, y),
                                  in_axes=(0, None))(xs, ys),
      "two callbacks under vmap":
          lambda cb, xs: adx.vmap(lambda x: (adx.debug.callback(cb, x),
                                             adx.debug.callback(cb, x * 10.)))(xs),
      "vmap of vmap":
          lambda cb, xs: adx.vmap(adx.vmap(lambda x: adx.debug.callback(cb, x)))(xs),
      "jit of vmap":
          lambda cb, xs: adx.jit(adx.vmap(lambda x: adx.debug.callback(cb, x, x + 1.)))(xs),
  }
  with batching.vmap_rules.override(callback.debug_callback_p, debug_callback_vmap):
    for what, f in cases.items():
      p.value(f"what the callback sees, {what}", p.call(what, _seen, f, xs))


# --- S.3: predict the printed lines ----------------------------------------------------------

@probe("S.3", answers=("vmap_lines", "scan_lines"))
def probe_S_3(p, vmap_lines, scan_lines):
  for k in range(3):
    xs = p.rng.integers(-5, 6, size=int(p.rng.integers(2, 5))).astype(float)
    p.given(xs=xs)
    got = p.call("vmap_lines(xs)", vmap_lines, xs)
    p.value(f"vmap_lines, vector {k + 1}", [str(s) for s in got])
    got = p.call("scan_lines(xs)", scan_lines, xs)
    p.value(f"scan_lines, vector {k + 1}", [str(s) for s in got])


# --- S.4: from a Ref to a carry ------------------------------------------------------------------

@probe("S.4", answers=("as_scan",))
def probe_S_4(p, as_scan):
  loss = lambda f: lambda xs: anp.sum(anp.sin(f(xs)))
  for k, shape in enumerate([(int(p.rng.integers(3, 6)), 3),
                             (int(p.rng.integers(2, 6)), 2, 2)], 1):
    xs = p.rng.normal(size=shape)
    p.given(xs=xs)
    out = p.call("as_scan(xs)", as_scan, xs)
    j = p.call("make_jaxpr(as_scan)", adx.make_jaxpr(as_scan), xs).jaxpr
    # The jaxpr's shape, recorded with the value: alone it is the same at every seed.
    p.value(f"xs {k}: as_scan(xs), and its jaxpr's effects, scans and new_refs", {
        "value": out, "effects": sorted(map(repr, j.effects)),
        "scans": sum(e.primitive.name == "scan" for e in j.eqns),
        "new_refs": sum(e.primitive.name == "new_ref" for e in j.eqns)})
    p.value(f"xs {k}: grad of as_scan", p.call("grad of as_scan", adx.grad(loss(as_scan)), xs))


# --- S.5: io_callback's type and its effect ------------------------------------------------------

@probe("S.5", answers=("io_callback_abstract_eval", "io_callback_effects"),
       removes={"autodidax.callback:_io_callback_abstract_eval": "io_callback_abstract_eval",
                "autodidax.callback:_io_callback_effects": "io_callback_effects"})
def probe_S_5(p, io_callback_abstract_eval, io_callback_effects):
  shape = tuple(int(d) for d in p.rng.integers(1, 4, size=int(p.rng.integers(0, 3))))
  x = p.rng.normal(size=shape)
  p.given(x=x)
  sds = adx.ShapeDtypeStruct
  k, dtype = int(p.rng.integers(1, 4)), str(p.rng.choice(["int32", "float32"]))

  def one(ordered):
    return lambda x: adx.io_callback(lambda v: v * 2., sds(x.shape, x.dtype), x, ordered=ordered)

  def two(ordered):   # results of other types than x's: a float32 scalar, `dtype`[k]
    return lambda x: adx.io_callback(
        lambda v: (np.float32(v.sum()), np.zeros((k,), dtype)),
        (sds((), np.float32), sds((k,), np.dtype(dtype))), x, ordered=ordered)

  # Three programs in an order drawn from the seed, ordered and unordered callbacks
  # among them, so that each list below changes with the seed.
  kinds = [(one, "one result"), (one, "one result"), (two, f"two results, f32[] and {dtype}[{k}]")]
  orders = [True, False, bool(p.rng.random() < .5)]
  programs = [(kinds[int(i)][1] + (", ordered" if o else ", unordered"), kinds[int(i)][0](o))
              for i, o in zip(p.rng.permutation(3), p.rng.permutation(orders))]
  effects_of, scans_of, tokens = [], [], []
  with core.abstract_eval_rules.override(callback.io_callback_p, io_callback_abstract_eval), \
       _rule(effects.effect_rules, callback.io_callback_p, io_callback_effects):
    for i, (what, f) in enumerate(programs, 1):
      p.given(x=x, program=what)
      closed = p.call(f"make_jaxpr of program {i}", adx.make_jaxpr(f), x)
      p.value(f"program {i}: the jaxpr's output types",
              [a.str_short() for a in closed.out_avals])
      effects_of.append(sorted(map(repr, closed.effects)))
      scanned = p.call(f"make_jaxpr of a scan of program {i}", adx.make_jaxpr(
          lambda x: lax.scan(lambda c, _: (c, f(x)), 0., None, length=2)[1]), x)
      scans_of.append(sorted(map(repr, scanned.effects)))
      p.value(f"program {i}: values under jit", p.call(f"jit of program {i}", adx.jit(f), x))
      text = p.call(f"lowering program {i}", lambda: adx.jit(f).lower(x).as_text())
      tokens.append("!stablehlo.token" in text)
    p.given(x=x, programs=[what for what, _ in programs])
    p.value("each program's jaxpr: its effects", effects_of)
    p.value("a scan of each program has its effect too", scans_of)
    p.value("each program, compiled: does it thread a token", tokens)
