"""jit: stage a function out of Python into a jaxpr, compile it with XLA, run it.

`jit` is an *initial-style* higher-order primitive: the whole function is traced
to a jaxpr first, and that jaxpr travels as a parameter of one `xla_call`
equation. Other transformations meet `xla_call` like any primitive, through its
rules: jvp and vmap transform the inner jaxpr and bind a new `xla_call`.
"""
from __future__ import annotations

import inspect
import weakref

import numpy as np

from . import ad, batching, core, lowering, runtime, state
from .api_util import shaped_abstractify, split_static
from .effects import is_ordered
from .flop_count import flops_call_rules
from .core import (Primitive, ShapedArray, Tracer, abstract_eval_rules, array_types,
                   impl_rules, raise_to_shaped)
from .sharding_rules import keep_body_types
from .jaxpr import ClosedJaxpr, Jaxpr, typecheck_jaxpr
from .mesh import get_mesh
from .partial_eval import closed_to_call_jaxpr, trace_to_jaxpr_dynamic
from .tree_util import LEAF, flatten_fun, tree_flatten, tree_unflatten

xla_call_p = Primitive("xla_call", multiple_results=True)

# A program for many devices (its jit has shardings, or it holds a shard_map)
# is lowered, compiled and run by autodidax.spmd, which plugs itself in here
# when imported (the chapter Many devices). This module knows one device.
spmd = None


# --- Device-resident arrays --------------------------------------------------------------

class Array:
  """A result of `jit`, living on the device, that behaves like an ndarray.

  Feeding it back into a jitted function hands XLA the device buffer directly;
  anything else (printing, NumPy, eager ops) fetches it once and caches it.
  """
  __array_priority__ = 1000
  __slots__ = ("_buf", "aval", "platform", "_npy", "__weakref__")   # cheap to make

  def __init__(self, buf, aval: ShapedArray, platform: str):
    if type(aval) is not ShapedArray:   # avals are immutable: share plain ones
      aval = raise_to_shaped(aval)
    self._buf, self.aval, self.platform = buf, aval, platform
    self._npy = None

  # weak_type too, so that jit keys on it
  shape, dtype, ndim, size, weak_type = map(
      core.aval_property, ("shape", "dtype", "ndim", "size", "weak_type"))

  def __array__(self, dtype=None, copy=None):
    if self._npy is None:
      self._npy = runtime.to_numpy(self._buf)
    return self._npy if dtype is None else self._npy.astype(dtype)

  def __repr__(self):
    body = np.array2string(np.asarray(self), separator=", ", prefix="Array(")
    return f"Array({body}, dtype={self.dtype.name})"

  def __len__(self):
    return len(np.asarray(self))

  def __iter__(self):
    return iter(np.asarray(self))

  def __bool__(self):
    return bool(np.asarray(self))

  def __float__(self):
    return float(np.asarray(self))

  def __int__(self):
    return int(np.asarray(self))

  def item(self):
    return np.asarray(self).item()

  def tolist(self):
    return np.asarray(self).tolist()

  def __format__(self, spec):
    return format(np.asarray(self).item() if self.ndim == 0 else np.asarray(self), spec)

  def block_until_ready(self) -> "Array":
    """Wait for the computation that produces this array (XLA runs asynchronously)."""
    self._buf.block_until_ready()
    return self


array_types.add(Array)


def block_until_ready(x):
  """`x`, once every array in it is computed: a pytree in, the same pytree out,
  as `jax.block_until_ready`. Leaves that are not device arrays (NumPy arrays,
  Python numbers) are ready already and pass through."""
  for leaf in tree_flatten(x)[0]:
    if hasattr(leaf, "block_until_ready"):
      leaf.block_until_ready()
  return x


def device_buffer(x, aval, platform):
  """The input handler: a device buffer for `x`, copying only host values."""
  if type(x) is Array and x.platform == platform:
    return x._buf
  return runtime.device_put(np.asarray(x, aval.dtype), platform)


