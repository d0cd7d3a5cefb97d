"""Grade submitted exercise notebooks.

    python -m coursekit.grade SUBMISSIONS [--out DIR] [--jobs N] [--part NAME] [--seed N]
                              [--timeout S] [--memory MIB] [--no-sandbox] [--cluster ADDRESS]
    make grade SUBMISSIONS=dir-or-zip [GRADES=outdir]

SUBMISSIONS is a folder or a .zip of notebooks (`.ipynb`, any case), any number per student,
for any chapter. Writes `grades.csv` and `grades.html` into `--out` (default `grades/`), the
learners' pages `feedback/<student>/<chapter>.html` and `feedback.zip` (`coursekit.feedback`),
and records the run in the gradebook, `gradebook.sqlite` (`coursekit.gradebook`), which
also spares a notebook graded before at the same seed.

How a notebook is graded (the instructor guide has the threat model):

1. Its chapter comes from its cells (ids, exercise metadata, the names it
   defines) and its metadata; `--part` forces one. Its student comes from its
   subfolder, else its file name; its `coursekit.student` metadata only gets a
   note when it disagrees (`coursekit.submissions`). Reading, rebuilding, the
   review flags and the similarity fingerprints run in a worker process under a
   time and memory budget (`Reader`): a notebook that breaks or stalls them
   gets a row that says so, and the batch goes on.
2. Its code is rebuilt around the stub: the stub's setup and given cells are
   the grader's own; check cells are dropped (they are the learner's feedback,
   not the grade).
3. For each exercise (one after another: never two sandboxes of one
   submission at once), only the learner's definitions that the exercise's answers
   need, above its check cell, run (`coursekit.definitions`), with the stub's cells, in a fresh
   bubblewrap sandbox (`coursekit.sandbox`), against the learner edition of the
   library, in which that exercise's answers are absent (`coursekit.edition`);
   then the exercise's probe (`coursekit.probe`) runs the learner's answers on
   inputs drawn from this run's seed. The records come out of the sandbox.
4. Outside, they are compared with the reference solution's records for the
   same seed, computed the same way in a sandbox of their own and cached.

So whatever the notebook does inside its sandbox, it can only change its own
records, at a seed it doesn't know in advance (never the seed whose records
ship with the stubs). An exercise's grade depends on its answers alone: not on
the notebook's other cells, nor on how the runs are scheduled. Submissions are
only read, never written, and nothing the sandboxes run can see them, the
output folder or the course.
"""
from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import multiprocessing
import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import definitions
from . import probe as probes
from . import similarity
from .edition import LIB, build as build_edition, fingerprint, kit_files, package
from .flags import aliases, scan
from .report import FIELDS  # noqa: F401 (the columns of grades.csv)
from .sandbox import Limits, Sandbox, SandboxUnavailable, mode_text
from .stubs import EXERCISES, SOURCE, read_source
from .submissions import Submission, collect, printable, read_notebook, student_of  # noqa: F401

REASON_LIMIT = 300
DETAIL_LIMIT = 4000   # characters of a failure's full text, for the feedback
ZIP_INSIDE = "/opt/autodidax/site.zip"   # where a sandbox finds the edition and the runner


# --- The stubs ---------------------------------------------------------------------------------

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
  from .runner import parse
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


# --- Rebuilding the notebook from the stub -------------------------------------------------------

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
  from .runner import neutralize, parse
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


# --- Running probes in sandboxes -------------------------------------------------------------

HEX = re.compile(r"0x[0-9a-fA-F]{6,}")


def clean(text, limit: int = REASON_LIMIT) -> str:
  """One printable line, no memory addresses, at most `limit` characters."""
  text = HEX.sub("0x…", printable(" ".join(str(text).split())))
  return text if len(text) <= limit else text[:limit - 1] + "…"


WALL_FACTOR = 3   # a run's wall-clock bound, in multiples of its CPU time limit
STARVED = 0.25    # a run that waited this share of its time for a CPU was starved
READ_SECONDS, READ_MEMORY_MIB = 60, 4096   # the budget for reading one notebook (`Reader`)
READER_START = 600   # seconds for the reader's worker to start (imports, the stubs)


class NotGraded(RuntimeError):
  """The grader, not the notebook, failed (a sandbox that won't start, a reference that
  fails): its rows say "not graded", never 0 points, and the run exits non-zero."""


@dataclass
class Options:
  timeout: float = 60           # CPU seconds per sandbox run (one exercise of one notebook)
  memory_mib: int = 2048        # per sandbox
  pids: int = 256               # processes and threads per sandbox
  part: str | None = None
  seed: int = 1
  sandbox: bool = True


