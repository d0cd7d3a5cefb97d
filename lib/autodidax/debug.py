"""`autodidax.debug`: printing and callbacks that work under every
transformation (`jax.debug`). See autodidax.callback for how."""
from __future__ import annotations

import builtins

from .callback import debug_callback as callback  # noqa: F401


def print(fmt: str, *args, ordered: bool = False, **kwargs):  # noqa: A001
  """`fmt.format(*args, **kwargs)`, printed with the values the program
  computes: now when run eagerly, when XLA runs it under `jit`."""
  callback(lambda *a, **k: builtins.print(fmt.format(*a, **k)), *args, ordered=ordered,
           **kwargs)

