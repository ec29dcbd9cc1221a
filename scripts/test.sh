#!/bin/bash
# Runs every test suite, prints each suite's result, and ends with one line
# "N passed, M failed" summed over all suites. Exits non-zero on any failure.
#
# Suites are independent: they run in JOBS parallel lanes (default 2, one per
# core), the longest first; their lines are printed in a fixed order (test
# suites by directory, then simulations), each as soon as it and every
# suite before it have finished. With --list, prints the suites' commands
# and runs nothing. A failing suite's line is followed by the
# tail of its output.
set -u
cd "$(dirname "$0")/.."
BIN=./_build/default
SIM_SEEDS=${SIM_SEEDS:-2000}
VSYNC_SEEDS=${VSYNC_SEEDS:-1000}
FLOW_SEEDS=${FLOW_SEEDS:-300}
SMALL_SEEDS=${SMALL_SEEDS:-500}
JOBS=${JOBS:-2}
export CONSORT_CHECKED=1
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

# Each runner writes "NAME PASSED FAILED SECONDS TAIL_LINES" to $log_dir/N.res
# and its output to $log_dir/N.log.

# An alcotest suite: its last lines say "Test Successful ... N tests run." or
# "K failures! ... N tests run."
alcotest() {
  local i=$1 name=$2; shift 2
  local out="$log_dir/$i.log"
  local start=$SECONDS
  "$@" >"$out" 2>&1 </dev/null
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
  echo "$name $((run - fail)) $fail $((SECONDS - start)) 60" >"$log_dir/$i.tmp"
  mv "$log_dir/$i.tmp" "$log_dir/$i.res"
}

# A command whose last line is "N passed, M failed".
counted() {
  local i=$1 name=$2; shift 2
  local out="$log_dir/$i.log"
  local start=$SECONDS
  "$@" >"$out" 2>&1 </dev/null
  local rc=$?
  local line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
  if [ -z "$line" ]; then
    p=0; f=1
  else
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  fi
  echo "$name $p $f $((SECONDS - start)) 40" >"$log_dir/$i.tmp"
  mv "$log_dir/$i.tmp" "$log_dir/$i.res"
}

# The suites, in printing order: "RUNNER|NAME|COMMAND ARGS...".
jobs=()
for t in $(find test -name dune -exec dirname {} \; | sort); do
  for exe in $(grep -Eo '\(name [a-z0-9_]+\)' "$t/dune" | awk '{print $2}' | tr -d ')'); do
    case "$exe" in test_*) jobs+=("alcotest|$exe|$BIN/$t/$exe.exe") ;; esac
  done
done
for s in pt2pt-lossy mnak-lossy; do
  jobs+=("counted|sim $s|$BIN/bin/main.exe sim --scenario $s --seeds $SIM_SEEDS")
done
for s in vsync-crash vsync-join-leave vsync-partition-merge vsync-churn vsync-oversize vsync-deaf \
  vsync-slander vsync-leave-coord xfer-join xfer-giver-crash switch; do
  jobs+=("counted|sim $s|$BIN/bin/main.exe sim --scenario $s --seeds $VSYNC_SEEDS")
