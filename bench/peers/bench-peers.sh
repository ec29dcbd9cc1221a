#!/bin/bash
# make bench-peers: Consort beside raw UDP, Corosync CPG and JGroups 5, every
# figure measured in this run on this machine; one table on stdout and the
# same as JSON in bench/results/. See bench/peers/README.md.
#
# Installs what is missing (Debian packages with apt-get, the JGroups jar from
# Maven Central into a cache), bounds every run in count and time, and stops
# everything it started by PID and removes the namespaces it made, also on
# failure or interrupt.
#
# Environment:
#   PEERS="raw consort cost corosync jgroups"  the parts to run (default all)
#   QUICK=1        tiny counts (a smoke run: figures are not meaningful)
#   REPS=3         rounds: each round runs every throughput configuration of
#                  every system once, starting with a different system each
#                  time, so that a change in the machine's load is shared
#                  (the median round is shown); round trips run in round 1
#   RTT_COUNT, TPUT_COUNT, JG_TPUT_COUNT       counts (see below)
#   RAW_COUNT, RAW_BIG_COUNT, RAW_MIN_SECONDS  raw UDP with a credit window:
#                  datagrams per sender of 1 KB and of 60 KB, and the least
#                  time each run sends for
#   JG_BEST_WARMUP, JG_BEST_COUNT, JG_BEST_ROUNDS  JGroups at its best: warm-up,
#                  then ROUNDS timed rounds of COUNT per sender in one JVM
#   RESULTS_DIR    where the JSON goes (default bench/results)
#   CONSORT        the consort executable (default _build/default/bin/main.exe)
#   BENCH_PEERS    bench_peers executable (default _build/default/bench/peers/main.exe)
#   PEERS_CACHE    cache for downloads (default ~/.cache/consort-bench-peers)
set -u
set -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CONSORT=${CONSORT:-$ROOT/_build/default/bin/main.exe}
BENCH_PEERS=${BENCH_PEERS:-$ROOT/_build/default/bench/peers/main.exe}
CACHE=${PEERS_CACHE:-$HOME/.cache/consort-bench-peers}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
PEERS=${PEERS:-raw consort cost corosync jgroups}
QUICK=${QUICK:-0}
JGROUPS_VERSION=${JGROUPS_VERSION:-5.5.7.Final}
JGROUPS_SHA1_KNOWN=${JGROUPS_SHA1_KNOWN:-}

if [ "$QUICK" = 1 ]; then
  REPS=${REPS:-1}; RTT_COUNT=${RTT_COUNT:-200}; RTT_WARMUP=${RTT_WARMUP:-50}
  TPUT_COUNT=${TPUT_COUNT:-2000}; JG_TPUT_COUNT=${JG_TPUT_COUNT:-5000}; JG_WARMUP=${JG_WARMUP:-1000}
  JG_RTT_COUNT=${JG_RTT_COUNT:-300}; JG_RTT_WARMUP=${JG_RTT_WARMUP:-200}; COST_ITER=${COST_ITER:-5000}
  RAW_COUNT=${RAW_COUNT:-2000}; RAW_BIG_COUNT=${RAW_BIG_COUNT:-200}; RAW_MIN_SECONDS=${RAW_MIN_SECONDS:-0}
  JG_BEST_WARMUP=${JG_BEST_WARMUP:-2000}; JG_BEST_COUNT=${JG_BEST_COUNT:-2000}; JG_BEST_ROUNDS=${JG_BEST_ROUNDS:-3}
