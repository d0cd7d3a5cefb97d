"""Probes of the exercises of "Kernels".

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import functools

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import pallas as pl

from ..probe import probe

F32 = np.dtype("float32")


def _normal(p, *shape):
  return p.rng.normal(size=shape).astype(F32)


# --- K.1 and K.2: a tiled matmul that accumulates over k -------------------------------------

def _ref_kernel(x_ref, y_ref, o_ref):
  @pl.when(pl.program_id(2) == 0)
  def _():
    o_ref[...] = anp.zeros(o_ref.shape, F32)
  o_ref[...] += x_ref[...] @ y_ref[...]


def _ref_specs(bm, bk, bn):
  return (pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
          pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
          pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)))


def _matmul_case(p):
  """Block sizes of at least 2, a grid of at least 3 along i and k and 2 along j (an
  index map that gives element offsets then reads a wrong block: a block index past
  the edge would be clamped to the last block), and the two operands."""
  bm, bk, bn = (int(b) for b in p.rng.integers(2, 4, size=3))
  gi, gj, gk = int(p.rng.integers(3, 5)), int(p.rng.integers(2, 4)), int(p.rng.integers(3, 5))
  x, y = _normal(p, gi * bm, gk * bk), _normal(p, gk * bk, gj * bn)
  return (bm, bk, bn), (gi, gj, gk), x, y


def _matmul(kernel, specs, grid, x, y):
  x_spec, y_spec, o_spec = specs
  f = pl.pallas_call(kernel, pl.ShapeDtypeStruct((x.shape[0], y.shape[1]), F32), grid=grid,
                     in_specs=[x_spec, y_spec], out_specs=o_spec)
  return f(x, y)


@probe("K.1", answers=("matmul_specs",))
def probe_K_1(p, matmul_specs):
  for case in range(2):
    blocks, grid, x, y = _matmul_case(p)
    p.given(bm=blocks[0], bk=blocks[1], bn=blocks[2], grid=grid, x_shape=x.shape,
            y_shape=y.shape)
    specs = p.call("matmul_specs(bm, bk, bn)", matmul_specs, *blocks)
    three = (isinstance(specs, (tuple, list)) and len(specs) == 3
             and all(isinstance(s, pl.BlockSpec) for s in specs))
    p.value(f"case {case + 1}: the block shapes of your three BlockSpecs (x, y, out)", [
        None if s.block_shape is None else [int(b) for b in s.block_shape] for s in specs]
        if three else f"not three BlockSpecs: {type(specs).__name__} {specs!r}"[:300])
    out = p.call(f"case {case + 1}: running the matmul kernel with your specs",
                 _matmul, _ref_kernel, specs, grid, x, y)
    p.value(f"case {case + 1}: x @ y from the kernel", out, rtol=1e-4, atol=1e-5)


@probe("K.2", answers=("matmul_kernel",))
def probe_K_2(p, matmul_kernel):
  for case in range(2):
    blocks, grid, x, y = _matmul_case(p)
    p.given(bm=blocks[0], bk=blocks[1], bn=blocks[2], grid=grid, x_shape=x.shape,
            y_shape=y.shape)
    out = p.call(f"case {case + 1}: running your kernel over the grid (i, j, k)",
                 _matmul, matmul_kernel, _ref_specs(*blocks), grid, x, y)
    p.value(f"case {case + 1}: x @ y from your kernel", out, rtol=1e-4, atol=1e-5)
  blocks, grid, x, y = _matmul_case(p)
  p.given(bm=blocks[0], bk=blocks[1], bn=blocks[2], grid=grid, x_shape=x.shape,
          y_shape=y.shape)
  out = p.call("under jit: running your kernel over the grid (i, j, k)",
               adx.jit(lambda x, y: _matmul(matmul_kernel, _ref_specs(*blocks), grid, x, y)),
               x, y)
  p.value("under jit: x @ y from your kernel", out, rtol=1e-4, atol=1e-5)


# --- K.3: the batching rule's new BlockMapping ------------------------------------------------

def _scale_kernel(x_ref, w_ref, o_ref):
  o_ref[...] = x_ref[...] * w_ref[...] + 1.0


def _scaled(rows, cols, br, bc):
  spec = pl.BlockSpec((br, bc), lambda i, j: (i, j))
  return pl.pallas_call(_scale_kernel, pl.ShapeDtypeStruct((rows, cols), F32),
                        grid=(rows // br, cols // bc), in_specs=[spec, spec], out_specs=spec)


def _rowsum_kernel(x_ref, o_ref):
  o_ref[...] = anp.sum(x_ref[...], axis=1)


def _rowsums(rows, cols, br):
  return pl.pallas_call(_rowsum_kernel, pl.ShapeDtypeStruct((rows,), F32), grid=(rows // br,),
                        in_specs=[pl.BlockSpec((br, cols), lambda i: (i, 0))],
                        out_specs=pl.BlockSpec((br,), lambda i: (i,)))


def _launch(f, *args):
  """The grid and block shapes of the (outermost) pallas_call in `f`'s jaxpr."""
  closed = adx.make_jaxpr(f)(*args)
  for eqn in closed.jaxpr.eqns:
    if eqn.primitive is pl.pallas_call_p:
      maps = eqn.params["in_mappings"] + eqn.params["out_mappings"]
      return {"grid": list(eqn.params["grid"]),
              "blocks": [list(m.block_shape) for m in maps],
              "operand shapes": [list(m.array_aval.shape) for m in maps]}
  return "no pallas_call in the jaxpr"


