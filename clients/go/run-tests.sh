#!/bin/bash
# The Go client's checks: gofmt, go vet, and go test against a fake daemon
# and the consortd built by dune; ends with
# "N passed, M failed" (for scripts/test.sh), counting every test and
# subtest, and gofmt and vet as one each. Offline: standard library only.
# Arguments go to go test (-run REGEXP: some tests only).
set -u
cd "$(dirname "$0")"
go=""
for g in go /usr/local/go/bin/go /usr/lib/go/bin/go; do
  if command -v "$g" >/dev/null 2>&1; then go=$(command -v "$g"); break; fi
done
if [ -z "$go" ]; then echo "no Go toolchain (make deps installs golang-go)"; echo "0 passed, 1 failed"; exit 1; fi
export GO=$go GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# A build cache even where HOME is not set (CI).
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
  export GOCACHE=/tmp/consort-go-cache
fi
p=0; f=0
gofmt=$(dirname "$(readlink -f "$go")")/gofmt
fmt=$("$gofmt" -l . 2>&1)
if [ -z "$fmt" ]; then echo "ok gofmt"; p=$((p + 1)); else echo "not ok gofmt: $fmt"; f=$((f + 1)); fi
if "$go" vet ./...; then echo "ok go vet"; p=$((p + 1)); else echo "not ok go vet"; f=$((f + 1)); fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# GO_RACE=1: under the race detector too (it builds the standard library a second time:
# about 40 CPU s on a cold build cache, so make test leaves it out).
race=""
if [ "${GO_RACE:-}" = 1 ]; then race=-race; fi
"$go" test $race -count=1 -v "$@" . >"$out" 2>&1
rc=$?
cat "$out"
tp=$(grep -cE '^ *--- PASS' "$out")
tf=$(grep -cE '^ *--- FAIL' "$out")
if [ "$rc" -ne 0 ] && [ "$tf" = 0 ]; then tf=1; fi
echo "$((p + tp)) passed, $((f + tf)) failed"
[ $((f + tf)) = 0 ]
