#!/bin/bash
# Runs every test suite, prints each suite's result, and ends with one line
# "N passed, M failed" summed over all suites. Exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
BIN=./_build/default
SIM_SEEDS=${SIM_SEEDS:-2000}
VSYNC_SEEDS=${VSYNC_SEEDS:-1000}
export CONSORT_CHECKED=1
passed=0
failed=0
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

# An alcotest suite: its last lines say "Test Successful ... N tests run." or
# "K failures! ... N tests run."
alcotest() {
  local name=$1; shift
  local out="$log_dir/$name.log"
  local start=$SECONDS
  "$@" >"$out" 2>&1
  local rc=$?
  local run fail
  run=$(grep -Eo '[0-9]+ tests? run' "$out" | tail -1 | grep -Eo '^[0-9]+')
  fail=$(grep -Eo '[0-9]+ failures?!' "$out" | tail -1 | grep -Eo '^[0-9]+')
  fail=${fail:-0}
  if [ -z "$run" ]; then
    # The suite did not get to its summary: count it as one failure.
    run=1; fail=1
  elif [ $rc -ne 0 ] && [ "$fail" = 0 ]; then
    fail=1
  fi
  passed=$((passed + run - fail)); failed=$((failed + fail))
  printf '%-28s %5d passed, %d failed  (%ds)\n' "$name" $((run - fail)) "$fail" $((SECONDS - start))
  if [ "$fail" != 0 ]; then tail -60 "$out"; fi
}

# A command whose last line is "N passed, M failed".
counted() {
  local name=$1; shift
  local out="$log_dir/$name.log"
  local start=$SECONDS
  "$@" >"$out" 2>&1
  local rc=$?
  local line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
  if [ -z "$line" ]; then
    p=0; f=1
  else
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  fi
  passed=$((passed + p)); failed=$((failed + f))
  printf '%-28s %5d passed, %d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - start))
  if [ "$f" != 0 ]; then tail -40 "$out"; fi
}

for t in $(find test -name dune -exec dirname {} \; | sort); do
  for exe in $(grep -Eo '\(name [a-z0-9_]+\)' "$t/dune" | awk '{print $2}' | tr -d ')'); do
    case "$exe" in test_*) alcotest "$exe" "$BIN/$t/$exe.exe" ;; esac
  done
done

for s in pt2pt-lossy mnak-lossy; do
  counted "sim $s" "$BIN/bin/main.exe" sim --scenario "$s" --seeds "$SIM_SEEDS"
done
for s in vsync-crash vsync-join-leave vsync-partition-merge vsync-churn; do
  counted "sim $s" "$BIN/bin/main.exe" sim --scenario "$s" --seeds "$VSYNC_SEEDS"
done

for s in rpc-at-most-once; do
  counted "sim $s" "$BIN/bin/main.exe" sim --scenario "$s" --seeds "${CAP_SEEDS:-1000}"
done

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
