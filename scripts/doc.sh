#!/bin/sh
# Builds the API documentation with odoc into _build/default/_doc/_html.
# With --check (make test): one line "1 passed, 0 failed" when it builds,
# "0 passed, 1 failed" and the errors when it does not, or when odoc warns about a
# documentation comment of this tree (a reference it cannot resolve, an ambiguous one). Warnings
# about libraries that ship no odoc files (Stdlib, Fmt, ...) are not this tree's and pass.
# The landing page (doc/index.mld, _doc/_html/consort/index.html) must name every library of
# src/ once, under "Public API" or "Internal libraries", and resolve every reference.
cd "$(dirname "$0")/.."
landing() {
  local page=_build/default/_doc/_html/consort/index.html n k bad=""
  [ -f "$page" ] && grep -q 'Public API' "$page" && grep -q 'Internal libraries' "$page" ||
    bad="$page: no landing page with \"Public API\" and \"Internal libraries\" (doc/index.mld)"
  for n in $(grep -rhoE '\(public_name [a-z_.]+\)' src --include=dune | awk '{print $2}' | tr -d ')' | sort -u); do
    k=$(grep -cF -- "{- [$n]:" doc/index.mld)
    [ "$k" = 1 ] || bad="$bad${bad:+
}doc/index.mld names library $n $k times (once, under Public API or Internal libraries)"
  done
  [ -z "$bad" ] || echo "$bad"
}
# --check-index: only that every library is on the landing page's source (no build).
if [ "${1:-}" = --check-index ]; then
  bad=$(landing | grep -v '^_build/')
  if [ -z "$bad" ]; then echo "1 passed, 0 failed"; else echo "$bad"; echo "0 passed, 1 failed"; exit 1; fi
  exit 0
fi
out=$(dune build @doc 2>&1)
rc=$?
if [ "$1" = "--check" ]; then
  ours=$(echo "$out" | grep -A1 -E '^File "(src/|(\.\./)*doc/)' | grep -v '^--$')
  # odoc also warns when a module is compiled beside a stale .odoc of a
  # module that depends on it (an incremental build after a change): such a
  # warning goes away when the documentation is built afresh, a comment's
  # does not. So the check builds it afresh once before it says a comment is
  # wrong.
  if [ $rc -eq 0 ] && [ -n "$ours" ]; then
    find _build/default -name '*.odoc' -delete
    rm -rf _build/default/_doc
    out=$(dune build @doc 2>&1)
    rc=$?
    ours=$(echo "$out" | grep -A1 -E '^File "(src/|(\.\./)*doc/)' | grep -v '^--$')
  fi
  page=$(landing)
  if [ $rc -eq 0 ] && [ -n "$page" ]; then
    echo "$page"
    echo "0 passed, 1 failed"
    exit 1
  elif [ $rc -eq 0 ] && [ -f _build/default/_doc/_html/index.html ] && [ -z "$ours" ]; then
    echo "1 passed, 0 failed"
  elif [ $rc -eq 0 ] && [ -n "$ours" ]; then
    echo "$ours" | head -20
    echo "doc: odoc warns about the comments above"
    echo "0 passed, 1 failed"
    exit 1
  else
    echo "$out" | grep -v '^Warning\|^File .*line' | tail -20
    echo "0 passed, 1 failed"
    exit 1
  fi
else
  [ $rc -eq 0 ] || { echo "$out" | tail -40; exit $rc; }
  echo "API documentation: _build/default/_doc/_html/consort/index.html (public API, then internal libraries)"
fi
