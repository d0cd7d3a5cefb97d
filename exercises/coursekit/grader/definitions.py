"""The code the grader runs for one exercise: the stub's cells, and the learner's definitions
that the exercise's answers need, and nothing else of the notebook.

An exercise's probe takes answers by name (`full_raise`, `tanh_jvp`, ...). From the
learner's cells, `select` keeps the top-level statements that define those names
(a `def`, a `class`, an `import`, an assignment, or a compound statement that
contains one), then, again and again, the statements that define the names
those statements read (helpers, constants, imports), and the statements that
change an object they need (`table[k] = v`, `table.update(...)` on a variable
of the notebook's own). Everything else (demos, prints, plots, slow or endless
cells, code that patches the library or the grader) doesn't run for the
exercise, so it can't use up the exercise's time or change its result, and an
exercise's grade depends on nothing but its own answers.

Only cells above the exercise's check cell count, as in *Run All*: the check
never sees what is defined below it. The stub's own cells (setup, given code)
are the grader's, and always run whole. Statements keep their line numbers, so
errors point where they do in the notebook.
"""
from __future__ import annotations

import ast
import re
import symtable
from dataclasses import dataclass, field

from .sandboxed.cells import lines as split_lines, neutralize, parse

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class Statement:
  cell: int                 # index of its cell in the program
  node: ast.stmt
  binds: set = field(default_factory=set)     # top-level names it binds (or deletes)
  changes: set = field(default_factory=set)   # names whose objects it changes in place
  reads: set = field(default_factory=set)     # module-level names it reads, anywhere inside
  star: bool = False        # `from m import *`: binds names we can't list


def _base(node) -> str | None:
  """`x` of `x.a.b`, `x[i][j]`, `x.a[i]`."""
  while isinstance(node, (ast.Attribute, ast.Subscript)):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


def _top_level(node):
  """The nodes of a statement that run in the module's scope (not in functions' bodies)."""
  stack = [node]
  while stack:
    n = stack.pop()
    yield n
    for child in ast.iter_child_nodes(n):
      if isinstance(n, _SCOPES) and n is not node:
        continue
      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # a definition's decorators, defaults and bases run here; its body does not
        if child in n.body:
          continue
      if isinstance(n, ast.Lambda) and child is n.body:
        continue
      stack.append(child)


def _binds_and_changes(stmt) -> tuple[set, set, bool]:
  binds, changes, star = set(), set(), False
  for n in _top_level(stmt):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      binds.add(n.name)
    elif isinstance(n, ast.Import):
      binds |= {a.asname or a.name.split(".")[0] for a in n.names}
    elif isinstance(n, ast.ImportFrom):
      for a in n.names:
        if a.name == "*":
          star = True
        else:
          binds.add(a.asname or a.name)
    elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
      binds.add(n.id)
    elif isinstance(n, ast.ExceptHandler) and n.name:
      binds.add(n.name)
    elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
      binds.add(n.name)
    elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)):
      if (b := _base(n)):
        changes.add(b)
    elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) \
        and isinstance(n.value.func, ast.Attribute):
      if (b := _base(n.value.func)):   # table.update(...), rules.append(...)
        changes.add(b)
  return binds, changes, star


def _reads(source: str) -> set:
  """Module-level names that `source` (one statement) reads, in any scope inside it."""
  try:
    top = symtable.symtable(source, "<statement>", "exec")
  except (SyntaxError, RecursionError, MemoryError):
    return set()
  names = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
  stack = list(top.get_children())
  while stack:
    t = stack.pop()
    stack += t.get_children()
    for s in t.get_symbols():
      if s.is_global() or (t.get_type() == "class" and not s.is_local()):
        names.add(s.get_name())
  return names


def _span(node) -> tuple[int, int]:
  start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
  return start, node.end_lineno


def statements(cell_index: int, source: str) -> list[Statement] | None:
  """The top-level statements of one cell (None if it doesn't parse)."""
  tree = parse(source)
  if isinstance(tree, Exception):
    return None
  python = neutralize(source)
  lines = split_lines(python)
  out = []
  for node in tree.body:
    start, end = _span(node)
    text = "\n".join(lines[start - 1:end]) if node.col_offset == 0 else _segment(lines, node)
    binds, changes, star = _binds_and_changes(node)
    out.append(Statement(cell_index, node, binds, changes, _reads(text), star))
  return out


def _segment(lines: list[str], node) -> str:
  """`ast.get_source_segment`, from lines split once (it splits the source at every call)."""
  first, last = node.lineno - 1, node.end_lineno - 1   # offsets count UTF-8 bytes
  head, tail = lines[first].encode(), lines[last].encode()
  if first == last:
    return head[node.col_offset:node.end_col_offset].decode()
  return "\n".join([head[node.col_offset:].decode(), *lines[first + 1:last],
                    tail[:node.end_col_offset].decode()])


