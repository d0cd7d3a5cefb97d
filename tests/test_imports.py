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
