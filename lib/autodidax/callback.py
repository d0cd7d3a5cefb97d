"""Calling Python from a staged program: `debug.callback`, `pure_callback`
and `io_callback`.

Each is a primitive whose parameter is the Python function. Eagerly, its impl
calls it. Staged, it stays in the jaxpr, with an effect unless it is pure,
and lowers to a custom call that XLA's runtime sends back to Python
(runtime.callback_target) while the compiled program runs.
"""
from __future__ import annotations

import numpy as np

from . import ad, batching, effects, lowering, runtime
from . import primitives as lax
from .core import Primitive, ShapedArray, abstract_eval_rules, impl_rules
from .tree_util import tree_flatten, tree_unflatten


class ShapeDtypeStruct:
  """The shape and dtype of a callback's result (JAX's `jax.ShapeDtypeStruct`)."""

  def __init__(self, shape, dtype):
    self.shape, self.dtype = tuple(shape), np.dtype(dtype)

  def __repr__(self):
    return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"


def _flat_callback(callback, in_tree):
  """`callback` on flat NumPy arrays, given its pytree of arguments."""
  def flat(*arrays):
    args, kwargs = tree_unflatten(in_tree, [np.asarray(a) for a in arrays])
    return callback(*args, **kwargs)
  flat.__qualname__ = getattr(callback, "__qualname__", "callback")
  return flat


# --- debug.callback: for its effect only -------------------------------------------------

debug_callback_p = Primitive("debug_callback", multiple_results=True)


def debug_callback(callback, *args, ordered: bool = False, **kwargs):
  """Call `callback(*args, **kwargs)` on concrete arrays when the program runs."""
  flat, in_tree = tree_flatten((args, kwargs))
  effect = effects.ordered_debug_effect if ordered else effects.debug_effect
  debug_callback_p.bind(*flat, callback=_flat_callback(callback, in_tree), effect=effect)


def _debug_callback_impl(*args, callback, effect):
  callback(*args)
  return []


impl_rules[debug_callback_p] = _debug_callback_impl
abstract_eval_rules[debug_callback_p] = lambda *avals, callback, effect: []
effects.def_effects(debug_callback_p, lambda *avals, callback, effect: {effect})


def _debug_callback_jvp(primals, tangents, **params):
  debug_callback_p.bind(*primals, **params)   # the primal values only
  return [], []


ad.jvp_rules[debug_callback_p] = _debug_callback_jvp


def _debug_callback_vmap(axis_size, vals, dims, **params):
  """One call per batch element, in order, as JAX does."""
  for i in range(axis_size):
    debug_callback_p.bind(*(_element(x, d, i) for x, d in zip(vals, dims)), **params)
  return [], []


def _element(x, dim, i):
  if dim is batching.not_mapped:
    return x
  start = [0] * np.ndim(x)
  start[dim] = i
  limit = list(np.shape(x))
  limit[dim] = i + 1
  return lax.squeeze(lax.slice(x, start, limit), [dim])


batching.vmap_rules[debug_callback_p] = _debug_callback_vmap


def emit_host_callback(ctx, fn, operands, avals_in, avals_out, *, ordered: bool,
                       side_effect: bool) -> list[str]:
  """A custom call that runs `fn` on the host, returning its results' names.
  An ordered one takes the latest token and makes the next."""
  module = ctx.module
  module.host_callbacks.append(_checked(fn, avals_out))
  index = len(module.host_callbacks) - 1
  in_types = [lowering.mlir_type(a) for a in avals_in]
  out_types = [lowering.mlir_type(a) for a in avals_out]
  if ordered:
    operands, in_types = [ctx.current_token(), *operands], ["!stablehlo.token", *in_types]
    out_types = ["!stablehlo.token", *out_types]
    module.host_callbacks[index] = _with_token(module.host_callbacks[index])
  attrs = (f"{{api_version = 4 : i32, has_side_effect = {str(side_effect).lower()}, "
           f"backend_config = {{index = {index} : ui64}}}}")
  target = runtime.callback_target(getattr(module, "platform", None))
  name, n = ctx.fresh(), len(out_types)
  lhs = f"{name}:{n} = " if n > 1 else f"{name} = " if n else ""
  results = f"({', '.join(out_types)})" if n != 1 else out_types[0]
  ctx.emit(f"{lhs}stablehlo.custom_call @{target}({', '.join(operands)}) {attrs} : "
           f"({', '.join(in_types)}) -> {results}", result=False)
  names = [f"{name}#{i}" for i in range(n)] if n > 1 else [name] * n
  if ordered:
    ctx.token, names = names[0], names[1:]
  return names


