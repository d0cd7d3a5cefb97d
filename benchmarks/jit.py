"""Section `jit`: what a call of a jitted function costs, ours against `jax.jit`.

Two things, in one run: the *dispatch overhead* of a cached call on tiny
inputs (the arithmetic costs nothing, so we see the Python and runtime work
around it), and the *steady-state compute* of an MLP forward pass, where
dispatch is negligible and only the compiled code matters. Both libraries
hand XLA the same kind of StableHLO, so compute should be a tie.

Dispatch is also compared with a floor: the same executable run through
`autodidax.runtime` directly (a device_put per input, execute, and for the
NumPy rows np.asarray), with none of `jit`'s own Python around it.
"""
from __future__ import annotations

import numpy as np

from harness import Column, Table, section

DISPATCH_GOAL = 1.5   # ours / jax.jit, cached call on tiny inputs
COMPUTE_GOAL = 1.05   # ours / jax.jit, MLP forward pass


def _dispatch_cases(platform: str):
  """(case, input label, our call, jax call, floor call, check) for tiny f."""
  import jax
  import jax.numpy as jnp
  from autodidax import jit, numpy as anp, runtime
  from autodidax.xla import compile_jaxpr

  def f(x, y):
    return anp.sin(x) * y + x

  def f_jax(x, y):
    return jnp.sin(x) * y + x

  ours = jit(f, platform=platform)
  jdev = jax.devices(platform)[0]
  theirs = jax.jit(f_jax)
  x = np.array([0.5, 1.5, 2.5], np.float32)
  y = np.array([1.0, -2.0, 3.0], np.float32)

  # Device-resident inputs: outputs of earlier calls, as a program would have.
  ax, ay = ours(x, y), ours(y, x)
  jx, jy = jax.device_put(x, jdev), jax.device_put(y, jdev)
  jx, jy = theirs(jx, jy), theirs(jy, jx)
  jax.block_until_ready((jx, jy))

  # The floor: the same executable, called through the runtime directly.
  traced = next(iter(ours._cache.values()))
  exe = compile_jaxpr(traced.jaxpr, platform, f"jit_{ours.__name__}")
  bx, by = runtime.device_put(x, platform), runtime.device_put(y, platform)

  def floor_numpy():
    bufs = [runtime.device_put(x, platform), runtime.device_put(y, platform)]
    return np.asarray(exe.execute(bufs)[0])

  def floor_device():
    return exe.execute([bx, by])[0].block_until_ready()

  def theirs_numpy():   # NumPy inputs go to the default device: make it `platform`'s
    with jax.default_device(jdev):
      return np.asarray(theirs(x, y))

  check = lambda: np.testing.assert_allclose(np.asarray(ours(ax, ay)),
                                             np.asarray(theirs(jx, jy)), rtol=1e-6)
  return [
      ("dispatch, NumPy in → NumPy out", "f32[3], f32[3]",
       lambda: np.asarray(ours(x, y)), theirs_numpy, floor_numpy,
       lambda: np.testing.assert_allclose(np.asarray(ours(x, y)), theirs_numpy(), rtol=1e-6)),
      ("dispatch, device arrays in → out", "f32[3], f32[3]",
       lambda: ours(ax, ay).block_until_ready(),
       lambda: theirs(jx, jy).block_until_ready(), floor_device, check),
  ]


def _mlp_case(platform: str):
  """A 3-layer tanh MLP forward pass, 512 units, batch 256, float32."""
  import jax
  import jax.numpy as jnp
  from autodidax import jit, numpy as anp

  rng = np.random.default_rng(0)
  sizes = [512, 512, 512, 512]
  params = [(rng.normal(0, 1 / np.sqrt(m), (m, n)).astype(np.float32),
             rng.normal(0, 0.1, (n,)).astype(np.float32))
            for m, n in zip(sizes[:-1], sizes[1:])]
  x = rng.normal(0, 1, (256, sizes[0])).astype(np.float32)
  flat = [a for wb in params for a in wb]

  def mlp(np_, x, *flat):
    for w, b in zip(flat[::2], flat[1::2]):
      x = np_.tanh(np_.dot(x, w) + b)
    return x

  ours = jit(lambda *a: mlp(anp, *a), platform=platform)
  theirs = jax.jit(lambda *a: mlp(jnp, *a))
  # Steady state: weights and data already on the device for both.
  to_ours = jit(lambda *a: a, platform=platform)
  o_args = to_ours(x, *flat)
  jdev = jax.devices(platform)[0]
  j_args = [jax.device_put(a, jdev) for a in (x, *flat)]

  def check():
    want = mlp(np, x.astype(np.float64), *(a.astype(np.float64) for a in flat))
    a, b = np.asarray(ours(*o_args)), np.asarray(theirs(*j_args))
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (256, 512)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # (a GPU multiplies f32 matrices in TF32 by default, both libraries alike)
    tol = 1e-4 if platform == "cpu" else 1e-2
    np.testing.assert_allclose(a, want, rtol=tol, atol=tol)

  return ("MLP forward, device arrays", "3 × 512 tanh, batch 256, f32",
          lambda: ours(*o_args).block_until_ready(),
          lambda: theirs(*j_args).block_until_ready(), None, check)


