"""Kernels written once, run with autodidax.pallas and with jax.experimental.pallas.

Each case is `make(pl, jnp) -> (function, args)`: the same code builds the
kernel on either library, so a differential test compares like with like.
"""
import numpy as np

RNG = np.random.default_rng(0)


def arr(*shape):
  return RNG.standard_normal(shape).astype(np.float32)


def elementwise(pl, jnp, lax):
  def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.sin(x_ref[...]) * y_ref[...] + 1.0
  spec = pl.BlockSpec((4, 8), lambda i, j: (i, j))
  f = pl.pallas_call(kernel, out_shape=jax_struct(pl, (8, 16)), grid=(2, 2),
                     in_specs=[spec, spec], out_specs=spec, interpret=True)
  return f, (arr(8, 16), arr(8, 16))


def tiled_matmul(pl, jnp, lax):
  def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...])
  f = pl.pallas_call(kernel, out_shape=jax_struct(pl, (8, 12)), grid=(2, 3),
                     in_specs=[pl.BlockSpec((4, 16), lambda i, j: (i, 0)),
                               pl.BlockSpec((16, 4), lambda i, j: (0, j))],
                     out_specs=pl.BlockSpec((4, 4), lambda i, j: (i, j)), interpret=True)
  return f, (arr(8, 16), arr(16, 12))


def accumulating_matmul(pl, jnp, lax):
  def kernel(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)
    o_ref[...] += jnp.dot(x_ref[...], y_ref[...])
  f = pl.pallas_call(kernel, out_shape=jax_struct(pl, (8, 8)), grid=(2, 2, 4),
                     in_specs=[pl.BlockSpec((4, 4), lambda i, j, k: (i, k)),
                               pl.BlockSpec((4, 4), lambda i, j, k: (k, j))],
                     out_specs=pl.BlockSpec((4, 4), lambda i, j, k: (i, j)), interpret=True)
  return f, (arr(8, 16), arr(16, 8))


def program_ids(pl, jnp, lax):
  def kernel(x_ref, o_ref):
    i, j = pl.program_id(0), pl.program_id(1)
    n = pl.num_programs(0) * pl.num_programs(1)
    o_ref[...] = x_ref[...] + (i * pl.num_programs(1) + j).astype(jnp.float32) / n
  spec = pl.BlockSpec((2, 4), lambda i, j: (i, j))
  f = pl.pallas_call(kernel, out_shape=jax_struct(pl, (6, 8)), grid=(3, 2),
                     in_specs=[spec], out_specs=spec, interpret=True)
  return f, (arr(6, 8),)


def masked_ds(pl, jnp, lax):
  """The sum of a length-13 vector, in blocks of 8 (the last one padded),
  each read as two dynamic slices of 4 (pl.ds), masked past the end."""
  n, b = 13, 8

  def kernel(x_ref, o_ref):
    i = pl.program_id(0)

    @pl.when(i == 0)
    def _():
      o_ref[...] = jnp.zeros((1,), jnp.float32)

    def half(j, acc):
      idx = i * b + j * 4 + jnp.arange(4)
      x = x_ref[pl.ds(j * 4, 4)]
      return acc + jnp.sum(jnp.where(idx < n, x, 0.0))
    o_ref[...] += lax.fori_loop(0, 2, half, jnp.float32(0.0)).reshape(1)
  f = pl.pallas_call(kernel, out_shape=jax_struct(pl, (1,)), grid=(2,),
                     in_specs=[pl.BlockSpec((b,), lambda i: (i,))],
                     out_specs=pl.BlockSpec((1,), lambda i: (0,)), interpret=True)
  return f, (arr(n),)


def row_softmax(pl, jnp, lax):
  def kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)
  f = pl.pallas_call(kernel, out_shape=jax_struct(pl, (8, 16)), grid=(4,),
                     in_specs=[pl.BlockSpec((2, 16), lambda i: (i, 0))],
                     out_specs=pl.BlockSpec((2, 16), lambda i: (i, 0)), interpret=True)
  return f, (arr(8, 16),)


def two_outputs(pl, jnp, lax):
  """Two outputs; the second input is whole (no BlockSpec: the default)."""
  def kernel(x_ref, w_ref, s_ref, d_ref):
    x, w = x_ref[...], w_ref[...]
    s_ref[...] = x + w
    d_ref[...] = x * jnp.sum(w)
  spec = pl.BlockSpec((2, 4), lambda i: (i, 0))
  f = pl.pallas_call(kernel, out_shape=(jax_struct(pl, (6, 4)), jax_struct(pl, (6, 4))),
                     grid=(3,), in_specs=[spec, pl.BlockSpec()], out_specs=[spec, spec], interpret=True)
  return f, (arr(6, 4), arr(2, 4))


def jax_struct(pl, shape, dtype=np.float32):
  """ShapeDtypeStruct from the library `pl` belongs to (jax.ShapeDtypeStruct for JAX)."""
  if hasattr(pl, "ShapeDtypeStruct"):
    return pl.ShapeDtypeStruct(shape, dtype)
  import jax
  return jax.ShapeDtypeStruct(shape, dtype)


CASES = {f.__name__: f for f in (elementwise, tiled_matmul, accumulating_matmul, program_ids,
                                 masked_ds, row_softmax, two_outputs)}


# What each kernel computes, in plain NumPy-style code: `reference[name](jnp, *args)`.
def _block_ids(shape, block):
  ids = np.arange(np.prod([s // b for s, b in zip(shape, block)])).reshape(
      [s // b for s, b in zip(shape, block)])
  return np.kron(ids, np.ones(block)).astype(np.float32)


REFERENCE = {
    "elementwise": lambda jnp, x, y: jnp.sin(x) * y + 1.0,
    "tiled_matmul": lambda jnp, x, y: jnp.dot(x, y),
    "accumulating_matmul": lambda jnp, x, y: jnp.dot(x, y),
    "program_ids": lambda jnp, x: x + _block_ids((6, 8), (2, 4)) / 6,
    "masked_ds": lambda jnp, x: jnp.sum(x).reshape(1),
    "row_softmax": lambda jnp, x: jnp.exp(x - jnp.max(x, axis=1, keepdims=True)) / jnp.sum(
        jnp.exp(x - jnp.max(x, axis=1, keepdims=True)), axis=1, keepdims=True),
    "two_outputs": lambda jnp, x, w: (x + jnp.concatenate([w, w, w]), x * jnp.sum(w)),
}
# Kernels that call program_id: JAX's jvp of these fails (its jvp rule retraces
# the kernel outside the grid's environment); ours is checked another way.
USES_PROGRAM_ID = {"accumulating_matmul", "program_ids", "masked_ds"}