@dataclass
class Outcome:
  """What one sandbox run gave: the cells' statuses, the records, and how it ended."""
  status: str                    # ok | timeout | killed | exited | error
  cells: list = field(default_factory=list)
  records: list | None = None
  imports: list = field(default_factory=list)
  why: str = ""
  output_note: str = ""
  started: bool = False          # the runner said it started (else the sandbox itself failed)
  wall: bool = False             # it timed out at the wall-clock bound, not its CPU limit
  starved: bool = False          # ... after waiting long for a CPU (or on a saturated machine)


class Workspace:
  """The grader's own temporary folder, and the learner editions (one zip per exercise,
  with the runner). A sandbox gets its exercise's zip through a file descriptor, never a
  folder."""

  def __init__(self, opts: Options, stubs: dict[str, Stub]):
    self.opts = opts
    self.root = Path(tempfile.mkdtemp(prefix="coursekit-grade-"))
    self.editions: dict[tuple[str, str], Path] = {}
    self.kit = ""   # the library's and the grader's hash, once asked
    self.lock = threading.Lock()
    limits = Limits(memory_mib=opts.memory_mib, pids=opts.pids, cpu_seconds=opts.timeout,
                    timeout=WALL_FACTOR * opts.timeout)
    self.sandbox = Sandbox(limits=limits, enabled=opts.sandbox, env={
        "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"})
    self.stubs = stubs

  def edition(self, part: str, exercise: str) -> Path:
    """The zip of `autodidax` without `exercise`'s answers, and the runner: built once per
    library and grader on this machine, in the cache that every grading process shares
    (a Dask worker's first task, and the next run, find it there)."""
    with self.lock:
      if (part, exercise) not in self.editions:
        spec = probes.spec(part, exercise)
        if not self.kit:
          self.kit = fingerprint(LIB) + kit_hash()
        key = hashlib.sha256(json.dumps([self.kit, ZIP_INSIDE, part, exercise, spec.answers,
                                         spec.removes]).encode()).hexdigest()[:24]
        final = cache_dir() / "editions" / part / f"{exercise.replace('.', '_')}-{key}.zip"
        final.parent.mkdir(parents=True, exist_ok=True)
        if not final.exists():   # built apart, then renamed into place: whoever wins, a whole zip
          work = Path(tempfile.mkdtemp(dir=final.parent, prefix=".building-"))
          try:
            pkg = build_edition(work, {t: (exercise, name, spec.answers)
                                       for t, name in spec.removes.items()})
            os.replace(package(pkg, work / "edition.zip", ZIP_INSIDE), final)
          finally:
            shutil.rmtree(work, ignore_errors=True)
          for old in final.parent.glob(f"{final.name.rsplit('-', 1)[0]}-*.zip"):   # other versions'
            with suppress(OSError):   # (one a run still uses is a day younger)
              if old != final and time.time() - old.stat().st_mtime > 86400:
                old.unlink()
        self.editions[part, exercise] = final
      return self.editions[part, exercise]

  def run(self, part: str, exercise: str, cells: list[dict], seed: int) -> Outcome:
    """Run `cells` (`definitions.select`'s) and the exercise's probe in a fresh sandbox."""
    zipped = self.edition(part, exercise)

    def job(result_fd):
      return (json.dumps({"part": part, "exercise": exercise, "result_fd": result_fd,
                          "cells": [[c["kind"], c["source"], c["cell"]] for c in cells]})
              + "\n" + json.dumps({"seed": seed}) + "\n").encode()
    command = [self.sandbox.python, "-m", "coursekit.runner"]
    if self.sandbox.enabled:
      r = self.sandbox.run(command, job, files={ZIP_INSIDE: zipped},
                           env={"PYTHONPATH": ZIP_INSIDE})
    else:   # trusted: the same program, as a plain subprocess in a temporary folder
      with tempfile.TemporaryDirectory(dir=self.root) as cwd:
        r = self.sandbox.run(command, job, env={"PYTHONPATH": str(zipped)}, cwd=cwd)
    out = parse_outcome(r, self.opts)
    if not out.started and r.status != "timeout" and not r.oom:
      tail = r.output.strip().splitlines()[-1:] or [f"status {r.returncode}"]
      raise NotGraded(f"the sandbox failed before the grader's runner started ({clean(tail[0], 160)})")
    return out

  def close(self):
    shutil.rmtree(self.root, ignore_errors=True)


