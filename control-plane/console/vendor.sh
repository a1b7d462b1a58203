#!/usr/bin/env bash
# Copies the console's front-end packages, at the versions package.json pins, into
# assets/ with their licences (and the browser tests' axe-core into the tests). Run at development time after changing a version; the
# files it writes are committed and embedded in the warden binary (no Node at run time).
set -euo pipefail
cd "$(dirname "$0")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp package.json "$scratch/"
[ -f package-lock.json ] && cp package-lock.json "$scratch/"
(cd "$scratch" && npm install --silent --no-audit --no-fund)
cp "$scratch/package-lock.json" package-lock.json
modules="$scratch/node_modules"
cp "$modules/htmx.org/dist/htmx.min.js" assets/htmx.min.js
cp "$modules/htmx-ext-sse/dist/sse.min.js" assets/htmx-ext-sse.min.js
# Redoc's sidebar footer loads its logo from Redocly's CDN; the console fetches nothing
# from elsewhere (and its Content-Security-Policy would refuse it), so the logo becomes
# an empty data URL, which Redoc's own error handler then hides. The "API docs by
# Redocly" link stays. This is the only change made to a vendored file.
sed 's#https://cdn.redoc.ly/redoc/logo-mini.svg#data:,#' \
  "$modules/redoc/bundles/redoc.standalone.js" > assets/redoc.standalone.js
grep -q 'cdn.redoc.ly' assets/redoc.standalone.js && { echo "redoc still names its CDN" >&2; exit 1; }
{
  echo "The console embeds these packages from the npm registry, unchanged but for Redoc's logo URL (see vendor.sh)."
  for package in htmx.org htmx-ext-sse redoc; do
    version=$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$modules/$package/package.json" | head -n 1)
    echo
    echo "== $package $version =="
    cat "$modules/$package/LICENSE"
  done
  # Redoc's bundle carries the notices of what it bundles.
  echo
  echo "== bundled in redoc.standalone.js =="
  cat "$modules/redoc/bundles/redoc.standalone.js.LICENSE.txt"
} > assets/LICENSES.txt
# The browser tests' accessibility scanner (not embedded in Warden).
tests=../tests/api/console/vendor
mkdir -p "$tests"
cp "$modules/axe-core/axe.min.js" "$tests/axe.min.js"
{
  version=$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$modules/axe-core/package.json" | head -n 1)
  echo "axe-core $version, from the npm registry, unchanged; used only by the console's browser tests."
  echo
  cat "$modules/axe-core/LICENSE"
} > "$tests/LICENSE-axe-core.txt"
echo "vendored into $(pwd)/assets and $tests"
