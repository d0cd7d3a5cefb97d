"""Grade submitted exercise notebooks.

    python -m coursekit.grade SUBMISSIONS [--out DIR] [--jobs N] [--part NAME]
                              [--timeout S] [--total-timeout S] [--memory MIB]
    autodidax-grade SUBMISSIONS ...          (the same, as a console command)
    make grade SUBMISSIONS=dir-or-zip [GRADES=outdir]

SUBMISSIONS is a folder or a .zip of `.ipynb` files (or one notebook), any number per student,
for any chapter. Writes `grades.csv` and `grades.html` into `--out`, shows a
progress bar, prints a table per chapter and a one-line summary.

Who: a notebook's `coursekit.student` metadata if it has one; else, for a
file in a subfolder, the subfolder's name (one folder per student, as LMS
exports do; a single folder around everything is ignored); else the file
name without `.ipynb` and without trailing tokens `part<N>`, `v<N>`, `<N>`,
`final`, `submission` or `copy` joined by `_`, `-`, `.` or a space:
`alice.ipynb`, `alice_part2.ipynb`, `alice-v2.ipynb`, `alice_part1_final.ipynb`
are all alice's; `mary-jane.ipynb` is mary-jane's.

Which chapter: the notebook's cells decide. Each stub `exercises/<part>.ipynb`
is scored by the exercise cell ids (and exercise numbers) it shares with the
submission; the `coursekit.part` metadata wins unless another stub matches
strictly better (then the notebook is graded as that part, with a note).
`--part` forces one.

How (see book/instructors.md): the notebook is rebuilt from the stub: every
stub code cell that is not a solution (setup, given code, check cells) is
taken from the stub, by cell id, wherever the learner put, edited or deleted
it; the learner's solution cells and own cells are kept. It runs in a fresh
kernel, in a temporary folder, under resource limits (`coursekit.sandbox`),
with a guard against tampering (`coursekit.guard`). An exercise passes when
its check cell runs without error and prints exactly the stub's stored
output. Submissions are only read, never written.
"""
from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import nbformat

from .report import FIELDS  # noqa: F401 (the columns of grades.csv)
from .stubs import EXERCISES

REASON_LIMIT = 300
MAX_OUTPUT = 20_000          # characters of each cell's output kept by the grader


# --- Finding the submissions and their students ---------------------------------------------

@dataclass
class Submission:
  label: str                 # path inside the folder or zip, posix
  data: bytes
  folder: str | None = None  # the per-student subfolder, if any


def collect(src: Path) -> list[Submission]:
  """Every .ipynb under `src` (a folder or a .zip), sorted by path."""
  found: dict[str, bytes] = {}
  skip = lambda parts: any(p.startswith(".") or p == "__MACOSX" for p in parts)
  if src.is_file() and zipfile.is_zipfile(src):
    with zipfile.ZipFile(src) as z:
      for info in z.infolist():
        parts = PurePosixPath(info.filename).parts
        if info.is_dir() or not info.filename.endswith(".ipynb") or skip(parts) or ".." in parts:
          continue
        found["/".join(parts)] = z.read(info)   # read in memory: nothing is extracted
  elif src.is_file() and src.suffix == ".ipynb":   # a single notebook
    found[src.name] = src.read_bytes()
  elif src.is_dir():
    for path in src.rglob("*.ipynb"):
      rel = path.relative_to(src)
      if path.is_file() and not skip(rel.parts):
        found[rel.as_posix()] = path.read_bytes()
  else:
    raise FileNotFoundError(f"{src} is neither a folder nor a .zip file")
  labels = sorted(found)
  # A single folder around everything (a zipped folder) says nothing: drop it.
  parts = [PurePosixPath(l).parts for l in labels]
  depth = 0
  while parts and all(len(p) > depth + 1 for p in parts) and len({p[depth] for p in parts}) == 1:
    depth += 1
  subs = []
  for label, p in zip(labels, parts):
    rest = p[depth:]
    subs.append(Submission(label, found[label], rest[0] if len(rest) > 1 else None))
  return subs