done
# Forged members are the slowest of these (about 0.13 CPU s a seed); make soak runs 100,000.
jobs+=("counted|sim vsync-forged|$BIN/bin/main.exe sim --scenario vsync-forged --seeds ${FORGED_SEEDS:-600}")
# Members restart at the same address while casts flow: no phantom view, one view
# change per restart (issue 31; about 0.04 CPU s a seed, 40 s for 1000; more in make soak).
jobs+=("counted|sim vsync-restart|$BIN/bin/main.exe sim --scenario vsync-restart --seeds ${RESTART_SEEDS:-1000}")
# The same, the restart coming during the flush that excludes the old incarnation (issue 31;
# about 0.055 CPU s a seed, 17 s for 300).
jobs+=("counted|sim vsync-restart-late|$BIN/bin/main.exe sim --scenario vsync-restart-late --seeds ${RESTART_LATE_SEEDS:-300}")
# A member crashes and another joins while the flush waits on it (issue 31; about 35 s for 1000).
jobs+=("counted|sim vsync-join-dead|$BIN/bin/main.exe sim --scenario vsync-join-dead --seeds ${RESTART_SEEDS:-1000}")
# A member or the coordinator paused past suspect.timeout leaves its dead view on resuming
# (issue 31; about 0.055 CPU s a seed, 55 s for 1000).
jobs+=("counted|sim vsync-pause|$BIN/bin/main.exe sim --scenario vsync-pause --seeds ${PAUSE_SEEDS:-1000}")
jobs+=("counted|sim vsync-pause (Total token, Agree)|$BIN/bin/main.exe sim --scenario vsync-pause --seeds ${PAUSE_ORDER_SEEDS:-50} --params sim.props=vsync+Total+Agree,total.protocol=token")
# Flushes cut into bursts under 15% loss (issue 31: Gmp's delivery up to the target; about
# 0.012 CPU s a seed, 4 s for 300).
jobs+=("counted|sim vsync-flush-burst|$BIN/bin/main.exe sim --scenario vsync-flush-burst --seeds ${FLUSH_BURST_SEEDS:-300}")
# Every side-channel message forged at an unsealed group: no view change, no pause in deliveries
# over 1 s (issue 29; about 0.16 s of CPU a seed, 32 s for 200).
jobs+=("counted|sim vsync-forged-side|$BIN/bin/main.exe sim --scenario vsync-forged-side --seeds ${FORGED_SIDE_SEEDS:-200}")
# Five of nine members starved at once: nobody excluded for slander (about
# 0.15 s of CPU a seed, 30 s for 200; more in make soak).
jobs+=("counted|sim vsync-slow-many|$BIN/bin/main.exe sim --scenario vsync-slow-many --seeds ${SLOW_SEEDS:-200}")
# Members move to new addresses under traffic, crashes and rejoins (about 35 CPU s).
jobs+=("counted|sim migrate|$BIN/bin/main.exe sim --scenario migrate --seeds ${MIGRATE_SEEDS:-1000}")
# A move to an address nothing reaches is undone (about 10 CPU s).
jobs+=("counted|sim migrate-unreachable|$BIN/bin/main.exe sim --scenario migrate-unreachable --seeds ${MIGRATE_UNREACHABLE_SEEDS:-300}")
# Client-server groups: 3 servers, 24 clients, a server and 2 clients crash (about 30 CPU s).
jobs+=("counted|sim cltsvr|$BIN/bin/main.exe sim --scenario cltsvr --seeds ${CLTSVR_SEEDS:-1000}")
# The contact, Total's sequencer, cut off one way from the other servers, crashes
# after it took requests (about 5 CPU s).
jobs+=("counted|sim cltsvr-cut-coord|$BIN/bin/main.exe sim --scenario cltsvr-cut-coord --seeds ${CLTSVR_CUT_SEEDS:-300}")
# Bursts that go in bundles, with a flush under way (about 0.1 s a seed).
jobs+=("counted|sim vsync-bundle|$BIN/bin/main.exe sim --scenario vsync-bundle --seeds ${BUNDLE_SEEDS:-300}")
# Heavy seeds (large fragmented casts): fewer here, many more in make soak.
# The fused path (stack.fused) is on by default, so every suite above and
# below runs it where the stack allows; these run the same schedules on the
# layered path alone (about 8 CPU s).
jobs+=("counted|sim vsync-churn (layered)|$BIN/bin/main.exe sim --scenario vsync-churn --seeds ${LAYERED_SEEDS:-150} --params stack.fused=false")
jobs+=("counted|sim mnak-lossy (layered)|$BIN/bin/main.exe sim --scenario mnak-lossy --seeds ${LAYERED_SEEDS:-300} --params stack.fused=false")
jobs+=("counted|sim total-seq (layered)|$BIN/bin/main.exe sim --scenario total-seq --seeds ${LAYERED_SEEDS:-300} --params stack.fused=false")
jobs+=("counted|sim vsync-churn (Total sequencer, layered)|$BIN/bin/main.exe sim --scenario vsync-churn --seeds ${LAYERED_SEEDS:-150} --params sim.props=vsync+Total,stack.fused=false")
jobs+=("counted|sim vsync-flow-flush|$BIN/bin/main.exe sim --scenario vsync-flow-flush --seeds $FLOW_SEEDS")
# Ordered delivery on the vsync stack: total order (sequencer, token),
# causal order, safe delivery.
for s in total-seq total-token causal safe; do
  jobs+=("counted|sim $s|$BIN/bin/main.exe sim --scenario $s --seeds ${ORDER_SEEDS:-1000}")