# --- The primitive and its rules --------------------------------------------------------------

def _platform(params):
  return params.get("platform") or runtime.default_platform()


_executables = weakref.WeakKeyDictionary()   # jaxpr -> {platform: Executable}


def discharged(jaxpr: Jaxpr, name: str = "jit_fun", ref_inputs_ok: bool = False) -> Jaxpr:
  """`jaxpr` with its `Ref`s made values (autodidax.state), if it has any."""
  return state.discharge_if_stateful(jaxpr, name, ref_inputs_ok)


def compile_jaxpr(jaxpr: Jaxpr, platform: str, name: str = "jit_fun"):
  """Lower and compile `jaxpr` once per platform; later calls hit the cache."""
  per_platform = _executables.get(jaxpr)
  if per_platform is None:
    per_platform = _executables[jaxpr] = {}
  exe = per_platform.get(platform)
  if exe is None:
    module = lowering.lower_module(discharged(jaxpr), name)
    exe = runtime.compile(module.text(), platform, module.host_callbacks, module.ordered)
    # The avals of the inputs and outputs, for the input handler and the
    # output `Array`s: worked out once here rather than on every call.
    exe.in_avals = [v.aval for v in jaxpr.invars]
    exe.out_avals = [raise_to_shaped(x.aval) for x in jaxpr.outvars]
    per_platform[platform] = exe
  return exe


def _xla_call_impl(*args, jaxpr: Jaxpr, num_consts: int, **params):
  if any(type(x) is state.Ref for x in args):   # a box made outside the jit: its value
    return state.bind_discharged(xla_call_p, args, dict(jaxpr=jaxpr, num_consts=num_consts,
                                                        **params))
  platform = _platform(params)
  if "mesh" in params:   # a program for many devices (the chapter Many devices)
    return spmd.execute_jaxpr(jaxpr, args, platform=platform, **params)
  mesh = spmd.mesh_of(args) if spmd is not None else None
  if mesh is not None:   # arguments on many devices: run there, keep their layouts
    return spmd.execute_on_args_mesh(jaxpr, args, mesh=mesh, num_consts=num_consts,
                                     platform=platform, name=params.get("name", "jit_fun"))
  return execute_compiled(compile_jaxpr(jaxpr, platform, params.get("name", "jit_fun")),
                          args, platform)


def execute_compiled(exe, args, platform: str) -> list:
  """Run a compiled jaxpr: input handler, XLA, and an `Array` per output."""
  bufs = [device_buffer(x, aval, platform) for x, aval in zip(args, exe.in_avals)]
  return [Array(b, aval, platform) for b, aval in zip(exe.execute(bufs), exe.out_avals)]


impl_rules[xla_call_p] = _xla_call_impl


def _xla_call_abstract_eval(*in_avals, jaxpr: Jaxpr, num_consts: int, **params):
  for i, (a, v) in enumerate(zip(in_avals, jaxpr.invars)):
    if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
      raise TypeError(f"xla_call: argument {i} is {a.str_short()} but the jaxpr "
                      f"expects {v.aval.str_short()}")
  return [raise_to_shaped(x.aval) for x in jaxpr.outvars]


abstract_eval_rules[xla_call_p] = _xla_call_abstract_eval
keep_body_types(xla_call_p)   # its results' types, shardings included, are its body's


def _xla_call_lowering(ctx, *args, jaxpr: Jaxpr, num_consts: int, **params):
  """jit of jit: the inner jaxpr becomes a private function, called by name
  (with ordered effects inside, it takes the token and returns the next)."""
  token = is_ordered(jaxpr.effects)
  callee = ctx.module.private_function(jaxpr, params.get("name", "jit_fun"), token)
  avals_in, avals_out = ctx.avals_in, ctx.avals_out
  if token:
    args = [ctx.current_token(), *args]
    avals_in, avals_out = [lowering.abstract_token, *avals_in], [lowering.abstract_token, *avals_out]
  in_types = ", ".join(lowering.mlir_type(a) for a in avals_in)
  out_types = ", ".join(lowering.mlir_type(a) for a in avals_out)
  name, n = ctx.fresh(), len(avals_out)
  ctx.emit(f"{name}{f':{n}' if n > 1 else ''} = func.call @{callee}({', '.join(args)}) "
           f": ({in_types}) -> ({out_types})", result=False)
  outs = [f"{name}#{i}" for i in range(n)] if n > 1 else [name]
  if token:
    ctx.token, outs = outs[0], outs[1:]
  return outs


