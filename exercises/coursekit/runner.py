"""`python -m coursekit.runner`: the program every grading sandbox runs. The command
line a sandbox shows (the same in every run, as the instructor guide prints it) kept
this name; the code is `coursekit/grader/sandboxed/runner.py`."""
import sys

from coursekit.grader.sandboxed.runner import main

if __name__ == "__main__":
  sys.exit(main())
