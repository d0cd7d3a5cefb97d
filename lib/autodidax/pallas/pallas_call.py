"""`pallas_call`: a kernel of Refs, run once per point of a grid.

The kernel is traced once, to a jaxpr of Refs: one Ref per block of each
input, then one per block of each output. `pallas_call_p` holds that jaxpr,
the grid, and a BlockMapping per operand. Its rules:

- abstract eval: the outputs' types are `out_shape`'s;
- interpret mode (impl and lowering): discharge the kernel's Refs, then loop
  over the grid: slice each operand's block out, run the pure kernel on the
  blocks, update the output blocks in place. It lowers to one StableHLO
  `while`, and XLA runs it on any backend. JAX's interpret mode is the same
  idea (jax/_src/pallas/hlo_interpreter.py);
- vmap: the batch axis becomes a new first axis of the grid;
- jvp: the JVP of the kernel is a kernel of primal and tangent Refs;
- transpose: an error that says what to do instead.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ad, batching, effects, lowering, state
from .. import partial_eval as pe
from .. import numpy as jnp
from .. import primitives as lax
from ..control_flow.loops import fori_loop
from ..core import Primitive, ShapedArray, Tracer, abstract_eval_rules, get_aval, impl_rules
from ..jaxpr import Jaxpr, Var, eval_jaxpr, pp_params_rules
from ..flop_count import flops_call_rules
from ..sharding_rules import keep_body_types
from ..state import AbstractRef, addupdate_p, discharge_state, get_p
from ..tree_util import tree_flatten, tree_unflatten
from ..util import cache_by_jaxpr
from ..xla import xla_call_p
from .core import BlockMapping, BlockSpec, block_mapping, grid_tuple, trace_index_map
from .primitives import grid_env, program_id_p

pallas_call_p = Primitive("pallas_call", multiple_results=True)


# --- The user's function -------------------------------------------------------------

def pallas_call(kernel, out_shape, *, grid=None, in_specs=None, out_specs=None,
                interpret=True, name=None):
  """`pallas_call(kernel, out_shape, grid=..., in_specs=..., out_specs=...)(*args)`
  runs `kernel(*in_refs, *out_refs)` once per point of `grid`; each run's Refs
  hold the blocks its BlockSpecs pick. `out_shape` is a ShapeDtypeStruct or
  a pytree of them. Every mode here is interpret mode (see the chapter), so
  `interpret` is accepted and ignored."""
  del interpret
  out_flat, out_tree = tree_flatten(out_shape)
  for o in out_flat:
    if not (hasattr(o, "shape") and hasattr(o, "dtype")):   # JAX's words, then what to do
      raise ValueError(f"Invalid out_shape type: {type(o)} (pallas_call's out_shape holds "
                       f"{o!r}). Give a ShapeDtypeStruct(shape, dtype) per output, e.g. "
                       "ShapeDtypeStruct(x.shape, x.dtype), or a tuple of them.")
  out_avals = [ShapedArray(tuple(o.shape), np.dtype(o.dtype)) for o in out_flat]
  grid = grid_tuple(grid)
  name = name or getattr(kernel, "__name__", "kernel")
  traced = {}

  def call(*args):
    args_flat, in_tree = tree_flatten(args)
    in_avals = [ShapedArray(np.shape(x), get_aval(x).dtype) for x in args_flat]
    key = (in_tree, tuple(in_avals))
    if key not in traced:
      traced[key] = _trace(kernel, name, grid, in_tree, in_avals, out_tree, out_avals,
                           in_specs, out_specs)
    jaxpr, consts, in_maps, out_maps = traced[key]
    outs = pallas_call_p.bind(*consts, *args_flat, jaxpr=jaxpr, num_consts=len(consts),
                              grid=grid, in_mappings=in_maps, out_mappings=out_maps, name=name)
    return tree_unflatten(out_tree, outs)
  return call


def _specs(specs, avals, grid, what):
  """One BlockMapping per flat operand: `specs` is one BlockSpec (or None) per
  operand, in a list or tuple, or a single BlockSpec for a single operand."""
  if specs is None:
    flat = [BlockSpec()] * len(avals)
  elif isinstance(specs, (list, tuple)):
    flat = list(specs)
  else:
    flat = [specs]
  for i, spec in enumerate(flat):
    if not isinstance(spec, BlockSpec):
      raise TypeError(f"pallas_call: {what}_specs[{i}] is {spec!r}, not a BlockSpec: give "
                      f"pl.BlockSpec(block_shape, index_map), or pl.BlockSpec() for the "
                      f"whole {what}put")
  if len(flat) != len(avals):
    raise ValueError(f"pallas_call: {len(flat)} {what}_specs for {len(avals)} "
                     f"{what}puts; give one BlockSpec per {what}put (pl.BlockSpec() for "
                     f"the whole array), in a list in the {what}puts' order")
  return tuple(block_mapping(s, a, grid, f"{what}puts[{i}]")
               for i, (s, a) in enumerate(zip(flat, avals)))


def _trace(kernel, name, grid, in_tree, in_avals, out_tree, out_avals, in_specs, out_specs):
  in_maps = _specs(in_specs, in_avals, grid, "in")
  out_maps = _specs(out_specs, out_avals, grid, "out")
  ref_avals = [AbstractRef(m.block_aval) for m in in_maps + out_maps]
  n_in = len(in_maps)

  def body(*refs):
    with grid_env(grid):
      ins, outs = refs[:n_in], refs[n_in:]
      ins = tree_unflatten(in_tree, list(ins))
      outs = tree_unflatten(out_tree, list(outs))   # a tuple of outputs: one Ref each
      ret = kernel(*ins, *(outs if isinstance(outs, (tuple, list)) else [outs]))
    if ret is not None:
      raise ValueError(f"The kernel function {name} in the pallas_call should return "
                       f"None: it writes its results into its output Refs. It returned {ret!r}.")
    return []
  jaxpr, consts = pe.trace_to_jaxpr_dynamic(body, ref_avals)
  captured = [c for c in consts if isinstance(c, Tracer) or _closed_over(kernel, c)]
  if captured:   # JAX's words, and what to do
    avals = ", ".join(get_aval(c).str_short() for c in captured)
    raise ValueError(f"The kernel function {name} in the pallas_call captures constants "
                     f"[{avals}]. You should pass them as inputs (with a BlockSpec, or "
                     "pl.BlockSpec() for the whole array).")
  # What is left are constants the tracing made (jnp.zeros, jnp.arange give
  # NumPy arrays here): they become the call's first operands, not Refs.
  jaxpr = Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.eqns, [])
  jaxpr = _drop_unused_program_ids(jaxpr)
  _check_outputs_written_first(jaxpr, len(consts) + n_in, name)
  return jaxpr, consts, in_maps, out_maps


def _closed_over(kernel, c) -> bool:
  """Whether the array `c` is one the kernel's code names from outside it."""
  code = getattr(kernel, "__code__", None)
  cells = [cell.cell_contents for cell in getattr(kernel, "__closure__", None) or ()
           if _has_contents(cell)]
  names = getattr(kernel, "__globals__", {})
  outside = cells + [names[n] for n in (code.co_names if code else ()) if n in names]
  return any(x is c for x in outside)


