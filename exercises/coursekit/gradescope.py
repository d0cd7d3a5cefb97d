"""`python -m coursekit.gradescope build|run` (`make gradescope`): Gradescope's
autograder. The code is `coursekit/grader/gradescope.py`.
Imported under this name, it is that module."""
import sys

from coursekit.grader import gradescope

if __name__ == "__main__":
  sys.exit(gradescope.main())
else:
  sys.modules[__name__] = gradescope
