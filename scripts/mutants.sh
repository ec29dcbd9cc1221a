#!/bin/bash
# Mutation testing: applies each deliberate bug under test/mutants/ to a
# temporary copy of the tree, one at a time, builds, and runs the commands
# that mutant names; a mutant is killed when one of them fails. Prints one
# line per mutant and ends with "N killed, M survived". The working tree is
# never modified. Usage:
#   scripts/mutants.sh [NAME...]     (default: every test/mutants/*.patch)
# Environment: MUTANTS_TIMEOUT (seconds per command, default 600; a command
# that runs out of time counts as a kill: the bug made it hang),
# MUTANTS_VERBOSE=1 (say which command killed each mutant, and how long each took),
# MUTANTS_NO_BASELINE=1 (skip checking that the commands pass without mutation).
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$src/test/mutants
timeout_s=${MUTANTS_TIMEOUT:-600}
verbose=${MUTANTS_VERBOSE:-0}
DUNE=${DUNE:-dune}

if [ $# -gt 0 ]; then
  patches=()
  for n in "$@"; do
    n=${n%.patch}
    if [ ! -f "$dir/$n.patch" ]; then echo "mutants: no mutant $n (no $dir/$n.patch)" >&2; exit 2; fi
    patches+=("$dir/$n.patch")
  done
else
  shopt -s nullglob
  patches=("$dir"/*.patch)
fi
if [ ${#patches[@]} -eq 0 ]; then echo "mutants: no mutant in $dir" >&2; exit 2; fi

tmp=$(mktemp -d /tmp/consort-mutants.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "mutants: interrupted" >&2; exit 130' INT TERM
tree=$tmp/tree
mkdir -p "$tree" "$tmp/bin" "$tmp/log"

# The tree as it is now (tracked and untracked files, not ignored ones),
# under git so that each mutant can be undone exactly.
(cd "$src" && git ls-files -z -c -o --exclude-standard | tar -c --null -T - -f -) | tar -x -C "$tree" -f -
git -C "$tree" init -q && git -C "$tree" add -A && git -C "$tree" -c user.name=m -c user.email=m@m commit -qm base

# In kill commands, "consort" is the binary built in the copy.
printf '#!/bin/sh\nexec %s/_build/default/bin/main.exe "$@"\n' "$tree" >"$tmp/bin/consort"
chmod +x "$tmp/bin/consort"

# The header of a mutant: "Mutant: ..." (what the bug is) and one or more
# "Kill: COMMAND" lines, before the diff.
kills() { sed -n '/^diff \|^--- /q; s/^Kill: *//p' "$1"; }
describe() { sed -n '/^diff \|^--- /q; s/^Mutant: *//p' "$1" | head -1; }

# Build targets: the binaries (tests start consortd), and every _build/default/....exe a command
# names.
targets() {
  echo bin/main.exe
  echo bin/consortd/consortd.exe
  for p in "${patches[@]}"; do kills "$p"; done | grep -Eo '_build/default/[A-Za-z0-9_./-]+\.exe' | sed 's|^_build/default/||'
}
mapfile -t build_targets < <(targets | sort -u)

build() { (cd "$tree" && $DUNE build "${build_targets[@]}" >"$tmp/log/build" 2>&1); }

run_kill() {
  (cd "$tree" && PATH="$tmp/bin:$PATH" CONSORT_CHECKED=1 timeout "$timeout_s" bash -c "$1") >"$tmp/log/run" 2>&1
}

if ! build; then
  echo "mutants: the tree does not build without mutation:" >&2
  tail -30 "$tmp/log/build" >&2
  exit 2
fi

if [ "${MUTANTS_NO_BASELINE:-0}" != 1 ]; then
  while IFS= read -r cmd; do
    [ -z "$cmd" ] && continue
    if ! run_kill "$cmd"; then
      echo "mutants: this command fails without any mutation, so it cannot tell a mutant: $cmd" >&2
      tail -20 "$tmp/log/run" >&2
      exit 2
    fi
  done < <(for p in "${patches[@]}"; do kills "$p"; done | sort -u)
fi

killed=0
survived=0
broken=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  start=$SECONDS
  mapfile -t cmds < <(kills "$p")
  if [ ${#cmds[@]} -eq 0 ]; then
    echo "BROKEN $name (no Kill: command)"
    broken=$((broken + 1))
    continue
  fi
  if ! git -C "$tree" apply "$p" 2>"$tmp/log/apply"; then
    echo "BROKEN $name (does not apply)"
    [ "$verbose" = 1 ] && sed 's/^/  /' "$tmp/log/apply"
    broken=$((broken + 1))
    continue
  fi
  if ! build; then
    echo "BROKEN $name (does not build)"
    [ "$verbose" = 1 ] && tail -20 "$tmp/log/build" | sed 's/^/  /'
    broken=$((broken + 1))
  else
    by=""
    for cmd in "${cmds[@]}"; do
      if ! run_kill "$cmd"; then by=$cmd; break; fi
    done
    if [ -n "$by" ]; then
      echo "killed $name"
      killed=$((killed + 1))
      [ "$verbose" = 1 ] && echo "  by: $by ($((SECONDS - start)) s): $(describe "$p")"
    else
      echo "SURVIVED $name"
      survived=$((survived + 1))
      [ "$verbose" = 1 ] && echo "  $(describe "$p") ($((SECONDS - start)) s)"
    fi
  fi
  git -C "$tree" checkout -q -- . && git -C "$tree" clean -qfd -e _build
done

[ $broken -gt 0 ] && echo "$broken broken (did not apply or build)"
echo "$killed killed, $survived survived"
[ $survived -eq 0 ] && [ $broken -eq 0 ]
