"""Tracing calls: a decorator that prints who calls which rule, with what."""
from __future__ import annotations

import functools

import numpy as np

from .. import core
from ..core import Tracer
from .draw import short


_call_depth = 0   # how many traced calls are running (the indentation)
_tracing = True   # whether `trace` prints; see `tracing`


class tracing:
  """`viz.tracing(False)` silences every `trace` decorator, `viz.tracing(True)`
  turns them back on; as a `with` block, the old setting returns at its end."""

  def __init__(self, enabled: bool):
    global _tracing
    self._prev, _tracing = _tracing, enabled

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    global _tracing
    _tracing = self._prev


def _pp_aval(a) -> str:
  if isinstance(a, core.ConcreteArray):
    return f"ConcreteArray({a.str_short()}, {pp_traced(a.val)})"
  return repr(a)


def pp_traced(x) -> str:
  """A value as `trace` prints it: tracers as their aval and interpreter."""
  if isinstance(x, Tracer):
    main = x._trace.main
    return f"Traced<{_pp_aval(x.aval)}>with<{main.trace_type.__name__} level={main.level}>"
  if isinstance(x, core.ShapedArray):
    return _pp_aval(x)
  if isinstance(x, tuple):
    return f"({', '.join(map(pp_traced, x))}{',' if len(x) == 1 else ''})"
  if isinstance(x, list):
    return f"[{', '.join(map(pp_traced, x))}]"
  if type(x) in (bool, int, float, str) or x is None:
    return str(x)
  if isinstance(x, np.generic):
    return str(x.item())
  if hasattr(x, "shape") and hasattr(x, "dtype"):   # NumPy and device arrays
    a = np.asarray(x)
    if a.ndim == 0:
      return str(a.item())
    return np.array2string(a, threshold=8) if a.size <= 8 else short(a)
  r = repr(x)
  return f"<{type(x).__name__}>" if " object at 0x" in r else r


def trace_note(msg: str):
  """Print `msg` at the indentation of the traced call that is running."""
  if _tracing:
    print("  " * _call_depth + msg)


def trace(name: str):
  """A decorator printing each call of a function and what it returns,
  indented by nesting, with tracers shown as their abstract value and their
  interpreter, e.g. `Traced<ShapedArray(float64[])>with<JVPTrace level=1>`:

      @viz.trace("multiply_add_impl")
      def multiply_add_impl(x, y, z): ...

  The indentation is restored when the function raises. `viz.tracing(False)`
  silences it; `viz.trace_note(msg)` prints a note at the current indentation.
  """

  def decorate(fun):
    @functools.wraps(fun)
    def traced(*args, **kwargs):
      global _call_depth
      if not _tracing:
        return fun(*args, **kwargs)
      shown = [pp_traced(a) for a in args] + [f"{k}={pp_traced(v)}" for k, v in kwargs.items()]
      trace_note(f"call {name}({', '.join(shown)})")
      _call_depth += 1
      try:
        out = fun(*args, **kwargs)
      except BaseException as e:
        _call_depth -= 1
        trace_note(f"|<- {name} raised {type(e).__name__}")
        raise
      _call_depth -= 1
      trace_note(f"|<- {name} = {pp_traced(out)}")
      return out
    return traced
  return decorate
