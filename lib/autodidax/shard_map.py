"""shard_map: one program, run by every device of a mesh on its own slices.

    shard_map(f, mesh=mesh, in_specs=P("data"), out_specs=P())(x)

splits `x` along its first dimension over the mesh axis "data", runs `f` on
every device with that device's slice (a *per-device* program: shapes are
the slices' shapes), and puts the outputs back together as `out_specs` say.
Inside `f` the mesh's axis names are bound, so collectives (`psum(y,
"data")`) move data between devices. It is vmap with a name, where the batch
is the devices: the same program per element, collectives across elements.

Like jit, shard_map is initial style: the function is traced to a jaxpr
(with the mesh's names bound) and one `shard_map` equation holds it. Its
lowering is Shardy's `sdy.manual_computation`: inside it, XLA leaves the
program as written, per device. JAX's is jax/_src/shard_map.py.
"""
from __future__ import annotations

import math
from contextlib import contextmanager


from . import ad, batching, lowering, parallel, runtime, spmd, state
from . import primitives as lax
from . import partial_eval as pe
from .api_util import shaped_abstractify
from .core import (Primitive, abstract_eval_rules, get_aval, impl_rules, mesh_axis_order,
                   raise_to_shaped, sharding_rules, vma_rules)
from .flop_count import flops_rules
from .jaxpr import Jaxpr, JaxprEqn, Var, eval_jaxpr
from .lowering import mlir_type
from .partial_eval import closed_to_call_jaxpr, trace_to_jaxpr
from .sharding import AxisType, Mesh, NamedSharding, P, PartitionSpec, get_mesh, type_sharding
from .sharding_rules import KEEP
from .tree_util import broadcast_prefix, flatten_fun, tree_flatten, tree_unflatten
from .util import cache_by_jaxpr
from .xla import discharge_call

shard_map_p = Primitive("shard_map", multiple_results=True)


# --- Varying manual axes (check_vma) ----------------------------------------------------------
# With check_vma=True (JAX's default), a type inside shard_map says over which
# mesh axes its value varies from device to device (`f32[2,4]{V:data}`): an
# argument over the axes its in_spec splits it along, a constant over none.
# An operation's result varies over the union of its operands' axes; psum
# makes it invariant over its axes. An invariant value that meets a varying
# one is cast to varying (JAX's pvary, `lax.pcast(x, axis, to="varying")`),
# and the transpose of that cast is a psum: so grad inside shard_map sums
# the cotangent of an invariant input over the devices.

_checked: list = []   # the mesh axes whose vma is tracked, innermost last


def checked_axes() -> frozenset:
  return _checked[-1] if _checked else frozenset()


@contextmanager
def body_env(mesh: Mesh, check_vma: bool):
  """Where a shard_map's body is traced: the mesh's names bound, and their
  vma tracked if `check_vma`."""
  _checked.append(frozenset(mesh.axis_names) if check_vma else frozenset())
  try:
    with parallel.extend_axis_env(mesh.shape), mesh_axis_order(mesh.axis_names):
      yield
  finally:
    _checked.pop()


def spec_axes(spec: PartitionSpec) -> frozenset:
  return frozenset(a for d in range(len(spec)) for a in spec.axes_of(d))


pvary_p = Primitive("pvary")


def pcast(x, axis_name, *, to: str):
  """`to="varying"`: `x`, typed as varying over `axis_name` (JAX's pcast)."""
  if to != "varying":
    raise NotImplementedError(f"pcast: to={to!r}; autodidax has only to='varying'")
  axes = axis_name if isinstance(axis_name, tuple) else (axis_name,)
  missing = tuple(a for a in axes if a not in get_aval(x).vma)
  return pvary_p.bind(x, axes=missing) if missing else x


abstract_eval_rules[pvary_p] = lambda x, *, axes: raise_to_shaped(x).update(
    vma=x.vma | frozenset(axes))
