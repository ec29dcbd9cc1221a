#!/bin/bash
# The Python client's pytest suite against the consortd built by dune; ends
# with "N passed, M failed" (for scripts/test.sh).
set -u
cd "$(dirname "$0")"
py=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import pytest' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then echo "no python3 with pytest (make deps installs python3-pytest)"; echo "0 passed, 1 failed"; exit 1; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -q -p no:cacheprovider "$@" >"$out" 2>&1
rc=$?
cat "$out"
p=$(grep -Eo '[0-9]+ passed' "$out" | tail -1 | grep -Eo '^[0-9]+')
f=$(grep -Eo '[0-9]+ (failed|error)' "$out" | awk '{s+=$1} END {print s+0}')
p=${p:-0}
if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
echo "$p passed, $f failed"
[ "$f" = 0 ]
