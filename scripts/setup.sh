#!/usr/bin/env bash
# Creates .venv/ and installs everything the course needs. Idempotent: `make`
# runs it whenever requirements.txt, pyproject.toml or this script change.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
echo "==> installing requirements.txt into .venv (first time: a few minutes)"
"${PIP[@]}" install -r requirements.txt
"${PIP[@]}" install --no-deps -e .

# Graphviz: the system `dot` when there is one, else the pure-Rust port from
# PyPI behind a `dot` shim (so the graphviz package finds it on PATH).
if ! command -v dot >/dev/null 2>&1 && [ ! -x .venv/bin/dot ]; then
  echo "==> no system graphviz: installing graphviz-pure and a dot shim"
  "${PIP[@]}" install graphviz-pure==0.2.2
  printf '#!/bin/sh\nexec "$(dirname "$0")/graphviz-pure" "$@"\n' > .venv/bin/dot
  chmod +x .venv/bin/dot
fi

# The grader's sandbox is bubblewrap, from the system's packages.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing bubblewrap (the grader's sandbox)"
    apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; } || true
  fi
  command -v bwrap >/dev/null 2>&1 || echo "==> NOTE: no bubblewrap (bwrap): \`make grade\` needs it" \
    "(Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap)"
fi

# ipywidgets' JavaScript for readers who are offline (see book/_ext/offline_widgets.py).
bash scripts/fetch_widget_js.sh || echo "==> (widget JS not fetched: the book will load it from a CDN)"

# A Jupyter kernel named after the venv, so notebooks run against the library.
.venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
touch .venv/.installed
echo "==> .venv ready"