else
  REPS=${REPS:-3}; RTT_COUNT=${RTT_COUNT:-5000}; RTT_WARMUP=${RTT_WARMUP:-500}
  TPUT_COUNT=${TPUT_COUNT:-100000}; JG_TPUT_COUNT=${JG_TPUT_COUNT:-100000}; JG_WARMUP=${JG_WARMUP:-30000}
  JG_RTT_COUNT=${JG_RTT_COUNT:-5000}; JG_RTT_WARMUP=${JG_RTT_WARMUP:-5000}; COST_ITER=${COST_ITER:-200000}
  RAW_COUNT=${RAW_COUNT:-100000}; RAW_BIG_COUNT=${RAW_BIG_COUNT:-20000}; RAW_MIN_SECONDS=${RAW_MIN_SECONDS:-2}
  JG_BEST_WARMUP=${JG_BEST_WARMUP:-400000}; JG_BEST_COUNT=${JG_BEST_COUNT:-300000}; JG_BEST_ROUNDS=${JG_BEST_ROUNDS:-3}
fi
DEADLINE=${DEADLINE:-60}   # seconds for any one run of any system
for v in REPS RTT_COUNT RTT_WARMUP TPUT_COUNT JG_TPUT_COUNT JG_WARMUP JG_RTT_COUNT JG_RTT_WARMUP COST_ITER DEADLINE \
  RAW_COUNT RAW_BIG_COUNT RAW_MIN_SECONDS JG_BEST_WARMUP JG_BEST_COUNT JG_BEST_ROUNDS; do
  case ${!v} in
    '' | *[!0-9]*) echo "bench-peers: $v=${!v}: expected a whole number" >&2; exit 2 ;;
  esac
done
[ "$REPS" -ge 1 ] && [ "$DEADLINE" -ge 1 ] && [ "$JG_BEST_ROUNDS" -ge 1 ] && [ "$RAW_COUNT" -ge 1 ] && [ "$RAW_BIG_COUNT" -ge 1 ] \
  || { echo "bench-peers: REPS, DEADLINE, JG_BEST_ROUNDS, RAW_COUNT and RAW_BIG_COUNT must be at least 1" >&2; exit 2; }
for p in $PEERS; do
  case $p in raw | consort | cost | corosync | jgroups) ;; *) echo "bench-peers: PEERS: unknown part $p (raw consort cost corosync jgroups)" >&2; exit 2 ;; esac
done

TAG="cpb$$"
WORK=$(mktemp -d "/tmp/consort-bench-peers.XXXXXX")
RES=$WORK/results.txt
: >"$RES"
: >"$WORK/skipped.tsv"
PIDS=()
NETNS=()

log() { echo "bench-peers: $*" >&2; }
skip() { log "skipped $1: $2"; printf '%s\t%s\n' "$1" "$2" >>"$WORK/skipped.tsv"; }
has() { command -v "$1" >/dev/null 2>&1; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for n in "${NETNS[@]}"; do ip netns del "$n" 2>/dev/null; done
  if [ "${KEEP_WORK:-0}" = 1 ]; then log "results kept in $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits for the given PIDs, each bounded by $1 seconds in all; kills the late.
wait_all() {
  local limit=$1; shift
  local end=$((SECONDS + limit))
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do
      if [ $SECONDS -ge $end ]; then log "run over ${limit}s: killing $p"; kill -KILL "$p" 2>/dev/null; break; fi
      sleep 0.05
    done
    wait "$p" 2>/dev/null
  done
}

# Appends the "result" lines of a file, with tags, to the results.
collect() {
  local file=$1; shift
  grep '^result ' "$file" | sed "s/\$/ $*/" >>"$RES"
}

meta() { printf '%s\t%s\n' "$1" "$2" >>"$WORK/meta.tsv"; }

apt_install() {
  local missing=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  log "installing$missing"
  local sudo=""; [ "$(id -u)" != 0 ] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq >/dev/null 2>&1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1
}

# Namespaces left by an earlier run of this script that was killed with
# SIGKILL (no trap ran): named cpbPID-..., removed when PID is gone.
for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^cpb[0-9]+-' || true); do
  pid=${n#cpb}; pid=${pid%%-*}
  if [ "$pid" != "$$" ] && ! kill -0 "$pid" 2>/dev/null; then ip netns del "$n" 2>/dev/null && log "removed stale namespace $n"; fi
done

want() { case " $PEERS " in *" $1 "*) return 0;; *) return 1;; esac; }

