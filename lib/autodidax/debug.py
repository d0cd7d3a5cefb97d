"""`autodidax.debug`: printing and callbacks that work under every
transformation (`jax.debug`). See autodidax.callback for how."""
from __future__ import annotations

import builtins
import string

import numpy as np

from .api_util import shaped_abstractify
from .callback import debug_callback as callback  # noqa: F401
from .tree_util import tree_flatten, tree_unflatten


def print(fmt: str, *args, ordered: bool = False, **kwargs):  # noqa: A001
  """`fmt.format(*args, **kwargs)`, printed with the values the program
  computes: now when run eagerly, when XLA runs it under `jit`. As in JAX,
  arguments that aren't arrays (a string, say) are printed as they are, the
  NumPy print options in force when it is traced are the ones used, and a
  format that leaves an argument unused is refused at once."""
  placeholders = _check_format(fmt, args, kwargs)
  leaves, tree = tree_flatten((args, kwargs))
  static = {i: x for i, x in enumerate(leaves) if not _is_array(x)}
  options = np.get_printoptions()   # when traced, as in JAX

  def show(*arrays):
    it = iter(arrays)
    a, k = tree_unflatten(tree, [static[i] if i in static else _Shown(next(it))
                                 for i in range(len(leaves))])
    if placeholders:
      with np.printoptions(**options):
        builtins.print(fmt.format(*a, **k))
    else:   # as JAX: the format, then the arguments, in the print options of now
      builtins.print(" ".join((fmt, *map(str, a))))
  callback(show, *[x for i, x in enumerate(leaves) if i not in static], ordered=ordered)


def _is_array(x) -> bool:
  try:
    shaped_abstractify(x)
    return True
  except TypeError:
    return False


class _Checker(string.Formatter):
  """Formats nothing; says which arguments the format leaves unused."""

  def __init__(self, fmt: str):
    self.fmt = fmt

  def format_field(self, value, format_spec):
    return ""

  def check_unused_args(self, used, args, kwargs):
    unused = [i for i in range(len(args)) if i not in used]
    if unused:
      raise ValueError(
          f"Unused positional arguments to `debug.print`: argument(s) {unused} of "
          f"{len(args)} have no placeholder in {self.fmt!r}. Add a `{{}}` for each, or "
          "leave them out.")
    unused_kw = [k for k in kwargs if k not in used]
    if unused_kw:
      raise ValueError(
          f"Unused keyword arguments to `debug.print`: {unused_kw} have no placeholder "
          f"in {self.fmt!r}. Name them in the format (`{{{unused_kw[0]}}}`); an "
          'f-string (f"{x}") is formatted before debug.print sees it: pass a plain string.')


def _check_format(fmt, args, kwargs) -> bool:
  """As JAX does when tracing: a missing argument is str.format's KeyError or
  IndexError, one the format doesn't use a ValueError. Returns whether the
  format has placeholders, by JAX's rule: its first field comes before any
  literal brace. A format that doesn't ("{{x}} = {x}") is printed as it is,
  followed by the arguments, and can't take keyword arguments."""
  if not isinstance(fmt, str):
    raise TypeError(f"debug.print: the format must be a string, got {fmt!r}")
  _Checker(fmt).format(fmt, *args, **kwargs)
  _, field, *_ = next(iter(string.Formatter().parse(fmt)), (None, None))
  if field is None and kwargs:
    raise AssertionError(
        f"debug.print: JAX reads the format {fmt!r} as having no placeholders (it "
        "starts with a literal brace, `{{`), and then can't place keyword arguments: "
        "start the format with a placeholder or text before the braces.")
  return field is not None


class _Shown:
  """A printed array: its str is NumPy's, its repr JAX's `Array(..., dtype=...)`
  (as in a tuple or a dict); indexing, attributes and format specs are NumPy's."""

  def __init__(self, x):
    self.x = np.asarray(x)

  def __str__(self):
    return str(self.x)

  def __repr__(self):
    body = np.array2string(self.x, separator=", ", prefix="Array(", suffix=",")
    return f"Array({body}, dtype={self.x.dtype.name})"

  def __format__(self, spec):
    return format(self.x[()] if self.x.ndim == 0 else self.x, spec)

  def __getitem__(self, i):
    return self.x[i]

  def __getattr__(self, name):
    return getattr(self.x, name)
