#!/bin/bash
# Fuzzing every decoder on the network path (fuzz/fuzz_consort.ml).
#
#   scripts/fuzz.sh --smoke   a short, seeded random run of every target (part
#                             of `make test`); ends with "N passed, M failed"
#   scripts/fuzz.sh           `make fuzz`: AFL++ (installed when missing) on an
#                             instrumented build, FUZZ_SECONDS (default 600) in
#                             all; crashes are kept under fuzz/findings/
#
# Environment: FUZZ_REPEAT (inputs per target in --smoke, default 30000),
# FUZZ_SEED (--smoke, default 1), FUZZ_SECONDS.
set -u
cd "$(dirname "$0")/.."
DUNE=${DUNE:-dune}

if [ "${1:-}" = "--smoke" ]; then
  exe=./_build/default/fuzz/fuzz_consort.exe
  $DUNE build ./fuzz/fuzz_consort.exe || exit 1
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  "$exe" -r "${FUZZ_REPEAT:-30000}" -s "${FUZZ_SEED:-1}" >"$out" 2>&1
  rc=$?
  cat "$out"
  p=$(grep -c ': PASS$' "$out")
  f=$(grep -c -E ': (FAIL|BAD)$' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  echo "$p passed, $f failed"
  [ "$f" = 0 ]
  exit
fi

# AFL++ from Debian, only when missing.
if ! command -v afl-fuzz >/dev/null; then
  echo "fuzz: installing afl++"
  SUDO=""; [ "$(id -u)" != "0" ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends afl++ >/dev/null || {
    echo "fuzz: afl++ could not be installed" >&2; exit 2; }
fi

# An instrumented build beside the normal one, so neither rebuilds the other.
build=_build-afl
$DUNE build --build-dir "$build" --profile afl ./fuzz/fuzz_consort.exe || exit 1
exe=$build/default/fuzz/fuzz_consort.exe

seconds=${FUZZ_SECONDS:-600}
work=$(mktemp -d /tmp/consort-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/in" fuzz/findings
# Crowbar reads its choices from the file: a few random starting inputs.
for i in 1 2 3 4 5 6 7 8; do head -c 256 /dev/urandom >"$work/in/seed$i"; done

export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
echo "fuzz: AFL++ on $exe for $seconds s"
timeout --signal=INT $((seconds + 30)) afl-fuzz -V "$seconds" -i "$work/in" -o "$work/out" -- "$exe" @@ \
  >"$work/afl.log" 2>&1
tail -5 "$work/afl.log"
stats=$work/out/default/fuzzer_stats
if [ -f "$stats" ]; then
  grep -E '^(execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs) ' "$stats"
fi
crashes=$(find "$work/out" -path '*crashes/id*' 2>/dev/null | wc -l)
if [ "$crashes" -gt 0 ]; then
  cp "$work"/out/default/crashes/id* fuzz/findings/ 2>/dev/null
  echo "fuzz: $crashes crashing inputs kept in fuzz/findings/ (replay: $exe FILE)"
  exit 1
fi
echo "fuzz: no crash in $seconds s"
