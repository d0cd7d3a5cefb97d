"""Section `make_jaxpr`: the cost of staging, per equation.

The program is a chain of `x = sin(x) * 2. + x`, repeated n/3 times so that
its jaxpr has n equations, on a float32 scalar: written once with
`autodidax.numpy` and once with `jax.numpy`. We time `make_jaxpr(f)(x)` on
each side at several n and divide by n. Tracing should cost the same for
every equation, so the per-equation time should not grow with n.
"""
from __future__ import annotations

import sys

import numpy as np

from harness import Column, Table, section

SIZES = (300, 3_000, 30_000)   # equations per jaxpr
GOAL = 0.33                     # ours / JAX, per equation
LINEAR_GOAL = 1.5               # per-equation time at n / at the smallest n
BIG = 10_000                    # from here on, a call takes seconds (for JAX)
BIG_REPEAT = 5                  # ... so fewer repeats, and no warm-up loop


def _chain(np_, n):
  def f(x):
    for _ in range(n // 3):
      x = np_.sin(x) * 2. + x
    return x
  return f


def _cases():
  import jax
  import jax.numpy as jnp
  import autodidax as adx
  import autodidax.numpy as anp

  # jax.make_jaxpr caches its trace per function object, so every call
  # stages a new function (on both sides, alike): we time the tracing.
  x = np.float32(0.5)
  for n in SIZES:
    yield (n, lambda n=n: adx.make_jaxpr(_chain(anp, n))(x),
           lambda n=n: jax.make_jaxpr(_chain(jnp, n))(x))


@section("make_jaxpr", "make_jaxpr: staging cost per equation")
def staging(ctx) -> Table:
  # Neither side recurses per equation, but keep headroom in case.
  sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
  rows = []
  first = None
  for n, ours, theirs in ctx.progress(list(_cases()), "make_jaxpr"):
    # Same program on both sides, or we would be timing different things.
    n_ours, n_jax = len(ours().eqns), len(theirs().jaxpr.eqns)
    assert n_ours == n_jax == n, (n, n_ours, n_jax)
    settings = {}
    if n >= BIG:
      settings = {"repeat": 1 if ctx.quick else BIG_REPEAT, "warmup_s": 0.0}
    t = ctx.time_many({"ours": ours, "jax": theirs}, **settings)
    ours_us, jax_us = t["ours"].best_us / n, t["jax"].best_us / n
    if first is None:
      first = (ours_us, jax_us)
    ratio = ours_us / jax_us
    linear = ours_us / first[0]
    rows.append({
        "n": f"{n:,}", "ours_us": ours_us, "ours_linear": linear,
        "jax_us": jax_us, "jax_linear": jax_us / first[1],
        "ours_over_jax": ratio, "ours_ms": t["ours"].best_us / 1e3,
        "jax_ms": t["jax"].best_us / 1e3,
        "goal": f"≤ {GOAL:g}, ≤ {LINEAR_GOAL:g}×",
        "met": ratio <= GOAL and linear <= LINEAR_GOAL,
        "repeats": len(t["ours"].repeats_us),
        "timings": {"ours": t["ours"].to_json(), "jax": t["jax"].to_json()}})
  n_met = sum(r["met"] for r in rows)
  worst_ratio = max(r["ours_over_jax"] for r in rows)
  worst_linear = max(r["ours_linear"] for r in rows)
  return Table(
      intro=(
          "`make_jaxpr(f)(x)` for f a chain of `x = sin(x) * 2. + x` repeated "
          "n/3 times (so n equations: sin, mul, add), on a float32 scalar, "
          "with `autodidax.make_jaxpr` + `autodidax.numpy` and with "
          "`jax.make_jaxpr` + `jax.numpy`; both jaxprs are checked to have n "
          "equations. Times are per equation (one call's time / n). "
          "*Linearity* is the per-equation time at n over that at "
          f"n = {SIZES[0]:,}, for the same library: 1.0× is linear. "
          f"**Goal** (ours): at most a third of JAX's time per equation "
          f"(ours/JAX ≤ {GOAL:g}), and linear growth (linearity ≤ "
          f"{LINEAR_GOAL:g}×)."),
      columns=[Column("n", "equations"),
               Column("ours_ms", "autodidax ms/call", "us"),
               Column("ours_us", "autodidax µs/eqn", "us"),
               Column("ours_linear", "autodidax linearity", "x"),
               Column("jax_ms", "JAX ms/call", "us"),
               Column("jax_us", "JAX µs/eqn", "us"),
               Column("jax_linear", "JAX linearity", "x"),
               Column("ours_over_jax", "ours/JAX", "ratio"),
               Column("goal", "goal (ratio, linearity)"),
               Column("met", "met?", "met")],
      rows=rows,
      summary={"rows_met": n_met, "rows": len(rows), "goal": GOAL,
               "linear_goal": LINEAR_GOAL, "worst_ours_over_jax": worst_ratio,
               "worst_linearity": worst_linear, "met": n_met == len(rows)},
      summary_text=(
          f"**Overall:** {n_met} of {len(rows)} sizes meet the goal; worst "
          f"ours/JAX = {worst_ratio:.2f} (goal ≤ {GOAL:g}), worst linearity "
          f"{worst_linear:.2f}× (goal ≤ {LINEAR_GOAL:g}×)."),
      notes=[
          f"From n = {BIG:,} on, one call takes seconds (for JAX), so those "
          f"rows are timed with {BIG_REPEAT} repeats of one call each and no "
          "warm-up loop (one untimed call first), instead of the usual "
          "settings.",
          "Like `timeit`, the harness turns the garbage collector off while it "
          "times, on both sides: these times leave out the collections that "
          "a long trace's many new objects would trigger."])