def _checked(fn, avals_out):
  """`fn`, its results made arrays of the declared shapes and dtypes."""
  def call(*args):
    outs = fn(*args)
    outs = [np.asarray(o) for o in (outs or ())]
    _check_results(outs, avals_out)
    return tuple(np.asarray(o, a.dtype) for o, a in zip(outs, avals_out))
  return call


def _with_token(fn):
  return lambda token, *args: (token, *fn(*args))


def _check_results(outs, avals):
  if len(outs) != len(avals):
    raise RuntimeError(f"the callback returned {len(outs)} values; expected {len(avals)}")
  for i, (o, a) in enumerate(zip(outs, avals)):
    if np.shape(o) != a.shape:
      raise RuntimeError(f"Incorrect output shape for return value #{i}: "
                         f"Expected: {a.shape}, Actual: {np.shape(o)}")


def _debug_callback_lowering(ctx, *args, callback, effect):
  def no_results(*arrays):
    callback(*arrays)
  emit_host_callback(ctx, no_results, args, ctx.avals_in, [],
                     ordered=effects.is_ordered({effect}), side_effect=True)
  return []


lowering.lowering_rules[debug_callback_p] = _debug_callback_lowering


# --- pure_callback and io_callback: callbacks with results -------------------------------

pure_callback_p = Primitive("pure_callback", multiple_results=True)
io_callback_p = Primitive("io_callback", multiple_results=True)

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")


def _call_with_results(prim, callback, result_shape_dtypes, args, kwargs, **params):
  flat, in_tree = tree_flatten((args, kwargs))
  specs, out_tree = tree_flatten(result_shape_dtypes)   # structs are leaves
  avals = tuple(ShapedArray(tuple(s.shape), s.dtype) for s in specs)
  fn = _flat_callback(callback, in_tree)

  def flat_fn(*arrays):   # results flattened in the declared structure
    leaves, _ = tree_flatten(fn(*arrays))
    return leaves
  flat_fn.__qualname__ = fn.__qualname__
  outs = prim.bind(*flat, callback=flat_fn, result_avals=avals, **params)
  return tree_unflatten(out_tree, outs)


def pure_callback(callback, result_shape_dtypes, *args, vmap_method=None, **kwargs):
  """Call a pure Python function from staged code; its results are declared
  by `result_shape_dtypes`. XLA may skip or repeat a pure call."""
  if vmap_method is not None and vmap_method not in VMAP_METHODS:
    raise ValueError(f"vmap_method must be one of {VMAP_METHODS} or None; "
                     f"got {vmap_method!r}")
  return _call_with_results(pure_callback_p, callback, result_shape_dtypes, args, kwargs,
                            vmap_method=vmap_method)


def io_callback(callback, result_shape_dtypes, *args, ordered: bool = False, **kwargs):
  """Call a Python function with side effects from staged code."""
  return _call_with_results(io_callback_p, callback, result_shape_dtypes, args, kwargs,
                            ordered=ordered)


def _callback_impl(*args, callback, result_avals, **_):
  outs = [np.asarray(o) for o in callback(*map(np.asarray, args))]
  _check_results(outs, result_avals)
  return [np.asarray(o, a.dtype) for o, a in zip(outs, result_avals)]


def _pure_callback_abstract_eval(*avals, callback, result_avals, vmap_method):
  return list(result_avals)