def parse_outcome(r, opts: Options) -> Outcome:
  """Read the runner's result (JSON), untrusted: anything malformed is just a failure."""
  out = Outcome(r.status)
  for line in r.result.decode("utf-8", "replace").splitlines():
    try:
      data = json.loads(line)
    except (ValueError, RecursionError):
      continue
    if not isinstance(data, dict):
      continue
    if data.get("started") is True:
      out.started = True
    elif isinstance(data.get("cell"), dict):
      out.cells.append(data["cell"])
    elif isinstance(data.get("records"), list):
      out.records = data["records"]
      imports = data.get("imports")
      out.imports = [clean(i, 40) for i in imports][:20] if isinstance(imports, list) else []
  if r.output_bytes > 64_000:
    out.output_note = f"printed {r.output_bytes / 1e6:.1f} MB (kept the first 64 kB)"
  if r.result_truncated:
    out.records, out.why = None, "its result was larger than the grader accepts"
  elif r.status == "timeout":
    out.wall = r.wall
    out.starved = r.wall and (r.waited > STARVED * r.seconds if r.waited is not None
                              else saturated())
    out.why = (f"it ran past the time limit ({WALL_FACTOR * opts.timeout:g} s of wall-clock time)"
               if r.wall else f"it ran past the time limit ({opts.timeout:g} s of CPU time)")
  elif r.status == "killed":
    out.why = f"the sandbox was killed by {r.signal}"
    if r.oom:
      out.why += f" after it reached its memory limit ({opts.memory_mib} MiB)"
  elif r.status == "exited" and out.records is None:
    out.why = f"the program exited with status {r.returncode}"
    tail = r.output.strip().splitlines()[-1:] if r.output.strip() else []
    if tail:
      out.why += f" (last output: {clean(tail[0], 120)})"
  return out


# --- Grading -----------------------------------------------------------------------------------

def row(sub, student, part, exercise, status, reason="", notes=(), max_points=0.0) -> dict:
  points = max_points if status == "pass" else 0.0
  return dict(student=clean(student, 80), part=clean(part, 40), exercise=clean(exercise, 20),
              points=f"{points:g}", max_points=f"{max_points:g}", status=status,
              reason=clean(reason), notes=clean("; ".join(n for n in notes if n), 2 * REASON_LIMIT),
              submission=clean(sub.label, 2 * REASON_LIMIT), detail=detail(reason))


def detail(reason) -> str:
  """The reason in full, its lines kept, as the check cell prints it (for the feedback;
  not a column of grades.csv)."""
  lines = [HEX.sub("0x…", printable(line.rstrip())) for line in str(reason).splitlines()]
  return "\n".join(lines)[:DETAIL_LIMIT]


def left_out(p) -> list[str]:
  """A note naming the learner's cells with code that no answer needs (they didn't run)."""
  used = {c["cell"] for cells in p.runs.values() for c in cells}
  idle = [i + 1 for i, c in enumerate(p.cells)
          if c["kind"] == "learner" and c["source"].strip() and i not in used]
  if not idle:
    return []
  which = ", ".join(map(str, idle[:20])) + (", ..." if len(idle) > 20 else "")
  return [f"cell{'s' * (len(idle) > 1)} {which} of your notebook did not run when graded: "
          "no answer needs what they define"]


@dataclass
class Parsed:
  sub: Submission
  student: str
  part: str | None = None
  cells: list = field(default_factory=list)     # the rebuilt program (`program`)
  notes: list = field(default_factory=list)
  failure: str = ""            # why it can't be graded at all
  flags: list = field(default_factory=list)
  runs: dict = field(default_factory=dict)      # exercise -> the cells that run for it
  signatures: list = field(default_factory=list)   # for similarity (`similarity.signatures`)
  syntax: list = field(default_factory=list)    # (cell, why it doesn't parse) of the learner's cells


def parse(sub: Submission, stubs: dict[str, Stub], opts: Options) -> Parsed:
  """Read a submission, find its chapter and its code, and what runs for each exercise;
  never raises. The notebook's bytes are not kept."""
  if sub.problem:
    return Parsed(sub, student_of(sub, None)[0], opts.part, failure=sub.problem)
  try:
    nb = read_notebook(sub.load())
  except Exception as e:  # noqa: BLE001 (anything a broken file may raise)
    return Parsed(sub, student_of(sub, None)[0], opts.part,
                  failure=f"unreadable notebook: {type(e).__name__}: {e}")
  student, who = student_of(sub, nb)
  try:
    part, note = match_part(nb, stubs, opts.part)
    if part is None:
      return Parsed(sub, student, None, notes=[who], failure=note)
    cells = program(nb, stubs[part])
    cache = {}   # each cell parsed once for all the exercises
    runs = {ex: definitions.select(cells, probes.spec(part, ex).answers
                                   + probes.spec(part, ex).optional, ex, cache)
            for ex in stubs[part].exercises}
  except Exception as e:  # noqa: BLE001 (a grader bug must not stop the batch)
    return Parsed(sub, student, opts.part, notes=[who],
                  failure=f"grader error: {type(e).__name__}: {e}")
  p = Parsed(sub, student, part, cells, [who, note], runs=runs)
  if not any(c["kind"] == "learner" and c["source"].strip() for c in cells):
    p.failure = "no answer: the notebook has no code of its own"
  for i, c in enumerate(cells):
    if c["kind"] == "learner" and (e := syntax_error(c["source"])):
      p.syntax.append((i, f"your cell {i + 1} doesn't parse ({e})"))
  return p


