# Consort: `make demo` runs the main job, `make test` runs every test suite.
# Both install what they need first (Debian packages, only when missing).

DUNE ?= dune
SIM_SEEDS ?= 2000

.PHONY: all deps build demo test bench soak soak-net soak-daemon mutants mutants-sample trace-oracle fuzz doc fmt clean

all: build

deps:
	@./scripts/deps.sh

build: deps
	@$(DUNE) build 2>&1 | head -100
	@$(DUNE) build

doc: build
	@./scripts/doc.sh

# Formats every OCaml and dune file (ocamlformat, pinned in .ocamlformat; make test checks it).
fmt:
	@./scripts/fmt.sh

demo: build
	@./scripts/demo.sh

test: build
	@SIM_SEEDS=$(SIM_SEEDS) ./scripts/test.sh

bench: build
	@./_build/default/bin/main.exe bench layering
	@echo; ./_build/default/bin/main.exe bench checksum
	@for b in join failover rtt; do echo; ./_build/default/bin/main.exe bench $$b --json || exit 1; done
	@echo; ./_build/default/bin/main.exe bench membership --json --save bench/results
	@echo; ./_build/default/bin/main.exe bench throughput --unbundled --json || exit 1
	@echo; ./_build/default/bin/main.exe bench rtt --total --count 2000 --json
	@for n in 3 5; do echo; ./_build/default/bin/main.exe bench throughput --total --members $$n --senders 1,$$n --count 10000 --json || exit 1; done
	@echo; ./_build/default/bin/main.exe bench throughput --seal --senders 1 --count 10000 --json
	@echo; ./_build/default/bin/main.exe bench rtt --seal --count 2000 --json
	@echo; ./_build/default/bin/main.exe bench tcp
	@echo; ./_build/default/bin/main.exe bench tcp --impair loss=2%,reorder=5%,delay=1ms --save bench/results
	@hcc=$$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null); if [ "$$hcc" = bbr ]; then echo; ./_build/default/bin/main.exe bench tcp --impair loss=2%,reorder=5%,delay=1ms --kernel-cc bbr --consort-cc bbr --save bench/results; fi
	@hcc=$$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null); if [ -n "$$hcc" ] && [ "$$hcc" != cubic ]; then echo; ./_build/default/bin/main.exe bench tcp --impair loss=2%,reorder=5%,delay=1ms --kernel-cc "$$hcc" --save bench/results; fi
	@echo; ./_build/default/bin/main.exe bench rpc --save bench/results
	@echo; ./_build/default/bin/main.exe bench fs --json
	@echo; ./_build/default/bin/main.exe bench proc --json --save bench/results
	@echo; ./_build/default/bin/main.exe bench tcp-sim
	@echo; ./_build/default/bin/main.exe bench kv --save bench/results
	@echo; ./_build/default/bin/main.exe bench dir
	@echo; ./_build/default/bin/main.exe bench scale --json
	@echo; ./_build/default/bench/daemon/daemon_bench.exe --json
	@echo; ./_build/default/bench/daemon/daemon_bench.exe --only rtt --pin --daemon-spin-us 200
	@echo; ./clients/c/bench/run.sh
	@echo; ./_build/default/bench/cltsvr/cltsvr_bench.exe

# Consort beside raw UDP in C, Corosync CPG and JGroups 5, all measured in
# one run (installs the peers when missing): one table, and the same as JSON
# in bench/results/. Not part of make test. See bench/peers/README.md.
.PHONY: bench-scale
# Cost against group size: 3 to 32 member processes on loopback, 64 and 128 in the simulator
# (bench/group/scale-procs.sh; bench/group/README.md). Not part of make test.
bench-scale: build
	@./bench/group/scale-procs.sh

.PHONY: bench-peers
bench-peers: build
	@./bench/peers/bench-peers.sh

SOAK_SEEDS ?= 100000