SUFFIX = re.compile(r"[-_. ]+(part\d+|p\d+|v\d+|\d+|final|submission|copy)$", re.I)


def student_of(sub: Submission, nb) -> str:
  meta = (nb or {}).get("metadata", {}).get("coursekit", {}) if isinstance(nb, dict) else {}
  who = meta.get("student") if isinstance(meta, dict) else None
  if isinstance(who, str) and who.strip():
    return clean(who, 64)
  if sub.folder:
    return sub.folder
  stem = PurePosixPath(sub.label).name[:-len(".ipynb")]
  name = stem
  while (shorter := SUFFIX.sub("", name)) != name and shorter:
    name = shorter
  return name or stem


# --- The stubs ---------------------------------------------------------------------------------

def is_check(cell) -> bool:
  return cell.get("metadata", {}).get("role") == "check"


def is_solution(cell) -> bool:
  return cell.get("metadata", {}).get("role") == "solution"


@dataclass
class Stub:
  part: str
  nb: nbformat.NotebookNode
  exercises: list = field(default_factory=list)    # in order
  titles: dict = field(default_factory=dict)
  points: dict = field(default_factory=dict)
  solution_ids: dict = field(default_factory=dict)  # exercise -> [cell ids]
  exercise_ids: set = field(default_factory=set)    # ids of statement/solution/check cells


