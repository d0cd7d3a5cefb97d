"""A submitted notebook's code, rebuilt around its chapter's stub.

The stub's setup and given cells are the grader's own, each put back where the
stub has it; check cells are dropped (they are the learner's feedback, not the
grade); what a learner added to a stub cell is kept as a cell of their own. The
result (`program`) is the list of cells that `definitions.select` chooses from for
each exercise; `reference_program` is the same for the reference solution.
"""
from __future__ import annotations

import ast
import copy

from ..learner.stubs import SOURCE, read_source
from . import definitions
from .chapters import Stub, is_check, is_solution
from .sandboxed.cells import neutralize, parse


def canonical_cells(canonical) -> list:
  """The stub's code cells that the grader supplies: all but the solution cells."""
  return [c for c in canonical.cells if c.cell_type == "code" and not is_solution(c)]


def graft(submission, canonical):
  """A copy of `submission` whose non-solution stub code cells (setup, given
  code, checks) are exactly the stub's, each placed where the stub has it
  relative to the cells around it; the learner's solution and own cells stay."""
  nb = copy.deepcopy(submission)
  canon = canonical_cells(canonical)
  canon_set = {c.id for c in canon}
  cells = [c for c in nb.cells if not (is_check(c) or c.get("id") in canon_set)]
  # A solution cell whose id changed (an older version) still anchors by its metadata.
  sol_by_ex = {}
  for c in canonical.cells:
    if is_solution(c):
      sol_by_ex.setdefault(str(c.metadata.get("exercise")), []).append(c.id)
  canon_ids = [c.id for c in canonical.cells]

  def key(cell):
    cid = cell.get("id")
    if cid in canon_ids:
      return cid
    if is_solution(cell):
      ids = sol_by_ex.get(str(cell.get("metadata", {}).get("exercise")))
      return ids[-1] if ids else cid
    return cid

  last = -1
  for cell in canon:
    i = canon_ids.index(cell.id)
    keys = [key(c) for c in cells]
    after = [keys.index(cid) for cid in canon_ids[i + 1:] if cid in keys and cid not in canon_set]
    before = [len(keys) - keys[::-1].index(cid) for cid in reversed(canon_ids[:i]) if cid in keys]
    if is_check(cell):   # before the next stub cell: after the learner's own cells
      pos = after[0] if after else before[0] if before else len(cells)
      ex = str(cell.metadata.get("exercise"))   # and never before its exercise's answer
      own = [j + 1 for j, c in enumerate(cells) if key(c) in sol_by_ex.get(ex, ())]
      pos = max([pos] + own)
    else:                # setup, given code: right after the previous stub cell
      pos = before[0] if before else after[0] if after else 0
    pos = max(pos, last + 1)
    cells.insert(pos, copy.deepcopy(cell))
    last = pos
  taken = {c.get("id") for c in cells}
  for i, cell in enumerate(cells):   # cells of old notebooks (format 4.4) have no ids
    if not cell.get("id"):
      cell["id"] = next(f"cell-{i}-{n}" for n in range(len(cells) + 1)
                        if f"cell-{i}-{n}" not in taken)
      taken.add(cell["id"])
  nb.cells, nb.nbformat, nb.nbformat_minor = cells, 4, 5
  nb.metadata["kernelspec"] = canonical.metadata["kernelspec"]
  return nb


def _checks_above(cells) -> list:
  """For each cell, the exercises whose check cells come before it (in the order given)."""
  seen, out = [], []
  for c in cells:
    out.append(list(seen))
    if is_check(c):
      seen.append(str(c.get("metadata", {}).get("exercise")))
  return out


def program(nb, stub: Stub) -> list[dict]:
  """The code of `nb`, rebuilt around the stub: [{"kind", "source", "exercise", "id",
  "after"}], in order. kind: "stub" (the grader's setup and given code) or "learner";
  `after`: the exercises whose check cells come before a learner's cell in the notebook
  as handed in (a check doesn't see what is below it: `definitions.select`)."""
  nb = copy.deepcopy(nb)
  for c, above in zip(nb.cells, _checks_above(nb.cells)):
    c.setdefault("metadata", {})["coursekit_after"] = above
  nb.cells = [x for c in nb.cells for x in [c, *_additions(c, stub)]]
  grafted = graft(nb, stub.nb)
  added = {c.id: c for c in grafted.cells if str(c.get("id")).endswith(ADDED)}
  grafted.cells = [x for c in grafted.cells if c.get("id") not in added
                   for x in [c, *([added[f"{c.id}{ADDED}"]] if f"{c.get('id')}{ADDED}" in added else [])]]
  canon = {c.id for c in canonical_cells(stub.nb)}
  sol_ids = {cid: ex for ex, ids in stub.solution_ids.items() for cid in ids}
  out = []
  for c in grafted.cells:
    if c.cell_type != "code" or is_check(c) or not isinstance(c.get("source"), str):
      continue
    cid = c.get("id")
    kind = "stub" if cid in canon else "learner"
    ex = sol_ids.get(cid) or (str(c.metadata.get("exercise")) if is_solution(c) else None)
    after = c.metadata.get("coursekit_after", []) if kind == "learner" else []
    out.append({"kind": kind, "source": c.source, "exercise": ex, "id": cid, "after": after})
  return out


ADDED = "-added"   # the id of a cell with what the learner added to a stub cell


def _additions(cell, stub: Stub) -> list:
  """What a learner added to one of the stub's own cells (setup, given code), which the
  grader replaces with the stub's: a cell of the learner's own, right after it, with the
  top-level statements the stub's version lacks (an `import math` in the setup cell)."""
  canon = next((c for c in canonical_cells(stub.nb) if c.id == cell.get("id")), None)
  source = cell.get("source")
  if canon is None or not isinstance(source, str) or source == canon.source:
    return []
  theirs, canonical = parse(source), parse(canon.source)
  if isinstance(theirs, Exception) or isinstance(canonical, Exception):
    return []
  try:
    ours = {ast.dump(n) for n in canonical.body}
    added = [n for n in theirs.body if ast.dump(n) not in ours]
  except (RecursionError, MemoryError):
    return []
  if not added:
    return []
  extra = copy.deepcopy(cell)
  extra.source = definitions.only(neutralize(source), added)
  extra.id = f"{cell.id}{ADDED}"
  extra.metadata.pop("role", None)
  extra.metadata.pop("exercise", None)
  return [extra]


def reference_program(part: str) -> list[dict]:
  """The reference solution's code (the exercise source with its solutions)."""
  nb = read_source(next(p for p in SOURCE.iterdir() if p.stem == part))
  out = []
  for c, above in zip(nb.cells, _checks_above(nb.cells)):
    if c.cell_type == "code" and not is_check(c):
      kind = "learner" if is_solution(c) else "stub"
      out.append({"kind": kind, "source": c.source, "id": c.id, "after": above,
                  "exercise": str(c.metadata.get("exercise")) if is_solution(c) else None})
  return out