# Pinning: same CPU is CPUs 0,0; different CPUs is 0,1 (when there are two).
NCPU=$(nproc)
PLACEMENTS="same-cpu"
[ "$NCPU" -ge 2 ] && PLACEMENTS="same-cpu different-cpus"
cpus_of() { case $1 in same-cpu) echo "0 0";; different-cpus) echo "0 1";; esac; }

# ---------------------------------------------------------------- the machine
meta date "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
meta cpu_model "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
meta cores "$NCPU"
meta kernel "$(uname -sr)"
meta host_memory "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta consort_commit "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
meta ocaml "OCaml $(ocamlfind ocamlopt -version 2>/dev/null || echo '?')"
meta gcc "$(gcc --version | head -1)"
meta quick "$QUICK"
meta reps "$REPS"
meta counts "Consort and Corosync $TPUT_COUNT per sender; JGroups as configured today $JG_WARMUP warm-up + $JG_TPUT_COUNT; JGroups at its best $JG_BEST_WARMUP warm-up + $JG_BEST_ROUNDS rounds of $JG_BEST_COUNT in one JVM; raw UDP with a credit window $RAW_COUNT (1 KB) and $RAW_BIG_COUNT (60 KB) per sender and at least ${RAW_MIN_SECONDS} s"

for f in "$CONSORT" "$BENCH_PEERS"; do
  [ -x "$f" ] || { log "$f is missing: run make build first"; exit 1; }
done

gcc -O2 -Wall -o "$WORK/udp_raw" "$HERE/udp_raw.c" || { log "udp_raw.c did not compile"; exit 1; }

# ------------------------------------------------------------ preparation
CPG_OK=0
if want corosync; then
  apt_install corosync libcpg-dev
  if ! has corosync || [ ! -e /usr/include/corosync/cpg.h ]; then
    skip "Corosync CPG" "corosync or libcpg-dev could not be installed"
  elif ! gcc -O2 -Wall -o "$WORK/cpg_bench" "$HERE/cpg_bench.c" -lcpg 2>"$WORK/cpg-cc.err"; then
    skip "Corosync CPG" "cpg_bench.c did not compile: $(head -1 "$WORK/cpg-cc.err")"
  else
    CPG_OK=1
    meta corosync_transport "knet (UDP), no crypto"
    meta corosync "$(corosync -v | head -1 | sed "s/.*version '\(.*\)'.*/Corosync \1/") (libcpg $(dpkg-query -W -f='${Version}' libcpg-dev), knet $(dpkg-query -W -f='${Version}' libknet1 2>/dev/null))"
  fi
fi

JG_OK=0
JG_NS="${TAG}-jg"
if want jgroups; then
  has javac || apt_install default-jdk-headless
  JAR="$CACHE/jgroups-$JGROUPS_VERSION.jar"
  mkdir -p "$CACHE"
  if [ ! -s "$JAR" ]; then
    has curl || apt_install curl
    url="https://repo1.maven.org/maven2/org/jgroups/jgroups/$JGROUPS_VERSION/jgroups-$JGROUPS_VERSION.jar"
    log "fetching JGroups $JGROUPS_VERSION from Maven Central"
    if curl -fsSL --max-time 120 -o "$JAR.part" "$url" && curl -fsSL --max-time 30 -o "$JAR.sha1" "$url.sha1" \
        && [ "$(sha1sum "$JAR.part" | cut -d' ' -f1)" = "$(cut -c1-40 "$JAR.sha1")" ]; then
      mv "$JAR.part" "$JAR"
    else
      rm -f "$JAR.part"
    fi
  fi
  if ! has javac; then
    skip "JGroups" "no JDK (javac) and default-jdk-headless could not be installed"
  elif [ ! -s "$JAR" ]; then
    skip "JGroups" "jgroups-$JGROUPS_VERSION.jar could not be fetched from Maven Central"
  elif ! javac -nowarn -cp "$JAR" -d "$WORK/jg" "$HERE/JgBench.java" 2>"$WORK/javac.err"; then
    skip "JGroups" "JgBench.java did not compile: $(head -1 "$WORK/javac.err")"
  elif ! ip netns add "$JG_NS" 2>/dev/null; then
    skip "JGroups" "cannot create a network namespace (needs root)"
  else
    NETNS+=("$JG_NS")
    # All members on the loopback of one namespace, where lo gets the
    # MULTICAST flag (the host's lo has none): udp.xml then uses real IP
    # multicast; tcp.xml uses TCPPING to the 3 members' ports.
    ip -n "$JG_NS" link set lo multicast on
    ip -n "$JG_NS" link set lo up
    ip -n "$JG_NS" route add 224.0.0.0/4 dev lo 2>/dev/null
    JG_OK=1
    meta jgroups "JGroups $JGROUPS_VERSION (sha1 $(sha1sum "$JAR" | cut -c1-12))"
    meta java "$(java -version 2>&1 | head -1)"
    meta jgroups_udp "udp.xml with IP multicast on lo (MULTICAST flag set in a private network namespace)"
  fi