impl_rules[pvary_p] = lambda x, *, axes: x
lowering.lowering_rules[pvary_p] = lambda ctx, x, *, axes: x   # a cast: no data moves
ad.jvp_rules[pvary_p] = ad.linear_jvp(pvary_p)
def _pvary_transpose(ct, x, *, axes):
  return [parallel.psum_p.bind(ct, axes=axes)]


ad.transpose_rules[pvary_p] = _pvary_transpose
batching.vmap_rules[pvary_p] = lambda n, vals, dims, *, axes: (pvary_p.bind(vals[0], axes=axes),
                                                               dims[0])
vma_rules[pvary_p] = lambda vmas, *, axes: vmas[0] | frozenset(axes)
for _p in (parallel.psum_p, parallel.pmax_p, parallel.pmin_p):
  vma_rules[_p] = lambda vmas, *, axes, **params: vmas[0] - frozenset(axes)
for _p in (parallel.all_gather_p, parallel.psum_scatter_p, parallel.ppermute_p):
  vma_rules[_p] = lambda vmas, *, axes, **params: vmas[0] | (frozenset(axes) & checked_axes())
vma_rules[parallel.axis_index_p] = lambda vmas, *, axes: frozenset(axes) & checked_axes()


def _fit_vma(ct, aval):
  if type(ct) is ad.Zero or not checked_axes():
    return ct
  have = get_aval(ct).vma
  extra = tuple(sorted(have - aval.vma))
  if extra:   # the transpose of an implicit pvary
    ct = parallel.psum_p.bind(ct, axes=extra)
  missing = tuple(sorted(aval.vma - have))
  return pvary_p.bind(ct, axes=missing) if missing else ct


ad.fit_vma = _fit_vma
_plain_psum_transpose = ad.transpose_rules[parallel.psum_p]


def _psum_transpose(ct, x, *, axes):
  """With vma: psum of a value varying over `axes` is transposed to a cast
  (each device's cotangent is its own); over axes it is invariant along,
  psum(x) is n * x, transposed to a psum."""
  if not checked_axes():
    return _plain_psum_transpose(ct, x, axes=axes)
  rest = tuple(a for a in axes if a not in x.aval.vma)
  return [parallel.psum_p.bind(ct, axes=rest) if rest else ct]


ad.transpose_rules[parallel.psum_p] = _psum_transpose


# --- Global and per-device types ------------------------------------------------------------

def shard_aval(mesh: Mesh, spec: PartitionSpec, aval):
  """The type of one device's slice of an array of type `aval`."""
  return aval.update(shape=NamedSharding(mesh, spec).shard_shape(aval.shape), sharding=None)


def unshard_aval(mesh: Mesh, spec: PartitionSpec, aval):
  """The type of the whole array made of slices of type `aval`."""
  whole = NamedSharding(mesh, spec)   # on Explicit axes, the spec is in the type
  return aval.update(shape=tuple(n * t for n, t in zip(aval.shape, whole.tiles(aval.ndim))),
                     sharding=type_sharding(whole), vma=frozenset())


def _check_specs(what, specs, avals, mesh):
  for i, (s, a) in enumerate(zip(specs, avals)):
    if not isinstance(s, PartitionSpec):
      raise TypeError(f"shard_map: {what}[{i}] must be a PartitionSpec (P(...)), got {s!r}")
    if len(s) > a.ndim:
      raise ValueError(f"shard_map: {what}[{i}] is {s!r}, with {len(s)} entries, for "
                       f"an array of rank {a.ndim} ({a.str_short()})")
    NamedSharding(mesh, s)   # checks the axis names


# --- The user-facing function --------------------------------------------------------------