def load_stubs(folder: Path = EXERCISES) -> dict[str, Stub]:
  stubs = {}
  for path in sorted(folder.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    stub = Stub(path.stem, nb)
    for cell in nb.cells:
      ex, role = cell.metadata.get("exercise"), cell.metadata.get("role")
      if ex is None:
        continue
      ex = str(ex)
      stub.exercise_ids.add(cell.id)
      if role == "statement":
        stub.titles[ex] = cell.metadata.get("title", "")
      elif role == "solution":
        stub.solution_ids.setdefault(ex, []).append(cell.id)
      elif role == "check":
        stub.exercises.append(ex)
        stub.points[ex] = float(cell.metadata.get("points", 1))
    stubs[stub.part] = stub
  return stubs


def match_part(nb, stubs: dict[str, Stub], forced: str | None) -> tuple[str | None, str]:
  """(the part to grade `nb` as, a note when that isn't what its metadata says)."""
  if forced:
    return forced, ""
  meta = nb.get("metadata", {}).get("coursekit", {})
  claimed = meta.get("part") if isinstance(meta, dict) else None
  ids = {c.get("id") for c in nb.cells}
  exs = {str(c.get("metadata", {}).get("exercise")) for c in nb.cells
         if c.get("metadata", {}).get("exercise") is not None}
  scores = {p: len(ids & s.exercise_ids) + len(exs & set(s.exercises)) for p, s in stubs.items()}
  best = max(sorted(scores), key=lambda p: scores[p], default=None)
  if claimed in stubs and scores[claimed] >= scores.get(best, 0):
    return claimed, ""
  if best is not None and scores[best] > 0:
    if claimed:
      return best, f"graded as {best}: its metadata says {claimed}, but its cells are {best}'s"
    return best, f"graded as {best}: no chapter metadata; its cells are {best}'s"
  return None, (f"can't tell which chapter this is: its metadata says {claimed!r} and no cell "
                f"matches a stub" if claimed else
                "can't tell which chapter this is: no coursekit.part metadata and no cell id "
                "of any chapter's stub")


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
      ids = sol_by_ex.get(str(cell.metadata.get("exercise")))
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


# --- Flagging suspicious code ------------------------------------------------------------------

GUARDED = {"checks", "coursekit", "np", "numpy", "jax", "jnp", "builtins", "sys", "math",
           "IPython", "ipykernel", "testing", "Checker", "__builtins__"}
RISKY_IMPORTS = {"ctypes", "gc", "importlib", "builtins", "coursekit.guard", "signal"}
RISKY_CALLS = {"exec", "eval", "compile", "__import__", "get_ipython", "globals", "setattr",
               "delattr"}
RISKY_ATTRS = {("sys", "modules"), ("sys", "settrace"), ("sys", "setprofile"),
               ("gc", "get_objects"), ("gc", "get_referrers"), ("coursekit", "guard"),
               ("sys", "stdout"), ("sys", "stderr")}


def _root(node):
  while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
    node = node.value if not isinstance(node, ast.Call) else node.func
  return node.id if isinstance(node, ast.Name) else None


def scan(source: str) -> list[str]:
  """What in a learner's cell could tamper with the checks (for a human to review)."""
  lines = [("pass" if l.lstrip().startswith(("%", "!")) else l) for l in source.splitlines()]
  found = set()
  if any(l.lstrip().startswith("!") for l in source.splitlines()):
    found.add("runs a shell command")
  try:
    tree = ast.parse("\n".join(lines))
  except SyntaxError:
    return sorted(found)
  for node in ast.walk(tree):
    targets = []
    if isinstance(node, (ast.Assign, ast.Delete)):
      targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
      targets = [node.target]
    for t in targets:
      if isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in GUARDED:
        found.add(f"assigns {ast.unparse(t)}")
    if isinstance(node, (ast.Global,)) and GUARDED & set(node.names):
      found.add(f"rebinds {', '.join(sorted(GUARDED & set(node.names)))}")
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
      for m in mods:
        if m in RISKY_IMPORTS or m.split(".")[0] in RISKY_IMPORTS:
          found.add(f"imports {m}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in RISKY_CALLS:
      if node.func.id in ("setattr", "delattr"):
        if node.args and _root(node.args[0]) in GUARDED:
          found.add(f"calls {node.func.id} on {ast.unparse(node.args[0])}")
      else:
        found.add(f"calls {node.func.id}()")
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and (node.value.id, node.attr) in RISKY_ATTRS):
      found.add(f"uses {node.value.id}.{node.attr}")
  return sorted(found)


# --- Grading one submission -------------------------------------------------------------------

HEX = re.compile(r"0x[0-9a-fA-F]{6,}")


def clean(text, limit: int = REASON_LIMIT) -> str:
  """One line, no memory addresses, at most `limit` characters."""
  text = HEX.sub("0x…", " ".join(str(text).split()))
  return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass
class Options:
  timeout: float = 120          # seconds per cell
  total_timeout: float = 600    # seconds per submission, kernel start included
  memory_mib: int = 4096        # address space of the kernel
  file_mib: int = 256           # largest file the kernel may write
  max_output: int = MAX_OUTPUT
  part: str | None = None


def kernel_env(workdir: Path) -> dict:
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("COURSEKIT_", "PYTEST_", "JPY_", "JUPYTER_"))}
  tmp = workdir / "tmp"
  tmp.mkdir()
  env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", PYTHONHASHSEED="0",
             OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
             XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
             MPLBACKEND="Agg", TMPDIR=str(tmp), IPYTHONDIR=str(workdir / ".ipython"),
             PYDEVD_DISABLE_FILE_VALIDATION="1")
  return env


def rlimits(opts: Options) -> dict:
  return {"AS": opts.memory_mib << 20, "CPU": int(opts.total_timeout) + 30,
          "FSIZE": opts.file_mib << 20, "CORE": 0}


def outputs_of(cell) -> list:
  """A stored cell's outputs as the kernel driver reports them, for comparing."""
  out = []
  for o in cell.get("outputs", []):
    if o.get("output_type") == "stream":
      kind = f"stream:{o.get('name')}"
      if out and out[-1][0] == kind:
        out[-1] = (kind, out[-1][1] + o.get("text", ""))
      else:
        out.append((kind, o.get("text", "")))
    elif o.get("output_type") in ("display_data", "execute_result"):
      out.append((o["output_type"], str(o.get("data", {}).get("text/plain", ""))))
  return [(k, t.rstrip()) for k, t in out]


