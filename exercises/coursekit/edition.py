"""The learner edition of the library: the reference library without an exercise's answers.

An exercise names what it asks the learner to write (`removes` in its probe,
copied into its statement cell's metadata by `make exercises`), as
`"module:qualname"` targets mapped to the name of the learner's answer:

    removes={"autodidax.core:full_raise": "full_raise"}

`build` copies `lib/autodidax` and replaces each target's definition, source
and all, with a slot of the same name. A slot looks up the learner's answer
by name in the notebook's namespace each time it is called, and raises
"Exercise 1.1 asks you to write this" while there is none. So inside the
grader's sandbox the reference code for the exercise is simply not there: an
answer that delegates to the library calls the learner's own answer back.
"""
from __future__ import annotations

import ast
import compileall
import hashlib
import shutil
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib" / "autodidax"

SLOTS_MODULE = '''"""Slots of the learner edition (written by coursekit.edition)."""
NAMESPACE = {}   # the notebook's globals, set by coursekit.runner


class ExerciseNotDone(NotImplementedError):
  pass


def answer(exercise, target, name):
  fn = NAMESPACE.get(name) if name else None
  if fn is None:
    raise ExerciseNotDone(
        f"Exercise {exercise} asks you to write this ({target}): "
        + (f"define `{name}` in your notebook" if name else
           "the library's own is removed while this exercise is graded; write your own"))
  return fn
'''


class EditionError(Exception):
  """A target names no function of the library."""


def _find(tree: ast.Module, qualname: str):
  body, node = tree.body, None
  for part in qualname.split("."):
    node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                    ast.ClassDef)) and n.name == part), None)
    if node is None:
      return None
    body = node.body
  return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _slot(node, exercise: str, target: str, name: str | None, indent: str, method: bool) -> list[str]:
  call = f"__import__('autodidax._slots', fromlist=['_']).answer({exercise!r}, {target!r}, {name!r})"
  args = "self, *args, **kwargs" if method else "*args, **kwargs"
  fwd = "self, *args, **kwargs" if method else "*args, **kwargs"
  return [f"{indent}def {node.name}({args}):   # Exercise {exercise} asks you to write this\n",
          f"{indent}  return {call}({fwd})\n"]


def rewrite(source: str, targets: list[tuple[str, str, str | None]]) -> str:
  """`source` with each (qualname, exercise, answer name) function replaced by a slot."""
  tree = ast.parse(source)
  lines = source.splitlines(keepends=True)
  spans = []
  for qualname, exercise, name in targets:
    node = _find(tree, qualname)
    if node is None:
      raise EditionError(f"no function {qualname!r} to remove")
    is_method = "." in qualname and not any(
        isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    indent = lines[node.lineno - 1][:node.col_offset]
    spans.append((node.lineno - 1, node.end_lineno, _slot(node, exercise, qualname, name, indent,
                                                          is_method)))
  for start, end, new in sorted(spans, reverse=True):
    lines[start:end] = new
  return "".join(lines)


def targets_by_module(removes: dict[str, tuple[str, str | None]]) -> dict[str, list]:
  """{"autodidax.core:full_raise": ("1.1", "full_raise")} -> {"core": [("full_raise", "1.1", "full_raise")]}"""
  out: dict[str, list] = {}
  for target, (exercise, name) in removes.items():
    module, _, qualname = target.partition(":")
    if not module.startswith("autodidax") or not qualname:
      raise EditionError(f"bad target {target!r}: expected 'autodidax.module:function'")
    rel = module.split(".", 1)[1] if "." in module else "__init__"
    out.setdefault(rel, []).append((qualname, exercise, name))
  return out


def build(dest: Path, removes: dict[str, tuple[str, str | None]], lib: Path = LIB) -> Path:
  """Write the edition without `removes` into `dest/autodidax`; return that folder."""
  pkg = dest / "autodidax"
  shutil.copytree(lib, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  for rel, targets in targets_by_module(removes).items():
    path = pkg / (rel.replace(".", "/") + ".py")
    if not path.exists():
      path = pkg / rel.replace(".", "/") / "__init__.py"
    if not path.exists():
      raise EditionError(f"no module autodidax.{rel} for {targets}")
    path.write_text(rewrite(path.read_text(), targets))
  (pkg / "_slots.py").write_text(SLOTS_MODULE)
  compileall.compile_dir(str(pkg), quiet=1)
  return pkg


def fingerprint(lib: Path = LIB) -> str:
  """A hash of the library's sources (reference values are cached per library)."""
  h = hashlib.sha256()
  for path in sorted(lib.rglob("*.py")):
    h.update(str(path.relative_to(lib)).encode() + b"\0" + path.read_bytes())
  return h.hexdigest()[:16]
