"""`when(cond)`: run the decorated function only where `cond` holds (JAX's `pl.when`)."""
from __future__ import annotations

from ..control_flow.conditionals import cond as _cond


def when(condition):
  """As a decorator, `@when(program_id(1) == 0)` runs the function at once,
  under a `cond`, for its effect on the kernel's Refs. A Python bool decides
  now, with nothing staged."""
  def decorator(f):
    if isinstance(condition, bool):
      if condition:
        f()
      return None
    _cond(condition, lambda: (f(), None)[1], lambda: None)
    return None
  return decorator
