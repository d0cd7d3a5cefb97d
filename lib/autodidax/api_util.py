"""Helpers of the user-facing transformations that `api`, `xla`,
`control_flow` and others share: the abstract value of an argument, and
static arguments. (As jax/_src/api_util.py.)"""
from __future__ import annotations

from .core import ShapedArray, Tracer, array_types, get_aval, raise_to_shaped


class TransformationError(ValueError):
  """A transformation was called with arguments it can't use."""


def split_static(fun, args, static, kwargs=None, static_names=()):
  """A function of the non-static arguments only, with the static ones bound;
  the traced arguments; and the static values. Keyword arguments not named
  in `static_names` are traced, as one more argument: a dict."""
  kwargs = kwargs or {}
  if not kwargs and any(not -len(args) <= i < len(args) for i in static):
    raise TransformationError(
        f"static_argnums={tuple(static)} but the function got {len(args)} arguments")
  static = {i % len(args) for i in static if -len(args) <= i < len(args)}
  static_kw = {k: v for k, v in kwargs.items() if k in static_names}
  dyn_kw = {k: v for k, v in kwargs.items() if k not in static_names}
  dyn_args = tuple(a for i, a in enumerate(args) if i not in static)

  def fun_dyn(*dyn):
    it = iter(dyn)
    pos = [args[i] if i in static else next(it) for i in range(len(args))]
    return fun(*pos, **static_kw, **(next(it) if dyn_kw else {}))
  statics = (*(args[i] for i in sorted(static)), *sorted(static_kw.items()))
  return fun_dyn, dyn_args + ((dyn_kw,) if dyn_kw else ()), statics


def shaped_abstractify(x):
  """The abstract value a traced argument stands for (never concrete)."""
  if isinstance(x, ShapedArray) or (
      hasattr(x, "shape") and hasattr(x, "dtype") and type(x) not in array_types
      and not isinstance(x, Tracer)):
    return ShapedArray(x.shape, x.dtype, getattr(x, "weak_type", False))
  return raise_to_shaped(get_aval(x))