def shard_map(f=None, /, *, in_specs, out_specs, mesh: Mesh | None = None, check_vma=True):
  """Run `f` on every device of `mesh`, each on its slices of the arguments.

  `in_specs` is a PartitionSpec per argument (or a pytree prefix of the
  arguments), saying how each is split over the mesh axes; `out_specs`,
  the same for the outputs: how the per-device outputs are put together. A
  dimension the spec doesn't split is whole on every device; an output's
  spec that leaves out a mesh axis says the output is the same on every
  device along it. With check_vma (the default, as in JAX) the types inside
  track which values vary over which axes, and that promise is checked;
  with check_vma=False it is trusted. With no `mesh`, the mesh is the
  context's (`with set_mesh(mesh):`) at the first call; with no `f`,
  shard_map is a decorator.
  """
  if f is None:
    return lambda f: shard_map(f, in_specs=in_specs, out_specs=out_specs, mesh=mesh,
                               check_vma=check_vma)

  def mapped(*args):
    nonlocal mesh   # as in JAX, the first call settles it
    mesh = _the_mesh(mesh)
    args_flat, in_tree = tree_flatten(args)
    try:
      specs_in = tuple(broadcast_prefix(in_specs, args, "in_specs"))
    except ValueError as e:
      raise ValueError(f"shard_map: {e}: give one PartitionSpec per "
                       "argument") from None
    avals = [raise_to_shaped(shaped_abstractify(x)) for x in args_flat]
    _check_specs("in_specs", specs_in, avals, mesh)
    _check_typed_inputs(specs_in, avals, mesh)
    local = [shard_aval(mesh, s, a) for s, a in zip(specs_in, avals)]
    if check_vma:   # an argument varies over the axes that split it
      local = [a.update(vma=spec_axes(s)) for a, s in zip(local, specs_in)]
    flat_fun, out_tree = flatten_fun(f, in_tree)
    with body_env(mesh, check_vma):   # the names are bound
      jaxpr, consts = trace_to_jaxpr(flat_fun, local)
    jaxpr, consts = closed_to_call_jaxpr(jaxpr, consts)
    skeleton = tree_unflatten(out_tree(), [0] * len(jaxpr.outvars))
    specs_out = tuple(broadcast_prefix(out_specs, skeleton, "out_specs"))
    _check_specs("out_specs", specs_out, jaxpr.out_avals, mesh)
    if check_vma:
      _check_out_vma(f, specs_out, jaxpr.out_avals, mesh)
    outs = shard_map_p.bind(*consts, *args_flat, jaxpr=jaxpr, mesh=mesh,
                            in_specs=(P(),) * len(consts) + specs_in,
                            out_specs=specs_out, check_vma=check_vma)
    return tree_unflatten(out_tree(), outs)
  mapped.__name__ = f"shard_map({getattr(f, '__name__', 'f')})"
  return mapped


def _the_mesh(mesh):
  """shard_map's mesh: the one it was given, else the context's, as in JAX."""
  context = get_mesh()
  if mesh is None:
    if context is None:
      raise ValueError("shard_map was given no mesh=, and the context mesh cannot be "
                       "empty: call it inside `with set_mesh(mesh):` (or call "
                       "set_mesh(mesh) first), or pass mesh=mesh.")
    return context
  if not isinstance(mesh, Mesh):
    raise TypeError(f"shard_map requires a Mesh (make_mesh(...)) for mesh=, got {mesh!r} "
                    f"of type {type(mesh).__name__}")
  abstract = lambda m: (m.axis_names, m.axis_sizes, m.axis_types)
  if context is not None and abstract(context) != abstract(mesh):
    raise ValueError(f"The context mesh {context} should match the mesh passed to "
                     f"shard_map {mesh}: leave out mesh= to use the context's, or call "
                     "shard_map outside `with set_mesh(...)`.")
  return mesh


def _check_typed_inputs(specs, avals, mesh):
  """On a mesh whose axes are all Explicit, an argument's type says how it is
  split, and its in_spec must say the same, as in JAX: shard_map doesn't
  move data. An argument whose type has no sharding (a NumPy array) is
  unsplit: only an in_spec that splits nothing takes it."""
  if not mesh.axis_types or any(t is not AxisType.Explicit for t in mesh.axis_types):
    return   # Auto axes: the partitioner lays the arguments out as in_specs say
  for s, a in zip(specs, avals):
    have = a.sharding.spec if a.sharding is not None else P()
    if have.normalized(a.ndim) != s.normalized(a.ndim):
      raise ValueError(
          f"in_specs passed to shard_map: {s.padded(a.ndim)!r} does not match the specs "
          f"of the input: {have.padded(a.ndim)!r} for arg: {a}. On a mesh of Explicit axes "
          "an argument's type says how it is split, and shard_map doesn't move data: "
          "lay the argument out first with sharding.reshard(x, NamedSharding(mesh, spec)) "
          "(or device_put(x, NamedSharding(mesh, spec)) for a host array), or give the "
          "in_spec that its type says.")