lowering.lowering_rules[xla_call_p] = _xla_call_lowering
flops_call_rules[xla_call_p] = lambda *args, jaxpr, run, **_: run(jaxpr, [], *args)


def _xla_call_jvp(primals, tangents, *, jaxpr, num_consts, **params):
  n_in, n_out = len(jaxpr.invars), len(jaxpr.outvars)   # every tangent, in and out
  new_jaxpr, new_consts, _ = ad.jvp_jaxpr(jaxpr, (True,) * n_in, (True,) * n_out)
  tangents = [ad.instantiate_zeros(t) for t in tangents]
  outs = xla_call_p.bind(*new_consts, *primals, *tangents, jaxpr=new_jaxpr,
                         num_consts=len(new_consts), **transformed(params))
  n = len(outs) // 2
  return outs[:n], outs[n:]


ad.jvp_rules[xla_call_p] = _xla_call_jvp


def _xla_call_vmap(axis_size, vals_in, dims_in, *, jaxpr, num_consts, axis_name=None,
                   **params):
  every_output = (True,) * len(jaxpr.outvars)   # batched at axis 0
  new_jaxpr, new_consts, _ = batching.batch_jaxpr_axes(
      jaxpr, axis_size, tuple(dims_in), every_output, axis_name)
  outs = xla_call_p.bind(*new_consts, *vals_in, jaxpr=new_jaxpr,
                         num_consts=len(new_consts), **transformed(params))
  return outs, [0] * len(outs)


batching.vmap_rules[xla_call_p] = _xla_call_vmap
# Under vmap(axis_name=...), the jaxpr is batched under the same name, so a
# collective over it inside becomes array code (see the chapter Many devices).
batching.axis_vmap_rules[xla_call_p] = (
    lambda axis_data, vals_in, dims_in, **params: _xla_call_vmap(
        axis_data.size, vals_in, dims_in, axis_name=axis_data.name, **params))


def transformed(params) -> dict:
  """The params of an xla_call that a rule transforms. A sharded jit keeps
  its mesh, but its new inputs and outputs are other arrays than the ones
  `in_shardings` and `out_shardings` describe: XLA's partitioner lays them out."""
  if "in_shardings" not in params:
    return params
  return {k: v for k, v in params.items() if k not in ("in_shardings", "out_shardings")}


# --- Discharge: a Ref a jit, checkpoint or shard_map body uses -----------------------------------

def discharge_call(eqn, vals, env):
  """The call again, its body discharged: each Ref it is passed goes in as
  its value, and its final value comes out after the call's outputs."""
  refs = state.ref_slots(eqn, range(len(eqn.inputs)))
  body, consts = state.discharged_call_body(eqn.params["jaxpr"], eqn.inputs,
                                            eqn.primitive.name)
  params = state.call_params[eqn.primitive](eqn, body, len(consts), refs)
  outs = eqn.primitive.bind(*consts, *vals, **params)
  n = len(eqn.out_binders)
  env.update(zip(refs, state.updated(eqn.inputs, refs, [None] * len(refs), outs[n:])))
  return outs[:n]


def _xla_call_params(eqn, body, n_consts, refs):
  if "mesh" in eqn.params:
    raise NotImplementedError("jit with shardings: a Ref can't cross into its body")
  return {**eqn.params, "jaxpr": body, "num_consts": eqn.params["num_consts"] + n_consts}


