#!/bin/sh
# Formats the tree with ocamlformat (OCaml sources, options in .ocamlformat) and dune (dune files),
# installing the pinned ocamlformat first when missing (scripts/ocamlformat.sh).
# With --check (make test): formats nothing; prints each file that is not formatted, with the
# diff's first lines, then "N passed, M failed" over the files checked.
cd "$(dirname "$0")/.."
bin=$(./scripts/ocamlformat.sh) || { echo "fmt: ocamlformat is not available"; echo "0 passed, 1 failed"; exit 1; }
PATH=$bin:$PATH
export PATH
if [ "$1" != "--check" ]; then
  dune build @fmt --auto-promote >/dev/null 2>&1
  dune build @fmt 2>&1 | tail -20
  exit 0
fi
out=$(dune build @fmt 2>&1)
total=$(git ls-files '*.ml' '*.mli' '*dune' 'dune-project' | grep -v '^test/mutants/' | wc -l)
bad=$(echo "$out" | sed -n 's/^File "\([^"]*\)".*/\1/p' | sort -u)
n=0
if [ -n "$bad" ]; then
  n=$(echo "$bad" | wc -l)
  echo "$bad" | sed 's/^/not formatted: /'
  echo "$out" | head -30
  echo "run 'make fmt' to format them"
fi
echo "$((total - n)) passed, $n failed"
[ "$n" -eq 0 ]