def _check_out_vma(f, specs, avals, mesh):
  for i, (s, a) in enumerate(zip(specs, avals)):
    unsaid = sorted(a.vma - spec_axes(s), key=mesh.axis_names.index)
    if unsaid:
      raise ValueError(
          f"shard_map applied to {getattr(f, '__name__', 'f')!r} was given out_specs "
          f"which require replication which can't be statically inferred: out_specs[{i}] "
          f"is {s!r}, which says output {i} ({a.str_short()}) is the same on every "
          f"device along mesh axis {unsaid[0]!r}, but its type says it varies along "
          f"{unsaid}. Add the axes to out_specs, make the value invariant (psum, pmean, "
          "all_gather), or pass check_vma=False to trust the out_specs unchecked.")


# --- Types and evaluation ----------------------------------------------------------------------

def _shard_map_abstract_eval(*avals, jaxpr, mesh, in_specs, out_specs, check_vma):
  for i, (a, s, want) in enumerate(zip(avals, in_specs, jaxpr.in_avals)):
    got = shard_aval(mesh, s, a)
    if got.shape != want.shape or got.dtype != want.dtype:
      raise TypeError(f"shard_map: argument {i} is {a.str_short()}, split by {s!r} into "
                      f"{got.str_short()}, but the body takes {want.str_short()}")
  return [unshard_aval(mesh, s, raise_to_shaped(a)) for s, a in zip(out_specs, jaxpr.out_avals)]


abstract_eval_rules[shard_map_p] = _shard_map_abstract_eval
sharding_rules[shard_map_p] = KEEP   # the out_specs give the outputs' shardings


@cache_by_jaxpr
def _as_program(jaxpr, mesh, in_specs, out_specs, check_vma) -> Jaxpr:
  """A jaxpr holding just this shard_map: what an eager call compiles."""
  ins = [Var(unshard_aval(mesh, s, a)) for s, a in zip(in_specs, jaxpr.in_avals)]
  outs = [Var(unshard_aval(mesh, s, raise_to_shaped(a)))
          for s, a in zip(out_specs, jaxpr.out_avals)]
  params = dict(jaxpr=jaxpr, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                check_vma=check_vma)
  return Jaxpr([], ins, [JaxprEqn(shard_map_p, ins, params, outs)], outs)


def _shard_map_impl(*args, jaxpr, mesh, in_specs, out_specs, check_vma):
  """Called on arrays (not under jit): compile the shard_map for the mesh and
  run it, the arguments laid out as `in_specs` say."""
  program = _as_program(jaxpr, mesh, in_specs, out_specs, check_vma)
  return spmd.execute_jaxpr(
      program, args, mesh=mesh, platform=runtime.default_platform(), name="shard_map",
      in_shardings=[NamedSharding(mesh, s) for s in in_specs],
      out_shardings=[NamedSharding(mesh, s) for s in out_specs])


impl_rules[shard_map_p] = _shard_map_impl
spmd.own_dispatch.add(shard_map_p)   # eager: laid out by in_specs, not by jit


# --- Lowering: Shardy's manual computation -------------------------------------------------------

def _dims(spec: PartitionSpec, ndim: int) -> str:
  return "[" + ", ".join("{" + ", ".join(f'"{a}"' for a in spec.axes_of(d)) + "}"
                         for d in range(ndim)) + "]"