def _io_callback_abstract_eval(*avals, callback, result_avals, ordered):
  return list(result_avals)


def _io_callback_effects(*avals, callback, result_avals, ordered):
  return {effects.ordered_io_effect if ordered else effects.io_effect}


for _p in (pure_callback_p, io_callback_p):
  impl_rules[_p] = _callback_impl
abstract_eval_rules[pure_callback_p] = _pure_callback_abstract_eval
abstract_eval_rules[io_callback_p] = _io_callback_abstract_eval
effects.def_effects(io_callback_p, _io_callback_effects)


def _no_jvp(message):
  def rule(primals, tangents, **params):
    raise ValueError(message)
  return rule


ad.jvp_rules[pure_callback_p] = _no_jvp(
    "Pure callbacks do not support JVP. Please use `custom_jvp` to use callbacks "
    "while taking gradients.")
ad.jvp_rules[io_callback_p] = _no_jvp("IO callbacks do not support JVP.")


def _pure_callback_vmap(axis_size, vals, dims, *, callback, result_avals, vmap_method):
  if vmap_method is None:
    raise NotImplementedError(
        "vmap is only supported for the pure_callback primitive when vmap_method is one "
        f"of {', '.join(map(repr, VMAP_METHODS))}. Got vmap_method=None.")
  batched = [ShapedArray((axis_size, *a.shape), a.dtype) for a in result_avals]
  if vmap_method == "sequential":
    return _sequential(pure_callback_p, axis_size, vals, dims, callback, result_avals,
                       vmap_method=vmap_method)
  # expand_dims: unbatched operands get a size-1 axis; broadcast_all: full size
  size = 1 if vmap_method == "expand_dims" else axis_size
  vals = [batching.move_batch_axis(axis_size, d, 0, x) if d is not batching.not_mapped
          else lax.broadcast(x, (size, *np.shape(x)), [0]) for x, d in zip(vals, dims)]
  outs = pure_callback_p.bind(*vals, callback=callback, result_avals=tuple(batched),
                              vmap_method=vmap_method)
  return outs, [0] * len(outs)


def _sequential(prim, axis_size, vals, dims, callback, result_avals, **params):
  """Call the callback once per batch element, on the host, and stack."""
  batched = tuple(ShapedArray((axis_size, *a.shape), a.dtype) for a in result_avals)
  vals = [batching.move_batch_axis(axis_size, d, 0, x) if d is not batching.not_mapped
          else x for x, d in zip(vals, dims)]
  mapped = [d is not batching.not_mapped for d in dims]

  def looped(*arrays):
    rows = [callback(*(a[i] if m else a for a, m in zip(arrays, mapped)))
            for i in range(axis_size)]
    return [np.stack([np.asarray(r[k], a.dtype) for r in rows])
            for k, a in enumerate(result_avals)]
  looped.__qualname__ = getattr(callback, "__qualname__", "callback")
  outs = prim.bind(*vals, callback=looped, result_avals=batched, **params)
  return outs, [0] * len(outs)


batching.vmap_rules[pure_callback_p] = _pure_callback_vmap


def _io_callback_vmap(axis_size, vals, dims, *, callback, result_avals, ordered):
  if ordered:
    raise ValueError("Cannot `vmap` ordered IO callback.")
  return _sequential(io_callback_p, axis_size, vals, dims, callback, result_avals,
                     ordered=ordered)


batching.vmap_rules[io_callback_p] = _io_callback_vmap


def _pure_callback_lowering(ctx, *args, callback, result_avals, vmap_method):
  return emit_host_callback(ctx, callback, args, ctx.avals_in, result_avals,
                            ordered=False, side_effect=False)


def _io_callback_lowering(ctx, *args, callback, result_avals, ordered):
  return emit_host_callback(ctx, callback, args, ctx.avals_in, result_avals,
                            ordered=ordered, side_effect=True)


lowering.lowering_rules[pure_callback_p] = _pure_callback_lowering
lowering.lowering_rules[io_callback_p] = _io_callback_lowering
