"""`python -m coursekit.gradebook` (`make gradebook`): the course table from the
grader's gradebook. The code is `coursekit/grader/gradebook.py`.
Imported under this name, it is that module."""
import sys

from coursekit.grader import gradebook

if __name__ == "__main__":
  sys.exit(gradebook.main())
else:
  sys.modules[__name__] = gradebook