done
# Extended virtual synchrony: transitional views under repeated partitions
# (about 40 s of CPU for 1000 seeds).
jobs+=("counted|sim evs|$BIN/bin/main.exe sim --scenario evs --seeds ${EVS_SEEDS:-1000}")
# Partitions 1-10 ms after a Block with a burst in flight (issue 31; about 0.045 CPU s a seed,
# 45 s for 1000).
jobs+=("counted|sim evs-flush-cut|$BIN/bin/main.exe sim --scenario evs-flush-cut --seeds ${EVS_CUT_SEEDS:-1000}")
# Primary components with quorum under repeated partitions (about 50 s of CPU).
jobs+=("counted|sim primary-partitions|$BIN/bin/main.exe sim --scenario primary-partitions --seeds ${PRIMARY_SEEDS:-1000}")
jobs+=("counted|sim primary-dynamic|$BIN/bin/main.exe sim --scenario primary-dynamic --seeds ${PRIMARY_SEEDS:-700}")
# The least member of a primary of two restarts, keeping nothing (about 10 CPU s).
jobs+=("counted|sim primary-restart|$BIN/bin/main.exe sim --scenario primary-restart --seeds ${PRIMARY_RESTART_SEEDS:-300}")
# Scale (Ringfd, mnak_tree) on the small adversarial schedules, then large
# groups: 64 members (about 9 CPU s a seed) and 256 (about 60 CPU s a seed);
# many more in make soak.
for s in vsync-crash vsync-deaf vsync-partition-merge vsync-churn vsync-slander vsync-leave-coord; do
  jobs+=("counted|sim $s (Scale)|$BIN/bin/main.exe sim --scenario $s --seeds ${SCALE_VSYNC_SEEDS:-200} --params sim.props=vsync+Scale")
done
# A one-way fault on Scale: a member deaf to its ring predecessor, or to the
# coordinator, for 15 s (24 members, about 0.4 CPU s a seed; 3000 in make soak).
jobs+=("counted|sim scale-oneway|$BIN/bin/main.exe sim --scenario scale-oneway --seeds ${SCALE_ONEWAY_SEEDS:-100}")
jobs+=("counted|sim scale-deaf-coord|$BIN/bin/main.exe sim --scenario scale-deaf-coord --seeds ${SCALE_ONEWAY_SEEDS:-100}")
jobs+=("counted|sim scale-64|$BIN/bin/main.exe sim --scenario scale-64 --seeds ${SCALE64_SEEDS:-8}")
jobs+=("counted|sim scale-256|$BIN/bin/main.exe sim --scenario scale-256 --seeds ${SCALE256_SEEDS:-2}")
# Total with each protocol under adversarial vsync schedules (more in make soak).
for s in vsync-churn vsync-slander; do
  for p in sequencer token; do
    jobs+=("counted|sim $s (Total $p)|$BIN/bin/main.exe sim --scenario $s --seeds ${TOTAL_VSYNC_SEEDS:-150} --params sim.props=vsync+Total,total.protocol=$p")
  done
done
# Sealed, with a key per view (Rekey): view changes under joins, leaves,
# crashes and partitions lose nothing (~25 s of CPU for both).
jobs+=("counted|sim vsync-churn (Privacy, Rekey)|$BIN/bin/main.exe sim --scenario vsync-churn --seeds ${REKEY_SEEDS:-150} --params sim.props=vsync+Privacy+Rekey")
jobs+=("counted|sim vsync-partition-merge (Auth, Rekey)|$BIN/bin/main.exe sim --scenario vsync-partition-merge --seeds ${REKEY_SEEDS:-150} --params sim.props=vsync+Auth+Rekey")
# The debugging layers (Debug) on correct stacks: no check fires, with the
# fault layers at work too (~20 s of CPU for the three).
jobs+=("counted|sim vsync-churn (Debug, Total)|$BIN/bin/main.exe sim --scenario vsync-churn --seeds ${DEBUG_SEEDS:-200} --params sim.props=vsync+Debug+Total")
jobs+=("counted|sim vsync-partition-merge (Debug, Total token)|$BIN/bin/main.exe sim --scenario vsync-partition-merge --seeds ${DEBUG_SEEDS:-200} --params sim.props=vsync+Debug+Total,total.protocol=token")
jobs+=("counted|sim vsync-crash (Debug, faults)|$BIN/bin/main.exe sim --scenario vsync-crash --seeds ${DEBUG_SEEDS:-200} --params sim.props=vsync+Debug+Total,drop.rate=0.1,dup.rate=0.05,delay.rate=0.2,delay.max=30ms")
# The same schedules with small windows and short timeouts.
small=mflow.window=4096,mflow.queue=16384,pt2ptw.window=4096,mnak.window=64,frag.size=1500,gmp.flush_timeout=2s
for s in vsync-crash vsync-churn; do
  jobs+=("counted|sim $s (small windows)|$BIN/bin/main.exe sim --scenario $s --seeds $SMALL_SEEDS --params $small")