def _shard_map_lowering(ctx, *args, jaxpr, mesh, in_specs, out_specs, check_vma):
  """`sdy.manual_computation`: its region is the per-device program, on
  per-device types; in_shardings/out_shardings say how the global arrays
  outside are split into (and made of) the slices inside."""
  if getattr(ctx.module, "mesh", None) != mesh:
    raise ValueError(f"shard_map over {mesh} inside a program for "
                     f"{getattr(ctx.module, 'mesh', 'one device')}: one jit can use one mesh")
  shardings = lambda specs, avals: ", ".join(
      f"<@mesh, {_dims(s, a.ndim)}>" for s, a in zip(specs, avals))
  body = ctx.sub_context()
  block_args = [body.fresh() for _ in jaxpr.invars]
  outs = lowering.lower_jaxpr_body(body, jaxpr, dict(zip(jaxpr.invars, block_args)))
  local_in = ", ".join(f"{n}: {mlir_type(v.aval)}" for n, v in zip(block_args, jaxpr.invars))
  local_out = ", ".join(mlir_type(a) for a in jaxpr.out_avals)
  n = len(outs)
  result = ctx.fresh()
  lines = "\n".join("      " + line.replace("\n", "\n  ") for line in body.lines)
  manual = ", ".join(f'"{a}"' for a in mesh.axis_names)
  global_in = ", ".join(mlir_type(a) for a in ctx.avals_in)
  global_out = ", ".join(mlir_type(a) for a in ctx.avals_out)
  ctx.emit(f"{result}{f':{n}' if n > 1 else ''} = sdy.manual_computation({', '.join(args)}) "
           f"in_shardings=[{shardings(in_specs, ctx.avals_in)}] "
           f"out_shardings=[{shardings(out_specs, ctx.avals_out)}] "
           f"manual_axes={{{manual}}} ({local_in}) {{\n{lines}\n"
           f"      sdy.return {', '.join(outs)} : {local_out}\n"
           f"    }} : ({global_in}) -> ({global_out})", result=False)
  return [f"{result}#{i}" for i in range(n)] if n > 1 else [result]


lowering.lowering_rules[shard_map_p] = _shard_map_lowering


# --- Forward mode and batching --------------------------------------------------------------

def _shard_map_jvp(primals, tangents, *, jaxpr, mesh, in_specs, out_specs, check_vma):
  """The JVP of the per-device program, as a shard_map of its own: each
  tangent is split like its primal."""
  with body_env(mesh, check_vma):
    n_in, n_out = len(jaxpr.invars), len(jaxpr.outvars)   # every tangent, in and out
    new_jaxpr, consts, _ = ad.jvp_jaxpr(jaxpr, (True,) * n_in, (True,) * n_out)
  tangents = [ad.instantiate_zeros(t) for t in tangents]
  outs = shard_map_p.bind(*consts, *primals, *tangents, jaxpr=new_jaxpr, mesh=mesh,
                          in_specs=(P(),) * len(consts) + in_specs + in_specs,
                          out_specs=out_specs + out_specs, check_vma=check_vma)
  n = len(outs) // 2
  return outs[:n], outs[n:]


ad.jvp_rules[shard_map_p] = _shard_map_jvp


def _shard_map_vmap(axis_size, vals_in, dims_in, *, jaxpr, mesh, in_specs, out_specs,
                    check_vma, axis_name=None):
  """The batch axis goes first and is not split: every device gets the whole
  batch of its slices, and the per-device program is vmapped."""
  vals = [x if d is batching.not_mapped else batching.moveaxis(x, d, 0) if d else x
          for x, d in zip(vals_in, dims_in)]
  dims = tuple(batching.not_mapped if d is batching.not_mapped else 0 for d in dims_in)
  every_output = (True,) * len(jaxpr.outvars)   # batched at axis 0
  with body_env(mesh, check_vma):
    new_jaxpr, consts, _ = batching.batch_jaxpr_axes(jaxpr, axis_size, dims, every_output,
                                                     axis_name)
  specs = tuple(s if d is batching.not_mapped else P(None, *s) for s, d in zip(in_specs, dims))
  outs = shard_map_p.bind(*consts, *vals, jaxpr=new_jaxpr, mesh=mesh,
                          in_specs=(P(),) * len(consts) + specs,
                          out_specs=tuple(P(None, *s) for s in out_specs),
                          check_vma=check_vma)
  return outs, [0] * len(outs)


