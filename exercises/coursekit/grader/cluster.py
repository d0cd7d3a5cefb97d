"""Grading on a Dask cluster: `python -m coursekit.grade SUBMISSIONS --cluster ADDRESS`.

ADDRESS is a running scheduler (`tcp://head:8786`) or `local:N`, a
`distributed.LocalCluster` of N one-thread worker processes on this machine.
Only `--cluster` imports this module, and with it Dask.

The unit of work is one submission: its notebook travels to a worker as
bytes; the worker parses it and runs each of its exercises in a bubblewrap
sandbox, one after another, with the same limits as on one machine, and sends
back the parsed submission and its sandboxes' outcomes. The reference
solution's records for the seed are one task per chapter and exercise, on the
cluster, whatever the number of submissions. The client alone compares
records with the reference and writes the reports, so grades do not depend
on where or in which order tasks ran.

Faults are Dask's to handle: a task whose worker dies is rerun elsewhere (the
scheduler's `allowed-failures`), one that raises is retried (`retries`). A
worker that can't sandbox never gets a task: only workers whose bubblewrap
works offer the `bwrap` resource that every task asks for. What fails for the
infrastructure's reasons (a task that keeps killing its workers, a course
version that differs) becomes rows "not graded", never 0 points.
"""
from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
from dataclasses import astuple
import uuid
from pathlib import Path

import dask
from distributed import Client, LocalCluster, WorkerPlugin, as_completed

from ..learner.stubs import EXERCISES
from .chapters import load_stubs
from .edition import LIB, fingerprint
from .options import Options, kit_hash
from .reading import Parsed
from .sandbox import SandboxUnavailable, mode_text, unavailable
from .scheduling import Grader
from .submissions import Submission, student_of
from .verdicts import left_out, row, verdict

RESOURCE = "bwrap"      # what a worker that can sandbox offers, one per thread
RETRIES = 2             # a task that raises is retried this many times
CONNECT_TIMEOUT = 10    # seconds, to reach a scheduler
WORKERS_TIMEOUT = 300   # seconds, for its first worker (a batch system may take a while)
NOT_GRADED = "not graded"
# Dask's housekeeping, made rarer: a grading task runs for seconds, and on a few cores a
# stack sampled every 10 ms and loops ticking every 20 ms in each process cost ~10 % of
# the grading (`benchmarks/grading.py`). Hand-started workers take the same settings
# from the environment (book/instructors.md).
QUIET = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
         "distributed.worker.memory.monitor-interval": "1s",
         "distributed.admin.system-monitor.interval": "2s"}


def course_version(exercises: Path) -> str:
  """A hash of what decides a grade: the library, the grader, the stub notebooks."""
  h = hashlib.sha256((fingerprint(LIB) + kit_hash()).encode())
  for path in sorted(exercises.glob("*.ipynb")):
    h.update(path.name.encode() + path.read_bytes())
  return h.hexdigest()[:16]


# --- On a worker ------------------------------------------------------------------------------

class SandboxCheck(WorkerPlugin):
  """Offers the `bwrap` resource on a worker whose bubblewrap works; on any other the
  reason is kept (`refusals`) and the worker gets no grading task."""
  name = "coursekit-sandbox"

  async def setup(self, worker):
    why = await asyncio.to_thread(unavailable)
    worker.coursekit_sandbox = why
    if why is None:
      await worker.set_resources(**{RESOURCE: worker.state.nthreads})


_graders: dict = {}   # this worker's Grader per (options, stub folder)


def _grader(opts: Options, exercises: str | None, version: str) -> Grader:
  key = (astuple(opts), exercises)
  if key not in _graders:
    folder = Path(exercises) if exercises else EXERCISES
    if course_version(folder) != version:
      raise RuntimeError("this worker has another version of the course than the client "
                         "(library, grader or stub notebooks): install the same one on both")
    _graders[key] = Grader(load_stubs(folder), opts, folder=folder)
  return _graders[key]


def reference_task(part, ex, opts, exercises, version) -> list:
  """The reference solution's records of one exercise at the run's seed."""
  return _grader(opts, exercises, version).reference_records(part, ex)


