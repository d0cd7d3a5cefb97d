"""Section `eager_ops`: the cost of one eager call.

For each primitive, on tiny inputs (so the arithmetic costs nothing and we see
the dispatch overhead), time: NumPy directly; `autodidax.lax.<prim>` through
the evaluation interpreter; and real JAX eager, `jax.lax.<prim>` on an array
already on the device, with `.block_until_ready()`. Then the same for what
learners call, `autodidax.numpy` against `jax.numpy`: elementwise functions,
reductions, `where` and indexing, on arrays and on Python scalars.
"""
from __future__ import annotations

import statistics

import numpy as np

from harness import Column, Table, section

GOAL = 0.5   # ours / JAX eager


def _cases():
  """(primitive, input label, numpy call, our call, JAX call), built lazily."""
  import jax
  import jax.numpy as jnp
  from autodidax import lax as L

  f32 = np.float32
  vec = np.array([0.5, 1.5, 2.5], f32)         # log needs positive inputs
  vec2 = np.array([1.0, 2.0, 3.0], f32)
  sca, sca2 = f32(0.75), f32(2.0)
  mat = np.arange(6, dtype=f32).reshape(2, 3) + 1
  j = jax.device_put
  jvec, jvec2, jsca, jsca2, jmat = map(j, (vec, vec2, sca, sca2, mat))
  jax.block_until_ready((jvec, jvec2, jsca, jsca2, jmat))

  binary = [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
            ("div", np.divide), ("max", np.maximum), ("greater", np.greater),
            ("less", np.less), ("greater_equal", np.greater_equal),
            ("less_equal", np.less_equal)]
  jax_name = {"greater": "gt", "less": "lt", "greater_equal": "ge",
              "less_equal": "le"}   # jax.lax spells the comparisons so
  unary = [("neg", np.negative), ("sin", np.sin), ("cos", np.cos),
           ("exp", np.exp), ("log", np.log), ("tanh", np.tanh)]

  cases = []
  for label, (x, y, jx, jy) in [("f32[3], f32[3]", (vec, vec2, jvec, jvec2)),
                                ("f32[], f32[]", (sca, sca2, jsca, jsca2)),
                                ("f32[3], f32[]", (vec, sca2, jvec, jsca2))]:
    for name, np_fn in binary:
      ours, theirs = getattr(L, name), getattr(jax.lax, jax_name.get(name, name))
      cases.append((name, label,
                    lambda np_fn=np_fn, x=x, y=y: np_fn(x, y),
                    lambda ours=ours, x=x, y=y: ours(x, y),
                    lambda theirs=theirs, x=jx, y=jy: theirs(x, y).block_until_ready()))
  for label, (x, jx) in [("f32[3]", (vec, jvec)), ("f32[]", (sca, jsca))]:
    for name, np_fn in unary:
      ours, theirs = getattr(L, name), getattr(jax.lax, name)
      cases.append((name, label,
                    lambda np_fn=np_fn, x=x: np_fn(x),
                    lambda ours=ours, x=x: ours(x),
                    lambda theirs=theirs, x=jx: theirs(x).block_until_ready()))

  # Reductions and shape/type operations, each with JAX's equivalent call.
  cases += [
      ("reduce_sum", "f32[3], axis 0", lambda: np.sum(vec, (0,)),
       lambda: L.reduce_sum(vec, 0),
       lambda: jax.lax.reduce_sum(jvec, (0,)).block_until_ready()),
      ("reduce_max", "f32[3], axis 0", lambda: np.max(vec, (0,)),
       lambda: L.reduce_max(vec, 0),
       lambda: jax.lax.reduce_max(jvec, (0,)).block_until_ready()),
      ("broadcast", "f32[3] → f32[2,3]",
       lambda: np.broadcast_to(np.expand_dims(vec, 0), (2, 3)),
       lambda: L.broadcast(vec, (2, 3), (0,)),
       lambda: jax.lax.broadcast_in_dim(jvec, (2, 3), (1,)).block_until_ready()),
      ("transpose", "f32[2,3]", lambda: np.transpose(mat, (1, 0)),
       lambda: L.transpose(mat, (1, 0)),
       lambda: jax.lax.transpose(jmat, (1, 0)).block_until_ready()),
      ("reshape", "f32[2,3] → f32[3,2]", lambda: np.reshape(mat, (3, 2)),
       lambda: L.reshape(mat, (3, 2)),
       lambda: jax.lax.reshape(jmat, (3, 2)).block_until_ready()),
      ("convert_element_type", "f32[3] → i32", lambda: vec.astype(np.int32),
       lambda: L.convert_element_type(vec, np.int32),
       lambda: jax.lax.convert_element_type(jvec, jnp.int32).block_until_ready()),
  ]
  return [("lax", *case) for case in cases] + [
      ("numpy", *case) for case in _numpy_cases(jax, jnp, vec, vec2, mat)]