def syntax_error(source: str) -> str:
  """Why a cell isn't Python (after IPython's syntax), or ""."""
  from .runner import parse
  e = parse(source)
  if isinstance(e, SyntaxError):
    return f"SyntaxError: {e.msg} (line {e.lineno})"
  if isinstance(e, Exception):
    return f"{type(e).__name__}: {clean(e, 80)}"
  return ""


def read(sub: Submission, stubs: dict[str, Stub], opts: Options) -> Parsed:
  """`parse`, then the review aids (flags, similarity fingerprints): a failure in one of
  those costs the notebook that aid, with a note, never its grade."""
  from . import runner
  runner.TREES.clear()   # the trees of this notebook's cells, each parsed once
  try:
    return _read(sub, stubs, opts)
  finally:
    runner.TREES.clear()


def _read(sub: Submission, stubs: dict[str, Stub], opts: Options) -> Parsed:
  p = parse(sub, stubs, opts)
  if p.failure:
    return p
  try:
    names = aliases(c["source"] for c in p.cells)
    p.flags = sorted({f"{f} (cell {i + 1})" for i, c in enumerate(p.cells)
                      if c["kind"] == "learner" for f in scan(c["source"], names)})
  except Exception as e:  # noqa: BLE001 (RecursionError, MemoryError: whatever a notebook causes)
    p.flags = [f"its code could not be scanned for review flags ({type(e).__name__})"]
  try:
    p.signatures = similarity.signatures(p)
  except Exception as e:  # noqa: BLE001
    p.notes.append(f"left out of the similarity check ({type(e).__name__})")
  return p


def _reader_main(conn, folder: str, opts: dict, memory_mib: int):
  """The reader's worker process (`Reader._start`): notebooks in, `Parsed` out, within its
  memory limit. `opts` comes as a dict: the grader's `Options` may be `__main__.Options`."""
  opts = Options(**opts)
  resource.setrlimit(resource.RLIMIT_AS, (memory_mib << 20, memory_mib << 20))
  warnings.filterwarnings("ignore", module="nbformat")
  stubs = load_stubs(Path(folder))
  conn.send("ready")
  while True:
    try:
      sub = conn.recv()
    except (EOFError, OSError):
      return
    conn.send(read(sub, stubs, opts))


class Reader:
  """Reads notebooks (`read`) in a worker process, one at a time, under a time and memory
  budget: a notebook that crashes it, stalls it or exhausts its memory costs its own rows
  (which say why), never the batch. The worker starts again for the next notebook."""

  def __init__(self, folder: Path, opts: Options, seconds: float = READ_SECONDS,
               memory_mib: int = READ_MEMORY_MIB):
    self.folder, self.opts, self.seconds, self.memory_mib = folder, opts, seconds, memory_mib
    self.lock = threading.Lock()
    self.proc = self.conn = None

  def _start(self):
    """A fresh Python (not a fork: the grader has threads) that talks over a socket pair.
    A subprocess, not a `multiprocessing.Process`: a Dask worker, a daemonic process,
    may not have those."""
    self.conn, theirs = multiprocessing.Pipe()
    fd = theirs.fileno()
    code = ("import sys; from multiprocessing.connection import Connection; "
            f"c = Connection({fd}); sys.path[:] = c.recv(); "
            "from coursekit.grade import _reader_main; _reader_main(c, *c.recv())")
    try:
      self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[fd],
                                   stdin=subprocess.DEVNULL)
    finally:
      theirs.close()
    self.conn.send(sys.path)
    self.conn.send((str(self.folder), asdict(self.opts), self.memory_mib))
    if not (self.conn.poll(READER_START) and self.conn.recv() == "ready"):
      raise EOFError("the reader did not start")

  def stop(self):
    if self.proc is not None:
      self.proc.kill()
      self.proc.wait()
      self.proc = None
    if self.conn is not None:
      self.conn.close()
      self.conn = None

  def read(self, sub: Submission) -> Parsed:
    failed = lambda why: Parsed(sub, student_of(sub, None)[0], self.opts.part, failure=why)
    if sub.problem:
      return failed(sub.problem)
    try:
      data = sub.load()
    except Exception as e:  # noqa: BLE001 (anything a broken file or zip may raise)
      return failed(f"unreadable notebook: {type(e).__name__}: {clean(e, 120)}")
    with self.lock:
      p = None
      try:
        if self.proc is None:
          self._start()
        self.conn.send(Submission(sub.label, data, sub.folder))
        if self.conn.poll(self.seconds):
          p = self.conn.recv()
        else:
          why = f"reading it took more than {self.seconds:g} s"
      except (EOFError, OSError):
        why = f"reading it crashed the grader's reader (its memory limit is {self.memory_mib} MiB)"
      if p is None:
        self.stop()
        return failed(f"not graded: {why}")
    p.sub = sub
    return p


