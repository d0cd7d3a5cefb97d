"""Reading a submission: its chapter, its code rebuilt around the stub, what runs for
each exercise, its review flags and similarity fingerprints (`read`), and all of that
in a worker process under a time and memory budget (`Reader`), so that a notebook
which breaks or stalls the reading costs only its own rows.
"""
from __future__ import annotations

import multiprocessing
import resource
import subprocess
import sys
import threading
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..learner import probe as probes
from . import definitions, similarity
from .chapters import Stub, load_stubs, match_part
from .flags import aliases, scan
from .options import READ_MEMORY_MIB, READ_SECONDS, READER_START, Options, clean
from .rebuild import program
from .sandboxed.cells import TREES, parse as parse_cell
from .submissions import Submission, read_notebook, student_of


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
  e = parse_cell(source)
  if isinstance(e, SyntaxError):
    return f"SyntaxError: {e.msg} (line {e.lineno})"
  if isinstance(e, Exception):
    return f"{type(e).__name__}: {clean(e, 80)}"
  return ""


def read(sub: Submission, stubs: dict[str, Stub], opts: Options) -> Parsed:
  """`parse`, then the review aids (flags, similarity fingerprints): a failure in one of
  those costs the notebook that aid, with a note, never its grade."""
  TREES.clear()   # the trees of this notebook's cells, each parsed once
  try:
    return _read(sub, stubs, opts)
  finally:
    TREES.clear()


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
            "from coursekit.grader.reading import _reader_main; _reader_main(c, *c.recv())")
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
