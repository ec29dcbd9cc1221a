# Consort: `make demo` runs the main job, `make test` runs every test suite.
# Both install what they need first (Debian packages, only when missing).

DUNE ?= dune
SIM_SEEDS ?= 2000

.PHONY: all deps build demo test bench soak mutants clean

all: build

deps:
	@./scripts/deps.sh

build: deps
	@$(DUNE) build 2>&1 | head -100
	@$(DUNE) build

demo: build
	@./scripts/demo.sh

test: build
	@SIM_SEEDS=$(SIM_SEEDS) ./scripts/test.sh

bench: build
	@./_build/default/bin/main.exe bench layering
	@echo; ./_build/default/bin/main.exe bench checksum
	@for b in join failover rtt throughput; do echo; ./_build/default/bin/main.exe bench $$b --json || exit 1; done
	@echo; ./_build/default/bin/main.exe bench tcp
	@echo; ./_build/default/bin/main.exe bench rpc
	@echo; ./_build/default/bin/main.exe bench fs --json
	@echo; ./_build/default/bin/main.exe bench tcp-sim

SOAK_SEEDS ?= 100000

soak: build
	@for s in pt2pt-lossy mnak-lossy vsync-crash vsync-join-leave vsync-partition-merge vsync-churn \
	  vsync-flow-flush vsync-oversize vsync-deaf vsync-slander vsync-leave-coord vsync-forged xfer-join xfer-giver-crash switch rpc-at-most-once fs-crash; do \
	  ./_build/default/bin/main.exe sim --scenario $$s --seeds $(SOAK_SEEDS) --quiet || exit 1; done

# Deliberate bugs from test/mutants/, each applied to a temporary copy of the
# tree; every one must be killed by the tests it names.
mutants: deps
	@./scripts/mutants.sh

clean:
	$(DUNE) clean
