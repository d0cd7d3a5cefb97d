"""A notebook cell's code as Python: its lines as Python numbers them, its IPython
syntax (`%magic`, `!shell`) read by IPython's own transformer, and its syntax tree.

Inside the sandbox, the runner executes the cells through `neutralize`; outside, the
grader reads the same cells with `parse` (which exercise needs which definitions, the
review flags, similarity), so both sides read a cell alike. Pure functions of the
text, with the standard library and IPython only.
"""
from __future__ import annotations

import ast
import functools
import re

_BODY_MAGICS = ("%%time", "%%timeit", "%%capture")   # cell magics whose body runs as is
LINE_END = re.compile(r"\r\n|\r|\n")   # Python's own line ends (not str.splitlines's U+2028, ...)


def lines(source: str) -> list[str]:
  """A cell's lines as Python numbers them."""
  return LINE_END.split(source)


TREES: dict = {}   # source -> its tree, or why it has none: `parse`'s, for one notebook at a time


def parse(source: str):
  """A cell's syntax tree (its IPython syntax read as IPython reads it), or the exception
  that says why it has none. The grader reads a cell for each exercise and for review:
  it clears `TREES` for each notebook, so each cell is parsed once."""
  python = neutralize(source)   # which parses Python once, and keeps its tree
  if source not in TREES:
    try:
      TREES[source] = ast.parse(python)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
      TREES[source] = e
  return TREES[source]


@functools.lru_cache(maxsize=256)
def neutralize(source: str) -> str:
  """Python for a cell written for IPython. Python is left as it is; else IPython's own
  transformer reads the cell's logical lines (`!cmd`, `x = !cmd`, `%magic`, `obj?`) and
  turns them into calls to `get_ipython()`, which the runner answers with nothing.
  A `%%time` cell is its body; any other cell magic, none of the cell. Line numbers stay."""
  try:
    TREES[source] = ast.parse(source)
    return source
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    pass
  first, *rest = lines(source)
  if first.lstrip().startswith("%%"):
    return neutralize("\n".join(["", *rest])) if first.split()[0] in _BODY_MAGICS else "pass"
  try:
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source)
  except Exception:  # noqa: BLE001 (no IPython, or a cell it can't read: Python reports why)
    return source


