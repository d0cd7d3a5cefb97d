#!/usr/bin/env bash
# Fetches the JavaScript that renders ipywidgets in the built book, so that the
# book works offline: the exact versions myst-nb loads from CDNs by default
# (require.js 2.3.4, @jupyter-widgets/html-manager 1.0.6), from the npm registry.
# They go into .widgets-js/ (git-ignored, outside _static so Jupyter Book does
# not load them on every page); book/_ext/offline_widgets.py uses them when present.
# Idempotent; exits non-zero when npm is missing or fails.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREJS=requirejs@2.3.4
HTML_MANAGER=@jupyter-widgets/html-manager@1.0.6
DEST=.widgets-js/offline-widgets
STAMP="$DEST/.fetched"
WANT="$REQUIREJS $HTML_MANAGER allowUnionTypes"   # the last word: the patch below

# Already done: nothing to do.
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_widget_js: npm not found" >&2
  exit 1
fi

echo "==> fetching $REQUIREJS and $HTML_MANAGER from npm (widgets offline)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "$REQUIREJS" "$HTML_MANAGER" >/dev/null)
mkdir -p "$TMP/requirejs" "$TMP/html-manager"
tar xzf "$TMP"/requirejs-2.3.4.tgz -C "$TMP/requirejs"
tar xzf "$TMP"/jupyter-widgets-html-manager-1.0.6.tgz -C "$TMP/html-manager"

# Only what the page needs: require.js, embed-amd.js and the icon fonts that
# embed-amd.js loads from its own folder; plus the
# html-manager's license (require.js carries its MIT notice in its header).
STAGE="$TMP/out"
mkdir -p "$STAGE"
cp "$TMP/requirejs/package/require.js" "$STAGE/require.js"
cp "$TMP/html-manager/package/LICENSE" "$STAGE/LICENSE-html-manager"
# embed-amd.js compiles the widget-state schema (in two bundled copies) with
# Ajv's default strict mode, which warns in the console of every widget page
# ("use allowUnionTypes"); the schema's union types are intended: allow them.
sed -e 's/Al=new(hl());Al.compile(pl)/Al=new(hl())({allowUnionTypes:!0});Al.compile(pl)/' \
    -e 's/j=new(y()),T=j.compile(v)/j=new(y())({allowUnionTypes:!0}),T=j.compile(v)/' \
  "$TMP/html-manager/package/dist/embed-amd.js" > "$STAGE/embed-amd.js"
if [ "$(grep -o 'allowUnionTypes:!0' "$STAGE/embed-amd.js" | wc -l)" != 2 ]; then
  echo "fetch_widget_js: embed-amd.js changed; update the Ajv patch" >&2
  exit 1
fi
cp "$TMP/html-manager/package/dist/"*.{woff2,woff,ttf,eot,svg} "$STAGE/"
echo "$WANT" > "$STAGE/.fetched"

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$STAGE" "$DEST"
echo "==> widget JavaScript in $DEST"
