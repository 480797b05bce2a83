#!/usr/bin/env bash
# The project's functions longer than a limit (default 150 lines), longest first, as counted by
# Universal Ctags' line ranges (the function's first line to its closing brace, comments and blank
# lines included): "LINES NAME FILE:LINE", then the count. Production code only (core, gpu, ui,
# app). Exits 1 when any function is over the limit, so it can gate a change; a measurement, not
# run by the tests.
#
#   packaging/function-lengths.sh [--limit 150]
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=150
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) LIMIT="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "function-lengths.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v ctags >/dev/null || { echo "function-lengths.sh: needs Universal Ctags (Debian package universal-ctags)" >&2; exit 2; }
long=$(ctags --c++-kinds=f --fields=+ne -x --_xformat="%{input}:%{line}:%{end} %{name}" -R core gpu ui app 2>/dev/null |
  awk -v limit="$LIMIT" '{ split($1, a, ":"); n = a[3] - a[2] + 1; if (n > limit) print n, $2, a[1] ":" a[2] }' |
  sort -rn)
count=0
if [ -n "$long" ]; then
  echo "$long"
  count=$(echo "$long" | wc -l)
fi
echo "$count functions over $LIMIT lines"
[ "$count" -eq 0 ]
