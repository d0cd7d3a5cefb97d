"""Probes of the exercises of "Side effects and state".

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import contextlib

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import batching, callback, core, effects, lax, state

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
  with _rule(state.discharge_rules, state.addupdate_p, discharge_addupdate):
    for what, f, args in [("r[...] += ..., r[1] += ..., r[0:2] += ...", _accumulate, (x, v)),
                          ("r[i] += ... with a traced i", _accumulate_traced, (x, v, i)),
                          ("r[i] += ... in a fori_loop", _accumulate_loop, (x, v))]:
      j = adx.make_jaxpr(f)(*args).jaxpr
      pure = p.call(f"discharging {what}", state.discharge_if_stateful, j)
      p.value(f"{what}: the discharged jaxpr has no effects",
              sorted(map(repr, pure.effects)))
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

@adx.jit   # xs a tracer, so that xs[i] takes a traced i
def _with_ref(xs):
  acc = adx.new_ref(anp.zeros(xs.shape[1:], xs.dtype))

  def body(i, c):
    acc[...] += xs[i] * c
    return c * 0.5
  lax.fori_loop(0, xs.shape[0], body, np.asarray(1., xs.dtype))
  return acc[...]


def _top_primitives(f, *args) -> list:
  return sorted({e.primitive.name for e in adx.make_jaxpr(f)(*args).jaxpr.eqns})


@probe("S.4", answers=("as_scan",))
def probe_S_4(p, as_scan):
  for shape in [(4, 3), (int(p.rng.integers(2, 6)), 2, 2)]:
    xs = p.rng.normal(size=shape)
    p.given(xs=xs)
    p.value(f"as_scan of xs{list(shape)}", p.call("as_scan(xs)", as_scan, xs))
    p.value(f"the same as the Ref version, xs{list(shape)}",
            np.allclose(p.call("as_scan(xs)", as_scan, xs), _with_ref(xs)))
    loss = lambda f: lambda xs: anp.sum(anp.sin(f(xs)))
    p.value(f"grad of as_scan, xs{list(shape)}",
            p.call("grad of as_scan", adx.grad(loss(as_scan)), xs))
    j = p.call("make_jaxpr(as_scan)", adx.make_jaxpr(as_scan), xs).jaxpr
    p.value(f"as_scan's jaxpr: effects, xs{list(shape)}", sorted(map(repr, j.effects)))
    p.value(f"as_scan's jaxpr: one scan, xs{list(shape)}",
            sum(e.primitive.name == "scan" for e in j.eqns))
    p.value(f"as_scan's jaxpr: no new_ref, xs{list(shape)}",
            "new_ref" not in _top_primitives(as_scan, xs))


# --- S.5: io_callback's type and its effect ------------------------------------------------------

@probe("S.5", answers=("io_callback_abstract_eval", "io_callback_effects"),
       removes={"autodidax.callback:_io_callback_abstract_eval": "io_callback_abstract_eval",
                "autodidax.callback:_io_callback_effects": "io_callback_effects"})
def probe_S_5(p, io_callback_abstract_eval, io_callback_effects):
  shape = tuple(int(d) for d in p.rng.integers(1, 4, size=int(p.rng.integers(0, 3))))
  x = p.rng.normal(size=shape)
  p.given(x=x)
  sds = adx.ShapeDtypeStruct
  programs = {
      "one result, unordered": (lambda x: adx.io_callback(lambda v: v * 2., sds(x.shape, x.dtype),
                                                          x), False),
      "one result, ordered": (lambda x: adx.io_callback(lambda v: v * 2., sds(x.shape, x.dtype),
                                                        x, ordered=True), True),
      "two results of other types": (lambda x: adx.io_callback(
          lambda v: (np.float32(v.sum()), np.zeros((2,), np.int32)),
          (sds((), np.float32), sds((2,), np.int32)), x), False),
  }
  with core.abstract_eval_rules.override(callback.io_callback_p, io_callback_abstract_eval), \
       _rule(effects.effect_rules, callback.io_callback_p, io_callback_effects):
    for what, (f, ordered) in programs.items():
      closed = p.call(f"make_jaxpr of {what}", adx.make_jaxpr(f), x)
      p.value(f"{what}: the jaxpr's output types",
              [a.str_short() for a in closed.out_avals])
      p.value(f"{what}: the jaxpr's effects", sorted(map(repr, closed.effects)))
      scanned = p.call(f"make_jaxpr of a scan of {what}", adx.make_jaxpr(
          lambda x: lax.scan(lambda c, _: (c, f(x)), 0., None, length=2)[1]), x)
      p.value(f"{what}: a scan of it has the effect too", sorted(map(repr, scanned.effects)))
      p.value(f"{what}: values under jit", p.call(f"jit of {what}", adx.jit(f), x))
      text = p.call(f"lowering {what}", lambda: adx.jit(f).lower(x).as_text())
      p.value(f"{what}: the compiled program threads a token", "!stablehlo.token" in text)