soak: build
	@for s in pt2pt-lossy mnak-lossy vsync-crash vsync-join-leave vsync-partition-merge vsync-churn \
	  vsync-flow-flush vsync-oversize vsync-deaf vsync-restart vsync-join-dead vsync-pause vsync-flush-burst vsync-slander vsync-slow-many vsync-leave-coord vsync-forged xfer-join xfer-giver-crash switch rpc-at-most-once fs-crash kv-linearizable dir-replicated dir-gc; do \
	  ./scripts/soak-sim.sh --scenario $$s --seeds $(SOAK_SEEDS) --quiet || exit 1; done
	@for s in total-seq total-token causal safe ordered-all; do \
	  ./scripts/soak-sim.sh --scenario $$s --seeds $(SOAK_SEEDS) --quiet || exit 1; done
	@./scripts/soak-sim.sh --scenario kv-linearizable --seeds $(SOAK_SEEDS) --quiet --params total.protocol=token
	@./scripts/soak-sim.sh --scenario evs --seeds $(SOAK_SEEDS) --quiet
	@./scripts/soak-sim.sh --scenario evs-flush-cut --seeds $(SOAK_SEEDS) --quiet
	@./scripts/soak-sim.sh --scenario primary-partitions --seeds $(SOAK_SEEDS) --quiet
	@./scripts/soak-sim.sh --scenario primary-dynamic --seeds $(SOAK_SEEDS) --quiet
	@for s in vsync-crash vsync-deaf vsync-partition-merge vsync-churn vsync-slander vsync-leave-coord; do \
	  ./scripts/soak-sim.sh --scenario $$s --seeds $(SOAK_SEEDS) --quiet --params sim.props=vsync+Scale || exit 1; done
	@./scripts/soak-sim.sh --scenario scale-64 --seeds 1000 --quiet
	@./scripts/soak-sim.sh --scenario scale-oneway --seeds 3000 --quiet
	@./scripts/soak-sim.sh --scenario scale-deaf-coord --seeds 3000 --quiet
	@./scripts/soak-sim.sh --scenario cltsvr-cut-coord --seeds $(SOAK_SEEDS) --quiet
	@./scripts/soak-sim.sh --scenario primary-restart --seeds $(SOAK_SEEDS) --quiet
	@./scripts/soak-sim.sh --scenario migrate-unreachable --seeds $(SOAK_SEEDS) --quiet
	@./scripts/soak-sim.sh --scenario scale-256 --seeds 100 --quiet
	@for s in vsync-crash vsync-partition-merge vsync-churn vsync-flow-flush vsync-slander vsync-leave-coord; do \
	  for p in sequencer token; do \
	    ./scripts/soak-sim.sh --scenario $$s --seeds $(SOAK_SEEDS) --quiet \
	      --params sim.props=vsync+Total+Causal+Agree,total.protocol=$$p || exit 1; done; done
	@for s in vsync-crash vsync-join-leave vsync-partition-merge vsync-churn vsync-deaf vsync-slander vsync-leave-coord vsync-forged; do \
	  ./scripts/soak-sim.sh --scenario $$s --seeds $(SOAK_SEEDS) --quiet \
	    --params sim.props=vsync+Privacy+Rekey || exit 1; done

# Five member processes in network namespaces (veth links to a bridge) under
# seeded kills, SIGSTOP pauses, partitions and cut links, casting with total
# order; every log checked. SOAK_NET_SECONDS (default 600), SOAK_NET_SEED.
SOAK_NET_SECONDS ?= 600
SOAK_NET_SEED ?= 1

soak-net: build
	@./_build/default/test/soak_net/soak_net.exe --seconds $(SOAK_NET_SECONDS) --seed $(SOAK_NET_SEED)

# consortd with 100 clients joining, casting and dying at random for
# SOAK_DAEMON_SECONDS (default 60); memory, undisturbed clients and logs checked.
SOAK_DAEMON_SECONDS ?= 60

soak-daemon: build
	@./_build/default/test/daemon_chaos/chaos.exe --seconds $(SOAK_DAEMON_SECONDS)

# The README's picture of the web console: test/console's browser test, its screenshot
# written to doc/console.png (headless chromium; make deps installs it).
.PHONY: console-shot
console-shot: build
	@CONSORT_CONSOLE_SHOT=$(CURDIR)/doc/console.png ./_build/default/test/console/test_console_browser.exe

# Every decoder on the network path under AFL++ (installed when missing),
# FUZZ_SECONDS (default 600); crashing inputs are kept in fuzz/findings/.
fuzz: build
	@./scripts/fuzz.sh

# Deliberate bugs from test/mutants/, each applied to a temporary copy of the
# tree; every one must be killed by the tests it names. Two lanes (MUTANTS_JOBS);
# a whole run records its summary in test/mutants/README.md. mutants-sample runs
# N drawn at random (SEED to draw the same again).
mutants: deps
	@./scripts/mutants.sh

mutants-sample: deps
	@./scripts/mutants.sh --sample $(or $(N),10) $(if $(SEED),--seed $(SEED))

# The simulator's trace hashes for fixed seeds of every scenario, as recorded in
# test/oracle/traces.txt: a change that only moves code reproduces every one (about 1 min).
trace-oracle: build
	@./scripts/trace-oracle.sh check

clean:
	$(DUNE) clean
