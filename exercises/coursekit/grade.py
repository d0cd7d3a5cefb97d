"""Grade submitted exercise notebooks.

    python -m coursekit.grade SUBMISSIONS [--out DIR] [--jobs N] [--part NAME] [--seed N]
                              [--timeout S] [--memory MIB] [--no-sandbox]
    make grade SUBMISSIONS=dir-or-zip [GRADES=outdir]

SUBMISSIONS is a folder or a .zip of notebooks (`.ipynb`, any case), any number per student,
for any chapter. Writes `grades.csv` and `grades.html` into `--out` (default `grades/`).

How a notebook is graded (the instructor guide has the threat model):

1. Its chapter comes from its cells (ids, exercise metadata, the names it
   defines) and its metadata; `--part` forces one. Its student comes from its
   subfolder, its `coursekit.student` metadata, or its file name
   (`coursekit.submissions`).
2. Its code is rebuilt around the stub: the stub's setup and given cells are
   the grader's own; check cells are dropped (they are the learner's feedback,
   not the grade).
3. For each exercise, only the learner's definitions that the exercise's answers
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
import os
import re
import resource
import secrets
import shutil
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
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
  from .runner import neutralize
  names = set()
  for c in nb.get("cells", []):
    if c.get("cell_type") != "code":
      continue
    try:
      tree = ast.parse(neutralize(c.get("source", "")))
    except (SyntaxError, ValueError):
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
  grafted = graft(nb, stub.nb)
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


@dataclass
class Options:
  timeout: float = 60           # seconds per sandbox run (one exercise of one notebook)
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


class Workspace:
  """The grader's own temporary folder: one zip per learner edition (with the runner).
  A sandbox gets its exercise's zip through a file descriptor, never a folder."""

  def __init__(self, opts: Options, stubs: dict[str, Stub]):
    self.opts = opts
    self.root = Path(tempfile.mkdtemp(prefix="coursekit-grade-"))
    self.editions: dict[tuple[str, str], Path] = {}
    self.lock = threading.Lock()
    limits = Limits(memory_mib=opts.memory_mib, pids=opts.pids, timeout=opts.timeout,
                    cpu_seconds=int(opts.timeout) + 5)
    self.sandbox = Sandbox(limits=limits, enabled=opts.sandbox, env={
        "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"})
    self.stubs = stubs

  def edition(self, part: str, exercise: str) -> Path:
    """The zip of `autodidax` without `exercise`'s answers, and the runner (built once)."""
    with self.lock:
      if (part, exercise) not in self.editions:
        spec = probes.spec(part, exercise)
        dest = self.root / "editions" / part / exercise.replace(".", "_")
        dest.mkdir(parents=True)
        pkg = build_edition(dest, {t: (exercise, name, spec.answers)
                                   for t, name in spec.removes.items()})
        self.editions[part, exercise] = package(pkg, dest.with_suffix(".zip"), ZIP_INSIDE)
        shutil.rmtree(dest)
      return self.editions[part, exercise]

  def run(self, part: str, exercise: str, cells: list[dict], seed: int) -> Outcome:
    """Run `cells` (`definitions.select`'s) and the exercise's probe in a fresh sandbox."""
    zipped = self.edition(part, exercise)

    def job(result_fd):
      return json.dumps({"part": part, "exercise": exercise, "seed": seed,
                         "result_fd": result_fd,
                         "cells": [[c["kind"], c["source"], c["cell"]] for c in cells]}).encode()
    command = [self.sandbox.python, "-m", "coursekit.runner"]
    if self.sandbox.enabled:
      r = self.sandbox.run(command, job, files={ZIP_INSIDE: zipped},
                           env={"PYTHONPATH": ZIP_INSIDE})
    else:   # trusted: the same program, as a plain subprocess in a temporary folder
      with tempfile.TemporaryDirectory(dir=self.root) as cwd:
        r = self.sandbox.run(command, job, env={"PYTHONPATH": str(zipped)}, cwd=cwd)
    return parse_outcome(r, self.opts)

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
    if isinstance(data.get("cell"), dict):
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
    out.why = f"it ran past the time limit ({opts.timeout:g} s)"
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
              submission=clean(sub.label, 2 * REASON_LIMIT))


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
    runs = {ex: definitions.select(cells, probes.spec(part, ex).answers
                                   + probes.spec(part, ex).optional, ex)
            for ex in stubs[part].exercises}
  except Exception as e:  # noqa: BLE001 (a grader bug must not stop the batch)
    return Parsed(sub, student, opts.part, notes=[who],
                  failure=f"grader error: {type(e).__name__}: {e}")
  p = Parsed(sub, student, part, cells, [who, note], runs=runs)
  if not any(c["kind"] == "learner" and c["source"].strip() for c in cells):
    p.failure = "no answer: the notebook has no code of its own"
  names = aliases(c["source"] for c in cells)
  p.flags = sorted({f"{f} (cell {i + 1})" for i, c in enumerate(cells) if c["kind"] == "learner"
                    for f in scan(c["source"], names)})
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
  prefix = "; ".join(x for x in (stub_fail, own) if x)
  prefix = prefix + "; " if prefix else ""
  if v.todo:   # the stub's own `raise` is no news: say what is missing
    return "fail", f"not done yet: {v.message}", notes
  return "fail", f"{prefix}{v.label}: {v.message}", notes


