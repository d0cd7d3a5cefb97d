"""Section `many_devices`: a data-parallel training step on 1, 2, 4 and 8 devices.

The step of an MLP, written with shard_map: each device takes its slice of
the batch, computes gradients, and averages them with `pmean` (an
all-reduce). The same program in autodidax and in JAX, jitted, on meshes of
1, 2, 4 and 8 of XLA's virtual CPU devices, with the global batch fixed
(strong scaling). Both hand XLA the same kind of SPMD program, so compute
should be a tie; what differs is the work around each call.

The virtual devices share the machine's cores, so more devices don't make a
step faster here: the numbers show the cost of splitting, not a speed-up.

XLA_FLAGS must be set before a runtime starts, so the measurements run in a
child process (this file, run as a script), and the section reads its JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOAL = 1.5   # ours / JAX, time per step
DEVICES = (1, 2, 4, 8)
BATCH, DIN, DH, DOUT = 512, 64, 256, 16


def _steps(n):
  """One step for each library, on a mesh of `n` devices, and its inputs."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  import autodidax as adx
  import autodidax.numpy as anp
  from autodidax import lax

  rng = np.random.default_rng(0)
  params = {"W1": rng.normal(size=(DIN, DH)).astype(np.float32) * .1,
            "W2": rng.normal(size=(DH, DOUT)).astype(np.float32) * .1}
  x = rng.normal(size=(BATCH, DIN)).astype(np.float32)
  y = rng.normal(size=(BATCH, DOUT)).astype(np.float32)

  def make(L, numpy, grad, shard_map, mesh, P, **kw):
    def loss(p, xb, yb):
      h = numpy.tanh(xb @ p["W1"])
      return ((h @ p["W2"] - yb) ** 2).mean()

    def local_step(p, xb, yb):
      g = L.pmean(grad(loss)(p, xb, yb), "data")
      return {k: p[k] - 0.01 * g[k] for k in p}
    return shard_map(local_step, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                     out_specs=P(), **kw)

  mesh = adx.make_mesh((n,), ("data",))
  jmesh = jax.make_mesh((n,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  ours = adx.jit(make(lax, anp, adx.grad, adx.shard_map, mesh, adx.P))
  # check_vma=False: the gradient inside is each device's own, as in autodidax
  # (JAX's default would already sum it over the devices; see the chapter).
  theirs = jax.jit(make(jax.lax, jnp, jax.grad, jax.shard_map, jmesh, jax.P, check_vma=False))
  # Inputs already laid out on the mesh, as a training loop keeps them.
  NS, JNS = adx.sharding.NamedSharding, jax.sharding.NamedSharding
  o_args = (adx.device_put(params, NS(mesh, adx.P())), adx.device_put(x, NS(mesh, adx.P("data"))),
            adx.device_put(y, NS(mesh, adx.P("data"))))
  j_args = (jax.device_put(params, JNS(jmesh, jax.P())),
            jax.device_put(x, JNS(jmesh, jax.P("data"))),
            jax.device_put(y, JNS(jmesh, jax.P("data"))))
  a, b = ours(*o_args), theirs(*j_args)
  for k in params:
    np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-4, atol=1e-5)

  def run_ours():
    out = ours(*o_args)
    for v in out.values():
      v.block_until_ready()

  def run_theirs():
    jax.block_until_ready(theirs(*j_args))
  return run_ours, run_theirs


def measure(quick: bool) -> list[dict]:
  """In the child process: time both steps on each mesh."""
  sys.path.insert(0, str(HERE))
  import harness
  ctx = harness.Context(quick=quick)
  rows = []
  for n in DEVICES:
    ours, theirs = _steps(n)
    t = ctx.time_many({"ours": ours, "jax": theirs})
    rows.append({"devices": n, "ours_us": t["ours"].best_us, "jax_us": t["jax"].best_us})
  return rows


def _child(quick: bool) -> list[dict]:
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run([sys.executable, __file__, "--child"] + (["--quick"] if quick else []),
                        env=env, capture_output=True, text=True, timeout=1800)
  if proc.returncode != 0:
    raise RuntimeError(f"the many_devices benchmark failed:\n{proc.stderr[-3000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _register():
  from harness import Column, Table, section

  @section("many_devices", "Many devices: a data-parallel training step on 1, 2, 4, 8 devices")
  def many_devices(ctx) -> Table:
    rows = _child(ctx.quick)
    base = {"ours": rows[0]["ours_us"], "jax": rows[0]["jax_us"]}
    for r in rows:
      r["ratio"] = r["ours_us"] / r["jax_us"]
      r["ours_vs_1"] = r["ours_us"] / base["ours"]
      r["jax_vs_1"] = r["jax_us"] / base["jax"]
      r["met"] = r["ratio"] <= GOAL
    met = sum(r["met"] for r in rows)
    worst = max(r["ratio"] for r in rows)
    return Table(
        intro=("The jitted shard_map step of an MLP "
               f"({DIN} → {DH} → {DOUT}, tanh, mean squared error, SGD) on a global batch "
               f"of {BATCH}, split over a mesh of 1, 2, 4 and 8 of XLA's virtual CPU devices "
               "(`XLA_FLAGS=--xla_force_host_platform_device_count=8`, in a child process); "
               "each device computes the gradient of its slice and `pmean` averages them. "
               "Parameters and batch are already laid out on the mesh. Time per step, "
               f"autodidax against JAX on the same program. **Goal:** ours/JAX ≤ {GOAL:g} "
               "on every mesh: both run the XLA program XLA partitions; the rest is the "
               "call's own work."),
        columns=[Column("devices", "devices"), Column("ours_us", "autodidax µs", "us"),
                 Column("jax_us", "JAX µs", "us"), Column("ratio", "ours/JAX", "ratio"),
                 Column("ours_vs_1", "ours vs 1 device", "x"),
                 Column("jax_vs_1", "JAX vs 1 device", "x"), Column("met", "met?", "met")],
        rows=rows,
        summary={"rows_met": met, "rows": len(rows), "worst_ratio": worst,
                 "met": met == len(rows)},
        summary_text=(f"**Overall:** {met} of {len(rows)} meshes meet ours/JAX ≤ {GOAL:g} "
                      f"(worst {worst:.2f})."),
        notes=["The virtual devices share the machine's cores: a bigger mesh splits the "
               "same work into more pieces and adds the all-reduce, so it is not faster "
               "here. On real accelerators each device would bring its own compute."])


if __name__ == "__main__":   # the child process
  print(json.dumps(measure("--quick" in sys.argv)))
else:
  _register()
