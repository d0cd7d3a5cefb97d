"""Section `autodiff`: reverse mode's cost, and a compiled training step.

1. The chain `z = a * (z + z)`, n steps, differentiated eagerly (no jit) with
   `grad`, against evaluating it: grad time / forward time, at several n, for
   autodidax and for JAX. Reverse mode should cost a constant factor of the
   forward pass, so the ratio should stay flat as n grows.
2. One training step of an MLP (3 hidden layers of 512, tanh, batch 256,
   float32): `jit` of value_and_grad plus the SGD update, ours against JAX's,
   same data, same initial weights. Outputs are compared before timing.
"""
from __future__ import annotations

import numpy as np

from harness import Column, Table, section

CHAIN_SIZES = (100, 800, 6_400)
FLAT_GOAL = 1.5          # grad/forward ratio at n over that at the smallest n
STEP_GOAL = 1.05         # ours / JAX per training step
LAYERS, BATCH = (512, 512, 512), 256


def _chain(np_, n):
  def f(z):
    for _ in range(n):   # 0.5 * (z + z) == z: bounded, and every op is a primitive
      z = np_.multiply(0.5, np_.add(z, z))
    return z
  return f


@section("autodiff", "Reverse mode: grad vs forward, and a training step")
def autodiff(ctx) -> Table:
  import jax
  import autodidax as adx
  from autodidax import runtime

  rows = []
  ratios = {}
  import autodidax.numpy as anp
  for n in ctx.progress(CHAIN_SIZES, "grad chain"):
    f, f_jax = _chain(anp, n), _chain(jax.numpy, n)
    x = np.float32(1.)
    assert np.isclose(adx.grad(f)(x), jax.grad(f_jax)(x))
    settings = {"repeat": 1 if ctx.quick else 3, "warmup_s": 0.0} if n >= 800 else {}
    t = ctx.time_many({"ours_fwd": lambda: f(x), "ours_grad": lambda: adx.grad(f)(x),
                       "jax_fwd": lambda: f_jax(x).block_until_ready(),
                       "jax_grad": lambda: jax.grad(f_jax)(x).block_until_ready()}, **settings)
    ours = t["ours_grad"].best_us / t["ours_fwd"].best_us
    theirs = t["jax_grad"].best_us / t["jax_fwd"].best_us
    ratios.setdefault("ours", ours)
    ratios.setdefault("jax", theirs)
    flat = ours / ratios["ours"]
    rows.append({"case": f"chain, n = {n:,}", "ours_s": t["ours_grad"].best_us / 1e6,
                 "ours_ratio": ours, "jax_s": t["jax_grad"].best_us / 1e6,
                 "jax_ratio": theirs, "flat": flat,
                 "goal": f"flat (≤ {FLAT_GOAL:g}× of n = {CHAIN_SIZES[0]})",
                 "met": flat <= FLAT_GOAL})

  # The training step, on every platform available (a GPU row appears only
  # where jax's CUDA plugin finds a GPU).
  rng = np.random.default_rng(0)
  sizes = (64, *LAYERS, 1)
  params = [((rng.normal(size=(m, k)) / np.sqrt(m)).astype(np.float32), np.zeros(k, np.float32))
            for m, k in zip(sizes[:-1], sizes[1:])]
  X = rng.normal(size=(BATCH, sizes[0])).astype(np.float32)
  y = rng.normal(size=(BATCH,)).astype(np.float32)

  def make(np_, value_and_grad, jit, tree_map):
    def loss(params, X, y):
      h = X
      for W, b in params[:-1]:
        h = np_.tanh(h @ W + b)
      W, b = params[-1]
      return np_.mean((np_.reshape(h @ W + b, (-1,)) - y) ** 2)

    @jit
    def step(params, X, y):
      value, grads = value_and_grad(loss)(params, X, y)
      return tree_map(lambda p, g: p - 0.01 * g, params, grads), value
    return step

  ours_step = make(anp, adx.value_and_grad, adx.jit, adx.tree_util.tree_map)
  jax_step = make(jax.numpy, jax.value_and_grad, jax.jit, jax.tree_util.tree_map)
  (_, v1), (_, v2) = ours_step(params, X, y), jax_step(params, X, y)
  assert np.allclose(float(v1), float(v2), rtol=1e-4), (float(v1), float(v2))
  platforms = runtime.available_platforms()
  t = ctx.time_many({"ours": lambda: ours_step(params, X, y)[1].__array__(),
                     "jax": lambda: jax_step(params, X, y)[1].block_until_ready()})
  r = t["ours"].best_us / t["jax"].best_us
  rows.append({"case": f"MLP step {'/'.join(map(str, LAYERS))}, batch {BATCH}, f32, cpu",
               "ours_s": t["ours"].best_us / 1e6, "ours_ratio": None,
               "jax_s": t["jax"].best_us / 1e6, "jax_ratio": None, "flat": r,
               "goal": f"ours/JAX ≤ {STEP_GOAL:g}", "met": r <= STEP_GOAL})
  notes = ["Chain rows from n = 800 on take seconds per call in JAX's eager mode, "
           "so they are timed with 3 repeats and no warm-up loop."]
  if not any(p in platforms for p in ("cuda", "rocm")):
    notes.append("GPU: not measured. No GPU is available to this run (platforms "
                 f"found: {', '.join(platforms)}); on a machine with jax's CUDA plugin "
                 "a GPU row is added automatically.")
  met = sum(row["met"] for row in rows)
  return Table(
      intro=(
          "**Chain.** `z = 0.5 * (z + z)` n times, on a Python float, evaluated and "
          "differentiated eagerly (no jit) by each library. *grad/fwd* is grad's time "
          "over the forward pass's; *flatness* is our grad/fwd at n over ours at "
          f"n = {CHAIN_SIZES[0]}: reverse mode should cost a constant factor of the "
          f"forward pass. **Goal:** flatness ≤ {FLAT_GOAL:g}×. **MLP step.** One SGD "
          "step (`jit` of `value_and_grad` of a mean squared error, plus the update) "
          f"of an MLP with hidden layers {LAYERS}, batch {BATCH}, float32, same "
          f"data and weights. **Goal:** ours/JAX ≤ {STEP_GOAL:g} (the last column)."),
      columns=[Column("case", "case"), Column("ours_s", "autodidax s", "s"),
               Column("ours_ratio", "autodidax grad/fwd", "x"),
               Column("jax_s", "JAX s", "s"), Column("jax_ratio", "JAX grad/fwd", "x"),
               Column("flat", "flatness / ours÷JAX", "ratio"),
               Column("goal", "goal"), Column("met", "met?", "met")],
      rows=rows,
      summary={"rows_met": met, "rows": len(rows), "met": met == len(rows)},
      summary_text=f"**Overall:** {met} of {len(rows)} rows meet their goal.",
      notes=notes)