batching.vmap_rules[shard_map_p] = _shard_map_vmap
batching.axis_vmap_rules[shard_map_p] = (
    lambda axis_data, vals_in, dims_in, **params: _shard_map_vmap(
        axis_data.size, vals_in, dims_in, axis_name=axis_data.name, **params))


# --- Partial evaluation: known and unknown parts, each a shard_map ---------------------------------

@cache_by_jaxpr
def _split(jaxpr, mesh, unknowns: tuple, in_specs, out_specs, check_vma):
  """The per-device program split into a known part and an unknown part.

  The residuals the known part hands over are per-device values, different
  on each device: each leaves it as one block of a global array split over
  all the mesh's axes along its first dimension (a scalar becomes shape (1,)).
  Returns the two jaxprs, which outputs are unknown, and the residuals' specs."""
  with body_env(mesh, check_vma):
    jaxpr1, jaxpr2, out_uk, num_res = pe.partial_eval_jaxpr(jaxpr, list(unknowns))
    n_known_out = len(jaxpr1.outvars) - num_res
    res_avals = jaxpr1.out_avals[n_known_out:]

    def known(*ins):
      outs = eval_jaxpr(jaxpr1, [], *ins)
      return [*outs[:n_known_out],
              *[lax.reshape(r, (1,)) if not a.shape else r
                for r, a in zip(outs[n_known_out:], res_avals)]]

    def unknown(*res_ins):
      res = [lax.reshape(r, ()) if not a.shape else r
             for r, a in zip(res_ins[:num_res], res_avals)]
      return eval_jaxpr(jaxpr2, [], *res, *res_ins[num_res:])

    j1 = closed_to_call_jaxpr(*trace_to_jaxpr(known, jaxpr1.in_avals))
    res_local = [a if a.shape else a.update(shape=(1,)) for a in res_avals]
    j2 = closed_to_call_jaxpr(*trace_to_jaxpr(
        unknown, [*res_local, *jaxpr2.in_avals[num_res:]]))
  res_specs = (P(tuple(mesh.axis_names)),) * num_res
  ins_uk = [s for s, u in zip(in_specs, unknowns) if u]
  ins_k = [s for s, u in zip(in_specs, unknowns) if not u]
  outs_k = [s for s, u in zip(out_specs, out_uk) if not u]
  outs_uk = [s for s, u in zip(out_specs, out_uk) if u]
  params1 = dict(in_specs=(P(),) * len(j1[1]) + tuple(ins_k), out_specs=tuple(outs_k) + res_specs,
                 check_vma=check_vma)
  params2 = dict(in_specs=(P(),) * len(j2[1]) + res_specs + tuple(ins_uk),
                 out_specs=tuple(outs_uk), check_vma=check_vma)
  return j1, j2, out_uk, num_res, params1, params2


def _shard_map_partial_eval(trace, tracers, *, jaxpr, mesh, in_specs, out_specs, check_vma):
  unknowns = tuple(t.pval.is_unknown for t in tracers)
  (j1, c1), (j2, c2), out_uk, num_res, p1, p2 = _split(jaxpr, mesh, unknowns, in_specs,
                                                        out_specs, check_vma)
  known_in = [t.pval.const for t in tracers if t.pval.is_known]
  outs1 = shard_map_p.bind(*c1, *known_in, jaxpr=j1, mesh=mesh, **p1)
  n_known = len(outs1) - num_res
  residuals = [trace.instantiate_const(trace.pure(r)) for r in outs1[n_known:]]
  consts2 = [trace.instantiate_const(trace.pure(c)) for c in c2]
  unknown_in = [t for t in tracers if t.pval.is_unknown]
  ins2 = [*consts2, *residuals, *unknown_in]
  avals2 = _shard_map_abstract_eval(*[t.aval for t in ins2], jaxpr=j2, mesh=mesh, **p2)
  outs2 = trace.stage(shard_map_p, ins2, dict(jaxpr=j2, mesh=mesh, **p2), avals2)
  known_outs, unknown_outs = iter(outs1[:n_known]), iter(outs2)
  return [next(unknown_outs) if uk else trace.pure(next(known_outs)) for uk in out_uk]