def _has_contents(cell) -> bool:
  try:
    cell.cell_contents
  except ValueError:   # a cell not yet filled
    return False
  return True


def _drop_unused_program_ids(jaxpr: Jaxpr) -> Jaxpr:
  """The kernel's trace binds a program_id per grid axis; keep the used ones."""
  used = {x for e in jaxpr.eqns for x in e.inputs if isinstance(x, Var)}
  eqns = [e for e in jaxpr.eqns
          if e.primitive is not program_id_p or e.out_binders[0] in used]
  return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars)


def _check_outputs_written_first(jaxpr: Jaxpr, n_in: int, name: str):
  """An output block starts out with no values (JAX's interpret mode fills it
  with NaN): a kernel whose first touch of an output Ref reads it is wrong.
  Only the kernel's own equations are looked at: a write under `when` counts."""
  outs = {v: i for i, v in enumerate(jaxpr.invars[n_in:])}
  for eqn in jaxpr.eqns:
    touched = [x for x in eqn.inputs if x in outs]
    for x in touched:
      if eqn.primitive in (get_p, addupdate_p):
        raise ValueError(
            f"The kernel {name} reads its output Ref outputs[{outs[x]}] before writing "
            "it: an output block starts out uninitialized (JAX's interpret mode fills it "
            "with NaN). Write it first, e.g. `o_ref[...] = jnp.zeros(o_ref.shape)` under "
            "`@pl.when(pl.program_id(k) == 0)` to start a sum over grid axis k.")
      del outs[x]
    if not outs:
      return


# --- Abstract eval -------------------------------------------------------------------