def grade_submission(sub: Submission, stubs: dict[str, Stub], opts: Options) -> list[dict]:
  """The rows of grades.csv for one submission: never raises."""
  try:
    nb = nbformat.reads(sub.data.decode("utf-8"), as_version=4)
    if not isinstance(nb.get("cells"), list):
      raise ValueError("no list of cells")
    for c in nb.cells:
      if not (isinstance(c, dict) and isinstance(c.get("source"), str) and "cell_type" in c):
        raise ValueError("a cell is not a notebook cell")
  except Exception as e:  # noqa: BLE001 (anything a broken file may raise)
    reason = f"unreadable notebook: {type(e).__name__}: {e}"
    if opts.part:
      stub = stubs[opts.part]
      return [row(sub, student_of(sub, None), stub.part, ex, "fail", reason,
                  max_points=stub.points[ex]) for ex in stub.exercises]
    return [row(sub, student_of(sub, None), "?", "*", "fail", reason)]
  student = student_of(sub, nb)
  part, note = match_part(nb, stubs, opts.part)
  if part is None:
    return [row(sub, student, "?", "*", "fail", note)]
  stub = stubs[part]
  try:
    return _grade(sub, student, nb, stub, note, opts)
  except Exception as e:  # noqa: BLE001 (a grader bug must not stop the batch)
    return [row(sub, student, part, ex, "fail", f"grader error: {type(e).__name__}: {e}",
                max_points=stub.points[ex]) for ex in stub.exercises]


def row(sub, student, part, exercise, status, reason="", notes=(), max_points=0.0) -> dict:
  points = max_points if status == "pass" else 0.0
  return dict(student=student, part=part, exercise=exercise, points=f"{points:g}",
              max_points=f"{max_points:g}", status=status, reason=clean(reason),
              notes=clean("; ".join(n for n in notes if n), 2 * REASON_LIMIT), submission=sub.label)