fi

# ------------------------------------------------------------------ raw UDP
raw_part() { # round
  local r=$1
  if [ "$r" = 1 ]; then
    log "raw UDP in C: round trips"
    for pl in $PLACEMENTS; do
      set -- $(cpus_of $pl)
      timeout $((DEADLINE + 10)) "$WORK/udp_raw" rtt --count "$RTT_COUNT" --warmup "$RTT_WARMUP" --size 16 --cpus "$1,$2" \
        --deadline "$DEADLINE" >"$WORK/raw-rtt.out" 2>"$WORK/raw-rtt.err" || skip "raw UDP round trip $pl" "$(tail -1 "$WORK/raw-rtt.err")"
      collect "$WORK/raw-rtt.out" "setup=loopback"
    done
  fi
  log "round $r: raw UDP in C: throughput"
  timeout $((DEADLINE + 10)) "$WORK/udp_raw" tput --count "$((TPUT_COUNT * 3))" --size 1024 --receivers 2 --deadline "$DEADLINE" \
    >"$WORK/raw-tput.out" 2>"$WORK/raw-tput.err" || skip "raw UDP throughput, round $r" "$(tail -1 "$WORK/raw-tput.err")"
  collect "$WORK/raw-tput.out" "run=raw$r"
  # The datagram limit (1 KB) and the byte limit (60 KB): 3 member
  # processes, sendmmsg/recvmmsg and a credit window, lossless.
  local size senders cnt
  for size in 1024 60000; do
    cnt=$RAW_COUNT; [ $size = 60000 ] && cnt=$RAW_BIG_COUNT
    for senders in 1 3; do
      log "round $r: raw UDP in C: $size-byte datagrams, $senders sender(s), sendmmsg/recvmmsg, credit window"
      timeout $((DEADLINE + 10)) "$WORK/udp_raw" flow --count "$cnt" --size $size --senders $senders --members 3 \
        --min-seconds "$RAW_MIN_SECONDS" --deadline "$DEADLINE" >"$WORK/raw-flow.out" 2>"$WORK/raw-flow.err" \
        || skip "raw UDP $size-byte datagrams, $senders sender(s), round $r" "$(tail -1 "$WORK/raw-flow.err")"
      collect "$WORK/raw-flow.out" "run=rawflow-$size-$senders-$r"
    done
  done
}

# ------------------------------------------------------------------ Consort
consort_part() { # round
  local r=$1
  if [ "$r" = 1 ]; then
    log "Consort: consort bench rtt --total"
    "$CONSORT" bench rtt --total --count "$RTT_COUNT" --warmup "$RTT_WARMUP" --rounds "$REPS" --json >"$WORK/consort-rtt.json" \
      2>"$WORK/consort-rtt.err" || skip "Consort round trip" "$(tail -1 "$WORK/consort-rtt.err")"
  fi
  # Senders chosen by rank: the sequencer (rank 0) casts only in the 3-sender rows, where every
  # member does; the 2-sender rows are total order from members that are not the sequencer.
  log "round $r: Consort: consort bench throughput --total --members 3 --senders 1,2,3 --sender-not-sequencer --reps 1"
  "$CONSORT" bench throughput --total --members 3 --senders 1,2,3 --sender-not-sequencer --count "$TPUT_COUNT" --reps 1 --deadline "$DEADLINE" --json \
    >"$WORK/consort-tput-$r.json" 2>"$WORK/consort-tput.err" || skip "Consort throughput, round $r" "$(tail -1 "$WORK/consort-tput.err")"
}