def _pallas_call_abstract_eval(*avals, jaxpr, num_consts, grid, in_mappings, out_mappings,
                               name):
  for a, m in zip(avals[num_consts:], in_mappings):
    if tuple(a.shape) != tuple(m.array_aval.shape) or a.dtype != m.array_aval.dtype:
      raise TypeError(f"pallas_call {name}: {m.origin} is {a.str_short()}, but the "
                      f"kernel was traced for {m.array_aval.str_short()}")
  return [m.array_aval for m in out_mappings]


abstract_eval_rules[pallas_call_p] = _pallas_call_abstract_eval
keep_body_types(pallas_call_p)   # its results' types are out_shape's (abstract eval)
# The kernel's Refs are its blocks, made by the call: seen from outside, the
# call reads its operands and returns new arrays, with no effect on a Ref.
effects.inner_jaxprs[pallas_call_p] = lambda params: []


def _pp_params(params):
  grid = params["grid"]
  blocks = tuple(m.block_shape for m in params["in_mappings"] + params["out_mappings"])
  return [("name", params["name"]), ("grid", grid), ("blocks", blocks),
          ("jaxpr", params["jaxpr"])]


pp_params_rules[pallas_call_p] = _pp_params


# --- Interpret mode: discharge, then a loop over the grid ------------------------------

def grid_indices(i, grid: tuple) -> list:
  """The grid point of loop step `i`, the last axis moving fastest (as JAX's)."""
  ids = []
  for k, size in enumerate(grid):
    stride = math.prod(grid[k + 1:])
    ids.append(lax.rem(lax.div(i, np.int32(stride)), np.int32(size)))
  return ids


def block_starts(m: BlockMapping, ids) -> list:
  """Element offsets of the block that the grid point `ids` sees."""
  idx = eval_jaxpr(m.index_map, [], *ids)
  return [lax.mul(lax.convert_element_type(b, np.int32), np.int32(s))
          for b, s in zip(idx, m.sizes)]


def read_block(x, m: BlockMapping, starts):
  block = lax.dynamic_slice(x, starts, m.sizes)
  return lax.reshape(block, m.block_aval.shape)


def write_block(x, m: BlockMapping, starts, block):
  return lax.dynamic_update_slice(x, lax.reshape(block, m.sizes), starts)


def uninitialized(shape, dtype):
  """What an output block holds before the kernel writes it: NaN, or the
  lowest integer (as JAX's interpret mode, pallas/primitives.py)."""
  dtype = np.dtype(dtype)
  fill = (np.nan if np.issubdtype(dtype, np.floating) else
          False if dtype == np.bool_ else np.iinfo(dtype).min)
  return jnp.full(shape, fill, dtype)


def pad_to_blocks(x, m: BlockMapping):
  """`x` padded up to whole blocks with `uninitialized` values."""
  pads = [(0, p - d, 0) for d, p in zip(np.shape(x), m.padded_shape)]
  if not any(hi for _, hi, _ in pads):
    return x
  return lax.pad(x, uninitialized((), m.array_aval.dtype), pads)


def interpret(jaxpr: Jaxpr, num_consts, grid, in_mappings, out_mappings, *args):
  """Run the kernel over the grid, on values: the heart of interpret mode."""
  kernel = kernel_as_values(jaxpr, len(grid))   # (ids, consts, *blocks) -> final blocks
  consts, args = args[:num_consts], args[num_consts:]
  ins = [pad_to_blocks(x, m) for x, m in zip(args, in_mappings)]
  outs = [uninitialized(m.padded_shape, m.array_aval.dtype) for m in out_mappings]
  maps, n_in = in_mappings + out_mappings, len(ins)
  # The outputs, and any input the kernel writes, ride in the loop's carry;
  # the other inputs stay outside the loop, only read.
  carried = written_inputs(jaxpr, num_consts, n_in) + list(range(n_in, n_in + len(outs)))

  def step(i, carry):
    operands = ins + outs
    for k, x in zip(carried, carry):
      operands[k] = x
    ids = grid_indices(i, grid)
    starts = [block_starts(m, ids) for m in maps]
    blocks = [read_block(x, m, s) for x, m, s in zip(operands, maps, starts)]
    new_blocks = eval_jaxpr(kernel, [], *ids, *consts, *blocks)
    return [write_block(operands[k], maps[k], starts[k], new_blocks[k]) for k in carried]

  final = fori_loop(0, math.prod(grid), step, [(ins + outs)[k] for k in carried])
  final = final[len(carried) - len(outs):]
  return [lax.slice(o, [0] * o.ndim, m.array_aval.shape) if m.padded_shape != m.array_aval.shape
          else o for o, m in zip(final, out_mappings)]