def _shard_map_partial_eval_jaxpr(unknowns, eqn):
  params = eqn.params
  mesh = params["mesh"]
  (j1, c1), (j2, c2), out_uk, num_res, p1, p2 = _split(
      params["jaxpr"], mesh, tuple(unknowns), params["in_specs"], params["out_specs"],
      params["check_vma"])
  if c1 or c2:   # the split of a jaxpr without constants has none: nothing to bind them to
    raise NotImplementedError("shard_map: partial evaluation made constants")
  ins1 = [x for x, uk in zip(eqn.inputs, unknowns) if not uk]
  ins2 = [x for x, uk in zip(eqn.inputs, unknowns) if uk]
  outs1 = [v for v, uk in zip(eqn.out_binders, out_uk) if not uk]
  outs2 = [v for v, uk in zip(eqn.out_binders, out_uk) if uk]
  res_avals = _shard_map_abstract_eval(*[x.aval for x in ins1], jaxpr=j1, mesh=mesh,
                                       **p1)[len(outs1):]
  residuals = [Var(a) for a in res_avals]
  eqn1 = JaxprEqn(shard_map_p, ins1, dict(jaxpr=j1, mesh=mesh, **p1), outs1 + residuals)
  eqn2 = JaxprEqn(shard_map_p, residuals + ins2, dict(jaxpr=j2, mesh=mesh, **p2), outs2)
  return eqn1, eqn2, out_uk, residuals


pe.partial_eval_rules[shard_map_p] = _shard_map_partial_eval
pe.partial_eval_jaxpr_rules[shard_map_p] = _shard_map_partial_eval_jaxpr


# --- Transposition ---------------------------------------------------------------------------------

def replicas(mesh: Mesh, spec: PartitionSpec) -> tuple:
  """The mesh axes `spec` doesn't mention: along them, every device holds the
  same slice."""
  used = {a for d in range(len(spec)) for a in spec.axes_of(d)}
  return tuple(a for a in mesh.axis_names if a not in used)


@cache_by_jaxpr
def _transpose_body(jaxpr, mesh, undefined: tuple, in_specs, out_specs, check_vma):
  """The per-device program of the transpose: cotangents of the outputs in,
  cotangents of the linear inputs out (the others are residuals, known).

  Two boundary terms make the per-device transposes add up to the transpose
  of the whole. An output that the spec says is replicated over k devices
  is one value that k devices each hold: each takes 1/k of its cotangent.
  An input replicated over some mesh axes was handed whole to each device
  along them: its cotangent is the sum of theirs, a psum over those axes.
  With check_vma the types say all this: an output's cotangent varies over
  the axes its out_spec names, and each input's is cast back to its type
  (summed where an invariant input met varying values), as inside grad."""
  avals = jaxpr.in_avals
  res_avals = [a for a, u in zip(avals, undefined) if not u]
  out_avals = [raise_to_shaped(a) for a in jaxpr.out_avals]
  if check_vma:
    out_avals = [a.update(vma=spec_axes(s)) for a, s in zip(out_avals, out_specs)]

  def copies(spec):   # how many devices hold each piece
    return math.prod(mesh.shape[a] for a in replicas(mesh, spec))

  def transposed(*args):
    res, cts = iter(args[:len(res_avals)]), args[len(res_avals):]
    primals = [ad.UndefPrimal(a) if u else next(res) for a, u in zip(avals, undefined)]
    if check_vma:
      return [ad.instantiate_zeros(ct) for ct in ad.backward_pass(jaxpr, primals, cts)]
    cts = [lax.div(ct, float(copies(s))) if copies(s) > 1 else ct
           for ct, s in zip(cts, out_specs)]
    cts_in = ad.backward_pass(jaxpr, primals, cts)
    specs = [s for s, u in zip(in_specs, undefined) if u]
    cts_in = [ad.instantiate_zeros(ct) for ct in cts_in]
    return [parallel.psum(ct, replicas(mesh, s)) if replicas(mesh, s)
            else ct for ct, s in zip(cts_in, specs)]

  with body_env(mesh, check_vma):
    jaxpr_t, consts = trace_to_jaxpr(transposed,
                                             res_avals + out_avals)
  return closed_to_call_jaxpr(jaxpr_t, consts)