def only(python: str, chosen: list[ast.stmt]) -> str:
  """The cell's source with only `chosen` statements, each on its own lines."""
  lines = split_lines(python)
  out = [""] * len(lines)
  for node in chosen:
    if node.col_offset == 0 and not _shares_line(lines, node):
      start, end = _span(node)
      out[start - 1:end] = lines[start - 1:end]
    else:
      seg = _segment(lines, node).split("\n")
      i = node.lineno - 1
      out[i] = f"{out[i]}; {seg[0]}" if out[i].strip() else seg[0]
      for k, text in enumerate(seg[1:], 1):
        out[i + k] = text
  while out and not out[-1].strip():
    out.pop()
  return "\n".join(out)


def _shares_line(lines: list[str], node) -> bool:
  """A simple statement followed by `; more` on its last line."""
  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For,
                       ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)):
    return False
  last = lines[node.end_lineno - 1].encode()   # offsets count UTF-8 bytes
  return bool(last[node.end_col_offset:].strip().lstrip(b";").strip()) or \
      bool(last[:node.col_offset].strip())


def select(cells: list[dict], names, exercise: str | None = None,
           cache: dict | None = None) -> list[dict]:
  """The code to run for an exercise whose probe takes `names`: from a program
  (`[{"kind": "stub"|"learner", "source", "exercise", "after"}]`, as `grade.program`
  gives it), every stub cell whole, and from the learner's cells above the exercise's
  check cell (those whose `after` doesn't name it: what "Run All" has run when the
  check runs, so a helper redefined further down is not the one the check sees) the
  statements that define `names` and what they need. Returns
  `[{"kind", "source", "cell"}]` in program order, `cell` indexing `cells`.

  A learner cell that doesn't parse is kept whole (it will report its SyntaxError)
  when it is the exercise's own solution cell or looks like it defines a name the
  exercise needs. `cache`: a dict shared by the calls for one program's exercises, so
  that each cell is parsed once."""
  cache = {} if cache is None else cache
  cells = [{**c, "kind": "later"} if exercise in c.get("after", ()) else c for c in cells]
  parsed = {}
  assigned = set()   # names some statement binds other than by import (so: objects of the notebook)
  for i, c in enumerate(cells):
    if (i, c["source"]) not in cache:
      cache[i, c["source"]] = statements(i, c["source"])
    st = parsed[i] = cache[i, c["source"]]
    for s in st or []:
      if not isinstance(s.node, (ast.Import, ast.ImportFrom)):
        assigned |= s.binds
  learner = [s for i, c in enumerate(cells) if c["kind"] == "learner" for s in parsed[i] or []]
  binders, changers = {}, {}   # name -> the statements that bind it, that change its object
  for k, s in enumerate(learner):
    for n in s.binds:
      binders.setdefault(n, []).append(k)
    for n in s.changes & assigned:
      changers.setdefault(n, []).append(k)
  chosen = {k for k, s in enumerate(learner) if s.star}
  work, needed = [*names, *(n for k in chosen for n in learner[k].reads)], set()
  while work:   # a worklist: each name, and each statement, is taken once
    n = work.pop()
    if n in needed:
      continue
    needed.add(n)
    for k in binders.get(n, []) + changers.get(n, []):
      if k not in chosen:
        chosen.add(k)
        work += learner[k].reads
  by_cell: dict[int, list] = {}
  for k in sorted(chosen):
    by_cell.setdefault(learner[k].cell, []).append(learner[k].node)
  out = []
  for i, c in enumerate(cells):
    if c["kind"] == "later":
      continue
    if c["kind"] != "learner":
      out.append({"kind": c["kind"], "source": c["source"], "cell": i})
    elif parsed[i] is None:
      if (exercise is not None and c.get("exercise") == exercise) or _mentions(c["source"], needed):
        out.append({"kind": "learner", "source": c["source"], "cell": i})
    elif i in by_cell:
      out.append({"kind": "learner", "source": only(neutralize(c["source"]), by_cell[i]),
                  "cell": i})
  return out


def _mentions(source: str, names) -> bool:
  return any(re.search(rf"^\s*(def|class)\s+{re.escape(n)}\b|^\s*{re.escape(n)}\s*[:=]", source, re.M)
             for n in names)


def defined(cells: list[dict]) -> set[str]:
  """Every top-level name the program's learner cells bind."""
  out = set()
  for i, c in enumerate(cells):
    if c["kind"] == "learner":
      for s in statements(i, c["source"]) or []:
        out |= s.binds
  return out
