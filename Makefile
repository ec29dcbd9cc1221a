# Consort: `make demo` runs the main job, `make test` runs every test suite.
# Both install what they need first (Debian packages, only when missing).

DUNE ?= dune
SIM_SEEDS ?= 2000

.PHONY: all deps build demo test bench soak clean

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

soak: build
	@./_build/default/bin/main.exe sim --scenario pt2pt-lossy --seeds 100000
	@./_build/default/bin/main.exe sim --scenario mnak-lossy --seeds 100000

clean:
	$(DUNE) clean
