"""What comes out of a sandbox run, read as untrusted.

The runner inside (`sandboxed/runner.py`) writes JSON lines to a descriptor:
that it started, each cell's status, then the probe's records. `parse_outcome`
reads them with the sandbox's own account of the run (its status, its limits,
its time): anything malformed is only a failure of that run, and a run that
timed out while starved of CPU is marked so that it runs again, alone.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .options import STARVED, WALL_FACTOR, Options, clean, default_jobs


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


def saturated() -> bool:
  """Whether this machine's CPUs are all busy (its load average)."""
  try:
    return os.getloadavg()[0] >= default_jobs()
  except OSError:
    return True
