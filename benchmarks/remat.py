"""Section `remat`: what checkpointing saves and costs, ours against JAX.

An N-layer residual MLP, `x + tanh(x @ w1) @ w2`, run as a `scan` over the
layers, differentiated with `jit(grad(...))` in three ways: no checkpoint,
a checkpoint around each layer, and a checkpoint around each group of √N
layers (a scan of checkpointed scans). For each, both libraries compile the
same program; we report the buffer sizes XLA assigned (`memory_analysis()`
of the compiled executable: `temp` holds the residuals, `peak` adds the
arguments and outputs) and the time of one gradient step. Outputs are
compared before timing.

The scan matters: on an unrolled Python loop of checkpointed layers, XLA's
CPU compiler merges the recomputation back into the forward pass (in JAX's
program as in ours), and the memory does not drop; across a loop boundary it
can't.
"""
from __future__ import annotations

import math

import numpy as np

from harness import Column, Table, section

DEPTHS = (16, 64)
WIDTH, HIDDEN, BATCH = 64, 256, 1024
MODES = ("no checkpoint", "per layer", "every √N layers")
MEMORY_GOAL = 1.1    # ours / JAX, temp bytes: the same program, the same compiler
SAVING_GOAL = 2.0    # no checkpoint / per layer, temp bytes, in both libraries
TIME_GOAL = 1.25     # ours / JAX per step


def _layer(np_):
  def step(x, w):
    w1, w2 = w
    return x + np_.tanh(x @ w1) @ w2, None
  return step


