#!/usr/bin/env bash
# `make lab`: JupyterLab on exercises/. LAB_ARGS goes on Jupyter's command line
# (make lab LAB_ARGS="--no-browser --port=8899"). Jupyter refuses to run as root
# without --allow-root, and Docker and many cloud machines run as root: there it
# is added, with a note. LAB_DRY_RUN=1 prints the command instead (for the tests).
# The file browser shows learners only what is theirs: the notebooks, not source/ (the
# solutions) nor coursekit/ (the grader), hidden along with Jupyter's own defaults.
# The notebooks' "In the book" links open the book that `make book` built, served by
# the lab itself (exercises/coursekit/learner/lab.py).
set -euo pipefail
cd "$(dirname "$0")/.."
hide="['source', 'coursekit', '__pycache__', '*.pyc', '*.pyo', '.DS_Store', '*~']"
cmd=(.venv/bin/jupyter lab exercises "--ContentsManager.hide_globs=$hide"
     --ServerApp.jpserver_extensions=coursekit.learner.lab=True)
if [ ! -d _build/html/book ]; then
  echo "make lab: the book isn't built, so the notebooks' book links have nothing to open yet: run make book" >&2
fi
if [ "$(id -u)" = 0 ]; then
  echo "make lab: running as root (as in Docker): adding --allow-root, which Jupyter needs there" >&2
  cmd+=(--allow-root)
fi
read -r -a extra <<< "${LAB_ARGS:-}"   # split into words, as a shell would
cmd+=("${extra[@]}")
if [ -n "${LAB_DRY_RUN:-}" ]; then
  echo "${cmd[*]}"
else
  exec "${cmd[@]}"
fi