class Grader:
  def __init__(self, stubs: dict[str, Stub], opts: Options, progress=None):
    self.stubs, self.opts, self.progress = stubs, opts, progress
    self.ws = Workspace(opts, stubs)
    self.reference: dict[tuple[str, str], list] = {}
    self.lock = threading.Lock()
    self.signatures: list = []   # (part, exercise, student, label, signature) for similarity

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
      got = self.ws.run(part, ex, cells, self.opts.seed)
      bad = [c for c in got.cells if c.get("status") != "ok"]
      if got.records is None or bad or any(r["value"].get("k") in ("todo", "error")
                                           for r in got.records):
        raise RuntimeError(f"the reference solution of {part} {ex} failed in the sandbox: "
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

  def grade_one(self, p: Parsed, ex: str) -> dict:
    stub = self.stubs[p.part]
    try:
      want = self.reference_records(p.part, ex)
      got = self.ws.run(p.part, ex, p.runs[ex], self.opts.seed)
      status, reason, notes = verdict(p, ex, got, want, stub)
    except SandboxUnavailable:
      raise
    except Exception as e:  # noqa: BLE001 (a grader bug must not stop the batch)
      status, reason, notes = "fail", f"grader error: {type(e).__name__}: {e}", []
    flags = [f"review: {', '.join(p.flags)}"] if p.flags else []
    return row(p.sub, p.student, p.part, ex, status, reason, p.notes + flags + notes,
               stub.points[ex])

  def failure_rows(self, p: Parsed) -> list[dict]:
    stub = self.stubs.get(p.part) if p.part else None
    if stub:
      return [row(p.sub, p.student, p.part, ex, "fail", p.failure, p.notes, stub.points[ex])
              for ex in stub.exercises]
    return [row(p.sub, p.student, p.part or "?", "*", "fail", p.failure, p.notes)]

  def grade(self, subs: list[Submission], jobs: int, on_parsed=None) -> list[dict]:
    """Grade every submission: each is read and parsed when its turn comes, and dropped
    when its exercises are done, so that memory holds a few notebooks at a time."""
    rows, futures = [], []
    window = threading.BoundedSemaphore(2 * max(jobs, 1) + 2)   # notebooks in flight
    with ThreadPoolExecutor(max(jobs, 1)) as pool:
      for sub in subs:
        window.acquire()
        p = parse(sub, self.stubs, self.opts)
        if on_parsed:
          on_parsed(p)
        self.signatures += similarity.signatures(p)
        if p.failure:
          rows += self.failure_rows(p)
          window.release()
          continue
        exercises = self.stubs[p.part].exercises
        left = [len(exercises)]

        def done(_, left=left):
          with self.lock:
            left[0] -= 1
            if left[0] == 0:
              window.release()
          if self.progress:
            self.progress()
        for ex in exercises:
          f = pool.submit(self.grade_one, p, ex)
          f.add_done_callback(done)
          futures.append(f)
      for f in as_completed(futures):
        rows.append(f.result())
    return rows

  def close(self):
    self.ws.close()


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


def main(argv=None) -> int:
  from tqdm import tqdm
  from . import report
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
  ap.add_argument("--exercises", type=Path, default=EXERCISES,
                  help="folder of the stub notebooks (default: this repo's exercises/)")
  args = ap.parse_args(argv)
  sys.modules.setdefault("rfc3987_syntax", None)   # nbformat's jsonschema: skip a slow import
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
  try:
    grader = Grader(stubs, opts)
  except SandboxUnavailable as e:
    print(f"error: can't grade in a sandbox: {e}", file=sys.stderr)
    return 2
  t0 = time.monotonic()
  bar = tqdm(total=0, unit="check", file=sys.stderr,
             desc=f"grading {len(subs)} notebook{'s' * (len(subs) != 1)}")

  def parsed(p):   # the bar grows as the notebooks are read
    if not p.failure:
      bar.total += len(stubs[p.part].exercises)
      bar.refresh()
  grader.progress = lambda: bar.update(1)
  try:
    rows = grader.grade(subs, args.jobs, on_parsed=parsed)
  except SandboxUnavailable as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  finally:
    bar.close()
    grader.close()
  elapsed = time.monotonic() - t0

  rows = report.sort_rows(rows, stubs)
  similar = similarity.pairs(grader.signatures)
  meta = {"seed": seed, "sandbox": mode_text(grader.ws.sandbox.mode),
          "limits": f"{opts.timeout:g} s, {opts.memory_mib} MiB and {opts.pids} processes per "
                    "exercise of each notebook",
          "unsafe": not opts.sandbox}
  args.out.mkdir(parents=True, exist_ok=True)
  csv_path, html_path = report.write(rows, stubs, args.out, meta, similar)
  print(report.tables(rows, stubs))
  print(report.one_line(rows, len(subs), elapsed, csv_path, html_path))
  print(f"seed {seed} ({mode_text(grader.ws.sandbox.mode)}); the grader's peak memory "
        f"{peak_memory_mb():.0f} MB")
  return 0


if __name__ == "__main__":
  sys.exit(main())