def written_inputs(jaxpr: Jaxpr, num_consts: int, n_in: int) -> list:
  """The inputs (by number) whose Refs the kernel writes."""
  written = {e.input_index - num_consts for e in jaxpr.effects
             if isinstance(e, (effects.WriteEffect, effects.AccumEffect))}
  return [k for k in range(n_in) if k in written]


@cache_by_jaxpr
def kernel_as_values(jaxpr: Jaxpr, n_axes: int) -> Jaxpr:
  """The kernel with its Refs discharged, and its program_ids made inputs:
  a pure jaxpr (grid indices, consts, *blocks) -> (*blocks after the run)."""
  by_axis = {e.params["axis"]: e.out_binders[0] for e in jaxpr.eqns
             if e.primitive is program_id_p}
  ids = [by_axis.get(a) or Var(ShapedArray((), np.dtype("int32"))) for a in range(n_axes)]
  eqns = [e for e in jaxpr.eqns if e.primitive is not program_id_p]
  pure, consts = discharge_state(Jaxpr([], ids + jaxpr.invars, eqns, []))
  assert not consts
  return pure


@cache_by_jaxpr
def interpreted(jaxpr: Jaxpr, num_consts, grid, in_mappings, out_mappings):
  """The whole pallas_call as one pure jaxpr over its operands: (jaxpr, consts)."""
  avals = [v.aval for v in jaxpr.invars[:num_consts]] + [m.array_aval for m in in_mappings]
  return pe.trace_to_jaxpr_dynamic(
      lambda *args: interpret(jaxpr, num_consts, grid, in_mappings, out_mappings, *args),
      avals)


def _pallas_call_impl(*args, jaxpr, num_consts, grid, in_mappings, out_mappings, name):
  """Eagerly: compile the interpreted loop with XLA (through the course's own
  jit machinery, xla_call) and run it."""
  j, consts = interpreted(jaxpr, num_consts, grid, in_mappings, out_mappings)
  call = Jaxpr([], j.constvars + j.invars, j.eqns, j.outvars)
  return xla_call_p.bind(*consts, *args, jaxpr=call, num_consts=len(consts),
                         name=f"pallas_{name}")


def _pallas_call_lowering(ctx, *args, jaxpr, num_consts, grid, in_mappings, out_mappings,
                          name):
  """Under jit: the interpreted loop, inlined."""
  j, consts = interpreted(jaxpr, num_consts, grid, in_mappings, out_mappings)
  env = {v: ctx.constant(c, v.aval.dtype) for v, c in zip(j.constvars, consts)}
  env.update(zip(j.invars, args))
  return lowering.lower_jaxpr_body(ctx, j, env)


def _pallas_call_flops(*args, jaxpr, num_consts, grid, in_mappings, out_mappings, name, run):
  """FLOPS: what the interpreted loop costs, every grid point's run counted."""
  j, consts = interpreted(jaxpr, num_consts, grid, in_mappings, out_mappings)
  return run(j, consts, *args)


def _pallas_call_discharge(eqn, vals, env):
  """A Ref from outside the kernel can't be an operand (nor can JAX's): say so."""
  raise TypeError(f"pallas_call {eqn.params['name']}: an operand is a Ref; pass its value "
                  "(ref[...]) and write the result back (ref[...] = out)")


impl_rules[pallas_call_p] = _pallas_call_impl
lowering.lowering_rules[pallas_call_p] = _pallas_call_lowering
flops_call_rules[pallas_call_p] = _pallas_call_flops
state.discharge_rules[pallas_call_p] = _pallas_call_discharge


# --- vmap: the batch axis becomes a new first axis of the grid ---------------------------

def _batched_mapping(m: BlockMapping, axis_size: int, batched: bool) -> BlockMapping:
  aval = m.array_aval
  if batched:
    aval = ShapedArray((axis_size, *aval.shape), aval.dtype)
  imap = m.index_map

  def index_map(b, *ids):
    idx = eval_jaxpr(imap, [], *ids)
    return (b, *idx) if batched else tuple(idx)
  block = ((None,) if batched else ()) + m.block_shape
  n_axes = len(imap.invars) + 1
  return BlockMapping(block, trace_index_map(index_map, (0,) * n_axes, block, m.origin),
                      aval, m.origin)


def _shift_program_ids(jaxpr: Jaxpr) -> Jaxpr:
  """The kernel under a grid with a new first axis: axis k is now k + 1."""
  eqns = [e._replace(params={"axis": e.params["axis"] + 1}) if e.primitive is program_id_p
          else e for e in jaxpr.eqns]
  return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars)