state.discharge_rules[xla_call_p] = discharge_call
state.call_params[xla_call_p] = _xla_call_params


# --- The user-facing jit ------------------------------------------------------------------

class _Traced:
  """One specialization of a jitted function: its jaxpr, consts, output tree."""

  def __init__(self, jaxpr, consts, out_tree):
    self.jaxpr, self.consts, self.out_tree = jaxpr, consts, out_tree
    self.mesh = None   # a program for many devices: its mesh, and a layout per
    self.in_shardings = self.out_shardings = None   # input and output (or None)


def _fast_signature(args):
  """A cache key for `args` if every one is a NumPy array, an `Array` or a float.

  They are the arguments whose avals `_specialize` would derive from their
  shape and dtype alone (a float: f64[], weakly typed); None for anything else.
  """
  sig = []
  for x in args:
    t = type(x)
    if t is np.ndarray:
      sig.append((x.shape, x.dtype))
    elif t is Array:   # an Array may be weakly typed: part of the signature
      sig.append((x.aval.shape, x.aval.dtype, x.aval.weak_type))
    elif t is float:
      sig.append(float)
    else:
      return None
  return tuple(sig)


def _static_args(fun, argnums, argnames) -> tuple[tuple, tuple]:
  """static_argnums and static_argnames, each completed from the other
  through `fun`'s signature (as JAX does)."""
  argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames)
  try:
    params = inspect.signature(fun).parameters.values()
  except (TypeError, ValueError):
    return argnums, argnames
  positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  argnums += tuple(positional.index(n) for n in argnames
                   if n in positional and positional.index(n) not in argnums)
  argnames += tuple(positional[i] for i in argnums
                    if -len(positional) <= i < len(positional) and positional[i] not in argnames)
  return argnums, argnames


def _static_key(x):
  """Static arguments as a cache key, with their types: 2 and 2.0 are equal
  in Python but give different programs."""
  if isinstance(x, (tuple, list)):
    return type(x), tuple(_static_key(v) for v in x)
  return type(x), x


