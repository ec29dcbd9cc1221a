#!/bin/bash
# How the vsync stack's costs grow with the group (make bench-scale; not part of make test):
# member processes on 127.0.0.1 for 3, 8, 16 and 32 members (join time, view change after a
# SIGKILL, throughput of 1 KB casts from one sender, each beside its baseline of the same run),
# then the simulator at 64 and 128 members (consort bench scale). Every command is bounded.
set -u
cd "$(dirname "$0")/../.."
consort=./_build/default/bin/main.exe
sizes=${SCALE_SIZES:-3 8 16 32}
sim_sizes=${SCALE_SIM_SIZES:-64,128}
bound() { timeout "${SCALE_TIMEOUT:-900}" "$@" || echo "(exit $? from: $*)"; }
echo "== join (process creation to the view of all; start: to its own first view, the baseline)"
bound $consort bench join --sizes "$(echo $sizes | tr ' ' ,)" --reps 3
for n in $sizes; do
  echo; echo "== view change after SIGKILL, $n members (baseline: suspect.timeout)"
  bound $consort bench failover --size "$n" --reps 2 | grep -v '^(Ensemble'
done
for n in $sizes; do
  echo; echo "== throughput, 1 KB casts from 1 sender, $n members (baseline: raw UDP to the same receivers)"
  bound $consort bench throughput --members "$n" --senders 1 --count 5000 --reps 1 | grep -E '^(kind|raw UDP +1 0 |  runs|ratio)'
done
echo; echo "== simulator, $sim_sizes members"
bound $consort bench scale --sizes "$sim_sizes"
