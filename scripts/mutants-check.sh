#!/bin/bash
# Checks, without building anything, that every deliberate bug under test/mutants/ can still be
# run by `make mutants`: each patch has its "Mutant:" line, at least one "Kill:" line and a blank
# line before its diff, applies to the tree as it is (git apply --check), and has its row in the
# README's table, and every test executable its Kill: lines name is one a dune file declares; no
# row names a patch that is gone or comes twice; and the summary of the last whole run is in its
# place. One line per problem, then "N passed, M failed" (one check per patch, plus one for the
# table's stale rows and one for the summary).
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
  if [ -z "$why" ]; then
    for t in $(sed -n '/^diff \|^--- /q; s/^Kill: *//p' "$p" | grep -Eo '_build/default/[A-Za-z0-9_./-]+\.exe' | sort -u); do
      t=${t#_build/default/}
      d=$(dirname "$t"); e=$(basename "$t" .exe)
      grep -Eq "\((name|names)( [a-z0-9_]+)* $e[ )]" "$d/dune" 2>/dev/null || { why="Kill: names $t, which no $d/dune declares"; break; }
    done
  fi
  if [ -z "$why" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "mutant $n: $why"; fi
done
stale=$(grep -o '^| [a-z0-9-]* |' "$dir/README.md" | sed 's/^| \(.*\) |$/\1/' | grep -v '^Mutant$' |
  while read -r n; do [ -f "$dir/$n.patch" ] || echo "$n"; done)
dups=$(grep -o '^| [a-z0-9-]* |' "$dir/README.md" | sort | uniq -d | sed 's/^| \(.*\) |$/\1/')
# The summary of the last whole run, which make mutants writes on the line after the marker.
last=$(sed -n '/^<!-- last whole run -->$/{n;p;q}' "$dir/README.md")
if [ "$last" = "None recorded yet." ] ||
  echo "$last" | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]+ UTC, commit .*: [0-9]+ killed, [0-9]+ survived, [0-9]+ weak'; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "$dir/README.md: no summary of the last whole run on the line after '<!-- last whole run -->'"
fi
if [ -z "$stale" ] && [ -z "$dups" ]; then pass=$((pass + 1)); else
  fail=$((fail + 1))
  [ -z "$stale" ] || echo "$dir/README.md: rows without a patch: $(echo $stale)"
  [ -z "$dups" ] || echo "$dir/README.md: rows twice: $(echo $dups)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