@section("jit", "jit: dispatch overhead and compute vs jax.jit")
def jit_section(ctx) -> Table:
  from autodidax import runtime

  platforms = runtime.available_platforms()
  cases = []
  for platform in ["cpu"] + (["cuda"] if "cuda" in platforms else []):
    cases += [(platform, DISPATCH_GOAL, c) for c in _dispatch_cases(platform)]
    cases.append((platform, COMPUTE_GOAL, _mlp_case(platform)))

  rows = []
  for platform, goal, (case, label, ours, theirs, floor, check) in ctx.progress(cases, "jit"):
    check()   # same answers, or we would be timing different things
    fns = {"ours": ours, "jax": theirs, **({"floor": floor} if floor else {})}
    t = ctx.time_many(fns)
    ratio = t["ours"].best_us / t["jax"].best_us
    rows.append({
        "case": case, "input": label, "platform": platform,
        "ours_us": t["ours"].best_us, "jax_us": t["jax"].best_us,
        "floor_us": t["floor"].best_us if floor else None,
        "ours_over_jax": ratio, "goal": f"≤ {goal}", "met": ratio <= goal,
        "timings": {k: v.to_json() for k, v in t.items()}})
  if "cuda" not in platforms:
    for case in ("dispatch, NumPy in → NumPy out", "dispatch, device arrays in → out",
                 "MLP forward, device arrays"):
      rows.append({"case": case, "input": "not measured: no GPU available here",
                   "platform": "gpu", "goal": "–", "met": None})

  measured = [r for r in rows if r.get("ours_over_jax") is not None]
  summary = {"platforms": platforms,
             "rows_met": sum(bool(r["met"]) for r in measured), "rows": len(measured),
             "ratios": {f"{r['platform']}: {r['case']}": r["ours_over_jax"] for r in measured}}
  return Table(
      intro=(
          "A cached call of a jitted function, ours (`autodidax.jit`) against "
          "`jax.jit`, compiled and warmed up before timing. **Dispatch**: "
          "`f(x, y) = sin(x) * y + x` on f32[3], so the arithmetic is free and "
          "what we time is the work around it: NumPy arrays in, "
          "`np.asarray(jf(x, y))` out; or device-resident arrays in (outputs "
          "of earlier calls, our `Array` / JAX's `jax.Array`) and out, with "
          "`.block_until_ready()`. The *floor* column runs the same executable "
          "through `autodidax.runtime` directly (a `device_put` per input, "
          "`execute`, `np.asarray`): what jaxlib's Python API costs before any "
          "of `jit`'s own work. **Compute**: an MLP forward pass, 3 tanh layers "
          "of 512 units, batch 256, float32, same weights and data for both, "
          "all on the device; outputs are checked equal (allclose) before "
          f"timing. **Goals:** dispatch ours/JAX ≤ {DISPATCH_GOAL}, compute "
          f"ours/JAX ≤ {COMPUTE_GOAL}."),
      columns=[Column("case", "case"), Column("input", "input"),
               Column("platform", "platform"),
               Column("ours_us", "autodidax µs", "us"),
               Column("jax_us", "jax.jit µs", "us"),
               Column("floor_us", "runtime floor µs", "us"),
               Column("ours_over_jax", "ours/JAX", "ratio"),
               Column("goal", "goal (ours/JAX)"), Column("met", "met?", "met")],
      rows=rows, summary=summary,
      summary_text=(
          f"**Overall:** {summary['rows_met']} of {summary['rows']} measured rows "
          "meet their goal (" + "; ".join(
              f"{r['case']} {r['ours_over_jax']:.2f}× jax.jit"
              + (f", the runtime alone {r['floor_us'] / r['jax_us']:.2f}×" if r["floor_us"] else "")
              for r in measured) + "). " + ("" if "cuda" in platforms else
          "GPU rows were not measured: no GPU is available on this machine "
          "(they are added automatically when `runtime.available_platforms()` "
          "lists 'cuda'; `run.py` defaults `JAX_PLATFORMS=cpu`, so set it to "
          "`cpu,cuda` there).")),
      notes=[
          "With NumPy inputs every call copies each input to the device: one "
          "`batched_device_put` per input from Python, where `jax.jit` does the "
          "transfers inside its C++ dispatch. That is most of the gap to JAX; "
          "compare the floor column."])