def where(got: Outcome, ran: list[dict]) -> str:
  """Where a run that gave no result stopped: in which cell, or in the check."""
  done = len(got.cells)
  if done < len(ran):
    cell = ran[done]
    return f" in cell {cell['cell'] + 1} (your code)" if cell["kind"] == "learner" \
        else f" in the grader's cell {cell['cell'] + 1}"
  return " while the check ran"


def verdict(p: Parsed, ex: str, got: Outcome, want: list, stub: Stub) -> tuple[str, str, list]:
  """(status, reason, notes) of one exercise, decided here, outside any sandbox."""
  notes = []
  if got.output_note:
    notes.append(got.output_note)
  if got.imports:
    notes.append(f"review: its code imported {', '.join(got.imports)} while it ran")
  ran = p.runs.get(ex, [])
  kinds = {c["cell"]: c["kind"] for c in ran}
  failed = [(c.get("cell"), c.get("error")) for c in got.cells
            if isinstance(c, dict) and c.get("status") != "ok"]
  stub_fail = next((f"the grader's setup cell {i + 1} failed ({e})" for i, e in failed
                    if kinds.get(i) == "stub"), "")
  own = next((f"your cell {i + 1} raised {e}" for i, e in failed
              if isinstance(i, int) and kinds.get(i) == "learner"), "")
  if got.records is None:
    return "fail", (got.why or "the sandbox gave no result") + where(got, ran), notes
  v = probes.compare(got.records, want)
  if v.passed:
    return "pass", "", notes
  syntax = "; ".join(t for i, t in p.syntax if i not in kinds)   # why a name may be missing
  prefix = "; ".join(x for x in (stub_fail, own, syntax) if x)
  prefix = prefix + "; " if prefix else ""
  if v.todo:   # the stub's own `raise` is no news: say what is missing, and what failed
    why = "; ".join(x for x in (own, syntax) if x and "NotImplementedError" not in x)
    return "fail", f"{why + '; ' if why else ''}not done yet: {v.message}", notes
  return "fail", f"{prefix}{v.label}: {v.message}", notes


class _Gate:
  """Runs at once, or one run alone: `shared()` for every run, `alone()` for a rerun that
  must have the machine to itself (it waits for the others, and new ones wait for it)."""

  def __init__(self):
    self.cond = threading.Condition()
    self.running, self.waiting, self.exclusive = 0, 0, False

  def shared(self):
    return self._hold(False)

  def alone(self):
    return self._hold(True)

  @contextmanager
  def _hold(self, alone: bool):
    with self.cond:
      if alone:
        self.waiting += 1
        self.cond.wait_for(lambda: not self.exclusive and self.running == 0)
        self.waiting -= 1
        self.exclusive = True
      else:
        self.cond.wait_for(lambda: not self.exclusive and not self.waiting)
        self.running += 1
    try:
      yield
    finally:
      with self.cond:
        if alone:
          self.exclusive = False
        else:
          self.running -= 1
        self.cond.notify_all()


def saturated() -> bool:
  """Whether this machine's CPUs are all busy (its load average)."""
  try:
    return os.getloadavg()[0] >= default_jobs()
  except OSError:
    return True