class jit:
  """`jit(f)(*args)`: trace `f` once per input signature, compile, and run it.

  Arguments in `static_argnums` (or named in `static_argnames`) are part of
  the signature by value and type (they must be hashable). `platform` picks
  the XLA backend ('cpu', 'gpu'); the default comes from $AUTODIDAX_PLATFORM,
  else 'cpu'. `in_shardings` and `out_shardings` (NamedShardings, or pytree
  prefixes of the arguments and outputs holding them) make it one program
  for the devices of their mesh, partitioned by XLA (the chapter Many devices).
  """

  def __init__(self, fun, static_argnums=(), static_argnames=(),
               platform: str | None = None, in_shardings=None, out_shardings=None):
    self.fun = fun
    self.in_shardings, self.out_shardings = in_shardings, out_shardings
    self.static_argnums, self.static_argnames = _static_args(fun, static_argnums,
                                                             static_argnames)
    self.platform = platform
    self.trace_count = 0
    self._cache: dict = {}
    self._fast: dict = {}   # _fast_signature(args) -> (_Traced, {platform: exe})
    self.__name__ = getattr(fun, "__name__", "fun")
    self.__doc__ = getattr(fun, "__doc__", None)
    self.__wrapped__ = fun   # its signature is fun's

  def clear_cache(self):
    """Forget every traced and compiled version (as JAX's `jit(f).clear_cache()`)."""
    self._cache.clear()
    self._fast.clear()

  def _specialize(self, args, kwargs=None) -> tuple[_Traced, list]:
    fun_dyn, dyn_args, statics = split_static(self.fun, args, self.static_argnums,
                                              kwargs, self.static_argnames)
    try:
      hash(statics)
    except TypeError:
      raise TypeError(f"jit: static arguments must be hashable, got {statics!r}: "
                      "pass tuples instead of lists or arrays") from None
    args_flat, in_tree = tree_flatten(dyn_args)
    in_avals = tuple(shaped_abstractify(x) for x in args_flat)
    # The named axes in scope are part of the key: pmean(x, 'i') divides by 'i's size;
    # so is the context mesh, which a shard_map with no mesh= runs on.
    key = (in_tree, in_avals, _static_key(statics), batching.bound_axes(), get_mesh())
    traced = self._cache.get(key)
    if traced is None:
      flat_fun, out_tree = flatten_fun(fun_dyn, in_tree)
      jaxpr, consts = closed_to_call_jaxpr(*trace_to_jaxpr_dynamic(flat_fun, in_avals))
      # Refs inside become values; a Ref closed over from an outer jit's trace
      # stays, for that jit's discharge, and so does a box made outside any
      # jit, passed in or closed over: the call is bound discharged
      # (state.bind_discharged).
      jaxpr = discharged(jaxpr, self.__name__, ref_inputs_ok=core.dynamic_trace is not None
                         or any(type(c) is state.Ref for c in [*consts, *args_flat]))
      # A NumPy array the function closes over is read now, as JAX does:
      # changing it later doesn't change what the compiled function computes.
      consts = [c.copy() if type(c) is np.ndarray else c for c in consts]
      typecheck_jaxpr(jaxpr)
      traced = _Traced(jaxpr, consts, out_tree())
      if spmd is not None:   # shardings or a shard_map: a program for many devices
        spmd.specialize(self, traced, dyn_args)
      self.trace_count += 1
      if not any(isinstance(c, Tracer) for c in consts):   # outer tracers go stale
        self._cache[key] = traced
    return traced, args_flat

  def _params(self, traced):
    params = dict(jaxpr=traced.jaxpr, num_consts=len(traced.consts), name=f"jit_{self.__name__}")
    if self.platform:
      params["platform"] = self.platform
    if traced.mesh is not None:
      params.update(mesh=traced.mesh, in_shardings=traced.in_shardings,
                    out_shardings=traced.out_shardings)
    return params

  def __call__(self, *args, **kwargs):
    sig = _fast_signature(args) if not (self.static_argnums or kwargs) else None
    hit = self._fast.get(sig)
    if hit is not None and core.hooks.quiet():
      return self._call_fast(hit, args)
    traced, args_flat = self._specialize(args, kwargs)
    outs = xla_call_p.bind(*traced.consts, *args_flat, **self._params(traced))
    if (sig is not None and not any(isinstance(c, (Tracer, state.Ref)) for c in traced.consts)
        and not batching.bound_axes() and traced.mesh is None):
      self._fast[sig] = traced, {}   # next time, take the fast path
    return tree_unflatten(traced.out_tree, outs)

  def _call_fast(self, hit, args):
    """A call whose arguments are all arrays (no pytrees, no static arguments,
    no tracers) with a signature seen before. It skips the flattening and the
    avals of `_specialize`, and `bind`'s dispatch: with no tracer anywhere,
    `bind` would call `_xla_call_impl`, which is what we do. Same result."""
    traced, exes = hit
    platform = self.platform or runtime.default_platform()
    exe = exes.get(platform)
    if exe is None:
      exe = exes[platform] = compile_jaxpr(traced.jaxpr, platform, f"jit_{self.__name__}")
    outs = execute_compiled(exe, [*traced.consts, *args], platform)
    return outs[0] if traced.out_tree is LEAF else tree_unflatten(traced.out_tree, outs)

  @property
  def num_specializations(self) -> int:
    """How many (argument types, static values) signatures were traced and kept."""
    return len(self._cache)

  def lower(self, *args) -> "Lowered":
    """Ahead of time: trace and lower for these arguments (or specs), no run."""
    traced, args_flat = self._specialize(args)
    return Lowered(traced, self._params(traced), args_flat)

  def __repr__(self):
    return f"jit({self.__name__})"


