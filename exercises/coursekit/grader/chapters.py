"""The stub notebooks, and which chapter a submitted notebook is.

`load_stubs` reads each chapter's stub (`exercises/<part>.ipynb`): its exercises in
order, their titles and points, the ids of its cells and the names its probes take
from a notebook. `match_part` finds a submission's chapter from its cells (ids,
exercise metadata, the names it defines) and its metadata; `--part` forces one.
"""
from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..learner import probe as probes
from ..learner.stubs import EXERCISES
from .options import clean
from .sandboxed.cells import parse


def role(cell) -> str | None:
  meta = cell.get("metadata", {})
  return meta.get("role") if isinstance(meta, dict) else None


def is_check(cell) -> bool:
  return role(cell) == "check"


def is_solution(cell) -> bool:
  return role(cell) == "solution"


@dataclass
class Stub:
  part: str
  nb: nbformat.NotebookNode
  exercises: list = field(default_factory=list)    # in order
  titles: dict = field(default_factory=dict)
  points: dict = field(default_factory=dict)
  solution_ids: dict = field(default_factory=dict)  # exercise -> [cell ids]
  exercise_ids: set = field(default_factory=set)    # ids of statement/solution/check cells
  answers: set = field(default_factory=set)         # names the probes take from a notebook


def load_stubs(folder: Path = EXERCISES) -> dict[str, Stub]:
  stubs = {}
  for path in sorted(folder.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    stub = Stub(path.stem, nb)
    for cell in nb.cells:
      ex, r = cell.metadata.get("exercise"), cell.metadata.get("role")
      if ex is None:
        continue
      ex = str(ex)
      stub.exercise_ids.add(cell.id)
      if r == "statement":
        stub.titles[ex] = cell.metadata.get("title", "")
      elif r == "solution":
        stub.solution_ids.setdefault(ex, []).append(cell.id)
      elif r == "check":
        stub.exercises.append(ex)
        stub.points[ex] = float(cell.metadata.get("points", 1))
    try:
      for ex in stub.exercises:
        stub.answers |= set(probes.spec(stub.part, ex).answers)
    except (ImportError, KeyError) as e:
      warnings.warn(f"{path.name}: no probe for an exercise ({e}); its chapter is not graded")
      continue
    stubs[stub.part] = stub
  return stubs


def defined_names(nb) -> set[str]:
  """Top-level names that a notebook's code cells define (functions, classes, variables)."""
  names = set()
  for c in nb.get("cells", []):
    if c.get("cell_type") != "code" or not isinstance(c.get("source"), str):
      continue
    tree = parse(c["source"])
    if isinstance(tree, Exception):
      continue
    for node in tree.body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
      elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
          names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
  return names


def match_part(nb, stubs: dict[str, Stub], forced: str | None) -> tuple[str | None, str]:
  """(the part to grade `nb` as, a note when that isn't what its metadata says)."""
  if forced:
    return forced, ""
  meta = nb.get("metadata", {}).get("coursekit", {})
  claimed = meta.get("part") if isinstance(meta, dict) else None
  odd = f"its chapter metadata ({clean(claimed, 40)}) is not a chapter's name; " \
      if claimed is not None and not isinstance(claimed, str) else ""
  if not isinstance(claimed, str):
    claimed = None
  ids = {c.get("id") for c in nb.cells}
  exs = {str(c.get("metadata", {}).get("exercise")) for c in nb.cells
         if isinstance(c.get("metadata"), dict) and c["metadata"].get("exercise") is not None}
  names = defined_names(nb)
  scores = {p: len(ids & s.exercise_ids) + len(exs & set(s.exercises)) + len(names & s.answers)
            for p, s in stubs.items()}
  best = max(sorted(scores), key=lambda p: scores[p], default=None)
  if claimed in stubs and scores[claimed] >= scores.get(best, 0):
    return claimed, ""
  if best is not None and scores[best] > 0:
    if claimed:
      return best, f"graded as {best}: its metadata says {claimed}, but its cells are {best}'s"
    return best, (f"graded as {best}: {odd or 'no chapter metadata; '}its cells and names "
                  f"are {best}'s")
  return None, ("can't tell which chapter this is: it has none of any chapter's cell ids or "
                "answer names (pass --part, or start from the chapter's stub notebook)")