def _grade(sub, student, nb, stub: Stub, part_note: str, opts: Options) -> list[dict]:
  grafted = graft(nb, stub.nb)
  canon = {c.id: c for c in canonical_cells(stub.nb)}
  sol_ids = {cid: ex for ex, ids in stub.solution_ids.items() for cid in ids}
  code = [c for c in grafted.cells if c.cell_type == "code"]

  def owner(cell):   # (exercise or None, "check" | "canonical" | "solution" | "own")
    cid = cell.get("id")
    if cid in canon:
      return str(canon[cid].metadata.get("exercise")), "check" if is_check(cell) else "canonical"
    if cid in sol_ids:
      return sol_ids[cid], "solution"
    if is_solution(cell) and str(cell.metadata.get("exercise")) in stub.exercises:
      return str(cell.metadata.get("exercise")), "solution"
    return None, "own"

  kinds = [owner(c) for c in code]
  answered = {ex for ex, k in kinds if k == "solution"}
  flags = sorted({f"{f} ({c.get('id')})" for c, (_, k) in zip(code, kinds)
                  if k in ("solution", "own") for f in scan(c.source)})
  sub_notes = [part_note] + ([f"review: {', '.join(flags)}"] if flags else [])

  def missing_note(ex):
    if ex in answered:
      return ""
    return (f"no solution cell for {ex} (expected id {', '.join(stub.solution_ids.get(ex, []))}; "
            f"an older version of the exercises?)")

  if not any(k in ("solution", "own") and c.source.strip() for c, (_, k) in zip(code, kinds)):
    return [row(sub, student, stub.part, ex, "fail",
                "no answer: the notebook has no solution cells or code of its own",
                sub_notes, stub.points[ex]) for ex in stub.exercises]

  runs, guard = {}, {}
  start = time.monotonic()
  deadline = start + opts.total_timeout
  workdir = Path(tempfile.mkdtemp(prefix="coursekit-grade-"))
  try:
    (workdir / "submission.ipynb").write_text(nbformat.writes(grafted))
    for extra in ("data",):   # files the exercises read, if a chapter ever needs some
      if (EXERCISES / extra).is_dir():
        shutil.copytree(EXERCISES / extra, workdir / extra)
    from .kernel import Kernel
    try:
      kernel = Kernel(str(workdir), kernel_env(workdir), rlimits(opts),
                      startup_timeout=min(120, opts.total_timeout))
    except Exception as e:  # noqa: BLE001
      return [row(sub, student, stub.part, ex, "fail", f"the notebook could not be run: {e}",
                  sub_notes, stub.points[ex]) for ex in stub.exercises]
    try:
      kernel.expression("__import__('coursekit.guard').guard.install(globals())")
      for i, (cell, (ex, kind)) in enumerate(zip(code, kinds)):
        if kind == "check" and kernel.alive():
          found = kernel.expression(f"__import__('coursekit.guard').guard.before_check({ex!r})")
          try:
            guard[ex] = json.loads(ast.literal_eval(found)) if found else []
          except (ValueError, SyntaxError):
            guard[ex] = ["the guard's report was unreadable"]
          if found is None and kernel.alive():
            guard[ex] = ["the grader's guard could not run (was it tampered with?)"]
        runs[i] = kernel.run(cell.source, opts.timeout, deadline, opts.max_output)
        if kind == "canonical" and runs[i].status == "ok":
          kernel.expression("__import__('coursekit.guard').guard.after_canonical()")
    finally:
      kernel.stop()
  finally:
    shutil.rmtree(workdir, ignore_errors=True)

  setup_fail = next((f"the setup cell {c.id} failed ({runs[i].error or runs[i].status}); "
                     for i, (c, (_, k)) in enumerate(zip(code, kinds))
                     if k == "canonical" and i in runs and runs[i].status != "ok"), "")
  rows = []
  for ex in stub.exercises:
    ci = next(i for i, (e, k) in enumerate(kinds) if k == "check" and e == ex)
    check = runs[ci]
    expected = outputs_of(canon[code[ci].id])
    got = [(k, t.rstrip()) for k, t in check.outputs]
    notes = sub_notes + [missing_note(ex)]
    if guard.get(ex):
      notes.append("tampering undone before the check: " + ", ".join(guard[ex]))
    if check.status == "ok" and got == expected:
      rows.append(row(sub, student, stub.part, ex, "pass", "", notes, stub.points[ex]))
      continue
    reason = setup_fail + failure_reason(ex, check, got, expected, runs, code, kinds, opts)
    if not (ex in answered) and not reason.startswith("no solution"):
      reason = f"{missing_note(ex)}; {reason}"
    rows.append(row(sub, student, stub.part, ex, "fail", reason, notes, stub.points[ex]))
  return rows


def _stopped(run, where, opts) -> str:
  if run.status == "timeout":
    if run.why:
      return f"{where} was stopped: the submission's time limit ({opts.total_timeout:g} s) was reached"
    return f"{where} timed out (over {opts.timeout:g} s)"
  if run.status == "died":
    return f"{run.why} in {where}"
  return f"{where} was not run: {run.why}"


def failure_reason(ex, check, got, expected, runs, code, kinds, opts) -> str:
  for i, (e, k) in enumerate(kinds):   # the exercise's own cells first
    r = runs.get(i)
    if e == ex and k == "solution" and r is not None and r.status != "ok":
      if r.status == "error":
        return f"solution cell raised {r.error}"
      return _stopped(r, "the solution cell", opts)
  if check.status in ("timeout", "died", "skipped"):
    return _stopped(check, "the check", opts)
  if (check.error or "").startswith("NotImplementedError"):
    return f"not done yet ({check.error})"
  if check.error:
    return f"check failed: {check.error}"
  if check.truncated:
    return "check output differs from the expected output (and was truncated: too long)"
  if not got:
    return "the check printed nothing (expected its summary line)"
  return f"check output differs from the expected output: got {got[0][1][:80]!r}"


