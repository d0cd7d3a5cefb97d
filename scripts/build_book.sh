#!/usr/bin/env bash
# Builds the website into _build/html, with warnings as errors.
#
# Chapters run the library live, and jupyter-cache re-executes a chapter only
# when the chapter itself changes. So the cache is dropped whenever any file
# under lib/ changes: the book can never show outputs of an older library.
set -euo pipefail
cd "$(dirname "$0")/.."
lib_hash=$(find lib -name '*.py' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
mkdir -p _build
exec 9>_build/.build.lock   # one build at a time (make book beside make test)
flock 9
if [ "$(cat _build/.lib-hash 2>/dev/null || true)" != "$lib_hash" ]; then
  rm -rf _build/.jupyter_cache _build/.doctrees   # re-read and re-run every chapter
fi
jupyter-book build . -W -n --keep-going "$@"
echo "$lib_hash" > _build/.lib-hash
