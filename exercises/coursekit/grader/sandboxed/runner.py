"""Run one exercise's code and its probe: the program inside the grader's sandbox.

    python -m coursekit.runner < job.json    (coursekit/runner.py runs this module's main)

The job is two JSON lines, `{"part", "exercise", "result_fd", "cells": [[kind, source, cell], ...]}`
then `{"seed"}`. The cells are the stub's cells and the learner's definitions
that the exercise needs (`coursekit.grader.definitions`), nothing else of the notebook.
This is a fresh process: the cells run in order, in one namespace, each to its
first error (which is recorded and does not stop the next cell); IPython syntax
(`%magic`, `!shell`, read by IPython's own transformer) does nothing here. Then the exercise's
probe runs on the namespace. The result descriptor (named in the job, never in
the environment) gets one JSON line per cell as it finishes,
`{"cell": {"cell", "status", "error", "seconds"}}`, then
`{"records": [...], "imports": [...]}`.

Nothing here is trusted: the learner's definitions and the answers the probe
calls run in this process and could change anything in it, the records
included. The grader decides outside, against the reference's records at a
seed this process reads (the job's second line) only when the cells have run:
the frames above the learner's cells hold neither the seed nor the probe
module, whose attributes can't be rebound. That raises the cost of tampering,
no more (book/instructors.md, the threat model).
"""
from __future__ import annotations

import builtins
import json
import os
import sys
import time
import types

from .cells import neutralize

_WATCHED = ("jax", "jaxlib", "importlib", "ctypes", "gc", "inspect", "coursekit", "subprocess")


class _NoShell:
  """`get_ipython()` in the sandbox: magics and shell commands do nothing and give None."""

  def __getattr__(self, name):
    return lambda *args, **kwargs: None


class _ImportLog:
  """Records the watched modules the notebook's own code asks for while it runs (for review
  flags), also when they are loaded already (jax is: the library's runtime uses it)."""

  def __init__(self, namespace):
    self.found: set[str] = set()
    self.ns = namespace
    self.active = False   # off while the grader's own cells run

  def _mine(self, depth) -> bool:
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
      frame = frame.f_back
    return frame is not None and (frame.f_globals is self.ns
                                  or frame.f_code.co_filename.startswith("<cell"))

  def note(self, name, depth):
    top = str(name).split(".")[0]
    if self.active and top in _WATCHED and self._mine(depth + 1):
      self.found.add(top)

  def install(self):
    import importlib
    real_import, real_import_module = builtins.__import__, importlib.import_module

    def logged_import(name, globals=None, locals=None, fromlist=(), level=0):
      if level == 0:
        self.note(name, 2)
      return real_import(name, globals, locals, fromlist, level)

    def logged_import_module(name, package=None):
      self.note(name, 2)
      return real_import_module(name, package)

    builtins.__import__ = logged_import
    importlib.import_module = logged_import_module


class _Sealed(types.ModuleType):
  """The probe module, once loaded: its attributes can't be rebound or deleted."""
  _sealed_name = "coursekit.probe"   # its name as notebooks import it (`from coursekit import probe`)

  def __setattr__(self, name, value):
    raise AttributeError(f"{self._sealed_name} is the grader's: its attributes can't be rebound")

  def __delattr__(self, name):
    raise AttributeError(f"{self._sealed_name} is the grader's: its attributes can't be deleted")


def _short(e) -> str:
  text = " ".join(str(e).split())
  return text if len(text) <= 600 else text[:599] + "…"


def run_cells(cells, ns, send, log, short):
  """Each cell in `ns`, to its first error. The frames above the learner's code (this one,
  `main`'s) hold neither the seed, which `main` reads only after, nor the probe."""
  for kind, source, cell in cells:
    t0 = time.monotonic()
    status, error = "ok", None
    log.active = kind == "learner"
    try:
      exec(compile(neutralize(source), f"<cell {cell}>", "exec"), ns)
    except SyntaxError as e:
      status, error = "error", f"SyntaxError: {e.msg} (line {e.lineno})"
    except BaseException as e:  # noqa: BLE001 (SystemExit, KeyboardInterrupt: the cell's own)
      status, error = "error", f"{type(e).__name__}: {short(e)}"
    send({"cell": {"cell": cell, "status": status, "error": error,
                   "seconds": round(time.monotonic() - t0, 3)}})


def main() -> int:
  job = json.loads(sys.stdin.readline())   # the cells; the seed is on the next line
  out = os.fdopen(int(job["result_fd"]), "w")
  out.write(json.dumps({"started": True}) + "\n")   # before anything of the learner's runs
  out.flush()
  from coursekit.learner import answers
  __import__("coursekit.probe")   # the same module, also under the name notebooks know (unbound)
  from coursekit.learner import probe
  probe.spec(job["part"], job["exercise"])   # the probe is loaded before the learner's code runs
  probe.__class__ = _Sealed
  del probe
  ns = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": _NoShell}
  answers.NAMESPACE = ns
  log = _ImportLog(ns)
  log.install()

  def send(obj):   # one JSON line per event, so a run that dies still says how far it got
    out.write(json.dumps(obj) + "\n")
    out.flush()

  run_cells(job["cells"], ns, send, log, _short)
  sys.stdout.flush()
  log.active = True
  t0 = time.monotonic()
  seed = json.loads(sys.stdin.readline())["seed"]
  probes = sys.modules["coursekit.learner.probe"]
  records = probes.run(probes.spec(job["part"], job["exercise"]), ns, seed)
  send({"records": records, "imports": sorted(log.found),
        "probe_seconds": round(time.monotonic() - t0, 3)})
  out.close()
  sys.stdout.flush()
  return 0


if __name__ == "__main__":
  sys.exit(main())