# ------------------------------------------------------------- Corosync CPG
# Each corosync runs in its own network namespace (its IPC sockets are
# abstract, so per namespace) and its own mount namespace with a private
# /run (corosync locks /run/corosync.pid).
start_corosync() { # ns conf log
  timeout $((DEADLINE * 20)) ip netns exec "$1" unshare -m sh -c "mount -t tmpfs none /run && exec corosync -f -c '$2'" >"$3" 2>&1 &
  PIDS+=($!)
}

corosync_conf() { # file statedir transport addr... (nodeid = position)
  local file=$1 state=$2 transport=$3; shift 3
  {
    echo "totem {"
    echo "  version: 2"
    echo "  cluster_name: consortbench"
    echo "  transport: $transport"
    echo "  crypto_cipher: none"
    echo "  crypto_hash: none"
    echo "  token: 3000"
    echo "  interface {"
    echo "    linknumber: 0"
    echo "    mcastport: 5405"
    echo "  }"
    echo "}"
    echo "nodelist {"
    local i=1
    for a in "$@"; do
      echo "  node {"; echo "    ring0_addr: $a"; echo "    nodeid: $i"; echo "    name: n$i"; echo "  }"
      i=$((i + 1))
    done
    echo "}"
    echo "logging {"; echo "  to_stderr: yes"; echo "  to_syslog: no"; echo "  to_logfile: no"; echo "}"
    echo "system {"; echo "  state_dir: $state"; echo "}"
  } >"$file"
}

# Waits until the daemons' logs say they formed a membership of $1 nodes.
corosync_ready() { # count logs...
  local want=$1; shift
  local end=$((SECONDS + 30))
  while [ $SECONDS -lt $end ]; do
    local ok=1
    for l in "$@"; do
      grep -q "Completed service synchronization" "$l" 2>/dev/null || ok=0
      [ "$want" -gt 1 ] && ! grep -q "Sync members\[$want\]" "$l" 2>/dev/null && ok=0
    done
    [ $ok = 1 ] && return 0
    sleep 0.2
  done
  return 1
}

stop_pids() {
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
  wait_all 15 "$@"
}