class Grader:
  def __init__(self, stubs: dict[str, Stub], opts: Options, progress=None,
               folder: Path = EXERCISES):
    self.stubs, self.opts, self.progress = stubs, opts, progress
    self.ws = Workspace(opts, stubs)
    self.reader = Reader(folder, opts)
    self.reference: dict[tuple[str, str], list] = {}
    self.lock = threading.Lock()
    self.gate = _Gate()
    self.signatures: list = []   # (part, exercise, student, label, signature) for similarity
    self.broken = ""             # why the grader stopped grading (`NotGraded`)

  def reference_records(self, part: str, ex: str) -> list:
    """The reference solution's records at this seed (cached on disk by content)."""
    key = (part, ex)
    with self.lock:
      if key in self.reference:
        return self.reference[key]
    cells = definitions.select(reference_program(part), probes.spec(part, ex).answers
                               + probes.spec(part, ex).optional, ex)
    h = hashlib.sha256(json.dumps([part, ex, self.opts.seed, fingerprint(LIB), kit_hash(),
                                   cells]).encode()).hexdigest()[:24]
    cache = cache_dir() / f"{h}.json"
    records = None
    if cache.exists():
      try:
        records = json.loads(cache.read_text())
      except ValueError:
        records = None
    if records is None:
      got = self.run(part, ex, cells)
      bad = [c for c in got.cells if c.get("status") != "ok"]
      if got.records is None or bad or any(r["value"].get("k") in ("todo", "error")
                                           for r in got.records):
        raise NotGraded(f"the reference solution of {part} {ex} failed in the sandbox: "
                        f"{got.why or bad or got.records[-1:]}")
      assert probes.compare(got.records, got.records).passed
      records = got.records
      try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(records))
      except OSError:
        pass
    with self.lock:
      self.reference[key] = records
    return records

  def run(self, part: str, ex: str, cells: list) -> Outcome:
    """One sandbox run. One that times out at its wall-clock bound after waiting long for
    a CPU (or, where no cgroup tells, while the machine is saturated) runs again, alone,
    before that counts."""
    with self.gate.shared():
      got = self.ws.run(part, ex, cells, self.opts.seed)
    if got.starved:
      with self.gate.alone():
        got = self.ws.run(part, ex, cells, self.opts.seed)
    return got

  def grade_one(self, p: Parsed, ex: str) -> dict:
    stub = self.stubs[p.part]
    flags = [f"review: {', '.join(p.flags)}"] if p.flags else []
    if self.broken:
      return not_graded(p, ex, self.broken, stub.points[ex])
    try:
      want = self.reference_records(p.part, ex)
      got = self.run(p.part, ex, p.runs[ex])
      status, reason, notes = verdict(p, ex, got, want, stub)
    except SandboxUnavailable:
      raise
    except NotGraded as e:
      self.broken = self.broken or str(e)
      return not_graded(p, ex, str(e), stub.points[ex])
    except Exception as e:  # noqa: BLE001 (a grader bug must not stop the batch)
      status, reason, notes = "fail", f"grader error: {type(e).__name__}: {e}", []
    return dict(row(p.sub, p.student, p.part, ex, status, reason, p.notes + flags + notes,
                    stub.points[ex]), left_out=left_out(p))

  def grade_submission(self, p: Parsed) -> list[dict]:
    """The rows of one read submission (`Reader.read`): its exercises one after another,
    each in a sandbox of its own, so that no two of its sandboxes ever run at once."""
    if p.failure:
      return self.failure_rows(p)
    out = []
    for ex in self.stubs[p.part].exercises:
      out.append(self.grade_one(p, ex))
      if self.progress:
        self.progress()
    return out

  def failure_rows(self, p: Parsed) -> list[dict]:
    stub = self.stubs.get(p.part) if p.part else None
    if stub:
      return [row(p.sub, p.student, p.part, ex, "fail", p.failure, p.notes, stub.points[ex])
              for ex in stub.exercises]
    return [row(p.sub, p.student, p.part or "?", "*", "fail", p.failure, p.notes)]

  def grade(self, subs: list[Submission], jobs: int, on_parsed=None, on_rows=None) -> list[dict]:
    """Grade every submission, `jobs` submissions at once: each is read when its turn
    comes, and dropped when its exercises are done, so memory holds a few at a time.
    `on_rows(parsed, rows)` is called here, in file order, as each submission is done."""
    def one(sub):
      p = self.reader.read(sub)
      if on_parsed:
        on_parsed(p)
      with self.lock:
        self.signatures += p.signatures
      return p, self.grade_submission(p)
    out = []
    with ThreadPoolExecutor(max(jobs, 1)) as pool:
      for p, rows in pool.map(one, subs):
        if on_rows:
          on_rows(p, rows)
        out += rows
    return out

  def close(self):
    self.reader.stop()
    self.ws.close()


def not_graded(p: Parsed, ex: str, why: str, max_points: float) -> dict:
  """A row for an exercise the grader failed to grade: no points, either way."""
  r = row(p.sub, p.student, p.part, ex, "not graded", f"not graded: {why}", p.notes, max_points)
  return dict(r, points="")


