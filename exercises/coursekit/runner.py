"""Run a notebook's code and one exercise's probe: the program inside the grader's sandbox.

    python -m coursekit.runner < job.json      (fd $COURSEKIT_RESULT_FD receives the result)

The job is `{"part", "exercise", "seed", "cells": [[kind, source], ...]}`.
The cells run in order, in one namespace, each to its first error (which is
recorded and does not stop the next cell); IPython syntax (`%magic`, `!shell`)
is neutralized, since there is no IPython here. Then the exercise's probe runs
on the namespace. The result fd gets one JSON line per cell as it finishes,
`{"cell": {"status", "error", "seconds"}}`, then `{"records": [...], "imports": [...]}`.

Nothing here is trusted: the learner's code runs in this process and can
change anything in it, its own records included. The grader decides outside.
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
  """Records the watched modules the notebook's own cells import (for review flags)."""

  def __init__(self):
    self.found: set[str] = set()
    self.active = False

  def find_spec(self, name, path=None, target=None):
    if self.active and name.split(".")[0] in _WATCHED:
      frame = sys._getframe(1)   # the import statement's frame: past importlib's own
      while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back
      if frame is not None and frame.f_code.co_filename.startswith("<cell"):
        self.found.add(name.split(".")[0])
    return None


def main() -> int:
  fd = int(os.environ.get("COURSEKIT_RESULT_FD", "3"))
  out = os.fdopen(fd, "w")
  job = json.load(sys.stdin)
  from coursekit import probe as probes
  spec = probes.spec(job["part"], job["exercise"])   # before the learner's code runs
  ns = {"__name__": "__main__", "__builtins__": builtins}
  try:
    import autodidax._slots as slots
    slots.NAMESPACE = ns
  except ImportError:   # the full library (a trusted run)
    pass
  log = _ImportLog()
  sys.meta_path.insert(0, log)
  def send(obj):   # one JSON line per event, so a run that dies still says how far it got
    out.write(json.dumps(obj) + "\n")
    out.flush()

  for i, (kind, source) in enumerate(job["cells"]):
    t0 = time.monotonic()
    status, error = "ok", None
    log.active = kind == "learner"
    try:
      exec(compile(neutralize(source), f"<cell {i}>", "exec"), ns)
    except SyntaxError as e:
      status, error = "error", f"SyntaxError: {e.msg} (line {e.lineno})"
    except BaseException as e:  # noqa: BLE001 (SystemExit, KeyboardInterrupt: the cell's own)
      status, error = "error", f"{type(e).__name__}: {probes.short(e)}"
    log.active = False
    send({"cell": {"status": status, "error": error, "seconds": round(time.monotonic() - t0, 3)}})
  sys.stdout.flush()
  t0 = time.monotonic()
  records = probes.run(spec, ns, job["seed"])
  send({"records": records, "imports": sorted(log.found),
        "probe_seconds": round(time.monotonic() - t0, 3)})
  out.close()
  sys.stdout.flush()
  return 0


if __name__ == "__main__":
  sys.exit(main())