def _shard_map_transpose(cts, *args, jaxpr, mesh, in_specs, out_specs, check_vma):
  undefined = tuple(ad.is_undefined_primal(x) for x in args)
  t_jaxpr, t_consts = _transpose_body(jaxpr, mesh, undefined, in_specs, out_specs, check_vma)
  residuals = [x for x in args if not ad.is_undefined_primal(x)]
  res_specs = tuple(s for s, u in zip(in_specs, undefined) if not u)
  cts = [ad.instantiate_zeros(ct) for ct in cts]
  outs = iter(shard_map_p.bind(
      *t_consts, *residuals, *cts, jaxpr=t_jaxpr, mesh=mesh,
      in_specs=(P(),) * len(t_consts) + res_specs + out_specs,
      out_specs=tuple(s for s, u in zip(in_specs, undefined) if u), check_vma=check_vma))
  return [next(outs) if u else None for u in undefined]


ad.transpose_rules[shard_map_p] = _shard_map_transpose


# --- FLOPS: every device runs the per-device program --------------------------------------------

def _collective_flops(avals_in, avals_out, *, axes, **params):
  """An all-reduce over n devices: each device combines the n - 1 others'
  values with its own (psum, pmax, pmin); a reduce-scatter, only for its
  block. Moving data (all_gather, ppermute) is no arithmetic."""
  return (parallel.axis_size(axes) - 1) * math.prod(avals_out[0].shape)


def _body_flops(jaxpr) -> int:
  total = 0
  for eqn in jaxpr.eqns:
    p, params = eqn.primitive, eqn.params
    if "jaxpr" in params and isinstance(params["jaxpr"], Jaxpr) and p not in flops_rules:
      total += _body_flops(params["jaxpr"])   # a jit inside
      continue
    if p not in flops_rules:
      raise NotImplementedError(f"FLOPS of '{p.name}' inside shard_map are not counted: "
                                "count the per-device function with flops() instead")
    total += flops_rules[p]([x.aval for x in eqn.inputs], [v.aval for v in eqn.out_binders],
                            **params)
  return total


def _shard_map_flops(avals_in, avals_out, *, jaxpr, mesh, in_specs, out_specs, check_vma):
  """The per-device program's FLOPS, once per device."""
  with body_env(mesh, check_vma):
    return mesh.size * _body_flops(jaxpr)


for _p in (parallel.psum_p, parallel.pmax_p, parallel.pmin_p, parallel.psum_scatter_p):
  flops_rules[_p] = _collective_flops
for _p in (parallel.all_gather_p, parallel.ppermute_p, parallel.axis_index_p):
  flops_rules[_p] = lambda avals_in, avals_out, **params: 0
flops_rules[shard_map_p] = _shard_map_flops


# --- Discharge: a Ref the body uses goes in as its value, unsharded (xla.discharge_call) ---------

def _shard_map_params(eqn, body, n_consts, refs):
  p = eqn.params
  ins = p["in_specs"]
  return {**p, "jaxpr": body, "in_specs": (PartitionSpec(),) * n_consts + tuple(ins),
          "out_specs": tuple(p["out_specs"]) + tuple(
              s for s, x in zip(ins, eqn.inputs) if isinstance(x.aval, state.AbstractRef))}


state.discharge_rules[shard_map_p] = discharge_call
state.call_params[shard_map_p] = _shard_map_params