class Lowered:
  def __init__(self, traced: _Traced, params: dict, args_flat=()):
    self._traced, self._params = traced, params
    mesh = spmd.mesh_of(args_flat) if traced.mesh is None and spmd is not None else None
    if mesh is not None:   # no shardings, but arguments on many devices: run there
      n, replicated = len(traced.consts), spmd.NamedSharding(mesh, spmd.P())
      self._params = params = dict(
          params, mesh=mesh, in_shardings=[replicated] * n + [None] * len(args_flat),
          out_shardings=[None] * len(traced.jaxpr.outvars))
    if "mesh" in params:   # each input's layout, as a call with these arguments
      self._params = dict(params, in_shardings=spmd.resolve_in_shardings(
          params["mesh"], params["in_shardings"], [*traced.consts, *args_flat]))

  @property
  def jaxpr(self) -> ClosedJaxpr:
    j = self._traced.jaxpr
    n = self._params["num_consts"]
    return ClosedJaxpr(Jaxpr(j.invars[:n], j.invars[n:], j.eqns, j.outvars),
                       self._traced.consts)

  def as_text(self) -> str:
    """The StableHLO module we hand to XLA."""
    if "mesh" in self._params:
      p = self._params
      return spmd.lower_spmd(self._traced.jaxpr, p["name"], p["mesh"], p["in_shardings"],
                             p["out_shardings"])
    return lowering.lower_jaxpr(discharged(self._traced.jaxpr), self._params["name"])

  def compile(self) -> "Compiled":
    return Compiled(self._traced, self._params)


class Compiled:
  def __init__(self, traced: _Traced, params: dict):
    self._traced, self._params = traced, params
    self.platform = _platform(params)
    if "mesh" in params:   # compiled for a mesh, partitioned by XLA
      self._exe = spmd.program(traced.jaxpr, params["name"], params["mesh"],
                               params["in_shardings"], params["out_shardings"], self.platform)
    else:
      self._exe = compile_jaxpr(traced.jaxpr, self.platform, params["name"])

  def as_text(self) -> str:
    """XLA's optimized HLO: what actually runs, after fusion (for a mesh, the
    program each device runs, after partitioning)."""
    return self._exe.hlo_text()

  def cost_analysis(self) -> dict:
    return self._exe.cost_analysis()

  def memory_analysis(self):
    """XLA's buffer sizes for this program (runtime.MemoryStats)."""
    return self._exe.memory_analysis()

  def __call__(self, *args):
    """Run the compiled program. Unlike `jit`, it never retraces, so the
    arguments must have exactly the types it was compiled for."""
    args_flat, _ = tree_flatten(args)
    n = self._params["num_consts"]
    expected = self._traced.jaxpr.in_avals[n:]
    if len(args_flat) != len(expected):
      raise TypeError(f"Compiled: expected {len(expected)} arrays, got {len(args_flat)}")
    for i, (x, want) in enumerate(zip(args_flat, expected)):
      got = shaped_abstractify(x)
      if got.shape != want.shape or got.dtype != want.dtype:
        raise TypeError(f"Compiled: argument {i} is {got.str_short()} but this program "
                        f"was compiled for {want.str_short()}; call jit(f) instead, "
                        "which compiles a new version for new types.")
    outs = xla_call_p.bind(*self._traced.consts, *args_flat, **self._params)
    return tree_unflatten(self._traced.out_tree, outs)


# --- xla_call under partial evaluation and transposition (Part 4) -------------------------------

from . import partial_eval as pe   # noqa: E402  (Part 4 extends Part 3's rules)
from .jaxpr import JaxprEqn, Var   # noqa: E402


