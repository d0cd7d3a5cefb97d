"""Start a command under resource limits (the grader's kernel wrapper).

    COURSEKIT_RLIMITS='{"AS": 4294967296, "CPU": 630}' python -m coursekit.sandbox CMD...

sets each `RLIMIT_<NAME>` of this process to the value given (soft and hard;
for CPU the hard limit is 10 s above the soft one, so the kernel first gets
SIGXCPU and then SIGKILL), then replaces itself with CMD: the limits hold for
CMD and everything it starts. The grader runs every kernel this way, so the
limits apply to the learner's code and not to the grader.

What each limit does:

* AS: address space (bytes). An allocation past it fails: Python raises
  MemoryError, which the check reports; C code may crash the kernel instead.
* CPU: CPU seconds. Past the soft limit the kernel gets SIGXCPU (and dies).
* FSIZE: the largest file the kernel may write (bytes); past it, SIGXFSZ.
* CORE: core dump size (0: no core files in the working directory).
"""
from __future__ import annotations

import json
import os
import resource
import sys


def apply(limits: dict) -> None:
  for name, value in sorted(limits.items()):
    if value is None:
      continue
    which = getattr(resource, f"RLIMIT_{name}")
    value = int(value)
    soft, hard = value, value + 10 if name == "CPU" else value
    _, old_hard = resource.getrlimit(which)
    if old_hard != resource.RLIM_INFINITY:   # can't raise a hard limit
      soft, hard = min(soft, old_hard), min(hard, old_hard)
    resource.setrlimit(which, (soft, hard))


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if not argv:
    print(__doc__, file=sys.stderr)
    return 2
  apply(json.loads(os.environ.pop("COURSEKIT_RLIMITS", "{}")))
  os.execvp(argv[0], argv)


if __name__ == "__main__":
  sys.exit(main())
