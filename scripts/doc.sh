#!/bin/sh
# Builds the API documentation with odoc into _build/default/_doc/_html.
# With --check (make test): one line "1 passed, 0 failed" when it builds,
# "0 passed, 1 failed" and the errors when it does not.
cd "$(dirname "$0")/.."
out=$(dune build @doc 2>&1)
rc=$?
if [ "$1" = "--check" ]; then
  if [ $rc -eq 0 ] && [ -f _build/default/_doc/_html/index.html ]; then
    echo "1 passed, 0 failed"
  else
    echo "$out" | grep -v '^Warning\|^File .*line' | tail -20
    echo "0 passed, 1 failed"
    exit 1
  fi
else
  [ $rc -eq 0 ] || { echo "$out" | tail -40; exit $rc; }
  echo "API documentation: _build/default/_doc/_html/index.html"
fi