def _xla_call_partial_eval(trace, tracers, *, jaxpr, num_consts, **params):
  """Split the jitted jaxpr: the known part runs now, compiled; the unknown part
  is staged as a second xla_call on the residuals, so it stays compiled too."""
  unknowns = [t.pval.is_unknown for t in tracers]
  jaxpr1, jaxpr2, out_unknowns, num_res = pe.partial_eval_jaxpr(jaxpr, unknowns)
  known_in = [t.pval.const for t in tracers if t.pval.is_known]
  params = transformed(params)
  n_known_out = len(jaxpr1.outvars) - num_res
  jaxpr1, forwarded = _forward_inputs(jaxpr1, num_res)
  outs1_res = xla_call_p.bind(*known_in, jaxpr=jaxpr1, num_consts=0, **params)
  outs1, computed = outs1_res[:n_known_out], iter(outs1_res[n_known_out:])
  residuals = [next(computed) if f is None else known_in[f] for f in forwarded]
  res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
  unknown_in = [t for t in tracers if t.pval.is_unknown]
  outs2 = trace.stage(xla_call_p, res_tracers + unknown_in,
                      dict(params, jaxpr=jaxpr2, num_consts=0),
                      [x.aval for x in jaxpr2.outvars])
  known_outs, unknown_outs = iter(outs1), iter(outs2)
  return [next(unknown_outs) if uk else trace.pure(next(known_outs)) for uk in out_unknowns]


pe.partial_eval_rules[xla_call_p] = _xla_call_partial_eval


def _forward_inputs(jaxpr1, num_res):
  """The known jaxpr without the residuals that are just its inputs: those are
  passed on as they are, not returned by the compiled call (JAX does the same).
  Returns it, and for each residual the index of that input, or None."""
  n_out = len(jaxpr1.outvars) - num_res
  index = {v: i for i, v in enumerate(jaxpr1.invars)}
  res = jaxpr1.outvars[n_out:]
  forwarded = [index.get(v) if type(v) is Var else None for v in res]
  outvars = jaxpr1.outvars[:n_out] + [v for v, f in zip(res, forwarded) if f is None]
  return Jaxpr(jaxpr1.constvars, jaxpr1.invars, jaxpr1.eqns, outvars), forwarded


def _xla_call_partial_eval_jaxpr(unknowns, eqn):
  """The same split, for an xla_call equation inside a jaxpr being split. A
  residual that is one of its known inputs is that input, outside too."""
  jaxpr1, jaxpr2, out_unknowns, num_res = pe.partial_eval_jaxpr(eqn.params["jaxpr"], unknowns)
  ins1 = [x for x, uk in zip(eqn.inputs, unknowns) if not uk]
  ins2 = [x for x, uk in zip(eqn.inputs, unknowns) if uk]
  outs1 = [v for v, uk in zip(eqn.out_binders, out_unknowns) if not uk]
  outs2 = [v for v, uk in zip(eqn.out_binders, out_unknowns) if uk]
  jaxpr1, forwarded = _forward_inputs(jaxpr1, num_res)
  residuals = [Var(v.aval) if f is None else ins1[f]
               for v, f in zip(jaxpr2.invars[:num_res], forwarded)]
  params = transformed(eqn.params)
  computed = [r for r, f in zip(residuals, forwarded) if f is None]
  eqn1 = JaxprEqn(xla_call_p, ins1, dict(params, jaxpr=jaxpr1, num_consts=0),
                  outs1 + computed)
  eqn2 = JaxprEqn(xla_call_p, residuals + ins2, dict(params, jaxpr=jaxpr2, num_consts=0),
                  outs2)
  return eqn1, eqn2, out_unknowns, residuals


pe.partial_eval_jaxpr_rules[xla_call_p] = _xla_call_partial_eval_jaxpr


def _xla_call_transpose(cts, *invals, jaxpr, num_consts, **params):
  undefined = tuple(ad.is_undefined_primal(x) for x in invals)
  t_jaxpr, t_consts = ad.transpose_jaxpr(jaxpr, undefined)
  residuals = [x for x in invals if not ad.is_undefined_primal(x)]
  cts = [ad.instantiate_zeros(ct) for ct in cts]
  outs = iter(xla_call_p.bind(*t_consts, *residuals, *cts, jaxpr=t_jaxpr,
                              num_consts=len(t_consts), **transformed(params)))
  return [next(outs) if u else None for u in undefined]


ad.transpose_rules[xla_call_p] = _xla_call_transpose

