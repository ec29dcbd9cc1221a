#!/bin/bash
# Checks, without building anything, that every deliberate bug under test/mutants/ can still be
# run by `make mutants`: each patch has its "Mutant:" line, at least one "Kill:" line and a blank
# line before its diff, applies to the tree as it is (git apply --check), and has its row in the
# README's table; and no row names a patch that is gone. One line per problem, then
# "N passed, M failed" (one check per patch, plus one for the table's stale rows).
set -u
cd "$(dirname "$0")/.."
dir=test/mutants
pass=0; fail=0
for p in "$dir"/*.patch; do
  n=$(basename "$p" .patch)
  why=""
  head -1 "$p" | grep -q '^Mutant: .' || why="no 'Mutant:' first line"
  [ -z "$why" ] && ! grep -q '^Kill: .' "$p" && why="no 'Kill:' line"
  [ -z "$why" ] && ! awk '/^diff --git/{exit !(prev=="")} {prev=$0} END{}' "$p" && why="no blank line before the diff"
  [ -z "$why" ] && ! git apply --check "$p" 2>/dev/null && why="does not apply: $(git apply --check "$p" 2>&1 | head -1)"
  [ -z "$why" ] && ! grep -q "^| $n |" "$dir/README.md" && why="no row in $dir/README.md"
  if [ -z "$why" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "mutant $n: $why"; fi
done
stale=$(grep -o '^| [a-z0-9-]* |' "$dir/README.md" | sed 's/^| \(.*\) |$/\1/' | grep -v '^Mutant$' |
  while read -r n; do [ -f "$dir/$n.patch" ] || echo "$n"; done)
if [ -z "$stale" ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "$dir/README.md: rows without a patch: $(echo $stale)"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
