"""Section `kernels`: our interpret-mode `pallas_call` against JAX's, and against plain XLA.

The same kernels, written once, are built with `autodidax.pallas` and with
`jax.experimental.pallas` (`interpret=True`), each under its library's
`jit`. For each we time compilation (tracing the kernel, interpret mode's
loop, lowering, XLA's compile: a fresh `pallas_call` and `jit` every time)
and a compiled call. Then the same computation as one `jax.numpy`
expression under `jax.jit`, which XLA fuses as it likes: what interpret
mode costs against no kernel at all. Outputs are compared before timing.

On a GPU (when one is present), JAX's real lowering (`interpret=False`,
Triton) runs beside our interpret mode on the same device.
"""
from __future__ import annotations

import time

import numpy as np

from harness import Column, Table, section

COMPILE_GOAL = 1.25   # ours / JAX's interpret mode, compile time
RUN_GOAL = 1.25       # ours / JAX's interpret mode, a compiled call


def _struct(shape, dtype=np.float32):
  import jax
  return jax.ShapeDtypeStruct(shape, dtype)   # both libraries take it


def elementwise(pl, np_, lax, n=1024, b=128):
  def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = np_.sin(x_ref[...]) * y_ref[...] + 1.0
  spec = pl.BlockSpec((b, b), lambda i, j: (i, j))
  return pl.pallas_call(kernel, out_shape=_struct((n, n)), grid=(n // b, n // b),
                        in_specs=[spec, spec], out_specs=spec, interpret=True)


def matmul(pl, np_, lax, n=512, b=128):
  def kernel(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      o_ref[...] = np_.zeros(o_ref.shape, np.float32)
    o_ref[...] += x_ref[...] @ y_ref[...]
  return pl.pallas_call(kernel, out_shape=_struct((n, n)), grid=(n // b, n // b, n // b),
                        in_specs=[pl.BlockSpec((b, b), lambda i, j, k: (i, k)),
                                  pl.BlockSpec((b, b), lambda i, j, k: (k, j))],
                        out_specs=pl.BlockSpec((b, b), lambda i, j, k: (i, j)),
                        interpret=True)


def softmax(pl, np_, lax, n=1024, d=512, b=64):
  def kernel(x_ref, o_ref):
    x = x_ref[...]
    e = np_.exp(x - np_.max(x, axis=1, keepdims=True))
    o_ref[...] = e / np_.sum(e, axis=1, keepdims=True)
  spec = pl.BlockSpec((b, d), lambda i: (i, 0))
  return pl.pallas_call(kernel, out_shape=_struct((n, d)), grid=(n // b,),
                        in_specs=[spec], out_specs=spec, interpret=True)


def attention(pl, np_, lax, n=512, d=64, bq=64, bk=64):
  def kernel(q_ref, k_ref, v_ref, o_ref):
    qb = q_ref[...]

    def step(j, carry):
      m, l, acc = carry
      kb, vb = k_ref[pl.ds(j * bk, bk), :], v_ref[pl.ds(j * bk, bk), :]
      s = qb @ kb.T
      m_new = np_.maximum(m, np_.max(s, axis=1))
      p = np_.exp(s - m_new[:, None])
      scale = np_.exp(m - m_new)
      return m_new, l * scale + np_.sum(p, axis=1), acc * scale[:, None] + p @ vb
    init = (np_.full((bq,), -np.inf, np.float32), np_.zeros((bq,), np.float32),
            np_.zeros((bq, d), np.float32))
    _, l, acc = lax.fori_loop(0, n // bk, step, init)
    o_ref[...] = acc / l[:, None]
  whole = pl.BlockSpec((n, d), lambda i: (0, 0))
  rows = pl.BlockSpec((bq, d), lambda i: (i, 0))
  return pl.pallas_call(kernel, out_shape=_struct((n, d)), grid=(n // bq,),
                        in_specs=[rows, whole, whole], out_specs=rows, interpret=True)


def _plain(name, jnp):
  """The same computation as one jax.numpy expression."""
  import jax
  return {"elementwise": lambda x, y: jnp.sin(x) * y + 1.0,
          "matmul": lambda x, y: x @ y,
          "softmax": lambda x: jax.nn.softmax(x, axis=1),
          "attention": lambda q, k, v: jax.nn.softmax(q @ k.T, axis=1) @ v}[name]


KERNELS = {"elementwise": (elementwise, [(1024, 1024), (1024, 1024)]),
           "matmul": (matmul, [(512, 512), (512, 512)]),
           "softmax": (softmax, [(1024, 512)]),
           "attention": (attention, [(512, 64), (512, 64), (512, 64)])}


def _compile_s(make, args, repeat: int) -> float:
  """The fastest of `repeat` fresh compiles: `make()` gives a new jitted function."""
  best = float("inf")
  for _ in range(repeat):
    t0 = time.perf_counter()
    make().lower(*args).compile()
    best = min(best, time.perf_counter() - t0)
  return best


def measure(ctx, name: str) -> dict:
  import jax
  import jax.numpy as jnp
  from jax.experimental import pallas as jpl

  import autodidax as adx
  import autodidax.numpy as anp
  from autodidax import lax, pallas as pl

  build, shapes = KERNELS[name]
  rng = np.random.default_rng(0)
  args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ours = adx.jit(build(pl, anp, lax))
  theirs = jax.jit(build(jpl, jnp, jax.lax))
  plain = jax.jit(_plain(name, jnp))
  o_args = adx.jit(lambda *a: a)(*args)
  j_args = [jax.device_put(a) for a in args]
  want = np.asarray(plain(*j_args))
  for got in (ours(*o_args), theirs(*j_args)):
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-3, atol=2e-4)
  repeat = 2 if ctx.quick else 3
  c_ours = _compile_s(lambda: adx.jit(build(pl, anp, lax)), o_args, repeat)
  c_jax = _compile_s(lambda: jax.jit(build(jpl, jnp, jax.lax)), j_args, repeat)
  t = ctx.time_many({"ours": lambda: ours(*o_args).block_until_ready(),
                     "jax": lambda: theirs(*j_args).block_until_ready(),
                     "plain": lambda: plain(*j_args).block_until_ready()},
                    repeat=3 if ctx.quick else 5)
  return {"kernel": name, "shapes": " ".join("×".join(map(str, s)) for s in shapes),
          "ours_compile_ms": c_ours * 1e3, "jax_compile_ms": c_jax * 1e3,
          "compile_ratio": c_ours / c_jax,
          "ours_ms": t["ours"].best_us / 1e3, "jax_ms": t["jax"].best_us / 1e3,
          "run_ratio": t["ours"].best_us / t["jax"].best_us,
          "plain_ms": t["plain"].best_us / 1e3,
          "vs_plain": t["ours"].best_us / t["plain"].best_us,
          "met": c_ours / c_jax <= COMPILE_GOAL and t["ours"].best_us / t["jax"].best_us
          <= RUN_GOAL,
          "timings": {k: v.to_json() for k, v in t.items()}}


def measure_gpu(ctx, name: str) -> dict:
  """JAX's real Pallas lowering (Triton) beside our interpret mode, on the GPU."""
  import jax

  import autodidax as adx
  import autodidax.numpy as anp
  from autodidax import lax, pallas as pl

  build, shapes = KERNELS[name]
  rng = np.random.default_rng(0)
  args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  gpu = jax.devices("gpu")[0]
  j_args = [jax.device_put(a, gpu) for a in args]
  ours = adx.jit(build(pl, anp, lax), platform="cuda")
  o_args = adx.jit(lambda *a: a, platform="cuda")(*args)
  compiled = jax.jit(lambda *a: _real_call(build, a))
  try:
    compiled(*j_args).block_until_ready()
  except Exception as e:   # a kernel Triton can't lower: say so in the row
    return {"kernel": name, "platform": "gpu",
            "note": f"real lowering failed: {type(e).__name__}", "met": None}
  t = ctx.time_many({"ours": lambda: ours(*o_args).block_until_ready(),
                     "real": lambda: compiled(*j_args).block_until_ready()},
                    repeat=5)
  return {"kernel": name, "platform": "gpu", "ours_ms": t["ours"].best_us / 1e3,
          "real_ms": t["real"].best_us / 1e3,
          "interpret_cost": t["ours"].best_us / t["real"].best_us, "met": None}


def _real_call(build, args):
  """`build`'s kernel with JAX's real lowering: its pallas_call with interpret=False."""
  import jax
  import jax.numpy as jnp
  from jax.experimental import pallas as jpl

  class Real:   # jpl, except that pallas_call compiles for the device
    def __getattr__(self, name):
      if name == "pallas_call":
        return lambda *a, interpret=True, **kw: jpl.pallas_call(*a, interpret=False, **kw)
      return getattr(jpl, name)
  return build(Real(), jnp, jax.lax)(*args)


@section("kernels", "Kernels: interpret-mode pallas_call vs JAX's, and vs plain XLA")
def kernels_section(ctx) -> Table:
  from autodidax import runtime

  names = list(KERNELS)[:2] if ctx.quick else list(KERNELS)
  rows = [measure(ctx, n) for n in ctx.progress(names, "kernels")]
  gpu = "cuda" in runtime.available_platforms()
  gpu_rows = [measure_gpu(ctx, n) for n in names] if gpu else []
  met = sum(bool(r["met"]) for r in rows)
  summary = {"rows_met": met, "rows": len(rows),
             "compile_ratio_max": max(r["compile_ratio"] for r in rows),
             "run_ratio_max": max(r["run_ratio"] for r in rows),
             "vs_plain_median": float(np.median([r["vs_plain"] for r in rows])),
             "gpu": gpu_rows}
  gpu_text = (" GPU: " + "; ".join(
      f"{r['kernel']}: ours {r['ours_ms']:.3g} ms, Triton {r['real_ms']:.3g} ms"
      if "real_ms" in r else f"{r['kernel']}: {r['note']}" for r in gpu_rows)
      if gpu else " GPU rows (JAX's Triton lowering beside our interpret mode) were not "
      "measured: no GPU is available on this machine.")
  return Table(
      intro=(
          "Four kernels written once and built with both libraries (interpret mode, "
          "float32, on the CPU): an elementwise kernel on 128×128 blocks, a 512² "
          "matmul accumulating over 128³ tiles, a row softmax on blocks of 64 rows, and "
          "online-softmax attention (64 queries per run, keys in blocks of 64). "
          "*compile* is the fastest of a few fresh compiles (trace, interpret mode's "
          "loop, lowering, XLA); *run* is a compiled call, the minimum over repeats. "
          "*plain XLA* is the same computation as one `jax.numpy` expression under "
          f"`jax.jit`. **Goals:** ours/JAX ≤ {COMPILE_GOAL:g} for compile and "
          f"≤ {RUN_GOAL:g} for run."),
      columns=[Column("kernel", "kernel"), Column("shapes", "operands"),
               Column("ours_compile_ms", "ours compile ms", "ratio"),
               Column("jax_compile_ms", "JAX compile ms", "ratio"),
               Column("compile_ratio", "compile ours/JAX", "ratio"),
               Column("ours_ms", "ours run ms", "ratio"),
               Column("jax_ms", "JAX run ms", "ratio"),
               Column("run_ratio", "run ours/JAX", "ratio"),
               Column("plain_ms", "plain XLA ms", "ratio"),
               Column("vs_plain", "ours / plain XLA", "x"),
               Column("met", "met?", "met")],
      rows=rows, summary=summary,
      summary_text=(f"**Overall:** {met} of {len(rows)} kernels meet both goals; "
                    f"interpret mode costs a median {summary['vs_plain_median']:.1f}× "
                    "plain XLA." + gpu_text),
      notes=["Compile times are the minimum of 3 fresh compiles (2 with --quick)."])
