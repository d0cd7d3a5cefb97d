"""The import graph of a Python package, read from its source (never imported).

Nodes are dotted module names ("autodidax.control_flow" is that package's
`__init__.py`). An edge A -> B means that A imports B: `from . import b`,
`from .. import b`, `from ..b import y`, `from .b.c import y` or
`import top.b`, at the top of the file or deferred into a function body. A
deferred import still means that A needs B, so it counts: a cycle through one
is a cycle. Importing a submodule runs its package's `__init__` first, and a
name taken from a package that is not one of its submodules comes from the
`__init__`, so both are edges too.

`tests/test_imports.py` fails on any cycle this finds, and the book's page
"The library's map" draws the same graph, layer by layer.
"""
from __future__ import annotations

import ast
import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class Import:
  """One edge: `source` imports `target`, at `line` of `path`."""
  source: str
  target: str
  path: str
  line: int
  deferred: bool     # inside a function body: runs when the function is called

  def __str__(self):
    where = "inside a function" if self.deferred else "at import time"
    return f"{self.source} -> {self.target} ({self.path}:{self.line}, {where})"


def module_name(relpath: str, top: str) -> str:
  parts = [top, *pathlib.PurePosixPath(relpath).with_suffix("").parts]
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_statements(tree: ast.Module):
  """(statement, deferred) for every import in the module."""
  todo = [(node, False) for node in tree.body]
  while todo:
    node, deferred = todo.pop(0)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      yield node, deferred
      continue
    inside = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    todo += [(child, inside) for child in ast.iter_child_nodes(node)]


def imports(sources: dict[str, str], top: str) -> list[Import]:
  """Every edge among the modules in `sources` ({path relative to the package
  root: source}), in file order."""
  names = {module_name(p, top): p for p in sources}
  edges = []
  for name, path in names.items():
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}

    def need(target: str, from_names, node, deferred):
      """`target` is imported, then `from_names` are taken from it."""
      parts = target.split(".")
      found = [p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
               if p in names and p not in ancestors]
      subs = [f"{target}.{n}" for n in from_names if f"{target}.{n}" in names]
      found += subs
      if target in names and (target not in ancestors or len(subs) < len(from_names)):
        found.append(target)
      edges.extend(Import(name, t, path, node.lineno, deferred)
                   for t in dict.fromkeys(found) if t != name)

    for node, deferred in _import_statements(ast.parse(sources[path], path)):
      if isinstance(node, ast.Import):
        for a in node.names:
          if a.name.split(".")[0] == top:
            need(a.name, (), node, deferred)
      elif node.level == 0:
        if (node.module or "").split(".")[0] == top:
          need(node.module, [a.name for a in node.names], node, deferred)
      else:
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
        need(target, [a.name for a in node.names], node, deferred)
  return edges


def read_package(root: pathlib.Path) -> dict[str, str]:
  return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py"))}


def graph(edges: list[Import], sources: dict[str, str], top: str) -> dict[str, set[str]]:
  """{module: the modules it imports}, every module of `sources` a key."""
  g = {module_name(p, top): set() for p in sources}
  for e in edges:
    g[e.source].add(e.target)
  return g


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
  """One cycle in `g` as [a, b, ..., a], or None."""
  done, on_path = set(), []

  def visit(m):
    if m in on_path:
      return on_path[on_path.index(m):] + [m]
    if m in done:
      return None
    on_path.append(m)
    for dep in sorted(g.get(m, ())):
      if cycle := visit(dep):
        return cycle
    on_path.pop()
    done.add(m)
    return None

  for m in sorted(g):
    if cycle := visit(m):
      return cycle
  return None


def layers(g: dict[str, set[str]]) -> dict[str, int]:
  """Each module's layer: 0 for a module that imports none of the others, else
  one more than the highest layer it imports. Needs an acyclic `g`."""
  if cycle := find_cycle(g):
    raise ValueError(f"no layers: the imports go round in a cycle: {' -> '.join(cycle)}")
  level: dict[str, int] = {}

  def of(m):
    if m not in level:
      level[m] = 1 + max((of(d) for d in g[m]), default=-1)
    return level[m]

  for m in g:
    of(m)
  return level
