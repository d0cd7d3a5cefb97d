"""Citations of JAX's source that the build checks against the installed JAX.

A chapter that says how JAX does something, where a live cell can't show
it, cites the file and the function or class:

    {jaxsrc}`interpreters/ad.py:LinearizeTrace.process_primitive`
    {jaxsrc}`process_primitive <interpreters/ad.py:LinearizeTrace.process_primitive>`
    {jaxsrc}`lax/control_flow/`

The path is under `jax/_src/`; the name after the colon is a top-level
function, class or assignment of that file, or a method (or class-level name)
of one of its classes. The role renders as the name and the file, or only
as the text given before `<...>`; where the prose has just named it
("`jit` is {jaxsrc}`api.py:jit`"), as the file alone, so that no name
reads twice. A citation
that does not resolve in the installed JAX is a build warning, which fails
the build. tests/test_jax_claims.py uses `resolve` to check every chapter
without building, and requires that a paragraph about JAX either cites JAX
this way or sits next to a cell that runs JAX.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path

from docutils import nodes

ROLE = re.compile(r"\{jaxsrc\}`([^`]+)`")
TARGET = re.compile(r"^(?:(?P<text>.+?)\s*<(?P<ref1>[^<>]+)>|(?P<ref2>[^<>]+))$", re.S)


@functools.cache
def jax_src() -> Path:
  spec = importlib.util.find_spec("jax")
  if spec is None or spec.origin is None:
    raise RuntimeError("jax is not installed: the chapters' citations of its source need it")
  return Path(spec.origin).parent / "_src"


def jax_version() -> str:
  text = (jax_src().parent / "version.py").read_text()
  m = re.search(r'^_version(?:: str)? = "([^"]+)"', text, re.M)
  return m.group(1) if m else "?"


def parse(content: str) -> tuple[str | None, str, str | None]:
  """(display text or None, path, dotted name or None) of a role's content."""
  m = TARGET.match(content.strip())
  if not m:
    raise ValueError(f"not a citation: {content!r}")
  ref = (m.group("ref1") or m.group("ref2")).strip()
  path, _, name = ref.partition(":")
  return m.group("text"), path.strip(), name.strip() or None


@functools.cache
def _names(path: Path) -> dict:
  """Each name a file defines: top-level ones, and `Class.member` ones, to
  their line numbers."""
  tree = ast.parse(path.read_text())
  found: dict = {}

  def targets(stmt):
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      return [stmt.name]
    if isinstance(stmt, ast.Assign):
      return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
      return [stmt.target.id]
    return []

  for stmt in tree.body:
    for name in targets(stmt):
      found.setdefault(name, stmt.lineno)
    if isinstance(stmt, ast.ClassDef):
      for inner in stmt.body:
        for name in targets(inner):
          found.setdefault(f"{stmt.name}.{name}", inner.lineno)
  return found


def resolve(content: str) -> tuple[str, int | None]:
  """(the file, relative to jax/, and the line of the name) of a citation;
  raises LookupError, saying what is missing, when it does not resolve."""
  _, path, name = parse(content)
  file = jax_src() / path
  if not file.exists():
    raise LookupError(f"jax/_src/{path} does not exist in JAX {jax_version()}")
  if name is None:
    return f"_src/{path}", None
  if file.is_dir():
    raise LookupError(f"jax/_src/{path} is a folder: cite a file to cite {name}")
  line = _names(file).get(name)
  if line is None:
    raise LookupError(f"jax/_src/{path} defines no {name} in JAX {jax_version()}")
  return f"_src/{path}", line


def jaxsrc_role(name, rawtext, text, lineno, inliner, options=None, content=None):
  try:
    shown, path, dotted = parse(text)
    resolve(text)
  except (ValueError, LookupError) as e:
    msg = inliner.reporter.warning(f"jaxsrc: {e}", line=lineno)
    return [nodes.problematic(rawtext, rawtext)], [msg]
  if shown is not None:   # a name in the prose: code like any other
    return [nodes.literal(rawtext, shown, classes=["adx-jaxsrc-name"])], []
  parts = []
  if dotted:
    parts += [nodes.literal(rawtext, dotted, classes=["adx-jaxsrc-name"]), nodes.Text(" in ")]
  parts.append(nodes.literal(rawtext, f"jax/_src/{path}", classes=["adx-jaxsrc"]))
  return [nodes.inline(rawtext, "", *parts, classes=["adx-jaxsrc"])], []


def named_just_before(cite: nodes.Node) -> bool:
  """Whether the code just before a citation (a few characters of text
  between, like " in " or " (") is the name it cites: `checkpoint` after
  `jax.checkpoint`, `SymbolicZero` after `SymbolicZero`."""
  name = cite.children[0].astext().rsplit(".", 1)[-1]
  parent, between = cite.parent, ""
  for sibling in reversed(parent.children[:parent.index(cite)]):
    if isinstance(sibling, nodes.literal):
      return len(between) <= 12 and sibling.astext().rsplit(".", 1)[-1] == name
    if not isinstance(sibling, nodes.Text):
      return False
    between = sibling.astext() + between
  return False


def _no_doubled_names(app, doctree):
  for cite in list(doctree.findall(nodes.inline)):
    if ("adx-jaxsrc" in cite["classes"] and len(cite.children) == 3
        and named_just_before(cite)):
      del cite.children[:2]   # the name and " in ": the file alone


def setup(app):
  app.add_role("jaxsrc", jaxsrc_role)
  app.connect("doctree-read", _no_doubled_names)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