@probe("K.3", answers=("batched_mapping",),
       removes={"autodidax.pallas.pallas_call:_batched_mapping": "batched_mapping"})
def probe_K_3(p, batched_mapping):
  del batched_mapping   # the library's vmap rule calls it in place of its own
  # A batch of another size than either grid axis: a rule that permutes the grid's
  # indices would otherwise still cover every block.
  nb = int(p.rng.integers(4, 6))
  br, bc = (int(b) for b in p.rng.integers(2, 4, size=2))
  gr, gc = (int(g) for g in p.rng.integers(2, 4, size=2))
  rows, cols = gr * br, gc * bc
  f = _scaled(rows, cols, br, bc)
  xs, ws, w = _normal(p, nb, rows, cols), _normal(p, nb, rows, cols), _normal(p, rows, cols)
  p.given(batch=nb, x_shape=(rows, cols), block=(br, bc))
  cases = [("both operands batched", adx.vmap(f), (xs, ws)),
           ("only x batched", adx.vmap(f, in_axes=(0, None)), (xs, w)),
           ("only w batched", adx.vmap(f, in_axes=(None, 0)), (w, ws)),
           ("x batched along axis 2", adx.vmap(f, in_axes=(2, None)),
            (np.ascontiguousarray(np.moveaxis(xs, 0, 2)), w)),
           ("vmap under jit", adx.jit(adx.vmap(f, in_axes=(0, None))), (xs, w))]
  for what, g, args in cases[:4]:
    p.value(f"{what}: the launch's grid, block shapes and operand shapes",
            p.call(f"make_jaxpr of vmap, {what}", _launch, g, *args))
  for what, g, args in cases:
    # x * w + 1 may be one fused multiply-add or two roundings, by CPU: a tolerance.
    p.value(f"{what}: the values", p.call(f"vmap, {what}", g, *args), rtol=1e-5, atol=1e-6)
  h = _rowsums(rows, cols, br)
  xss = _normal(p, 2, nb, rows, cols)
  p.given(batches=(2, nb), x_shape=(rows, cols), block=(br, cols))
  p.value("vmap of vmap of a row sum: the launch",
          p.call("make_jaxpr of vmap of vmap", _launch, adx.vmap(adx.vmap(h)), xss))
  p.value("vmap of vmap of a row sum: the values",
          p.call("vmap of vmap of a row sum", adx.vmap(adx.vmap(h)), xss), rtol=1e-5, atol=1e-6)


# --- K.4: a masked kernel past the edge -----------------------------------------------------

def _block_sums(kernel, x, n, b):
  nblocks = -(-n // b)
  f = pl.pallas_call(functools.partial(kernel, n=n), pl.ShapeDtypeStruct((nblocks,), F32),
                     grid=(nblocks,), in_specs=[pl.BlockSpec((b,), lambda i: (i,))],
                     out_specs=pl.BlockSpec((1,), lambda i: (i,)))
  return f(x)


@probe("K.4", answers=("block_sum_kernel",))
def probe_K_4(p, block_sum_kernel):
  b = int(p.rng.integers(3, 6))
  # Two lengths that leave a part block at the end, and one of whole blocks, in an
  # order drawn from the seed.
  lengths = [int(p.rng.integers(1, 4)) * b + int(p.rng.integers(1, b)) for _ in range(2)]
  lengths.append(int(p.rng.integers(2, 4)) * b)
  for k, n in p.shuffled(lengths):
    x = _normal(p, n)
    p.given(n=n, b=b, x=x)
    out = p.call(f"length {k + 1}: running your kernel", _block_sums, block_sum_kernel, x, n, b)
    p.value(f"length {k + 1}: the sum of each block", out, rtol=1e-5, atol=1e-6)


# --- K.5: the kernel's runs and the blocks each sees ---------------------------------------------

MAPS = [("(i, j)", lambda *g: (g[0], g[1])), ("(j, i)", lambda *g: (g[1], g[0])),
        ("(i, 0)", lambda *g: (g[0], 0)), ("(0, j)", lambda *g: (0, g[1])),
        ("(last, i)", lambda *g: (g[-1], g[0])), ("(i, last)", lambda *g: (g[0], g[-1]))]


def _as_lists(runs):
  return [[[[int(v) for v in pair] for pair in block] for block in run] for run in runs]


@probe("K.5", answers=("kernel_runs",))
def probe_K_5(p, kernel_runs):
  for case in range(3):
    grid = tuple(int(g) for g in p.rng.integers(2, 4, size=2 if case < 2 else 3))
    picks = [MAPS[int(m)] for m in p.rng.integers(0, len(MAPS), size=2)]
    blocks = [tuple(int(b) for b in p.rng.integers(2, 5, size=2)) for _ in picks]
    maps = [m for _, m in picks]
    p.given(grid=grid, block_shapes=blocks, index_maps=[name for name, _ in picks])
    runs = p.call(f"case {case + 1}: kernel_runs(grid, block_shapes, index_maps)",
                  kernel_runs, grid, blocks, maps)
    p.value(f"case {case + 1}: how many runs", p.call("len(runs)", len, runs))
    p.value(f"case {case + 1}: the element ranges of each operand's block, run by run",
            p.call(f"case {case + 1}: reading your runs as [[(start, stop), ...], ...]",
                   _as_lists, runs))
