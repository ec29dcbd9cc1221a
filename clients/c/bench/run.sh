#!/bin/bash
# The C client's write batching on 1 KB throughput: one sender and two
# receivers, each a C client of a daemon of its own (a group of 3 on
# 127.0.0.1), the sender with the default batch (64 KiB) and with none (a
# write per cast), in turn, ROUNDS times (5); prints the medians and their
# ratio. Unpinned. Usage: run.sh [ROUNDS] [MESSAGES]
set -u
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${2:-10000}
root=$(cd ../.. && pwd)
consortd=${CONSORTD:-$root/_build/default/bin/consortd/consortd.exe}
out=${OUT:-build}
make -s OUT="$out" all >/dev/null || { echo "c batching bench: build failed"; exit 1; }
dir=$(mktemp -d /tmp/consort-cbench.XXXXXX)
base=${C_BENCH_PORT:-31000}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
for i in 0 1 2; do
  peers=""
  for j in 0 1 2; do
    [ "$i" = "$j" ] || peers="$peers${peers:+,}127.0.0.1:$((base + 10 * j))-$((base + 10 * j + 3))"
  done
  "$consortd" --socket "$dir/d$i.sock" --bind 127.0.0.1:$((base + 10 * i)) --ports 4 --peers "$peers" 2>"$dir/d$i.err" &
  pids+=($!)
done
for i in 0 1 2; do for _ in $(seq 100); do [ -S "$dir/d$i.sock" ] && break; sleep 0.05; done; done
# One round: the slowest receiver's rate, or nothing on failure.
round() {
  "$out/tput" "$dir/d1.sock" recv "$n" "$1" 3 >"$dir/r1" 2>&1 &
  local r1=$!
  "$out/tput" "$dir/d2.sock" recv "$n" "$1" 3 >"$dir/r2" 2>&1 &
  local r2=$!
  "$out/tput" "$dir/d0.sock" send "$n" "$1" 3 >"$dir/s" 2>&1
  wait $r1 $r2
  local a b
  a=$(awk '/^tput/{print $2}' "$dir/r1")
  b=$(awk '/^tput/{print $2}' "$dir/r2")
  local c
  c=$(awk '/^sent/{print $2}' "$dir/s")
  if [ -z "$a" ] || [ -z "$b" ] || [ -z "$c" ]; then cat "$dir/r1" "$dir/r2" "$dir/s" >&2; return 1; fi
  echo "$((a < b ? a : b)) $c"
}
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
batched=() single=() bcpu=() scpu=()
for _ in $(seq "$rounds"); do
  read -r x y < <(round 0) || { echo "c batching bench: a round failed"; exit 1; }
  single+=("$x"); scpu+=("$y")
  read -r x y < <(round 65536) || { echo "c batching bench: a round failed"; exit 1; }
  batched+=("$x"); bcpu+=("$y")
done
s=$(printf '%s\n' "${single[@]}" | median)
b=$(printf '%s\n' "${batched[@]}" | median)
sc=$(printf '%s\n' "${scpu[@]}" | median)
bc=$(printf '%s\n' "${bcpu[@]}" | median)
echo "C client, 1 KB casts, 1 sender, 3 members, a daemon each (unpinned, medians of $rounds rounds, in turn)"
printf '%-34s %14s %14s %8s\n' "" "a write each" "batched 64K" "ratio"
printf '%-34s %8d msg/s %8d msg/s %7.2fx\n' "throughput, 1 KB" "$s" "$b" "$(echo "$b / $s" | bc -l)"
printf '%-34s %11.2f us %11.2f us %7.2fx\n' "sender's CPU time per message" "$sc" "$bc" "$(echo "$bc / $sc" | bc -l)"
echo "{\"bench\":\"c-batching\",\"tput_msgs\":{\"single\":$s,\"batched\":$b},\"sender_cpu_us\":{\"single\":$sc,\"batched\":$bc},\"rounds\":$rounds,\"messages\":$n}"