def submission_task(label, data, folder, problem, opts, exercises, version) -> tuple:
  """(the read submission, {exercise: Outcome, or the text of a grader error}), and how
  this worker sandboxes. It is read as on one machine (`Reader`, under its budget), and
  its exercises run one after another."""
  g = _grader(opts, exercises, version)
  p = g.reader.read(Submission(label, data, folder, problem))
  p.sub = Submission(label, b"", folder, problem)   # the bytes don't travel back
  got = {}
  if not p.failure:
    for ex in g.stubs[p.part].exercises:
      try:
        got[ex] = g.run(p.part, ex, p.runs[ex])
      except SandboxUnavailable:
        raise
      except Exception as e:  # noqa: BLE001 (a grader bug is this exercise's failure)
        got[ex] = f"grader error: {type(e).__name__}: {e}"
  return p, got, mode_text(g.ws.sandbox.mode)


# --- On the client ----------------------------------------------------------------------------

def connect(address: str) -> Client:
  """A client of the scheduler at `address`, or of a new LocalCluster for `local:N`.
  Raises ValueError or OSError with a message for the command line."""
  if address.startswith("local:"):
    try:
      n = int(address.removeprefix("local:"))
    except ValueError:
      n = 0
    if n < 1:
      raise ValueError(f"--cluster {address}: say how many workers, e.g. local:4")
    dashboard = ":0" if importlib.util.find_spec("bokeh") else None
    with dask.config.set(QUIET):
      cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                             dashboard_address=dashboard, silence_logs=logging.ERROR)
    return Client(cluster, set_as_default=False)
  try:
    return Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
  except (OSError, TimeoutError) as e:
    raise OSError(f"no Dask scheduler answered at {address} within {CONNECT_TIMEOUT} s "
                  f"({e}); start one (`dask scheduler`) or check the address") from None


