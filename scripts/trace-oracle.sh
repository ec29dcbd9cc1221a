#!/bin/bash
# The trace oracle: the simulator's trace hash for a fixed set of seeds of every scenario and of
# the parameter variants make test runs. A change that only moves code must reproduce every hash.
#
#   scripts/trace-oracle.sh record   # write test/oracle/traces.txt from the current build
#   scripts/trace-oracle.sh check    # run again and compare; exit 1 and name each difference
#
# Environment: ORACLE_SEEDS (default 3) seeds per configuration, ORACLE_JOBS (default 2) lanes,
# ORACLE_FILE (default test/oracle/traces.txt), ORACLE_ONLY (a regular expression on the
# configuration's scenario name: check only those). The large groups run one seed.
set -u
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in record | check) ;; *)
  echo "usage: scripts/trace-oracle.sh record|check" >&2
  exit 2
  ;;
esac
file=${ORACLE_FILE:-test/oracle/traces.txt}
seeds=${ORACLE_SEEDS:-3}
jobs=${ORACLE_JOBS:-2}
only=${ORACLE_ONLY:-.*}
bin=./_build/default/bin/main.exe
dune build bin/main.exe 2>&1 | head -20
[ -x "$bin" ] || {
  echo "trace-oracle: $bin was not built" >&2
  exit 2
}

small=mflow.window=4096,mflow.queue=16384,pt2ptw.window=4096,mnak.window=64,frag.size=1500,gmp.flush_timeout=2s
# One configuration per line: SCENARIO|PARAMS (PARAMS may be empty).
configs() {
  "$bin" sim --help=plain 2>/dev/null | sed -n '/Scenarios:/,/^ *$/p' | tr -d '\n' |
    sed 's/.*Scenarios://; s/\.$//; s/,/\n/g' | tr -d ' ' | grep -v '^$' | sed 's/$/|/'
  for s in vsync-churn mnak-lossy total-seq; do echo "$s|stack.fused=false"; done
  echo "vsync-churn|sim.props=vsync+Total,stack.fused=false"
  for s in vsync-crash vsync-deaf vsync-partition-merge vsync-churn vsync-slander vsync-leave-coord; do
    echo "$s|sim.props=vsync+Scale"
  done
  for p in seq token; do
    for s in vsync-crash vsync-partition-merge vsync-churn; do
      echo "$s|sim.props=vsync+Total,total.protocol=$p"
    done
  done
  echo "vsync-pause|sim.props=vsync+Total+Agree,total.protocol=token"
  echo "vsync-churn|sim.props=vsync+Privacy+Rekey"
  echo "vsync-partition-merge|sim.props=vsync+Auth+Rekey"
  echo "vsync-churn|sim.props=vsync+Debug+Total"
  echo "vsync-crash|sim.props=vsync+Debug+Total,drop.rate=0.1,dup.rate=0.05,delay.rate=0.2,delay.max=30ms"
  for s in vsync-crash vsync-churn; do echo "$s|$small"; done
}

one() {
  # $1 = SCENARIO|PARAMS|SEED: prints SCENARIO|PARAMS|SEED|HASH (or ERROR and the output).
  IFS='|' read -r s p seed <<<"$1"
  if [ -n "$p" ]; then out=$("$bin" sim --scenario "$s" --seeds 1 --seed "$seed" --params "$p" 2>&1)
  else out=$("$bin" sim --scenario "$s" --seeds 1 --seed "$seed" 2>&1); fi
  h=$(printf '%s\n' "$out" | sed -n 's/^seed [0-9]*: .*, trace \([0-9a-f]*\)$/\1/p' | head -1)
  if [ -z "$h" ]; then h="ERROR $(printf '%s' "$out" | tail -2 | tr '\n' ' ')"; fi
  printf '%s|%s|%s|%s\n' "$s" "$p" "$seed" "$h"
}
export -f one
export bin

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
start=$(date +%s)
configs | grep -E "^($only)\|" | while IFS= read -r c; do
  # The large groups (scale-64 about 9 CPU s a seed, scale-256 about 60) run one seed.
  n=$seeds
  case "$c" in scale-64\|* | scale-256\|*) n=1 ;; esac
  for ((i = 1; i <= n; i++)); do echo "$c|$i"; done
done | xargs -d '\n' -P "$jobs" -I{} bash -c 'one "$1"' _ {} | sort >"$tmp"
n=$(wc -l <"$tmp")
if [ "$mode" = record ]; then
  mkdir -p "$(dirname "$file")"
  {
    echo "# scenario|params|seed|trace hash: written by scripts/trace-oracle.sh record"
    cat "$tmp"
  } >"$file"
  errors=$(grep -c '|ERROR' "$tmp")
  echo "trace-oracle: recorded $n runs in $(($(date +%s) - start)) s ($errors without a trace hash) into $file"
  exit 0
fi
want=$(mktemp)
grep -v '^#' "$file" | awk -F'|' -v re="^($only)\$" '$1 ~ re' | sort >"$want"
diffs=$(diff "$want" "$tmp" | grep '^[<>]')
rm -f "$want"
if [ -z "$diffs" ]; then
  echo "trace-oracle: $n runs, every hash as recorded ($(($(date +%s) - start)) s)"
  exit 0
fi
echo "$diffs" | sed 's/^</recorded:/; s/^>/now:     /'
echo "trace-oracle: $(echo "$diffs" | grep -c '^<') recorded runs differ"
exit 1
