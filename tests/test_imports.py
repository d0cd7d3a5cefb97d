"""autodidax is built from scratch: only `runtime.py`, the single module that
talks to the XLA runtime, may import jax or jaxlib."""
import ast
import sys
import pathlib

import pytest

import autodidax

sys.path.insert(0, str(pathlib.Path(autodidax.__file__).parents[2] / "book" / "_ext"))
import import_graph as source_graph  # noqa: E402

LIB = pathlib.Path(autodidax.__file__).parent
MODULES = sorted(LIB.rglob("*.py"))
ALLOWED = {"runtime.py"}
FORBIDDEN = {"jax", "jaxlib"}


def jax_imports(source: str, filename: str = "<src>") -> list[str]:
  """The jax/jaxlib modules `source` imports, anywhere (also inside functions)."""
  found = []
  for node in ast.walk(ast.parse(source, filename)):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names = [node.module]
    elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
          and getattr(node.func, "id", getattr(node.func, "attr", None))
          in ("import_module", "__import__")
          and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str)):
      names = [node.args[0].value]   # importlib.import_module("jax.numpy")
    else:
      continue
    found += [n for n in names if n.split(".")[0] in FORBIDDEN]
  return found


def test_found_the_library():
  names = {p.name for p in MODULES}
  assert {"core.py", "primitives.py", "lax.py", "ad.py", "batching.py", "api.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_module_does_not_import_jax(path):
  if path.name in ALLOWED:
    pytest.skip("the XLA-runtime module may use jax/jaxlib")
  bad = jax_imports(path.read_text(), str(path))
  assert not bad, (f"{path.relative_to(LIB)} imports {bad}: autodidax is built "
                   "from scratch; only runtime.py may touch jax/jaxlib")


@pytest.mark.parametrize("src", [
    "import jax", "import jax.numpy as jnp", "import jaxlib", "from jax import lax",
    "from jax.numpy import sin", "import numpy, jax", "def f():\n  import jax\n",
    "from jaxlib.xla_client import Client", "import importlib\nimportlib.import_module('jax')",
])
def test_detector_catches(src):
  assert jax_imports(src)


@pytest.mark.parametrize("src", [
    "import numpy", "from . import jax_like", "from .jax import x", "import jaxtyping",
    "s = 'import jax'", "import ajax",
])
def test_detector_ignores(src):
  assert not jax_imports(src)


# --- The library's layout: no private names across modules, no import cycles,
# one way to register a rule -------------------------------------------------------

SUBMODULES = {p.stem for p in MODULES if p.name != "__init__.py"}


def library_imports(source: str) -> list[tuple[str, str | None]]:
  """(module, name) for every `from . import m` / `from .m import name` / `import
  autodidax.m`, anywhere in `source` (also inside functions); name is None for
  a whole module."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.ImportFrom) and node.level == 1:
      if node.module:
        found += [(node.module.split(".")[0], a.name) for a in node.names]
      else:
        found += [(a.name, None) for a in node.names]
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autodidax."):
      found += [(node.module.split(".")[1], a.name) for a in node.names]
  return found


def private_uses(source: str) -> list[str]:
  """Private names taken from another library module: imported by name, or
  read as `module._name` through a module imported as one."""
  imports = library_imports(source)
  aliases = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module:
      aliases |= {a.asname or a.name for a in node.names}
  bad = [f"{m}.{n}" for m, n in imports if n and n.startswith("_") and m in SUBMODULES]
  for node in ast.walk(ast.parse(source)):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in aliases and node.attr.startswith("_")
        and not node.attr.startswith("__")):
      bad.append(f"{node.value.id}.{node.attr}")
  return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_no_private_name_crosses_modules(path):
  bad = private_uses(path.read_text())
  assert not bad, f"{path.name} uses other modules' private names {bad}: make them public"


def test_private_and_cycle_detectors_catch():
  assert private_uses("from .api import _abstractify") == ["api._abstractify"]
  assert private_uses("from . import core\ncore._bind_observers") == ["core._bind_observers"]
  assert not private_uses("from . import core\ncore.bind\nx._trace")
  assert library_imports("def f():\n  from . import control_flow\n") == [("control_flow", None)]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_rules_are_registered_one_way(path):
  """Every rule table is filled with `table[prim] = rule`; JAX's spellings
  (def_impl, def_abstract_eval, register_lowering) exist for users only."""
  called = lambda f: getattr(f, "attr", getattr(f, "id", None))
  calls = [called(node.func) for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Call)
           and called(node.func) in ("def_impl", "def_abstract_eval", "register_lowering")]
  decorators = [ast.unparse(d) for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.FunctionDef) for d in node.decorator_list
                if "def_" in ast.unparse(d)]
  assert not calls and not decorators, (path.name, calls, decorators)


# --- Import cycles: what runs when a module is imported ------------------------------------------
# Nodes are dotted module names ("autodidax.control_flow" is the package's
# __init__.py). An edge A -> B means that importing A runs B first: a module-level
# `from . import b`, `from .. import b`, `from ..b import y`, `from .b.c import y`
# or `import autodidax.b`. Imports inside functions run later and are left out.

def module_name(relpath: str, top: str = "autodidax") -> str:
  parts = [top, *pathlib.PurePosixPath(relpath).with_suffix("").parts]
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_time_statements(tree: ast.Module):
  """The import statements that run when the module runs: at the top level,
  or under an if/try/with/for/class there, never inside a function."""
  todo = list(tree.body)
  while todo:
    node = todo.pop(0)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      yield node
    elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)
               or isinstance(c, ast.excepthandler)]


def import_graph(sources: dict[str, str], top: str = "autodidax") -> dict[str, set[str]]:
  """{module: the library modules and packages it imports at import time}, for
  `sources` = {path relative to the package root: source}."""
  names = {module_name(p, top): p for p in sources}
  graph = {}
  for name, path in names.items():
    is_pkg = path.endswith("__init__.py")
    package = name if is_pkg else name.rpartition(".")[0]
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    deps = set()

    def need(target: str, from_names=()):
      """`target` is imported, then `from_names` are taken from it. Each package
      on the way runs its __init__ first, unless we are inside it already; a
      name that is not a submodule comes from the package's __init__."""
      parts = target.split(".")
      deps.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
                  if p in names and p not in ancestors)
      subs = [f"{target}.{n}" for n in from_names if f"{target}.{n}" in names]
      deps.update(subs)
      if target in names and (target not in ancestors or len(subs) < len(from_names)):
        deps.add(target)

    for node in import_time_statements(ast.parse(sources[path], path)):
      if isinstance(node, ast.Import):
        for a in node.names:
          if a.name.split(".")[0] == top:
            need(a.name)
      elif node.level == 0:
        if (node.module or "").split(".")[0] == top:
          need(node.module, [a.name for a in node.names])
      else:
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
        need(target, [a.name for a in node.names])
    graph[name] = deps - {name}
  return graph


