"""The course's own tooling, in two packages that never mix:

* `coursekit.learner`: what a learner's side runs (the check cells' helpers, the
  exercises' probes, the answer slots, the stub builder, the lab's extension). A
  notebook kernel imports only this; it imports nothing of the grader.
* `coursekit.grader`: the instructor's grader (`make grade`, `--cluster`, `make
  gradescope`, the gradebook). Its subpackage `grader/sandboxed/` is what runs inside
  the bubblewrap sandbox; everything else in it runs outside.

The modules beside this file hold no code: they keep the names that came before the
split working. `python -m coursekit.grade`, `.stubs`, `.gradebook`, `.gradescope` and
`.runner` (the sandbox's command line) run the commands; `coursekit.checks`, `.probe`
and `.answers` are the learner's modules under their old names (the stub notebooks,
and notebooks handed in before, import `from coursekit import checks`).
"""
from . import _lean_imports  # noqa: F401 (first: before anything imports nbformat)