def _numpy_cases(jax, jnp, vec, vec2, mat):
  """autodidax.numpy against jax.numpy: (function, input label, NumPy call,
  our call, JAX call). Eager values are NumPy arrays for us and device
  arrays for JAX; indexing, which on a NumPy array is NumPy's own, is timed
  on device arrays (`jit` results) on both sides."""
  import autodidax as adx
  import autodidax.numpy as anp
  j = jax.device_put
  jvec, jvec2, jmat = j(vec), j(vec2), j(mat)
  avec, amat = adx.jit(lambda x: x)(vec), adx.jit(lambda x: x)(mat)
  jax.block_until_ready((jvec, jvec2, jmat))
  ready = lambda f: lambda: f().block_until_ready()
  return [
      ("sin", "f32[3]", lambda: np.sin(vec), lambda: anp.sin(vec),
       ready(lambda: jnp.sin(jvec))),
      ("sin", "Python float", lambda: np.sin(2.), lambda: anp.sin(2.),
       ready(lambda: jnp.sin(2.))),
      ("sqrt", "f32[3]", lambda: np.sqrt(vec), lambda: anp.sqrt(vec),
       ready(lambda: jnp.sqrt(jvec))),
      ("add", "f32[3], f32[3]", lambda: np.add(vec, vec2),
       lambda: anp.add(vec, vec2), ready(lambda: jnp.add(jvec, jvec2))),
      ("add", "f32[2,3], f32[3]", lambda: np.add(mat, vec),
       lambda: anp.add(mat, vec), ready(lambda: jnp.add(jmat, jvec))),
      ("multiply", "f32[3], Python float", lambda: np.multiply(vec, 2.),
       lambda: anp.multiply(vec, 2.), ready(lambda: jnp.multiply(jvec, 2.))),
      ("add", "Python float, int", lambda: np.add(2., 3),
       lambda: anp.add(2., 3), ready(lambda: jnp.add(2., 3))),
      ("divide", "f32[3], f32[3]", lambda: np.divide(vec, vec2),
       lambda: anp.divide(vec, vec2), ready(lambda: jnp.divide(jvec, jvec2))),
      ("maximum", "f32[3], Python float", lambda: np.maximum(vec, 0.),
       lambda: anp.maximum(vec, 0.), ready(lambda: jnp.maximum(jvec, 0.))),
      ("sum", "f32[3]", lambda: np.sum(vec), lambda: anp.sum(vec),
       ready(lambda: jnp.sum(jvec))),
      ("mean", "f32[2,3], axis 0", lambda: np.mean(mat, 0),
       lambda: anp.mean(mat, 0), ready(lambda: jnp.mean(jmat, 0))),
      ("max", "f32[3]", lambda: np.max(vec), lambda: anp.max(vec),
       ready(lambda: jnp.max(jvec))),
      ("argmax", "f32[3]", lambda: np.argmax(vec), lambda: anp.argmax(vec),
       ready(lambda: jnp.argmax(jvec))),
      ("where", "f32[3] > 1, f32[3], Python float",
       lambda: np.where(vec > 1, vec, np.float32(0)),
       lambda: anp.where(vec > 1, vec, 0.),
       ready(lambda: jnp.where(jvec > 1, jvec, 0.))),
      ("x[i]", "f32[2,3] device array, x[1]", lambda: mat[1],
       lambda: amat[1], ready(lambda: jmat[1])),
      ("x[::-1]", "f32[3] device array", lambda: vec[::-1],
       lambda: avec[::-1], ready(lambda: jvec[::-1])),
  ]


def _check_same(out, expected):
  out, expected = np.asarray(out), np.asarray(expected)
  assert out.shape == expected.shape, (out.shape, expected.shape)
  np.testing.assert_allclose(out.astype(float), expected.astype(float), rtol=1e-6)


