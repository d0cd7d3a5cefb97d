"""`python -m coursekit.grade SUBMISSIONS ...` (`make grade`): the grader's command line,
kept at this name for instructors' scripts. The code is `coursekit/grader/cli.py`.
Imported under this name, it is that module."""
import sys

from coursekit.grader import cli

if __name__ == "__main__":
  sys.exit(cli.main())
else:
  sys.modules[__name__] = cli
