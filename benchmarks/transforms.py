"""Section `transforms`: what jvp and vmap cost on a small program, eagerly.

The program is f(x) = sum(tanh(sin(x) * x + 1)) on a small vector, written
once with `autodidax.numpy` and once with `jax.numpy`. Every transformation
runs eagerly (no jit on either side): each primitive goes through the
interpreter stack, which is the overhead we want to see.
"""
from __future__ import annotations

import numpy as np

from harness import Column, Table, section

N, BATCH = 3, 8
GOAL = 1.0   # ours / JAX: not slower than JAX's eager transformation


def _programs():
  import jax
  import jax.numpy as jnp
  import autodidax as adx
  import autodidax.numpy as anp

  def f_ours(x):
    return anp.sum(anp.tanh(anp.sin(x) * x + 1.))

  def f_jax(x):
    return jnp.sum(jnp.tanh(jnp.sin(x) * x + 1.))

  x = np.linspace(0.1, 1.0, N, dtype=np.float32)
  t = np.ones(N, np.float32)
  xs = np.linspace(0.1, 1.0, BATCH * N, dtype=np.float32).reshape(BATCH, N)
  jx, jt, jxs = jax.device_put((x, t, xs))
  vmap_ours, vmap_jax = adx.vmap(f_ours), jax.vmap(f_jax)
  jac_ours, jac_jax = adx.jacfwd(f_ours), jax.jacfwd(f_jax)
  jvp_of_vmap_ours = lambda: adx.jvp(vmap_ours, (xs,), (xs,))
  jvp_of_vmap_jax = lambda: jax.block_until_ready(jax.jvp(vmap_jax, (jxs,), (jxs,)))
  # (case, ours, JAX): every JAX call blocks until its result is ready.
  return [
      ("f(x) (eager)", f"f32[{N}]", lambda: f_ours(x),
       lambda: f_jax(jx).block_until_ready()),
      ("jvp(f, (x,), (t,))", f"f32[{N}]", lambda: adx.jvp(f_ours, (x,), (t,)),
       lambda: jax.block_until_ready(jax.jvp(f_jax, (jx,), (jt,)))),
      ("vmap(f)(xs)", f"f32[{BATCH},{N}]", lambda: vmap_ours(xs),
       lambda: vmap_jax(jxs).block_until_ready()),
      ("jacfwd(f)(x)", f"f32[{N}]", lambda: jac_ours(x),
       lambda: jac_jax(jx).block_until_ready()),
      ("jvp of vmap(f)", f"f32[{BATCH},{N}]", jvp_of_vmap_ours, jvp_of_vmap_jax),
  ]


def _check_same(ours, theirs):
  import jax
  a, b = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
  assert len(a) == len(b)
  for u, v in zip(a, b):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


@section("transforms", "jvp and vmap overhead (eager)")
def transforms(ctx) -> Table:
  rows = []
  ours_eager = jax_eager = None
  for case, inp, ours, theirs in ctx.progress(_programs(), "transforms"):
    _check_same(ours(), theirs())
    t = ctx.time_many({"ours": ours, "jax": theirs})
    t_ours, t_jax = t["ours"], t["jax"]
    if ours_eager is None:   # the first case is the plain call
      ours_eager, jax_eager = t_ours.best_us, t_jax.best_us
    ratio = t_ours.best_us / t_jax.best_us
    rows.append({
        "case": case, "input": inp,
        "ours_us": t_ours.best_us, "ours_over_eager": t_ours.best_us / ours_eager,
        "jax_us": t_jax.best_us, "jax_over_eager": t_jax.best_us / jax_eager,
        "ours_over_jax": ratio, "goal": f"≤ {GOAL:g}", "met": ratio <= GOAL,
        "timings": {"ours": t_ours.to_json(), "jax": t_jax.to_json()}})
  n_met = sum(r["met"] for r in rows)
  return Table(
      intro=(
          "f(x) = sum(tanh(sin(x) · x + 1)) on a small float32 vector, with "
          "`autodidax.numpy` and with `jax.numpy`; every call is eager (no "
          "`jit` on either side). *× eager* is a case's time over the plain "
          "`f(x)` call of the same library: the price of the transformation. "
          f"**Goal** (ours): not slower than JAX's eager transformation, "
          f"ours/JAX ≤ {GOAL:g}."),
      columns=[Column("case", "case"), Column("input", "input"),
               Column("ours_us", "autodidax µs", "us"),
               Column("ours_over_eager", "autodidax × eager", "x"),
               Column("jax_us", "JAX µs", "us"),
               Column("jax_over_eager", "JAX × eager", "x"),
               Column("ours_over_jax", "ours/JAX", "ratio"),
               Column("goal", "goal (ours/JAX)"), Column("met", "met?", "met")],
      rows=rows,
      summary={"rows_met": n_met, "rows": len(rows), "goal": GOAL,
               "met": n_met == len(rows)},
      summary_text=f"**Overall:** {n_met} of {len(rows)} cases meet the goal.")
