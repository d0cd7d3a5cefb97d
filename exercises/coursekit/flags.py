"""Review flags: what a learner's code does that values can't judge.

The sandbox makes tampering pointless, but some answers are right for the
wrong reason: an exercise asks you to write a rule yourself, and the answer
calls JAX's. The grader flags such code for a human to look at. The scan works
on the syntax tree, so aliases don't hide anything (`import jax.numpy as q` is
an import of jax whatever it is called), and dynamic imports and code built at
run time are flagged as such. The sandbox's runner also reports which of these
modules the notebook's own cells really imported while they ran.
"""
from __future__ import annotations

import ast

from .runner import neutralize

FORBIDDEN = {"jax": "imports jax", "jaxlib": "imports jaxlib"}
DYNAMIC = {"__import__": "imports a module dynamically", "exec": "runs code built at run time",
           "eval": "evaluates code built at run time", "compile": "compiles code at run time"}
RISKY = {"importlib": "imports importlib (dynamic imports)", "ctypes": "imports ctypes",
         "subprocess": "runs other programs", "gc": "imports gc"}


def scan(source: str) -> list[str]:
  """Sorted review flags for one cell of a learner's code."""
  found = set()
  python = neutralize(source)
  if python.splitlines() != source.splitlines():
    found.add("uses IPython magics or shell commands")
  try:
    tree = ast.parse(python)
  except (SyntaxError, ValueError):
    return sorted(found)
  for node in ast.walk(tree):
    mods = []
    if isinstance(node, ast.Import):
      mods = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      mods = [node.module]
    for m in mods:
      top = m.split(".")[0]
      if top in FORBIDDEN:
        found.add(FORBIDDEN[top])
      elif top in RISKY:
        found.add(RISKY[top])
    if isinstance(node, ast.Call):
      fn = node.func
      name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
      if name in DYNAMIC:
        found.add(DYNAMIC[name])
      if name == "import_module":
        found.add(DYNAMIC["__import__"])
      for arg in node.args[:1]:   # __import__("jax"), import_module("jax.numpy")
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
            and arg.value.split(".")[0] in FORBIDDEN and name in ("__import__", "import_module"):
          found.add(FORBIDDEN[arg.value.split(".")[0]])
    if isinstance(node, ast.Attribute) and node.attr == "modules" and \
        isinstance(node.value, ast.Name) and node.value.id == "sys":
      found.add("reads sys.modules")
  return sorted(found)