def _pallas_call_vmap(axis_size, vals_in, dims_in, *, jaxpr, num_consts, grid, in_mappings,
                      out_mappings, name):
  if any(d is not batching.not_mapped for d in dims_in[:num_consts]):
    raise NotImplementedError(f"vmap of pallas_call {name}: a constant the kernel made "
                              "is batched")
  consts, vals_in, dims_in = vals_in[:num_consts], vals_in[num_consts:], dims_in[num_consts:]
  batched = [d is not batching.not_mapped for d in dims_in]
  vals = [batching.move_batch_axis(axis_size, d, 0, x) if b else x
          for x, d, b in zip(vals_in, dims_in, batched)]
  in_maps = tuple(_batched_mapping(m, axis_size, b) for m, b in zip(in_mappings, batched))
  out_maps = tuple(_batched_mapping(m, axis_size, True) for m in out_mappings)
  outs = pallas_call_p.bind(*consts, *vals, jaxpr=_shift_program_ids(jaxpr),
                            num_consts=num_consts, grid=(axis_size, *grid),
                            in_mappings=in_maps, out_mappings=out_maps, name=name)
  return outs, [0] * len(outs)


batching.vmap_rules[pallas_call_p] = _pallas_call_vmap
batching.axis_vmap_rules[pallas_call_p] = batching.named_axis_rule(_pallas_call_vmap)


# --- jvp: a kernel of primal and tangent Refs ---------------------------------------------

def _pallas_call_jvp(primals, tangents, *, jaxpr, num_consts, grid, in_mappings,
                     out_mappings, name):
  """The JVP of the kernel reads each input's tangent block beside its primal
  block and writes each output's tangent block beside its primal block; run
  over the same grid with the same BlockMappings, it is the JVP of the call."""
  k, n_in, n_out = num_consts, len(in_mappings), len(out_mappings)
  if any(type(t) is not ad.Zero for t in tangents[:k]):
    raise NotImplementedError(f"jvp of pallas_call {name}: a constant the kernel made "
                              "has a tangent")
  nz = [type(t) is not ad.Zero for t in tangents[k:]]
  j, new_consts, _ = ad.jvp_jaxpr(jaxpr, (False,) * k + tuple(nz) + (True,) * n_out, ())
  # j takes (new_consts, consts, ins, outs, tangents of ins, tangents of outs)
  consts, p_in, p_out, tans = split(j.invars, [len(new_consts) + k, n_in, n_out])
  t_in, t_out = tans[:sum(nz)], tans[sum(nz):]
  jvp_kernel = Jaxpr([], [*consts, *p_in, *t_in, *p_out, *t_out], j.eqns, [])
  nz_maps = tuple(m for m, b in zip(in_mappings, nz) if b)
  outs = pallas_call_p.bind(*new_consts, *primals,
                            *[t for t in tangents[k:] if type(t) is not ad.Zero],
                            jaxpr=jvp_kernel, num_consts=len(new_consts) + k, grid=grid,
                            in_mappings=in_mappings + nz_maps,
                            out_mappings=out_mappings + out_mappings, name=name)
  return outs[:n_out], outs[n_out:]


ad.jvp_rules[pallas_call_p] = _pallas_call_jvp


def split(xs, sizes):
  """`xs` cut into pieces of `sizes`, then the rest."""
  out, i = [], 0
  for n in sizes:
    out.append(list(xs[i:i + n]))
    i += n
  return out + [list(xs[i:])]


# --- Reverse mode: not defined; what JAX does instead ----------------------------------------

class PallasReverseModeError(NotImplementedError):
  """grad (or vjp, linearize) of a pallas_call."""


def _reverse_mode_error(name):
  return PallasReverseModeError(
      f"grad of pallas_call {name}: a kernel has no reverse-mode rule, here as in JAX "
      "(grad would split the kernel's JVP and transpose a part). Wrap the call in "
      "custom_vjp, with the backward pass as a second pallas_call, as JAX users do; "
      "jvp of a kernel works.")


def _pallas_call_partial_eval(trace, tracers, *, name, **params):
  raise _reverse_mode_error(name)


def _pallas_call_partial_eval_jaxpr(unks_in, eqn):
  raise _reverse_mode_error(eqn.params["name"])


def _pallas_call_transpose(cts, *args, name, **params):
  raise _reverse_mode_error(name)


pe.partial_eval_rules[pallas_call_p] = _pallas_call_partial_eval
pe.partial_eval_jaxpr_rules[pallas_call_p] = _pallas_call_partial_eval_jaxpr
ad.transpose_rules[pallas_call_p] = _pallas_call_transpose