# --- Command line ---------------------------------------------------------------------------------

def default_jobs() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def main(argv=None) -> int:
  from tqdm import tqdm
  from . import report
  ap = argparse.ArgumentParser(prog="python -m coursekit.grade",
                               description="Grade submitted exercise notebooks.",
                               epilog="Rules and details: book/instructors.md and this module's docstring.")
  ap.add_argument("submissions", type=Path, help="a folder or .zip of .ipynb files")
  ap.add_argument("--out", type=Path, default=Path("."),
                  help="folder for grades.csv and grades.html (default: .)")
  ap.add_argument("--part", help="grade every submission as exercises/<part>.ipynb "
                  "(default: each notebook's chapter, from its cells and metadata)")
  ap.add_argument("--jobs", type=int, default=default_jobs(),
                  help="submissions graded at once, one kernel each (default: the number of cores)")
  ap.add_argument("--timeout", type=float, default=120, help="seconds per cell (default 120)")
  ap.add_argument("--total-timeout", type=float, default=600,
                  help="seconds per submission, kernel start included (default 600)")
  ap.add_argument("--memory", type=int, default=4096,
                  help="address-space limit of each kernel, MiB (default 4096)")
  ap.add_argument("--exercises", type=Path, default=EXERCISES,
                  help="folder of the stub notebooks (default: this repo's exercises/)")
  args = ap.parse_args(argv)
  # nbformat imports jsonschema, whose optional IRI format checker builds a
  # grammar at import (~2 s) that nbformat never uses (as in nbval_run.py).
  sys.modules.setdefault("rfc3987_syntax", None)
  warnings.filterwarnings("ignore", module="nbformat")   # old notebooks: no cell ids, ...

  stubs = load_stubs(args.exercises)
  if args.part and args.part not in stubs:
    ap.error(f"no {args.part}.ipynb in {args.exercises}; pick one of {sorted(stubs)}")
  try:
    subs = collect(args.submissions)
  except (OSError, zipfile.BadZipFile) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  if not subs:
    print(f"no .ipynb files in {args.submissions}", file=sys.stderr)
    return 1
  opts = Options(timeout=args.timeout, total_timeout=args.total_timeout,
                 memory_mib=args.memory, part=args.part)
  before = {s.label: hashlib.sha256(s.data).hexdigest() for s in subs}

  rows = []
  parts = sorted({p for p in (match_part_quick(s, stubs, args.part) for s in subs) if p})
  t0 = time.monotonic()
  with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
    futures = [pool.submit(grade_submission, s, stubs, opts) for s in subs]
    for f in tqdm(as_completed(futures), total=len(futures), unit="notebook", file=sys.stderr,
                  desc=f"grading {', '.join(parts) or 'submissions'}"):
      rows.extend(f.result())
  elapsed = time.monotonic() - t0
  for s in subs:   # we only read them; make sure, for the record
    assert hashlib.sha256(s.data).hexdigest() == before[s.label]

  rows = report.sort_rows(rows, stubs)
  args.out.mkdir(parents=True, exist_ok=True)
  csv_path, html_path = report.write(rows, stubs, args.out)
  print(report.tables(rows, stubs))
  print(report.one_line(rows, len(subs), elapsed, csv_path, html_path))
  return 0


def match_part_quick(sub: Submission, stubs, forced) -> str | None:
  """The chapter of a submission, for the progress bar's title (None if unknown)."""
  try:
    nb = nbformat.reads(sub.data.decode("utf-8"), as_version=4)
    return match_part(nb, stubs, forced)[0]
  except Exception:  # noqa: BLE001
    return None


if __name__ == "__main__":
  sys.exit(main())