cpg_runs() { # round setup ns-of-member0 ns-of-member1 ns-of-member2 (the daemons run there)
  local r=$1 setup=$2; shift 2
  local nss=("$@")
  local ps tags
  if [ "$r" = 1 ]; then
    # Round trips: members 0 and 1 (on nodes 1 and 2 in the 3-node setup).
    for pl in $PLACEMENTS; do
      set -- $(cpus_of $pl)
      local c0=$1 c1=$2
      timeout $((DEADLINE + 10)) ip netns exec "${nss[1]}" taskset -c "$c1" "$WORK/cpg_bench" rtt --index 1 --size 16 --count "$RTT_COUNT" \
        --warmup "$RTT_WARMUP" --deadline "$DEADLINE" --group "rtt-$pl" >"$WORK/cpg-r1.out" 2>"$WORK/cpg-r1.err" &
      local p1=$!; PIDS+=($p1)
      timeout $((DEADLINE + 10)) ip netns exec "${nss[0]}" taskset -c "$c0" "$WORK/cpg_bench" rtt --index 0 --size 16 --count "$RTT_COUNT" \
        --warmup "$RTT_WARMUP" --deadline "$DEADLINE" --group "rtt-$pl" >"$WORK/cpg-r0.out" 2>"$WORK/cpg-r0.err" &
      local p0=$!; PIDS+=($p0)
      wait_all $((DEADLINE + 15)) $p0 $p1
      grep -q '^result' "$WORK/cpg-r0.out" || skip "Corosync CPG round trip, $setup, $pl" "$(tail -1 "$WORK/cpg-r0.err" "$WORK/cpg-r1.err" | tr '\n' ' ')"
      collect "$WORK/cpg-r0.out" "setup=${setup},_corosync_unpinned placement=$pl cpus=$c0,$c1"
    done
  fi
  for senders in 1 3; do
    ps=()
    for i in 0 1 2; do
      timeout $((DEADLINE + 10)) ip netns exec "${nss[$i]}" "$WORK/cpg_bench" tput --members 3 --index $i --count "$TPUT_COUNT" \
        --size 1024 --senders $senders --deadline "$DEADLINE" --group "tput-$senders-$r" >"$WORK/cpg-t$i.out" 2>"$WORK/cpg-t$i.err" &
      ps+=($!); PIDS+=($!)
    done
    wait_all $((DEADLINE + 15)) "${ps[@]}"
    for i in 0 1 2; do
      tags="setup=$setup run=cpg-$setup-$senders-$r order=total"
      if grep -q '^result' "$WORK/cpg-t$i.out"; then collect "$WORK/cpg-t$i.out" "$tags"; else
        skip "Corosync CPG throughput, $setup, $senders sender(s), round $r, member $i" "$(tail -1 "$WORK/cpg-t$i.err")"
        echo "result bench=tput system=corosync-cpg index=$i members=3 senders=$senders no_result=1 $tags" >>"$RES"
      fi
    done
  done
}

cpg_part() { # round
  local r=$1 ns br n i
  [ $CPG_OK = 1 ] || return 0
  # 1 node on loopback: one daemon, the 3 member processes beside it.
  ns="${TAG}-cs0-$r"
  if ip netns add "$ns" 2>/dev/null; then
    NETNS+=("$ns")
    ip -n "$ns" link set lo up
    mkdir -p "$WORK/cs0-$r"
    corosync_conf "$WORK/cs0-$r/corosync.conf" "$WORK/cs0-$r" knet 127.0.0.1
    start_corosync "$ns" "$WORK/cs0-$r/corosync.conf" "$WORK/cs0-$r/log"
    local d0=${PIDS[-1]}
    if corosync_ready 1 "$WORK/cs0-$r/log"; then
      log "round $r: Corosync CPG, 1 node on loopback (knet)"
      cpg_runs "$r" "1_node,_loopback" "$ns" "$ns" "$ns"
    else
      skip "Corosync CPG, 1 node, round $r" "corosync did not start: $(tail -2 "$WORK/cs0-$r/log" | tr '\n' ' ')"
    fi
    stop_pids $d0
    ip netns del "$ns" 2>/dev/null
  else
    skip "Corosync CPG" "cannot create a network namespace (needs root)"
    return 0
  fi
  # 3 nodes, each in its own namespace, veths to a bridge in a fourth.
  local pre="10.79.$(($$ % 250))"
  br="${TAG}-br-$r"
  ip netns add "$br" 2>/dev/null || return 0
  NETNS+=("$br")
  ip -n "$br" link add br0 type bridge && ip -n "$br" link set br0 up
  local nodes=() logs=() dpids=()
  for i in 1 2 3; do
    n="${TAG}-cs$i-$r"
    ip netns add "$n" && NETNS+=("$n")
    ip -n "$n" link set lo up
    ip -n "$n" link add eth0 type veth peer name v$i netns "$br"
    ip -n "$br" link set v$i master br0 up
    ip -n "$n" addr add "$pre.$i/24" dev eth0
    ip -n "$n" link set eth0 up
    nodes+=("$n")
  done
  for i in 1 2 3; do
    mkdir -p "$WORK/cs$i-$r"
    corosync_conf "$WORK/cs$i-$r/corosync.conf" "$WORK/cs$i-$r" knet "$pre.1" "$pre.2" "$pre.3"
    start_corosync "${nodes[$((i - 1))]}" "$WORK/cs$i-$r/corosync.conf" "$WORK/cs$i-$r/log"
    dpids+=(${PIDS[-1]}); logs+=("$WORK/cs$i-$r/log")
  done
  if corosync_ready 3 "${logs[@]}"; then
    log "round $r: Corosync CPG, 3 nodes in network namespaces over veth and a bridge (knet)"
    cpg_runs "$r" "3_nodes,_netns+veth+bridge" "${nodes[@]}"
  else
    skip "Corosync CPG, 3 nodes, round $r" "the daemons did not form a ring of 3: $(tail -1 "$WORK/cs1-$r/log")"
  fi
  stop_pids "${dpids[@]}"
  for n in "${nodes[@]}" "$br"; do ip netns del "$n" 2>/dev/null; done
}