find_cycle = source_graph.find_cycle   # one cycle finder, shared with the book's map


def test_no_import_cycles():
  graph = import_graph({str(p.relative_to(LIB)): p.read_text() for p in MODULES})
  assert "autodidax.control_flow.loops" in graph["autodidax.control_flow"]
  cycle = find_cycle(graph)
  assert cycle is None, (f"import cycle: {' -> '.join(cycle)}. It works only by the order "
                         "of the import lines; move the shared piece so that one side "
                         "doesn't import the other")


@pytest.mark.parametrize("files, cycle", [
    ({"a.py": "from . import b", "b.py": "from .a import f"}, ["a", "b", "a"]),
    # a package's __init__ and a module that imports the package back
    ({"__init__.py": "", "cf/__init__.py": "from ..fc import f",
      "fc.py": "from .cf import g"}, ["cf", "fc", "cf"]),
    # `from .. import x`, `from ..x import y`, `import top.x`
    ({"p/__init__.py": "from .m import f", "p/m.py": "from .. import q",
      "q.py": "import top.p"}, ["p", "p.m", "q", "p"]),
    ({"p/__init__.py": "", "p/m.py": "from ..q import g",
      "q.py": "from top.p.m import f"}, ["p.m", "q", "p.m"]),
    # importing a submodule runs its package's __init__ first
    ({"p/__init__.py": "from ..q import g", "p/m.py": "",
      "q.py": "if True:\n  from .p.m import f"}, ["p", "q", "p"]),
    # a name taken from a package's __init__ (not a submodule) needs that __init__
    ({"__init__.py": "from .a import f\nflops = 1", "a.py": "from . import flops"},
     ["", "a", ""]),
    # no cycle: siblings inside a package; an import inside a function runs later
    ({"p/__init__.py": "from .m import f\nfrom .n import g", "p/m.py": "from .n import g",
      "p/n.py": "from .. import q", "q.py": "def f():\n  from .p import m"}, None),
])
def test_cycle_detector(files, cycle):
  found = find_cycle(import_graph(files, top="top"))
  short = lambda m: m.removeprefix("top").removeprefix(".")
  assert (found and [short(m) for m in found]) == cycle, found


# --- Counting deferred imports too (book/_ext/import_graph.py) ------------------------------------
# An import inside a function still means that its module needs the other one:
# a cycle through it is a cycle (issue 42), and there is none.