done
for s in rpc-at-most-once fs-crash; do
  jobs+=("counted|sim $s|$BIN/bin/main.exe sim --scenario $s --seeds ${CAP_SEEDS:-1000}")
done
# The API documentation builds (odoc).
jobs+=("counted|doc|scripts/doc.sh --check")
# Every OCaml and dune file is formatted (ocamlformat as pinned in .ocamlformat; make fmt formats).
jobs+=("counted|format|scripts/fmt.sh --check")
# consort cap demo: boot server, file server, 3 directory replicas, 2 process servers, kills (a few s).
jobs+=("counted|cap demo|$BIN/bin/main.exe cap demo")
# Every deliberate bug under test/mutants/ still applies and is in the README's table (make mutants runs them).
jobs+=("counted|mutants apply|scripts/mutants-check.sh")
# Every distinct Kill: command passes without mutation in a copy built as make mutants builds it
# (what make test runs itself, where the copy cannot change the result, is not run again: see
# scripts/mutants.sh --help), in one lane: about 1.6 CPU minutes, the copy's build included
# (15 of 149 commands run).
jobs+=("counted|mutants baseline|env MUTANTS_JOBS=1 scripts/mutants.sh --baseline --skip-covered")
# Every decoder on the network path, fuzzed for a short seeded while (make fuzz runs AFL++).
jobs+=("counted|fuzz smoke|scripts/fuzz.sh --smoke")
# Replicated key-value store: about 65 CPU seconds for 1000 seeds (75 with the token).
jobs+=("counted|sim kv-linearizable|$BIN/bin/main.exe sim --scenario kv-linearizable --seeds ${KV_SEEDS:-1000}")
# Storage faults (issue 28): disks that fill, fail writes and fsyncs (kv and directory replicas),
# and a replica restarted on an empty or another cluster's data directory (about 50, 40 and 30
# CPU seconds for 1000 seeds).
jobs+=("counted|sim kv-disk-faults|$BIN/bin/main.exe sim --scenario kv-disk-faults --seeds ${KV_DISK_SEEDS:-1000}")
jobs+=("counted|sim kv-lost-dir|$BIN/bin/main.exe sim --scenario kv-lost-dir --seeds ${KV_LOST_SEEDS:-1000}")
jobs+=("counted|sim dir-disk-faults|$BIN/bin/main.exe sim --scenario dir-disk-faults --seeds ${DIR_DISK_SEEDS:-1000}")
# The sequencer's acknowledgement overtakes its own cast, then it crashes before the cast reaches
# anyone (issue 28; about 5 CPU seconds for 200 seeds).
jobs+=("counted|sim kv-ack-race|$BIN/bin/main.exe sim --scenario kv-ack-race --seeds ${KV_ACK_SEEDS:-200}")
# A directory replica restarted on an empty or another cluster's data directory (about 5 CPU
# seconds for 200 seeds).
jobs+=("counted|sim dir-lost-dir|$BIN/bin/main.exe sim --scenario dir-lost-dir --seeds ${DIR_LOST_SEEDS:-200}")
# The file server's disk fills or fails for a while (about 4 CPU seconds for 1000 seeds).
jobs+=("counted|sim fs-disk-faults|$BIN/bin/main.exe sim --scenario fs-disk-faults --seeds ${CAP_SEEDS:-1000}")
# The same with Total's token protocol ordering the replicas' requests.
jobs+=("counted|sim kv-linearizable (Total token)|$BIN/bin/main.exe sim --scenario kv-linearizable --seeds ${KV_TOKEN_SEEDS:-300} --params total.protocol=token")
# The replicated directory server (issue 14): about 32 CPU seconds for 1000 seeds.
jobs+=("counted|sim dir-replicated|$BIN/bin/main.exe sim --scenario dir-replicated --seeds ${DIR_SEEDS:-1000}")
# Garbage collection across the directory and file servers, crashes during rounds (about 6 CPU seconds).
jobs+=("counted|sim dir-gc|$BIN/bin/main.exe sim --scenario dir-gc --seeds ${DIR_SEEDS:-1000}")
# Five real members in network namespaces under kills, pauses, partitions and cut links (make soak-net: 10 min).
jobs+=("counted|soak-net (60 s)|$BIN/test/soak_net/soak_net.exe --seconds ${SOAK_NET_SECONDS:-60}")
# consortd's clients and interop: pytest, the C client under valgrind, and one
# group of OCaml, C, Python and Go members over two daemons (a few seconds each).
jobs+=("counted|daemon python client|clients/python/run-tests.sh")
jobs+=("counted|daemon C client (valgrind)|clients/c/tests/run.sh")
# The Go client: gofmt, go vet, go test (a fake daemon and a real one; about 10 s, 2 CPU s;
# a cold Go build cache adds about 25 CPU s once, compiling the standard library).
jobs+=("counted|daemon Go client|clients/go/run-tests.sh")
jobs+=("counted|daemon interop|test/daemon_interop/run.sh")
# 100 clients joining, casting and dying at random for 15 s (make soak-daemon: 60 s); the
# daemon's peak resident size is bounded by a formula from its caps (test/daemon_chaos).
jobs+=("counted|daemon chaos (15 s, 100 clients)|$BIN/test/daemon_chaos/chaos.exe --seconds ${DAEMON_CHAOS_SECONDS:-15} --clients ${DAEMON_CHAOS_CLIENTS:-100}")
n=${#jobs[@]}
# --list: the suites' commands, one a line, and nothing run (scripts/mutants.sh --baseline
# --skip-covered reads which simulations make test runs).
if [ "${1:-}" = --list ]; then
  for j in "${jobs[@]}"; do echo "${j#*|*|}"; done
  exit 0
fi

# Start order: the simulations (the longest) first, from the last, then the
# other suites, so that the two lanes end close together.
order=()
for ((i = n - 1; i >= 0; i--)); do
  case "${jobs[$i]}" in "counted|sim "*) order+=("$i") ;; esac
