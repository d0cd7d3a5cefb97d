#!/usr/bin/env bash
# Builds the website into _build/html, with warnings as errors.
#
# Chapters run the library live, and jupyter-cache re-executes a chapter only
# when the chapter itself changes. So the cache is dropped whenever any file
# under lib/ changes, or any module of book/_ext that the chapters' kernels
# import (short_tracebacks, outputs): the book can never show outputs of an
# older library or an older formatting of them.
set -euo pipefail
cd "$(dirname "$0")/.."
lib_hash=$(find lib book/_ext -name '*.py' -not -path '*/__pycache__/*' -print0 | sort -z \
           | xargs -0 sha256sum | sha256sum | cut -c1-16)
mkdir -p _build
exec 9>_build/.build.lock   # one build at a time (make book beside make test)
flock 9
if [ "$(cat _build/.lib-hash 2>/dev/null || true)" != "$lib_hash" ]; then
  rm -rf _build/.jupyter_cache _build/.doctrees   # re-read and re-run every chapter
fi
# Sphinx copies static files (CSS, JavaScript, the widget JavaScript) only
# when it writes a page: when only they or the extensions changed, start the
# HTML afresh (the execution cache stays).
site_hash=$( { find book/_static book/_ext -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum;
               cat .widgets-js/offline-widgets/.fetched 2>/dev/null || true; } | sha256sum | cut -c1-16)
if [ "$(cat _build/.site-hash 2>/dev/null || true)" != "$site_hash" ]; then
  rm -rf _build/html _build/.doctrees
fi
jupyter-book build . -W -n --keep-going "$@"
echo "$lib_hash" > _build/.lib-hash
echo "$site_hash" > _build/.site-hash