def _closing_edges(sources, top):
  edges = source_graph.imports(sources, top)
  g = source_graph.graph(edges, sources, top)

  def reaches(a, b):
    seen, todo = set(), [a]
    while todo:
      m = todo.pop()
      if m == b:
        return True
      if m not in seen:
        seen.add(m)
        todo += g[m]
    return False
  short = lambda m: m.removeprefix(top + ".")
  return {(short(e.source), short(e.target)): e for e in edges
          if e.deferred and reaches(e.target, e.source)}


def every_import_cycle_message(sources, top="autodidax"):
  """None, or what a cycle in the full graph (deferred imports counted) is,
  naming the import that closes it, with its file and line."""
  edges = source_graph.imports(sources, top)
  cycle = source_graph.find_cycle(source_graph.graph(edges, sources, top))
  if cycle is None:
    return None
  closing = [e for e in edges if (e.source, e.target) == (cycle[-2], cycle[-1])]
  return (f"import cycle, counting imports inside functions: {' -> '.join(cycle)}; the "
          f"last step is {closing[0]}. Move what both sides need below them; an import "
          "inside a function is no way around a cycle.")


def test_no_import_cycle_counting_deferred_imports():
  sources = {str(p.relative_to(LIB)): p.read_text() for p in MODULES}
  assert every_import_cycle_message(sources) is None, every_import_cycle_message(sources)


def test_library_imports_inside_functions_only_keep_heavy_dependencies_away():
  """Deferred imports of the library's own modules: none (they'd reach up or
  dodge a cycle). Deferred imports of others: jax/jaxlib (runtime.py), graphviz
  and ipywidgets (viz), each with a comment on its line."""
  sources = {str(p.relative_to(LIB)): p.read_text() for p in MODULES}
  own = [str(e) for e in source_graph.imports(sources, "autodidax") if e.deferred]
  assert not own, f"library modules imported inside functions: {own}"
  heavy = ("jax", "jaxlib", "graphviz", "ipywidgets")
  for rel, source in sources.items():
    lines = source.splitlines()
    for node, deferred in source_graph._import_statements(ast.parse(source)):
      if not deferred:
        continue
      names = ([a.name for a in node.names] if isinstance(node, ast.Import)
               else [node.module or ""])
      assert all(n.split(".")[0] in heavy for n in names), (
          f"{rel}:{node.lineno} imports {names} inside a function: import it at the top")
      k = node.lineno - 1   # this import, or one of the imports just above it, says why
      while "#" not in lines[k] and lines[k - 1].strip().startswith(("import ", "from ")):
        k -= 1
      assert "#" in lines[k], f"{rel}:{node.lineno}: say in a comment why this import is deferred"


def test_cycle_message_names_the_closing_import():
  files = {"__init__.py": "", "a.py": "from . import b", "b.py": "def f():\n  from . import a\n"}
  msg = every_import_cycle_message(files, "top")
  assert "top.a -> top.b -> top.a" in msg and "b.py:2, inside a function" in msg, msg
  assert every_import_cycle_message({"__init__.py": "", "a.py": "from . import b",
                                     "b.py": ""}, "top") is None


def test_deferred_cycle_detector():
  files = {"__init__.py": "", "a.py": "from . import b", "b.py": "def f():\n  from . import a\n",
           "c.py": "def f():\n  from . import a\n"}
  closing = _closing_edges(files, "top")
  assert set(closing) == {("b", "a")} and closing[("b", "a")].deferred
  assert source_graph.find_cycle(source_graph.graph(
      source_graph.imports(files, "top"), files, "top")) == ["top.a", "top.b", "top.a"]


# --- __init__.py files only hand names on (issue 42) ----------------------------------------------

def init_problems(source: str) -> list[str]:
  """The statements of an __init__.py that do more than hand names on: all but
  imports, `__all__ = [...]`, a docstring and `def __getattr__`."""
  bad = []
  for node in ast.parse(source).body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      continue
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
      continue   # the docstring
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and getattr(node.targets[0], "id", None) == "__all__"
        and isinstance(node.value, (ast.List, ast.Tuple))):
      continue
    if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
      continue
    bad.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
  return bad


INITS = sorted(p for p in LIB.rglob("__init__.py"))


@pytest.mark.parametrize("path", INITS, ids=lambda p: str(p.relative_to(LIB)))
def test_init_only_hands_names_on(path):
  bad = init_problems(path.read_text())
  assert not bad, (f"{path.relative_to(LIB)} does more than import and re-export: {bad}. "
                   "Register rules and set attributes in the module that defines them.")


def test_init_detector_catches():
  assert init_problems('"""doc"""\nfrom . import a\n__all__ = ["a"]\n'
                       'def __getattr__(n):\n  raise AttributeError(n)\n') == []
  assert init_problems("for n in ('a',):\n  setattr(lax, n, 1)\n")
  assert init_problems("core.sharding_rules[p] = rule\n")
  assert init_problems("lax.pcast = pcast\n")
  assert init_problems("keep_body_types(cond_p)\n")
