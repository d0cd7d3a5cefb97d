"""The learner edition of the library: the reference library without an exercise's answers.

An exercise names what it asks the learner to write (`removes` in its probe,
copied into its statement cell's metadata by `make exercises`), as
`"module:qualname"` targets mapped to the name of the learner's answer, or to
None for a helper that holds the answer's logic or another function that
computes it:

    removes={"autodidax.api:jacfwd": "jacfwd", "autodidax.api:jacrev": None}

`build` copies `lib/autodidax` and replaces each target's definition, source
and all, with a slot of the same name (`coursekit.learner.answers`): it forwards to
the learner's function of that name in the notebook's namespace, and refuses,
naming the library function and the exercise, when the learner's code calls
it or when it stands for no answer. So inside the grader's sandbox the
reference code for the exercise is simply not there.

`package` puts an edition and the grader's runner and probes into one zip
file, with bytecode compiled in advance: the sandbox gets it through a file
descriptor and imports from it (`zipimport`), so no folder of the grader's
shows in the sandbox.
"""
from __future__ import annotations

import ast
import hashlib
import py_compile
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..learner import answers

LIB = Path(__file__).resolve().parents[3] / "lib" / "autodidax"
KIT = Path(__file__).resolve().parents[1]   # the coursekit package
# What a sandbox needs of coursekit (paths in the package): the runner and what it imports
# (`grader/sandboxed/`), the probes and what they import (`learner/`), and their packages.
KIT_FILES = ("__init__.py", "_lean_imports.py", "runner.py", "checks.py", "probe.py", "answers.py",
             "learner/__init__.py", "learner/answers.py",
             "learner/checks.py", "learner/probe.py", "grader/__init__.py",
             "grader/sandboxed/__init__.py", "grader/sandboxed/cells.py",
             "grader/sandboxed/runner.py")
PROBES = KIT / "learner" / "probes"


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


def rewrite(source: str, targets: list[tuple[str, tuple]]) -> str:
  """`source` with each (qualname, info) function replaced by a slot; `info` is
  (exercise, target, answer name or None, the exercise's answer names)."""
  tree = ast.parse(source)
  lines = source.splitlines(keepends=True)
  spans = []
  for qualname, info in targets:
    node = _find(tree, qualname)
    if node is None:
      raise EditionError(f"no function {qualname!r} to remove")
    is_method = "." in qualname and not any(
        isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    indent = lines[node.lineno - 1][:node.col_offset]
    slot = answers.slot_source(node.name, info, method=is_method, indent=indent)
    spans.append((node.lineno - 1, node.end_lineno, [slot]))
  for start, end, new in sorted(spans, reverse=True):
    lines[start:end] = new
  return "".join(lines)


def targets_by_module(removes: dict[str, tuple]) -> dict[str, list]:
  """{"autodidax.core:full_raise": info} -> {"core": [("full_raise", info)]}, where
  info is (exercise, answer name or None[, answer names])."""
  out: dict[str, list] = {}
  for target, info in removes.items():
    module, _, qualname = target.partition(":")
    if not module.startswith("autodidax") or not qualname:
      raise EditionError(f"bad target {target!r}: expected 'autodidax.module:function'")
    exercise, name, *rest = info
    rel = module.split(".", 1)[1] if "." in module else "__init__"
    out.setdefault(rel, []).append(
        (qualname, (exercise, target, name, tuple(rest[0]) if rest else (name,) if name else ())))
  return out


def build(dest: Path, removes: dict[str, tuple], lib: Path = LIB) -> Path:
  """Write the edition without `removes` ({target: (exercise, name[, answers])}) into
  `dest/autodidax`; return that folder."""
  pkg = dest / "autodidax"
  shutil.copytree(lib, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  for rel, targets in targets_by_module(removes).items():
    path = pkg / (rel.replace(".", "/") + ".py")
    if not path.exists():
      path = pkg / rel.replace(".", "/") / "__init__.py"
    if not path.exists():
      raise EditionError(f"no module autodidax.{rel} for {targets}")
    path.write_text(rewrite(path.read_text(), targets))
  return pkg


def _pyc(source: bytes, name: str) -> bytes:
  """Bytecode that Python loads without looking at the source (PEP 552, unchecked)."""
  with tempfile.TemporaryDirectory() as tmp:
    src, out = Path(tmp) / "m.py", Path(tmp) / "m.pyc"
    src.write_bytes(source)
    py_compile.compile(str(src), str(out), dfile=name, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return out.read_bytes()


_PYC_CACHE: dict[tuple[str, str], bytes] = {}


def package(pkg: Path, zip_path: Path, inside: str) -> Path:
  """A zip of the edition `pkg` and the runner's part of coursekit, each module with
  its bytecode beside it (as zipimport looks for it); `inside` is where the zip is
  in the sandbox (for tracebacks)."""
  files = [(f"autodidax/{p.relative_to(pkg).as_posix()}", p) for p in sorted(pkg.rglob("*.py"))]
  files += [(f"coursekit/{p.relative_to(KIT).as_posix()}", p) for p in kit_files()]
  with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_STORED) as z:
    for arc, path in files:
      data = path.read_bytes()
      key = (arc, hashlib.sha256(data).hexdigest())
      if key not in _PYC_CACHE:
        _PYC_CACHE[key] = _pyc(data, f"{inside}/{arc}")
      info = zipfile.ZipInfo(arc, date_time=(2024, 1, 1, 0, 0, 0))
      z.writestr(info, data)
      z.writestr(zipfile.ZipInfo(arc[:-3] + ".pyc", date_time=(2024, 1, 1, 0, 0, 0)),
                 _PYC_CACHE[key])
  return zip_path


def kit_files() -> list[Path]:
  return [KIT / n for n in KIT_FILES] + sorted(PROBES.glob("*.py"))


def fingerprint(lib: Path = LIB) -> str:
  """A hash of the library's sources (reference values are cached per library)."""
  h = hashlib.sha256()
  for path in sorted(lib.rglob("*.py")):
    h.update(str(path.relative_to(lib)).encode() + b"\0" + path.read_bytes())
  return h.hexdigest()[:16]

