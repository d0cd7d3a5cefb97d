"""Scheduling the sandbox runs: the learner editions, one fresh sandbox per exercise of
a notebook, the reference solution's records at the run's seed, and the `Grader`
that puts them together on one machine (`cluster` does the same on Dask).

A job that is the same as one this grader already ran (the exercise, its cells, the seed)
gets that run's outcome: the sandbox is given nothing else, so it could not tell them apart.

`Workspace.run` is the boundary: it hands the sandbox a job (the cells that run for
the exercise, then the seed) and the zip of the learner edition with the runner
(`sandboxed/`), and reads back only what the runner wrote (`outcome`). Submissions
are read in a worker process (`reading.Reader`); verdicts are decided here,
outside (`verdicts`), so a grade never depends on how runs were scheduled.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

from ..learner import probe as probes
from ..learner.stubs import EXERCISES
from . import definitions
from .chapters import Stub
from .edition import LIB, build as build_edition, fingerprint, package
from .options import WALL_FACTOR, NotGraded, Options, cache_dir, clean, kit_hash
from .outcome import Outcome, parse_outcome
from .reading import Parsed, Reader
from .rebuild import reference_program
from .sandbox import Limits, Sandbox, SandboxUnavailable
from .submissions import Submission
from .verdicts import left_out, not_graded, row, verdict

ZIP_INSIDE = "/opt/autodidax/site.zip"   # where a sandbox finds the edition and the runner
RUNNER = "coursekit.runner"   # what runs in it (grader/sandboxed/runner.py)


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
    command = [self.sandbox.python, "-m", RUNNER]
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


class Grader:
  def __init__(self, stubs: dict[str, Stub], opts: Options, progress=None,
               folder: Path = EXERCISES):
    self.stubs, self.opts, self.progress = stubs, opts, progress
    self.ws = Workspace(opts, stubs)
    self.reader = Reader(folder, opts)
    self.reference: dict[tuple[str, str], list] = {}
    self.lock = threading.Lock()
    self.gate = _Gate()
    self.done: OrderedDict[str, Future] = OrderedDict()   # job -> its outcome (`run`)
    self.shared_runs = 0         # runs answered by an identical job's sandbox
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

  SHARED = 512   # finished jobs kept for `run` to share (a few classes' worth of one part)

  def run(self, part: str, ex: str, cells: list) -> Outcome:
    """One sandbox run, or the outcome of an identical job's (the same exercise, cells and
    seed: an untouched stub, an answer many learners share, the reference solution itself)
    run by this grader: what a sandbox sees is only the job, so it would give the same."""
    key = hashlib.sha256(json.dumps([part, ex, cells]).encode()).hexdigest()
    with self.lock:
      mine = key not in self.done
      if mine:
        self.done[key] = Future()
        while len(self.done) > self.SHARED and next(iter(self.done.values())).done():
          self.done.popitem(last=False)
      else:
        self.shared_runs += 1
      future = self.done[key]
    if not mine:
      return future.result()
    try:
      future.set_result(self._sandbox_run(part, ex, cells))
    except BaseException as e:
      future.set_exception(e)
    return future.result()

  def _sandbox_run(self, part: str, ex: str, cells: list) -> Outcome:
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