done
for ((i = 0; i < n; i++)); do
  case "${jobs[$i]}" in "counted|sim "*) ;; *) order+=("$i") ;; esac
done

passed=0
failed=0
next=0
# Prints, in order, the results of the suites that have finished.
flush() {
  while [ "$next" -lt "$n" ] && [ -f "$log_dir/$next.res" ]; do
    local name p f secs tail_lines
    read -r -a r <"$log_dir/$next.res"
    tail_lines=${r[-1]}; secs=${r[-2]}; f=${r[-3]}; p=${r[-4]}
    name=${r[*]:0:${#r[@]}-4}
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-28s %5d passed, %d failed  (%ds)\n' "$name" "$p" "$f" "$secs"
    if [ "$f" != 0 ]; then tail -"$tail_lines" "$log_dir/$next.log"; fi
    next=$((next + 1))
  done
}

running=0
for i in "${order[@]}"; do
  IFS='|' read -r runner name cmd <<<"${jobs[$i]}"
  # shellcheck disable=SC2086
  $runner "$i" "$name" $cmd &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n
    running=$((running - 1))
    flush
  fi
done
wait
# A runner that died before writing its result counts as one failure.
for ((i = 0; i < n; i++)); do
  if [ ! -f "$log_dir/$i.res" ]; then
    IFS='|' read -r _ name _ <<<"${jobs[$i]}"
    echo "$name 0 1 0 40" >"$log_dir/$i.res"
  fi
done
flush

lanes=$(cat "$log_dir"/*.res | awk '{s += $(NF - 1)} END {print s}')
echo "suites took ${SECONDS}s on $JOBS lanes (${lanes}s in all)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
