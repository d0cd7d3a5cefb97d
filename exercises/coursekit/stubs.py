"""`python -m coursekit.stubs` (`make exercises`): the stub notebooks, built from
exercises/source. The code is `coursekit/learner/stubs.py`.
Imported under this name, it is that module."""
import sys

from coursekit.learner import stubs

if __name__ == "__main__":
  sys.exit(stubs.main())
else:
  sys.modules[__name__] = stubs