@section("eager_ops", "Eager primitive overhead")
def eager_ops(ctx) -> Table:
  rows = []
  for layer, prim, label, np_call, our_call, jax_call in ctx.progress(
      _cases(), "eager_ops"):
    # Same answers, or we would be timing different things.
    _check_same(our_call(), np_call())
    _check_same(jax_call(), np_call())
    t = ctx.time_many({"numpy": np_call, "ours": our_call, "jax": jax_call})
    t_np, t_ours, t_jax = t["numpy"], t["ours"], t["jax"]
    ratio = t_ours.best_us / t_jax.best_us
    rows.append({
        "layer": layer, "primitive": prim, "input": label,
        "numpy_us": t_np.best_us, "ours_us": t_ours.best_us, "jax_us": t_jax.best_us,
        "ours_over_jax": ratio, "ours_over_numpy": t_ours.best_us / t_np.best_us,
        "goal": f"≤ {GOAL}", "met": ratio <= GOAL,
        "timings": {"numpy": t_np.to_json(), "ours": t_ours.to_json(),
                    "jax": t_jax.to_json()}})

  cases = list(rows)
  med = lambda key, layer=None: statistics.median(
      r[key] for r in cases if layer in (None, r["layer"]))
  n_met = sum(r["met"] for r in cases)
  median_ratio = med("ours_over_jax")
  by_layer = {layer: med("ours_over_jax", layer) for layer in ("lax", "numpy")}
  summary = {"median_ours_over_jax": median_ratio,
             "median_ours_over_jax_by_layer": by_layer,
             "median_ours_over_numpy": med("ours_over_numpy"),
             "rows_met": n_met, "rows": len(cases), "goal": GOAL,
             "met": median_ratio <= GOAL and max(by_layer.values()) <= GOAL}
  for layer in (None, "lax", "numpy"):
    n = sum(layer in (None, r["layer"]) for r in cases)
    rows.append({"layer": layer or "all", "primitive": "median",
                 "input": f"{n} cases", "numpy_us": med("numpy_us", layer),
                 "ours_us": med("ours_us", layer), "jax_us": med("jax_us", layer),
                 "ours_over_jax": med("ours_over_jax", layer),
                 "ours_over_numpy": med("ours_over_numpy", layer),
                 "goal": f"≤ {GOAL}", "met": med("ours_over_jax", layer) <= GOAL,
                 "bold": True})
  return Table(
      intro=(
          "One call of each primitive on tiny inputs, so what we see is the "
          "cost of dispatch, not of arithmetic: NumPy called directly; "
          "autodidax's `autodidax.lax.<prim>` (wrapper → `bind` → the "
          "evaluation interpreter → the NumPy impl rule); and JAX's eager "
          "`jax.lax.<prim>` on arrays already on the device, with "
          "`.block_until_ready()`. The `numpy` rows do the same for "
          "`autodidax.numpy` against `jax.numpy` (what learners call): ours "
          "on NumPy arrays and Python scalars, JAX's on device arrays; "
          "indexing on device arrays on both sides (a NumPy array indexes "
          "with NumPy's own code). **Goal:** our eager call at most half the "
          f"time of JAX's (ours/JAX ≤ {GOAL}), per row and for the median "
          "of each layer."),
      columns=[Column("layer", "layer"), Column("primitive", "function"),
               Column("input", "input"),
               Column("numpy_us", "NumPy µs", "us"),
               Column("ours_us", "autodidax µs", "us"),
               Column("jax_us", "JAX eager µs", "us"),
               Column("ours_over_numpy", "ours/NumPy", "x"),
               Column("ours_over_jax", "ours/JAX", "ratio"),
               Column("goal", "goal (ours/JAX)"), Column("met", "met?", "met")],
      rows=rows, summary=summary,
      summary_text=(
          f"**Overall:** median ours/JAX = {median_ratio:.2f} (goal ≤ {GOAL}): "
          f"{'met' if summary['met'] else 'not met'}; `lax` "
          f"{by_layer['lax']:.2f}, `numpy` {by_layer['numpy']:.2f}; "
          f"{n_met} of {len(cases)} rows meet it. autodidax pays a median "
          f"{summary['median_ours_over_numpy']:.1f}× over calling NumPy "
          "directly."))
