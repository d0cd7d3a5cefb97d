"""The grader's options and fixed limits, its seed, and what identifies its version.

`Options` is what one grading run is configured with (the command line's
`--timeout`, `--memory`, `--part`, `--seed`, `--no-sandbox`); the constants
bound what a notebook's text may put into a report. `kit_hash` is the hash
of the code that decides a notebook's records and grade (the sandbox's files
and the grader's own), which keys the caches and the gradebook.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..learner import probe as probes
from .edition import LIB, KIT, fingerprint, kit_files
from .submissions import printable

REASON_LIMIT = 300
DETAIL_LIMIT = 4000   # characters of a failure's full text, for the feedback
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


# Besides the sandbox's files (`edition.kit_files`): the grader's modules that decide a
# notebook's records and its grade (what was one grade.py, and definitions).
KIT_NAMES = ("definitions.py", "options.py", "chapters.py", "rebuild.py", "reading.py",
             "scheduling.py", "verdicts.py", "cli.py")


def kit_hash() -> str:
  h = hashlib.sha256()
  for path in sorted(kit_files() + [Path(__file__).parent / n for n in KIT_NAMES]):
    h.update(path.relative_to(KIT).as_posix().encode() + path.read_bytes())
  return h.hexdigest()[:16]


def grader_version() -> str:
  """What decides a grade besides the notebook and the seed: the grader's code and the
  library's (a notebook is graded again when either changed)."""
  return f"{kit_hash()}-{fingerprint(LIB)[:16]}"


def cache_dir() -> Path:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(base) / "autodidax-grader"


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
