"""Run one exercise's code and its probe: the program inside the grader's sandbox.

    python -m coursekit.runner < job.json

The job is `{"part", "exercise", "seed", "result_fd", "cells": [[kind, source, cell], ...]}`:
the stub's cells and the learner's definitions that the exercise needs
(`coursekit.definitions`), nothing else of the notebook. This is a fresh
process: the cells run in order, in one namespace, each to its first error
(which is recorded and does not stop the next cell); IPython syntax (`%magic`,
`!shell`) is neutralized, since there is no IPython here. Then the exercise's
probe runs on the namespace. The result descriptor (named in the job, never in
the environment) gets one JSON line per cell as it finishes,
`{"cell": {"cell", "status", "error", "seconds"}}`, then
`{"records": [...], "imports": [...]}`.

Nothing here is trusted: the learner's definitions and the answers the probe
calls run in this process and could change anything in it, the records
included. The grader decides outside, against the reference's records at a
seed this process learns only when it starts.
"""
from __future__ import annotations

import builtins
import json
import os
import re
import sys
import time

_MAGIC_ASSIGN = re.compile(r"^(\s*)([\w., ]+?)\s*=\s*[!%]")
_HELP = re.compile(r"^[\w.]+\?{1,2}$")
_WATCHED = ("jax", "jaxlib", "importlib", "ctypes", "gc", "inspect", "coursekit", "subprocess")


def neutralize(source: str) -> str:
  """Python for a cell written for IPython: magics and shell lines become `pass`."""
  lines = source.splitlines()
  if lines and lines[0].lstrip().startswith("%%"):
    return "pass" if lines[0].split()[0] not in ("%%time", "%%timeit", "%%capture") \
        else neutralize("\n".join(lines[1:]))
  out = []
  for line in lines:
    stripped = line.lstrip()
    indent = line[:len(line) - len(stripped)]
    if stripped.startswith(("%", "!")):
      out.append(f"{indent}pass")
    elif (m := _MAGIC_ASSIGN.match(line)):
      out.append(f"{m.group(1)}{m.group(2)} = None")
    elif _HELP.match(stripped):   # `obj?` / `obj??`: IPython's help
      out.append(f"{indent}pass")
    else:
      out.append(line)
  return "\n".join(out)


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


def main() -> int:
  job = json.load(sys.stdin)
  out = os.fdopen(int(job["result_fd"]), "w")
  from coursekit import answers
  from coursekit import probe as probes
  spec = probes.spec(job["part"], job["exercise"])   # before the learner's code runs
  ns = {"__name__": "__main__", "__builtins__": builtins}
  answers.NAMESPACE = ns
  log = _ImportLog(ns)
  log.install()

  def send(obj):   # one JSON line per event, so a run that dies still says how far it got
    out.write(json.dumps(obj) + "\n")
    out.flush()

  for kind, source, cell in job["cells"]:
    t0 = time.monotonic()
    status, error = "ok", None
    log.active = kind == "learner"
    try:
      exec(compile(neutralize(source), f"<cell {cell}>", "exec"), ns)
    except SyntaxError as e:
      status, error = "error", f"SyntaxError: {e.msg} (line {e.lineno})"
    except BaseException as e:  # noqa: BLE001 (SystemExit, KeyboardInterrupt: the cell's own)
      status, error = "error", f"{type(e).__name__}: {probes.short(e)}"
    send({"cell": {"cell": cell, "status": status, "error": error,
                   "seconds": round(time.monotonic() - t0, 3)}})
  sys.stdout.flush()
  log.active = True
  t0 = time.monotonic()
  records = probes.run(spec, ns, job["seed"])
  send({"records": records, "imports": sorted(log.found),
        "probe_seconds": round(time.monotonic() - t0, 3)})
  out.close()
  sys.stdout.flush()
  return 0


if __name__ == "__main__":
  sys.exit(main())