# ------------------------------------------------------------------ JGroups
JOPTS=(-Djava.net.preferIPv4Stack=true -Djgroups.bind_addr=127.0.0.1 "-Djgroups.tcpping.initial_hosts=127.0.0.1[7800],127.0.0.1[7801],127.0.0.1[7802]")
# JGroups at its best: the heap fixed at 1 GB, G1 (as deployed for throughput).
JOPTS_BEST=(-Xms1g -Xmx1g -XX:+UseG1GC)
JG_BEST_DEADLINE=$((DEADLINE * 3))
jg() { # cpu-or-"" args...
  local cpu=$1; shift
  if [ -n "$cpu" ]; then
    timeout $((DEADLINE + 15)) ip netns exec "$JG_NS" taskset -c "$cpu" java "${JOPTS[@]}" -cp "$JAR:$WORK/jg" JgBench "$@"
  else
    timeout $((DEADLINE + 15)) ip netns exec "$JG_NS" java "${JOPTS[@]}" -cp "$JAR:$WORK/jg" JgBench "$@"
  fi
}
jg_best() { # args...
  timeout $((JG_BEST_DEADLINE + 15)) ip netns exec "$JG_NS" java "${JOPTS_BEST[@]}" "${JOPTS[@]}" -cp "$JAR:$WORK/jg" JgBench "$@"
}

