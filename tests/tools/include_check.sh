#!/usr/bin/env bash
# The command-line tools (tools/) and the examples (examples/) are programs
# on the public API: they include the public headers (tessera/...), the
# standard library and system headers, and their own files beside them;
# nothing under src/. Their builds enforce it (include paths hold include/
# alone); this says which line breaks it, and that the check itself bites.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

# Prints every quoted include in the files given that is neither a public
# header nor a file in the including file's own folder.
offenders() {
  local f inc
  for f in "$@"; do
    while IFS= read -r inc; do
      case "$inc" in
        tessera/*) ;;
        */*) echo "$f: #include \"$inc\"" ;;
        *) [ -f "$(dirname "$f")/$inc" ] || echo "$f: #include \"$inc\" (no such file beside it)" ;;
      esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done
}

fail=0
bad=$(offenders "$ROOT"/tools/*.cc "$ROOT"/tools/*.h "$ROOT"/examples/*.cc "$ROOT"/python/*.cc)
if [ -n "$bad" ]; then
  echo "FAIL: tools/, examples/ and python/ must include only include/tessera/ and their own files:"
  echo "$bad"
  fail=1
fi

# The check bites: a file that includes an internal header is caught.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include "tessera/tessera.h"\n#include "base/strings.h"\n#include "own.h"\n' > "$tmp/probe.cc"
: > "$tmp/own.h"
caught=$(offenders "$tmp/probe.cc")
if [ "$(printf '%s\n' "$caught" | grep -c 'base/strings.h')" != 1 ] || [ "$(printf '%s\n' "$caught" | grep -c .)" != 1 ]; then
  echo "FAIL: the check did not catch exactly the internal include in a probe file (got: $caught)"
  fail=1
fi

[ $fail = 0 ] && echo "include check: $(ls "$ROOT"/tools/*.cc "$ROOT"/tools/*.h "$ROOT"/examples/*.cc "$ROOT"/python/*.cc | wc -l) files use the public API only"
exit $fail
