"""Every collective inside every higher-order primitive, under every
transformation, against JAX (generated: one test per collective and
primitive, each running every transformation).

A higher-order primitive batches its jaxprs under a named vmap with the
vmap's name (`batching.named_axis_rule`); without it, a collective inside
is batched as if unnamed and gives a plausible wrong value (psum of the
batch came out as `x * axis_size`). The named axis is bound by
`vmap(..., axis_name="i")` over 4 elements, on one device.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax as jlax

import autodidax as adx
import autodidax.numpy as anp
from autodidax import lax

N = 4   # the size of axis "i"
RING = [(k, (k + 1) % N) for k in range(N)]

# A collective over "i", as a function of one element's x (shape (N,)).
COLLECTIVES = {
    "psum": lambda L, x: L.psum(x, "i"),
    "pmean": lambda L, x: L.pmean(x, "i"),
    "pmax": lambda L, x: L.pmax(x, "i"),
    "pmin": lambda L, x: L.pmin(x, "i"),
    "all_gather": lambda L, x: L.all_gather(x, "i", axis=1),
    "psum_scatter": lambda L, x: L.psum_scatter(x, "i"),
    "ppermute": lambda L, x: L.ppermute(x, "i", RING),
    "axis_index": lambda L, x: x * L.axis_index("i"),
}


def _cjvp(A, L, f):
  g = A.custom_jvp(f)
  g.defjvp(lambda p, t: (g(p[0]), f(t[0]) * 0.5))   # a collective in the rule too
  return g


def _cvjp(A, L, f):
  g = A.custom_vjp(f)

  def bwd(x, ct):   # a collective in bwd too
    return (x * 0. + L.psum(ct.sum(), "i") * 0.25,)
  g.defvjp(lambda x: (g(x), x), bwd)
  return g


# A higher-order primitive around f: (A, L, np-like, f) -> a function of x.
HIGHER_ORDER = {
    "jit": lambda A, L, N_, f: A.jit(f),
    "checkpoint": lambda A, L, N_, f: A.checkpoint(f),
    "cond": lambda A, L, N_, f: lambda x: L.cond(x.sum() > 5., f, lambda v: f(v * 2.), x),
    "while": lambda A, L, N_, f: lambda x: L.while_loop(
        lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] + f(x)), (0, f(x)))[1],
    "scan": lambda A, L, N_, f: lambda x: L.scan(
        lambda c, xi: (c, f(xi)), 0., N_.stack([x, x * 2.]))[1],
    "custom_jvp": lambda A, L, N_, f: _cjvp(A, L, f),
    "custom_vjp": lambda A, L, N_, f: _cvjp(A, L, f),
}


def _transformations(A, N_, g):
  """Every transformation around (or inside) the named vmap of g. (jit and
  jvp come in as higher-order primitives and through grad.)"""
  named = lambda h: A.vmap(h, axis_name="i")   # noqa: E731
  loss = lambda h: lambda x: N_.sum(N_.sin(h(x)))   # noqa: E731
  return {
      "vmap": named(g),
      "grad": A.grad(loss(named(g))),
      "vmap_of_grad": named(A.grad(loss(g))),
      "outer_vmap": lambda x: A.vmap(named(g))(N_.stack([x, x[::-1]])),
  }


def _jax_results(fs: dict, x) -> dict:
  """JAX's result of each function, all under one jit (one compilation);
  a function JAX can't transform (pmax's derivative, ...) is left out."""
  try:
    return jax.jit(lambda v: {n: f(v) for n, f in fs.items()})(x)
  except Exception:
    results = {}
    for n, f in fs.items():
      try:
        results[n] = jax.jit(f)(x)
      except Exception:
        pass
    return results


@pytest.mark.parametrize("hop", list(HIGHER_ORDER))
@pytest.mark.parametrize("collective", list(COLLECTIVES))
def test_collective_inside_higher_order_primitive(collective, hop):
  x = np.arange(1., N * N + 1.).reshape(N, N) ** 1.5 / 7.   # no ties for pmax
  c = COLLECTIVES[collective]
  ours = _transformations(adx, anp, HIGHER_ORDER[hop](adx, lax, anp, lambda v: c(lax, v)))
  theirs = _transformations(jax, jnp, HIGHER_ORDER[hop](jax, jlax, jnp, lambda v: c(jlax, v)))
  wanted = _jax_results(theirs, x)
  if hop not in ("while",) and collective not in ("pmax", "pmin"):
    assert set(wanted) == set(ours), set(ours) - set(wanted)   # JAX runs all of these
  for name, want in wanted.items():
    got, want = jax.tree_util.tree_leaves(ours[name](x)), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want), name
    for g, w in zip(got, want):
      g, w = np.asarray(g), np.asarray(w)
      assert g.shape == w.shape, (name, g.shape, w.shape)
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9, err_msg=name)
