"""autodidax is built from scratch: only `runtime.py`, the single module that
talks to the XLA runtime, may import jax or jaxlib."""
import ast
import pathlib

import pytest

import autodidax

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
  assert {"core.py", "lax.py", "ad.py", "batching.py", "api.py"} <= names


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


def test_no_import_cycles():
  graph = {p.stem: {m for m, _ in library_imports(p.read_text()) if m in SUBMODULES} - {p.stem}
           for p in MODULES if p.name != "__init__.py"}
  done, on_path = set(), []

  def visit(m):
    if m in on_path:
      raise AssertionError(f"import cycle: {' -> '.join(on_path[on_path.index(m):] + [m])}")
    if m in done:
      return
    on_path.append(m)
    for dep in sorted(graph[m]):
      visit(dep)
    on_path.pop()
    done.add(m)

  for m in sorted(graph):
    visit(m)


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
