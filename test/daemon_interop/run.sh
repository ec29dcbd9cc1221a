#!/bin/bash
# Interop: one group (vsync,Total) with four members casting at once: an
# OCaml member in-process (consort member), a C member and a Go member through
# one consortd and a Python member through another (one daemon per "machine",
# on other loopback ports). Each writes one member log; `consort check-logs
# --total` must pass over the four. Ends with "N passed, M failed".
#   INTEROP_CASTS (default 100) casts per member; INTEROP_PORT (default: from
#   26000, chosen by the process id, so that two runs at once stay apart).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
B=$root/_build/default
n=${INTEROP_CASTS:-100}
base=${INTEROP_PORT:-$((26000 + 40 * ($$ % 25)))}
group=interop-$$
d1=$base; d2=$((base + 10)); pm=$((base + 20))
dir=$(mktemp -d /tmp/consort-interop.XXXXXX)
pids=()
passed=0; failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
ko() { echo "FAILED - $1"; failed=$((failed + 1)); }
finish() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  echo "$passed passed, $failed failed"
  if [ -n "${INTEROP_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi
  # (A bare exit in a trap would keep the status from before the trap.)
  if [ "$failed" = 0 ]; then exit 0; else exit 1; fi
}
trap finish EXIT

py=""
for p in python3 /usr/bin/python3; do "$p" -c 'import sys; assert sys.version_info >= (3, 8)' 2>/dev/null && { py=$p; break; }; done
if ! make -s -C clients/c OUT="$dir/c" "$dir/c/logmember" >"$dir/make.log" 2>&1; then cat "$dir/make.log"; ko "build the C client"; exit; fi
go=""
for g in go /usr/local/go/bin/go /usr/lib/go/bin/go; do command -v "$g" >/dev/null 2>&1 && { go=$g; break; }; done
if [ -z "$go" ]; then ko "no Go toolchain (make deps installs golang-go)"; exit; fi
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then export GOCACHE=/tmp/consort-go-cache; fi
if ! (cd clients/go && GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-buildvcs=false "$go" build -o "$dir/go-logmember" ./examples/logmember) >"$dir/go-build.log" 2>&1; then
  cat "$dir/go-build.log"; ko "build the Go client's logmember"; exit
fi

$B/bin/consortd/consortd.exe --socket "$dir/d1.sock" --bind 127.0.0.1:$d1 --ports 8 \
  --peers 127.0.0.1:$d2-$((d2 + 7)),127.0.0.1:$pm 2>"$dir/d1.err" &
pids+=($!)
$B/bin/consortd/consortd.exe --socket "$dir/d2.sock" --bind 127.0.0.1:$d2 --ports 8 \
  --peers 127.0.0.1:$d1-$((d1 + 7)),127.0.0.1:$pm 2>"$dir/d2.err" &
pids+=($!)
for _ in $(seq 200); do [ -S "$dir/d1.sock" ] && [ -S "$dir/d2.sock" ] && break; sleep 0.05; done

mkfifo "$dir/in.ml" "$dir/in.c" "$dir/in.py" "$dir/in.go"
range() { local p; for p in $(seq "$1" $(($1 + 7))); do printf '127.0.0.1:%d,' "$p"; done; }
$B/bin/main.exe member --group "$group" --props vsync,Total --bind 127.0.0.1:$pm \
  --peers "$(range $d1)$(range $d2)" --log "$dir/ml.log" --quiet \
  <"$dir/in.ml" >"$dir/ml.out" 2>&1 &
pids+=($!)
"$dir/c/logmember" "$dir/d1.sock" "$group" vsync,Total "$dir/c.log" <"$dir/in.c" >"$dir/c.out" 2>&1 &
pids+=($!)
$py clients/python/examples/logmember.py "$dir/d2.sock" "$group" vsync,Total "$dir/py.log" \
  <"$dir/in.py" >"$dir/py.out" 2>&1 &
pids+=($!)
"$dir/go-logmember" "$dir/d1.sock" "$group" vsync,Total "$dir/go.log" <"$dir/in.go" >"$dir/go.out" 2>&1 &
pids+=($!)
exec 3>"$dir/in.ml" 4>"$dir/in.c" 5>"$dir/in.py" 6>"$dir/in.go"

# The last view of a log: its member count and id.
last_view() { grep '"ev":"view"' "$1" 2>/dev/null | tail -1 | sed -E 's/.*"view":"([^"]*)","members":\[([^]]*)\].*/\1 \2/'; }
formed() {
  local v1 v2 v3 v4
  v1=$(last_view "$dir/ml.log"); v2=$(last_view "$dir/c.log"); v3=$(last_view "$dir/py.log"); v4=$(last_view "$dir/go.log")
  [ -n "$v1" ] && [ "$v1" = "$v2" ] && [ "$v2" = "$v3" ] && [ "$v3" = "$v4" ] && [ "$(echo "$v1" | tr ',' '\n' | wc -l)" = 4 ]
}
for _ in $(seq 300); do formed && break; sleep 0.1; done
if formed; then ok "one view of four members (OCaml in-process, C and Go via daemon 1, Python via daemon 2)"; else
  ko "the group did not form"; for f in "$dir"/*.log "$dir"/*.err "$dir"/*.out; do echo "== $f"; tail -n 3 "$f"; done; exit; fi

# Casting at once, interleaved.
for i in $(seq "$n"); do
  echo "ml $i" >&3; echo "c $i" >&4; echo "py $i" >&5; echo "go $i" >&6
done
delivered() { grep -c '"ev":"deliver"' "$1" 2>/dev/null || echo 0; }
for _ in $(seq 600); do
  [ "$(delivered "$dir/ml.log")" -ge $((4 * n)) ] && [ "$(delivered "$dir/c.log")" -ge $((4 * n)) ] &&
    [ "$(delivered "$dir/py.log")" -ge $((4 * n)) ] && [ "$(delivered "$dir/go.log")" -ge $((4 * n)) ] && break
  sleep 0.1
done
all=1
for m in ml c py go; do
  d=$(delivered "$dir/$m.log")
  if [ "$d" -eq $((4 * n)) ]; then ok "$m delivered all $((4 * n)) casts"; else ko "$m delivered $d of $((4 * n)) casts"; all=0; fi
done

# The members leave one at a time (end of their input).
for fd in 4 6 5 3; do
  eval "exec $fd>&-"
  log=$dir/$(case $fd in 3) echo ml ;; 4) echo c ;; 5) echo py ;; 6) echo go ;; esac).log
  for _ in $(seq 100); do grep -q '"ev":"exit"' "$log" && break; sleep 0.1; done
  if grep -q '"ev":"exit"' "$log"; then ok "$(basename "$log" .log) left cleanly"; else ko "$(basename "$log" .log) did not exit"; fi
done

if $B/bin/main.exe check-logs --total "$dir/ml.log" "$dir/c.log" "$dir/py.log" "$dir/go.log" >"$dir/check.out" 2>&1; then
  ok "consort check-logs --total over the four logs: $(head -1 "$dir/check.out")"
else
  ko "consort check-logs --total"; cat "$dir/check.out"
fi
for d in 1 2; do
  if [ -s "$dir/d$d.err" ]; then ko "daemon $d wrote errors"; cat "$dir/d$d.err"; else ok "daemon $d quiet"; fi
done