KIT_NAMES = ("definitions.py", "grade.py")   # besides the sandbox's files: what decides records


def kit_hash() -> str:
  h = hashlib.sha256()
  for path in sorted(kit_files() + [Path(__file__).parent / n for n in KIT_NAMES]):
    h.update(path.name.encode() + path.read_bytes())
  return h.hexdigest()[:16]


def cache_dir() -> Path:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(base) / "autodidax-grader"


# --- Command line ---------------------------------------------------------------------------------

def default_jobs() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def seed_arg(text: str) -> int:
  seed = int(text)
  if seed == probes.SHIPPED_SEED:
    raise argparse.ArgumentTypeError(
        f"{seed} is the seed of the learners' own check cells, whose records ship with the "
        "stubs: graded at it, those records would be an answer key. Pick any other seed")
  if seed < 0:
    raise argparse.ArgumentTypeError("a seed is a number >= 1")
  return seed


def peak_memory_mb() -> float:
  """This process's peak resident memory (the grader's, not its sandboxes'). VmHWM, where
  there is one: `ru_maxrss` keeps the high-water mark of the process that started us."""
  try:
    for line in Path("/proc/self/status").read_text().splitlines():
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) / 1024
  except (OSError, ValueError, IndexError):
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def content_hash(sub: Submission) -> str:
  try:
    return hashlib.sha256(sub.load()).hexdigest()
  except Exception:  # noqa: BLE001 (an unreadable file: parse says why)
    return ""


def grader_version() -> str:
  """What decides a grade besides the notebook and the seed: the grader's code and the
  library's (a notebook is graded again when either changed)."""
  return f"{kit_hash()}-{fingerprint(LIB)[:16]}"


def by_submission(rows) -> dict[str, list[dict]]:
  out: dict[str, list[dict]] = {}
  for r in rows:
    out.setdefault(r["submission"], []).append(r)
  return out