def _loss(np_, checkpoint, scan, mode):
  def loss(ws, x):
    step = _layer(np_)
    if mode == "per layer":
      step = checkpoint(step)
    elif mode == "every √N layers":
      n = ws[0].shape[0]
      k = math.isqrt(n)
      ws = tuple(np_.reshape(w, (n // k, k, *w.shape[1:])) for w in ws)
      inner = step
      step = checkpoint(lambda x, wg: (scan(inner, x, wg)[0], None))
    x, _ = scan(step, x, ws)
    return np_.sum(x * x) / x.shape[0]
  return loss


def _problem(n):
  rng = np.random.default_rng(n)
  ws = ((rng.normal(size=(n, WIDTH, HIDDEN)) / np.sqrt(WIDTH)).astype(np.float32),
        (rng.normal(size=(n, HIDDEN, WIDTH)) / np.sqrt(HIDDEN) / n).astype(np.float32))
  x = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
  return ws, x


def measure(ctx, platform: str, n: int, mode: str) -> dict:
  """One row: compiled memory and step time of both libraries."""
  import jax
  import jax.numpy as jnp
  import autodidax as adx
  import autodidax.numpy as anp
  from autodidax import lax

  ws, x = _problem(n)
  ours = adx.jit(adx.grad(_loss(anp, adx.checkpoint, lax.scan, mode)), platform=platform)
  theirs = jax.jit(jax.grad(_loss(jnp, jax.checkpoint, jax.lax.scan, mode)))
  dev = jax.devices(platform)[0]
  jws, jx = jax.device_put(ws, dev), jax.device_put(x, dev)
  o_args = adx.jit(lambda *a: a, platform=platform)(ws, x)   # on the device
  mine, other = ours.lower(*o_args).compile(), theirs.lower(jws, jx).compile()
  m, j = mine.memory_analysis(), other.memory_analysis()
  g_ours, g_jax = ours(*o_args), theirs(jws, jx)
  tol = (2e-3, 2e-5) if platform == "cpu" else (2e-2, 2e-4)   # a GPU's f32 dots: TF32
  for a, b in zip(g_ours, g_jax):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol[0], atol=tol[1])
  t = ctx.time_many({"ours": lambda: ours(*o_args)[0].block_until_ready(),
                     "jax": lambda: theirs(jws, jx)[0].block_until_ready()},
                    repeat=2 if ctx.quick else 5)
  j_peak = (j.argument_size_in_bytes + j.output_size_in_bytes - j.alias_size_in_bytes
            + j.temp_size_in_bytes)
  return {"platform": platform, "layers": n, "mode": mode,
          "ours_temp_mib": m.temp_size_in_bytes / 2**20,
          "jax_temp_mib": j.temp_size_in_bytes / 2**20,
          "ours_peak_mib": m.peak_bytes / 2**20, "jax_peak_mib": j_peak / 2**20,
          "mem_ratio": m.temp_size_in_bytes / j.temp_size_in_bytes,
          "ours_ms": t["ours"].best_us / 1e3, "jax_ms": t["jax"].best_us / 1e3,
          "time_ratio": t["ours"].best_us / t["jax"].best_us,
          "timings": {k: v.to_json() for k, v in t.items()}}


@section("remat", "Rematerialization: memory and time of checkpointed scans vs JAX")
def remat_section(ctx) -> Table:
  from autodidax import runtime

  platforms = runtime.available_platforms()
  depths = DEPTHS[:1] if ctx.quick else DEPTHS
  cases = [(p, n, mode) for p in ["cpu"] + (["cuda"] if "cuda" in platforms else [])
           for n in depths for mode in MODES]
  rows = [measure(ctx, *case) for case in ctx.progress(cases, "remat")]
  base = {(r["platform"], r["layers"]): r for r in rows if r["mode"] == MODES[0]}
  for r in rows:
    b = base[r["platform"], r["layers"]]
    r["ours_saving"] = b["ours_temp_mib"] / r["ours_temp_mib"]
    r["jax_saving"] = b["jax_temp_mib"] / r["jax_temp_mib"]
    r["met"] = (r["mem_ratio"] <= MEMORY_GOAL and r["time_ratio"] <= TIME_GOAL
                and (r["mode"] != "per layer"
                     or min(r["ours_saving"], r["jax_saving"]) >= SAVING_GOAL))
  if "cuda" not in platforms:
    rows += [{"platform": "gpu", "layers": n, "mode": mode, "met": None}
             for n in depths for mode in MODES]
  measured = [r for r in rows if r.get("met") is not None]
  deepest = max(r["layers"] for r in measured)
  at = {r["mode"]: r for r in measured if r["layers"] == deepest and r["platform"] == "cpu"}
  met = sum(r["met"] for r in measured)
  summary = {"rows_met": met, "rows": len(measured), "platforms": platforms,
             "deepest": deepest,
             "temp_mib": {m: [at[m]["ours_temp_mib"], at[m]["jax_temp_mib"]] for m in at}}
  saving = "; ".join(
      f"{m}: {at[m]['ours_temp_mib']:.0f} MiB (JAX {at[m]['jax_temp_mib']:.0f})"
      for m in MODES if m in at)
  return Table(
      intro=(
          f"A residual MLP of N layers (`x + tanh(x @ w1) @ w2`, width {WIDTH}, "
          f"hidden {HIDDEN}, batch {BATCH}, float32) as a `scan` over the layers; "
          "`jit(grad(loss))` with no checkpoint, a checkpoint per layer, or a "
          "checkpoint per group of √N layers, compiled by each library from the same "
          "program. *temp* and *peak* are the buffer sizes in XLA's compiled memory "
          "analysis (`memory_analysis()`): temp holds the intermediate values, the "
          "residuals among them; peak adds arguments and outputs. *saving* is the no-"
          "checkpoint temp over this row's. Step times are the minimum over "
          f"repeats. **Goals:** ours/JAX temp ≤ {MEMORY_GOAL:g} and time ≤ "
          f"{TIME_GOAL:g}; a per-layer checkpoint cuts temp by ≥ {SAVING_GOAL:g}× in "
          "both libraries."),
      columns=[Column("platform", "platform"), Column("layers", "N"),
               Column("mode", "checkpoint"),
               Column("ours_temp_mib", "ours temp MiB", "ratio"),
               Column("jax_temp_mib", "JAX temp MiB", "ratio"),
               Column("ours_saving", "ours saving", "x"),
               Column("jax_saving", "JAX saving", "x"),
               Column("ours_peak_mib", "ours peak MiB", "ratio"),
               Column("jax_peak_mib", "JAX peak MiB", "ratio"),
               Column("ours_ms", "ours ms/step", "ratio"),
               Column("jax_ms", "JAX ms/step", "ratio"),
               Column("time_ratio", "time ours/JAX", "ratio"),
               Column("met", "met?", "met")],
      rows=rows, summary=summary,
      summary_text=(
          f"**Overall:** {met} of {len(measured)} measured rows meet their goals. "
          f"At N = {deepest}, XLA's temp memory: {saving}." + (
              "" if "cuda" in platforms else
              " GPU rows were not measured: no GPU is available on this machine "
              "(they are added automatically when `runtime.available_platforms()` "
              "lists 'cuda'; `run.py` defaults `JAX_PLATFORMS=cpu`, so set it to "
              "`cpu,cuda` there).")),
      notes=["Each step is seconds of work at N = 64, so rows are timed with "
             "5 repeats (2 with --quick)."])