class ClusterGrader:
  """`scheduling.Grader`'s interface (grade, progress, signatures, close), on a Dask cluster.
  `on_rows(parsed, rows)` is called as soon as a submission's rows are known."""

  def __init__(self, stubs, opts: Options, address: str, exercises: Path = EXERCISES,
               log=print):
    self.stubs, self.opts, self.progress = stubs, opts, None
    self.signatures: list = []
    self.modes: set = set()
    self.count_not_graded = 0   # rows that say "not graded"
    self.client = connect(address)
    self.folder = None if exercises == EXERCISES else str(exercises)
    self.version = course_version(exercises)
    try:
      self._check_workers(log)
    except BaseException:
      self.close()
      raise

  def _check_workers(self, log):
    services = self.client.scheduler_info().get("services", {})
    if self.client.dashboard_link and "dashboard" in services:
      log(f"Dask dashboard: {self.client.dashboard_link}")
    try:
      self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
    except TimeoutError:
      raise OSError(f"the scheduler has had no worker for {WORKERS_TIMEOUT} s: start some "
                    "(`dask worker ADDRESS`)") from None
    if not self.opts.sandbox:
      return
    self.client.register_plugin(SandboxCheck())
    refusals = self.client.run(lambda dask_worker: dask_worker.coursekit_sandbox)
    bad = {w: why for w, why in refusals.items() if why}
    for w, why in sorted(bad.items()):
      log(f"worker {w} can't sandbox, so it grades nothing: {why}")
    if len(bad) == len(refusals):
      raise SandboxUnavailable("no worker of the cluster can sandbox (see above): install "
                               "bubblewrap on the workers and allow user namespaces")

  def _submit(self, fn, *args, key, priority=0):
    resources = {RESOURCE: 1} if self.opts.sandbox else None
    return self.client.submit(fn, *args, self.opts, self.folder, self.version, key=key,
                              pure=False, retries=RETRIES, resources=resources,
                              priority=priority)

  def grade(self, subs: list[Submission], jobs: int = 0, on_parsed=None, on_rows=None):
    """Rows of every submission. At most a few notebooks per worker thread are in flight
    (their bytes are read when they are sent); `jobs` is the workers' business."""
    window = max(2 * sum(self.client.nthreads().values()) + 2, 4)
    todo = iter(enumerate(subs))
    refs: dict = {}        # (part, exercise) -> future of its records
    waiting: dict = {}     # index of a submission -> its result, until its references are in
    owner: dict = {}       # future -> what it is: ("sub", index) or ("ref", part, exercise)
    records: dict = {}
    rows: list = []
    ac = as_completed(loop=self.client.loop)
    run = uuid.uuid4().hex[:12]   # keys are the scheduler's: other runs may share it

    def send():
      for i, sub in todo:
        data = b"" if sub.problem else sub.load()
        f = self._submit(submission_task, sub.label, data, sub.folder, sub.problem,
                         key=f"grade-{run}-{i}")
        owner[f] = ("sub", i)
        ac.add(f)
        return

    def finish(i, result):
      p, got, mode = result
      p.sub = subs[i]
      self.modes.add(mode)
      out = self.rows_of(p, got, records)
      rows.extend(out)
      if on_rows:
        on_rows(p, out)

    for _ in range(window):
      send()
    for f in ac:
      kind = owner.pop(f)
      if kind[0] == "ref":
        try:
          records[kind[1:]] = f.result()
        except Exception as e:  # noqa: BLE001 (an infrastructure failure or a reference bug)
          records[kind[1:]] = e
        for i in [i for i, (p, _, _) in waiting.items()
                  if all(k in records for k in self._needs(p))]:
          finish(i, waiting.pop(i))
        continue
      send()
      i = kind[1]
      try:
        result = f.result()
      except Exception as e:  # noqa: BLE001 (the worker died too often, or raised)
        p = Parsed(subs[i], student_of(subs[i], None)[0], self.opts.part,
                         failure=f"the cluster could not grade it ({type(e).__name__}: {e})")
        if on_parsed:
          on_parsed(p)
        out = self.failed(p)
        rows.extend(out)
        if on_rows:
          on_rows(p, out)
        continue
      p = result[0]
      if on_parsed:
        on_parsed(p)
      self.signatures += p.signatures
      for k in self._needs(p):
        if k not in refs:
          refs[k] = self._submit(reference_task, *k, priority=10,   # the same for every run
                                 key=f"reference-{k[0]}-{k[1]}-{self.opts.seed}-{self.version}")
          owner[refs[k]] = ("ref", *k)
          ac.add(refs[k])
      if all(k in records for k in self._needs(p)):
        finish(i, result)
      else:
        waiting[i] = result
    return rows

  def _needs(self, p) -> list:
    return [] if p.failure else [(p.part, ex) for ex in self.stubs[p.part].exercises]

  def rows_of(self, p: Parsed, got: dict, records: dict) -> list[dict]:
    """The rows of a submission, compared here with the reference's records."""
    if p.failure:
      return Grader.failure_rows(self, p)   # it needs only `self.stubs`
    stub, out = self.stubs[p.part], []
    flags = [f"review: {', '.join(p.flags)}"] if p.flags else []
    for ex in stub.exercises:
      want, outcome = records[p.part, ex], got[ex]
      if isinstance(want, Exception):
        out += self.not_graded(p, [ex], f"the reference solution could not run on the cluster "
                               f"({type(want).__name__}: {want})")
      else:
        status, reason, notes = (verdict(p, ex, outcome, want, stub)
                                 if not isinstance(outcome, str) else ("fail", outcome, []))
        out.append(dict(row(p.sub, p.student, p.part, ex, status, reason,
                                  p.notes + flags + notes, stub.points[ex]),
                        left_out=left_out(p)))
      if self.progress:
        self.progress()
    return out

  def failed(self, p: Parsed) -> list[dict]:
    stub = self.stubs.get(self.opts.part) if self.opts.part else None
    return self.not_graded(p, stub.exercises if stub else ["*"], p.failure)

  def not_graded(self, p: Parsed, exercises, why: str) -> list[dict]:
    """Rows that say what kept the cluster from grading: blank points, never 0."""
    stub = self.stubs.get(p.part) if p.part else None
    rows = [row(p.sub, p.student, p.part or "?", ex, NOT_GRADED,
                      f"{why}; rerun to grade it", p.notes, stub.points[ex] if stub else 0.0)
            for ex in exercises]
    for r in rows:
      r["points"] = ""
    self.count_not_graded += len(rows)
    return rows

  def mode(self) -> str:
    """How the workers sandboxed, for the report."""
    return " | ".join(sorted(self.modes)) or "unknown: no submission was graded"

  def close(self):
    cluster = self.client.cluster
    self.client.close()
    if cluster is not None:
      cluster.close()
