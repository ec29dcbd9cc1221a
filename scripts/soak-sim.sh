#!/bin/sh
# One run of `consort sim` for make soak: its arguments said in one line on standard error first
# when standard error is a terminal (which scenario runs; consort sim then draws its seeds), nothing
# otherwise.
cd "$(dirname "$0")/.."
if [ -t 2 ]; then echo "make soak: sim $*" >&2; fi
exec ./_build/default/bin/main.exe sim "$@"