jg_part() { # round
  local r=$1 cfg pl order senders i p0 p1 c0 c1 ps tags extra
  [ $JG_OK = 1 ] || return 0
  for cfg in udp.xml tcp.xml; do
    if [ "$r" = 1 ]; then
      log "JGroups $cfg: round trips"
      for pl in $PLACEMENTS; do
        set -- $(cpus_of $pl)
        c0=$1; c1=$2
        jg "$c1" rtt --config $cfg --index 1 --size 16 --count "$JG_RTT_COUNT" --warmup "$JG_RTT_WARMUP" --deadline "$DEADLINE" \
          >"$WORK/jg-r1.out" 2>"$WORK/jg-r1.err" &
        p1=$!; PIDS+=($p1)
        jg "$c0" rtt --config $cfg --index 0 --size 16 --count "$JG_RTT_COUNT" --warmup "$JG_RTT_WARMUP" --deadline "$DEADLINE" \
          >"$WORK/jg-r0.out" 2>"$WORK/jg-r0.err" &
        p0=$!; PIDS+=($p0)
        wait_all $((DEADLINE + 20)) $p0 $p1
        grep -q '^result' "$WORK/jg-r0.out" || skip "JGroups $cfg round trip $pl" "$(grep -v '^\s*$' "$WORK/jg-r0.err" | tail -1)"
        collect "$WORK/jg-r0.out" "setup=loopback_in_a_netns placement=$pl cpus=$c0,$c1"
      done
    fi
    for order in fifo total; do
      extra=(); [ $order = total ] && extra=(--total)
      log "round $r: JGroups $cfg $order: throughput"
      for senders in 1 3; do
        ps=()
        for i in 0 1 2; do
          jg "" tput --config $cfg --members 3 --index $i --count "$JG_TPUT_COUNT" --warmup "$JG_WARMUP" --size 1024 \
            --senders $senders --deadline "$DEADLINE" "${extra[@]}" >"$WORK/jg-t$i.out" 2>"$WORK/jg-t$i.err" &
          ps+=($!); PIDS+=($!)
          [ $i = 0 ] && sleep 1 # the first is the coordinator (and the sequencer)
        done
        wait_all $((DEADLINE + 20)) "${ps[@]}"
        for i in 0 1 2; do
          tags="setup=loopback_in_a_netns run=jg-$cfg-$order-$senders-$r"
          if grep -q '^result' "$WORK/jg-t$i.out"; then collect "$WORK/jg-t$i.out" "$tags"; else
            skip "JGroups $cfg $order throughput, $senders sender(s), round $r, member $i" "$(grep -v '^\s*$' "$WORK/jg-t$i.err" | tail -1)"
            echo "result bench=tput system=jgroups config=$cfg order=$order index=$i members=3 senders=$senders no_result=1 $tags" >>"$RES"
          fi
        done
        # At its best: one JVM per member with a fixed heap and G1, warmed
        # up, then timed rounds back to back, counted without a lock.
        ps=()
        for i in 0 1 2; do
          jg_best tput --config $cfg --members 3 --index $i --count "$JG_BEST_COUNT" --warmup "$JG_BEST_WARMUP" \
            --rounds "$JG_BEST_ROUNDS" --size 1024 --senders $senders --deadline "$JG_BEST_DEADLINE" "${extra[@]}" \
            >"$WORK/jg-t$i.out" 2>"$WORK/jg-t$i.err" &
          ps+=($!); PIDS+=($!)
          [ $i = 0 ] && sleep 1
        done
        wait_all $((JG_BEST_DEADLINE + 20)) "${ps[@]}"
        for i in 0 1 2; do
          tags="setup=loopback_in_a_netns run=jgbest-$cfg-$order-$senders-$r"
          if grep -q '^result' "$WORK/jg-t$i.out"; then collect "$WORK/jg-t$i.out" "$tags"; else
            skip "JGroups $cfg $order at its best, $senders sender(s), round $r, member $i" "$(grep -v '^\s*$' "$WORK/jg-t$i.err" | tail -1)"
            echo "result bench=tput system=jgroups variant=best config=$cfg order=$order index=$i members=3 senders=$senders no_result=1 $tags" >>"$RES"
          fi
        done
      done
    done
  done
}

# ------------------------------------------------------------------- rounds
parts=()
want raw && parts+=(raw_part)
want consort && parts+=(consort_part)
want corosync && parts+=(cpg_part)
want jgroups && parts+=(jg_part)
n=${#parts[@]}
for r in $(seq "$REPS"); do
  meta "load_round_$r" "$(cut -d' ' -f1-3 /proc/loadavg)"
  for k in $(seq 0 $((n - 1))); do
    ${parts[$(((k + r - 1) % n))]} "$r"
  done
done

# ------------------------------------------------------------- stack cost
if want cost; then
  meta load_before_cost "$(cut -d' ' -f1-3 /proc/loadavg)"
  log "stack cost: consort bench layering, bench_peers stack-cost"
  "$CONSORT" bench layering --iterations "$COST_ITER" --json >"$WORK/consort-layering.json" 2>&1 || skip "consort bench layering" "failed"
  "$BENCH_PEERS" stack-cost --iterations "$COST_ITER" --json "$WORK/stack-cost.json" >"$WORK/stack-cost.out" 2>&1 \
    || skip "stack cost of the default stack" "$(tail -1 "$WORK/stack-cost.out")"
fi

# ------------------------------------------------------------------ report
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$RESULTS_DIR"
out="$RESULTS_DIR/peers-$(date -u +%Y%m%d-%H%M%S)"
[ "$QUICK" = 1 ] && out="$RESULTS_DIR/peers-quick"
"$BENCH_PEERS" report --dir "$WORK" --json "$out.json" --svg "$out.svg"