def main(argv=None) -> int:
  from tqdm import tqdm
  from . import feedback, gradebook, report
  ap = argparse.ArgumentParser(prog="python -m coursekit.grade",
                               description="Grade submitted exercise notebooks.",
                               epilog="Rules and details: book/instructors.md and this module's docstring.")
  ap.add_argument("submissions", type=Path, help="a folder or .zip of .ipynb files")
  ap.add_argument("--out", type=Path, default=Path("grades"),
                  help="folder for grades.csv and grades.html (default: grades/)")
  ap.add_argument("--part", help="grade every submission as exercises/<part>.ipynb "
                  "(default: each notebook's chapter, from its cells and metadata)")
  ap.add_argument("--jobs", type=int, default=default_jobs(),
                  help="sandboxes run at once (default: the number of cores)")
  ap.add_argument("--seed", type=seed_arg, help="seed of the check inputs (default: a random "
                  "one, recorded in the report: pass it again to reproduce a run; never "
                  f"{probes.SHIPPED_SEED}, the learners' own)")
  ap.add_argument("--timeout", type=float, default=60,
                  help="seconds for one exercise of one notebook (default 60)")
  ap.add_argument("--memory", type=int, default=2048,
                  help="memory limit of each sandbox, MiB (default 2048)")
  ap.add_argument("--no-sandbox", action="store_true",
                  help="run notebooks without bubblewrap: ONLY for trusted notebooks "
                  "(the report says so at its top)")
  ap.add_argument("--cluster", metavar="ADDRESS",
                  help="grade on a Dask cluster: a scheduler's address (tcp://head:8786) or "
                  "local:N, N worker processes here (coursekit.cluster)")
  ap.add_argument("--exercises", type=Path, default=EXERCISES,
                  help="folder of the stub notebooks (default: this repo's exercises/)")
  ap.add_argument("--feedback", choices=feedback.LEVELS, default="all",
                  help="feedback pages for the learners, OUT/feedback/<student>/<chapter>.html "
                  "and OUT/feedback.zip: every exercise (all, default), the failed ones "
                  "(failures), or none")
  ap.add_argument("--gradebook", type=Path, help="the SQLite gradebook that keeps every run "
                  "(default: OUT/gradebook.sqlite); 'none' keeps nothing")
  ap.add_argument("--regrade", action="store_true", help="grade every notebook again, even "
                  "one the gradebook holds with the same content, seed and grader")
  args = ap.parse_args(argv)
  warnings.filterwarnings("ignore", module="nbformat")   # old notebooks: no cell ids, ...

  stubs = load_stubs(args.exercises)
  if args.part and args.part not in stubs:
    ap.error(f"no {args.part}.ipynb in {args.exercises}; pick one of {sorted(stubs)}")
  try:
    subs = collect(args.submissions)
  except (OSError, ValueError, zipfile.BadZipFile) as e:
    print(f"error: {printable(e)}", file=sys.stderr)
    return 1
  if not subs:
    print(f"no .ipynb files in {printable(args.submissions)}", file=sys.stderr)
    return 1
  seed = args.seed if args.seed is not None else probes.SHIPPED_SEED + 1 + secrets.randbelow(2**31 - 2)
  opts = Options(timeout=args.timeout, memory_mib=args.memory, part=args.part, seed=seed,
                 sandbox=not args.no_sandbox)
  try:   # before the gradebook: a run that can't grade leaves no output folder
    if args.cluster:   # the only import of Dask
      from .cluster import ClusterGrader
      grader = ClusterGrader(stubs, opts, args.cluster, args.exercises,
                             log=lambda text: print(text, file=sys.stderr))
    else:
      grader = Grader(stubs, opts, folder=args.exercises)
  except SandboxUnavailable as e:
    print(f"error: can't grade in a sandbox: {e}", file=sys.stderr)
    return 2
  except (OSError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  book_path = args.gradebook or args.out / "gradebook.sqlite"
  try:
    book = None if str(book_path) == "none" else gradebook.Gradebook(book_path)
  except gradebook.GradebookError as e:
    print(f"error: {printable(e)}", file=sys.stderr)
    grader.close()
    return 1
  version, digests, reused, fresh = grader_version(), {}, [], []
  for sub in subs:   # what the gradebook holds at this seed is not graded again
    label = clean(sub.label, 2 * REASON_LIMIT)
    digests[label] = content_hash(sub)
    old = book and not args.regrade and book.seen(label, digests[label], seed, version)
    reused += old or []
    fresh += [] if old else [sub]
  subs = fresh
  mode = grader.mode if args.cluster else lambda: mode_text(grader.ws.sandbox.mode)
  t0 = time.monotonic()
  bar = tqdm(total=0, unit="check", file=sys.stderr,
             desc=f"grading {len(subs)} notebook{'s' * (len(subs) != 1)}")

  def parsed(p):   # the bar grows as the notebooks are read
    if not p.failure:
      bar.total += len(stubs[p.part].exercises)
      bar.refresh()
  grader.progress = lambda: bar.update(1)

  def record(p, group):   # each submission as soon as it is done: Ctrl-C loses none of them
    if book and group and all(r["status"] != "not graded" for r in group):   # a rerun grades those
      book.record(group, digests.get(group[0]["submission"], ""), seed, version)
  try:
    rows = grader.grade(subs, args.jobs, on_parsed=parsed, on_rows=record)
  except SandboxUnavailable as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  finally:
    bar.close()
    grader.close()
    if book:
      book.close()
  elapsed = time.monotonic() - t0

  rows = report.sort_rows(rows + reused, stubs)
  similar = similarity.groups(grader.signatures)
  meta = {"seed": seed, "sandbox": mode(),
          "limits": f"{opts.timeout:g} s of CPU time ({WALL_FACTOR * opts.timeout:g} s of "
                    f"wall-clock time), {opts.memory_mib} MiB and {opts.pids} processes per "
                    "exercise of each notebook, one exercise of a notebook at a time",
          "unsafe": not opts.sandbox}
  args.out.mkdir(parents=True, exist_ok=True)
  csv_path, html_path = report.write(rows, stubs, args.out, meta, similar)
  pages = feedback.write(rows, stubs, args.out / "feedback", args.feedback)
  print(report.tables(rows, stubs))
  print(report.one_line(rows, len(digests), elapsed, csv_path, html_path))
  if reused:
    print(f"{len(by_submission(reused))} notebooks unchanged since {book_path} graded them at "
          "this seed: not graded again (--regrade forces it)")
  if pages:
    print(f"feedback: {len(pages)} pages in {args.out / 'feedback'}, all in "
          f"{args.out / 'feedback.zip'}")
  print(f"seed {seed} ({mode()}); the grader's peak memory {peak_memory_mb():.0f} MB")
  if getattr(grader, "broken", None):   # fail closed: rows that say "not graded", and exit 3
    print(f"error: grading stopped, the rest is not graded: {grader.broken}", file=sys.stderr)
    return 3
  missing = getattr(grader, "count_not_graded", 0)
  if missing:
    print(f"error: {missing} exercise{'s' * (missing != 1)} not graded (the cluster failed, "
          "see their reasons): rerun to grade them", file=sys.stderr)
    return 3
  return 0


if __name__ == "__main__":
  sys.exit(main())
