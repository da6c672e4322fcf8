SHELL := /bin/bash
# A recipe line that pipes fails when any command in it fails.
.SHELLFLAGS := -o pipefail -ec

GO ?= go
BIN := bin/bub

.PHONY: all build run telegram-demo test check test-go test-docker fuzz bench bench-quick bench-go bcp-eval vet clean \
	test-race test-race-then-lanes test-fuzz test-image \
	image image-binaries compose-secrets up down compose-config compose-test compose-test-if-docker \
	cluster-test cluster-test-if-docker pytest-sdk console-shots a2a-tck

all: build

# A first build compiles every dependency (NATS, Prometheus, ...), minutes
# that go build spends silent; deploy/build-progress.sh says how far it
# has got (a line every 20 packages) rather than look hung.
build:
	@test -x $(BIN) || echo "building $(BIN): the first build compiles bub and its dependencies, which takes a few minutes; later builds take seconds"
	@echo "go build -o $(BIN) ./cmd/bub"
	@GO="$(GO)" deploy/build-progress.sh $(BIN) ./cmd/bub

# Starts the bus on 127.0.0.1:7892 with its data in ./data, once built.
run: build
	./$(BIN) serve

# The Telegram bridge without a bot token: the fake Bot API of the tests
# (bridges/telegram/telegramtest), and against it the bus, the spawner
# with the echo agent and the bridge, on loopback ports and a temporary
# directory; a user writes twice, and the chat, the bus messages it
# becomes and the bot's answers are printed (examples/telegram-demo).
telegram-demo: build
	$(GO) build -o bin/echo-agent ./examples/echo-agent
	$(GO) run ./examples/telegram-demo --bub $(BIN) --agent bin/echo-agent

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

# Everything CI runs (.ci/run calls this), after vet: lanes side by
# side, each line prefixed with its lane's name.
# - [race]: every package's tests under -race, three packages at a
#   time (bus, cmd/bub and cluster, the three longest, spend most of
#   their time waiting on processes, sockets and elections, so a third
#   package uses what the other two leave of the cores); then, side by
#   side, the [go] lane (the tests that measure the process's heap,
#   without -race and alone in their process, bus/norace_test.go; then
#   the Python SDK's tests) and the [docker] lane (the compose stack's
#   test, then three nodes under load while nodes are killed and cut
#   off), which mostly waits on containers.
# - [fuzz], from the start: a short run of every fuzz target at nice 19,
#   so that it takes only the CPU the tests leave idle while they wait
#   on processes, sockets and containers: a CFS weight of 15 against the
#   tests' 1024. It used to start after the race step, at nice 10, and
#   was the longest lane.
# - [docker], from the start too and at nice 19: the image and the load
#   program of compose-test and cluster-test, so that when the race step
#   ends their builds are done (go build finds the binaries up to date,
#   docker build every layer in its cache).
# What is left on the critical path: vet, the race step, the Docker
# lane. docs/TESTING.md says more, and how long it takes.
test: vet compose-config
	@$(MAKE) --no-print-directory -j3 test-fuzz test-race-then-lanes

test-race-then-lanes: test-race test-image
	@$(MAKE) --no-print-directory -j2 test-go test-docker

test-image:
	@if docker info >/dev/null 2>&1; then \
		nice -n 19 $(MAKE) --no-print-directory image IMAGE=bub-bus:compose-test && \
		nice -n 19 $(GO) build -o $(CLUSTERCHECK) ./deploy/clustercheck; \
	fi 2>&1 | sed -u 's/^/[docker] /'

test-race:
	$(GO) test -race -count=1 -p 3 -timeout 10m ./... 2>&1 | sed -u 's/^/[race] /'

# make test's fuzz run: TEST_FUZZTIME executions of each target, after
# its seed corpus, which every package's tests also run as unit tests.
# A smoke test of the fuzzing itself (an input the mutator finds within
# a few thousand executions, a target too slow to fuzz), not a campaign:
# that is make fuzz's FUZZTIME, or one target run for longer by hand.
TEST_FUZZTIME ?= 2000x
test-fuzz:
	nice -n 19 $(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME) 2>&1 | sed -u 's/^/[fuzz] /'

test-go:
	$(GO) test -count=1 -run '^TestNoRace' ./bus/ 2>&1 | sed -u 's/^/[go] /'
	$(MAKE) --no-print-directory pytest-sdk 2>&1 | sed -u 's/^/[go] /'

test-docker:
	$(MAKE) --no-print-directory compose-test-if-docker 2>&1 | sed -u 's/^/[docker] /'
	$(MAKE) --no-print-directory cluster-test-if-docker 2>&1 | sed -u 's/^/[docker] /'

# The edit-compile-test loop: vet and the library packages' tests under
# -race, without the cluster tests (-short skips them) and without the
# packages whose tests run the bub binary, examples or deploy tools.
# Three packages at a time, as make test runs them: they wait on sockets
# and the echo agent more than they compute (113 CPU-seconds for 232 s
# of wall time, measured), and go test's default is one per core.
# docs/TESTING.md says how long it takes.
check: vet
	$(GO) test -race -short -count=1 -p 3 $$($(GO) list ./... | grep -v -e /cmd/ -e /examples/ -e /deploy/)

# The Python SDK's tests (sdk/python) against the bub built here, and
# mypy --strict on the SDK where Debian's mypy is installed. Skipped, in
# one line, without a Python 3.11 that has pytest and websockets (Debian:
# python3-pytest, python3-websockets; .ci/run installs them).
PYTHON ?= /usr/bin/python3
pytest-sdk:
	@if ! $(PYTHON) -c 'import sys, pytest, websockets; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "pytest-sdk skipped: $(PYTHON) with pytest and websockets (Python 3.11+) is missing (Debian: apt-get install python3-pytest python3-websockets)"; \
	else \
		set -e; $(GO) build -o $(BIN) ./cmd/bub; \
		if $(PYTHON) -c 'import mypy' 2>/dev/null; then (cd sdk/python && $(PYTHON) -m mypy --strict src/bub_bus); fi; \
		cd sdk/python && BUB_BINARY=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q -p no:cacheprovider; \
	fi

# A short run of every fuzz target; `go test -fuzz` takes one target at a
# time. The budget is a count of executions, not a duration: Go 1.26's
# fuzz coordinator can report a spurious "context deadline exceeded" when a
# duration runs out mid-execution (golang/go#75804, fixed in Go 1.27), and
# a count has no deadline to race. 20000 is a second or two per target
# here, once its package is built: a smoke test of every target (it found
# FuzzEscape's slow inputs), not a campaign; run one target longer by
# hand (go test -fuzz FuzzX -fuzztime 10m PKG); make test runs fewer
# (TEST_FUZZTIME).
# The targets are found in the packages' test files (go list names
# them), not with go test -list, which linked every package's test
# binary to list them. Each package with targets is built once,
# instrumented for fuzzing (`go test -c -fuzz`), and its binary runs
# each target from the package's folder (where testdata/fuzz holds the
# seeds) with go test's own cache folder for what the fuzzer finds: one
# `go test -fuzz` per target linked its package again for each target.
# A target whose cost grows faster than its input must bound the input
# (FuzzEscape does): the fuzzer minimizes every new interesting input by
# running it thousands of times, and one large input then holds a worker
# for the whole -fuzzminimizetime (60 s) with no executions counted.
FUZZTIME ?= 20000x
FUZZ_DIR := build/fuzz
fuzz:
	@set -e; mkdir -p $(FUZZ_DIR); cache=$$($(GO) env GOCACHE)/fuzz; \
	$(GO) list -f '{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}' ./... | \
	while read -r pkg dir files; do \
		targets=$$(cd $$dir && grep -ho '^func Fuzz[A-Za-z0-9_]*' $$files /dev/null | sed 's/^func //' || true); \
		if [ -z "$$targets" ]; then continue; fi; \
		bin=$(CURDIR)/$(FUZZ_DIR)/$$(echo $$pkg | tr / _).test; \
		$(GO) test -c -fuzz=. -o $$bin $$pkg; \
		for target in $$targets; do \
			echo "fuzz $$pkg $$target"; \
			(cd $$dir && $$bin -test.run='^$$' -test.fuzz="^$$target$$" -test.fuzztime=$(FUZZTIME) -test.fuzzcachedir=$$cache/$$pkg) || exit 1; \
		done; \
	done

# The harness (bench/, a module of its own; docs/BENCHMARKS.md): builds
# bub, runs it as a separate process next to a raw WebSocket relay and
# NATS, then alone for the durable scenarios and with bub spawner for
# spawn-to-first-delivery; prints the tables (rates and server CPU per
# message) and writes bench/results/latest.json. Several minutes.
bench:
	cd bench && $(GO) run . -out results/latest.json

# The official A2A TCK against bub serve and examples/a2a-tck-agent
# (docs/A2A.md, "The official TCK"). Not part of `make test`: it needs a
# checkout of a2aproject/a2a-tck (branch 1.0-dev) in TCK_DIR and the
# google/api and google/rpc protos in GOOGLEAPIS_DIR; LEVEL=must runs
# one level.
a2a-tck:
	examples/a2a-tck-agent/run-tck.sh $(if $(LEVEL),--level $(LEVEL))

# One short round: checks the harness works, numbers not for publishing.
bench-quick:
	cd bench && $(GO) run . -quick -out results/quick.json

# The BCP evaluation (docs/BCP-EVAL.md): every suite's tasks through a
# bus and the BCP gateway on loopback, with honest, adaptive and covert
# Readers and the no-BCP baseline; prints the table and writes the JSON
# report to $(BCP_EVAL_OUT) (default bench/results/bcp-eval.json).
bcp-eval:
	$(GO) run ./bcp/eval/cmd/bcp-eval

# The in-package Go benchmarks (router, relay, store).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin build/image build/console

# Screenshots of every page of the operator console (docs/OPERATIONS.md,
# "Operator console"), taken in Chromium by its browser test against the
# real binary, to build/console/*.png for a person to look at.
console-shots:
	mkdir -p build/console
	BUB_CONSOLE_SHOTS=$(CURDIR)/build/console $(GO) test -count=1 -run '^TestConsoleBrowser$$' -v ./cmd/bub/
	@ls build/console/*.png

# --- The image and the compose stack (docs/OPERATIONS.md) ---------------
#
# No base image can be pulled, so the image is FROM scratch and holds
# binaries built here: static (CGO_ENABLED=0), without local paths
# (-trimpath), stripped (-s -w; panics still name functions and lines),
# with the version stamped in, since the toolchain records no revision
# (GOFLAGS=-buildvcs=false, and no work tree in the image).
IMAGE ?= bub-bus:dev
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_DIR := build/image
IMAGE_LDFLAGS := -s -w -X github.com/bub-bus/bub/internal/buildinfo.stamped=$(VERSION)
# Credentials of the stack `make up` runs: generated once, never committed.
SECRETS_DIR ?= build/compose
# A fixed project name, so that make down finds what make up started
# whatever the checkout's directory is called.
PROJECT ?= bub
BUB_PORT ?= 7892
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

# The binaries are built over the last ones rather than after removing
# them: go build then sees they are up to date and does not link them
# again (cluster-test, after compose-test in make test, built the same
# two a second time).
image-binaries:
	rm -rf $(IMAGE_DIR)/agents $(IMAGE_DIR)/data $(IMAGE_DIR)/tmp
	mkdir -p $(IMAGE_DIR)/data $(IMAGE_DIR)/tmp
	chmod 0700 $(IMAGE_DIR)/data
	chmod 1777 $(IMAGE_DIR)/tmp
	@echo "building the image's binaries (static, stripped): the first time, minutes, as for make build"
	@CGO_ENABLED=0 GO="$(GO)" deploy/build-progress.sh $(IMAGE_DIR)/bub ./cmd/bub -trimpath -ldflags '$(IMAGE_LDFLAGS)'
	@CGO_ENABLED=0 GO="$(GO)" deploy/build-progress.sh $(IMAGE_DIR)/echo-agent ./examples/echo-agent -trimpath -ldflags '$(IMAGE_LDFLAGS)'
	cp -R examples/agents $(IMAGE_DIR)/agents

image: image-binaries
	docker build -q -t $(IMAGE) .
	@docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' $(IMAGE)

compose-secrets: image-binaries
	deploy/compose-secrets.sh $(IMAGE_DIR)/bub $(SECRETS_DIR) $(BUB_PORT)

# The stack on this host: the bus on 127.0.0.1:$(BUB_PORT) and the
# spawner with the echo agent. up returns once the spawner has started,
# which it does only once the bus is healthy (depends_on). bin/bub is for
# the commands run from here, with $(SECRETS_DIR)/operator.env.
up: build image compose-secrets
	BUB_IMAGE=$(IMAGE) BUB_PORT=$(BUB_PORT) BUB_SECRETS_DIR=./$(SECRETS_DIR) $(COMPOSE) -p $(PROJECT) up -d
	@echo "stack up; for the bub commands on this host: . $(SECRETS_DIR)/operator.env"

# Stops the stack and keeps its volumes (the store); `make down
# VOLUMES=1` deletes them too.
down:
	BUB_IMAGE=$(IMAGE) BUB_SECRETS_DIR=./$(SECRETS_DIR) $(COMPOSE) -p $(PROJECT) down $(if $(VOLUMES),--volumes)

# Both compose tools must accept the file; each that is installed checks
# it. Neither needs a Docker Engine for this, nor the generated secrets.
compose-config:
	@checked=; \
	for f in docker-compose.yml docker-compose.cluster.yml; do \
		if command -v docker-compose >/dev/null; then docker-compose -f $$f config -q && echo "docker-compose config $$f: ok" && checked=1 || exit 1; fi; \
		if docker compose version >/dev/null 2>&1; then docker compose -f $$f config -q && echo "docker compose config $$f: ok" && checked=1 || exit 1; fi; \
	done; \
	if [ -z "$$checked" ]; then echo "compose-config skipped: neither docker-compose nor docker compose is installed"; fi

# The real stack, end to end (deploy/compose-test.sh). An image tag of its
# own, so that it never replaces the image a `make up` stack runs.
compose-test: IMAGE = bub-bus:compose-test
compose-test: image
	BUB_IMAGE=$(IMAGE) COMPOSE="$(COMPOSE)" deploy/compose-test.sh $(IMAGE_DIR)/bub

compose-test-if-docker:
	@if ! docker info >/dev/null 2>&1; then echo "compose-test skipped: no Docker Engine answers (docker info failed)"; \
	elif ! $(COMPOSE) version >/dev/null 2>&1; then echo "compose-test skipped: no compose tool (docker compose or docker-compose)"; \
	else $(MAKE) compose-test; fi

# Three nodes as one bus, under load, while nodes are killed, cut off and
# restarted (deploy/cluster-test.sh, docs/CLUSTER.md "Running it with
# Docker"); every message the bus accepted must be accounted for. About
# three minutes. The image tag is compose-test's: the same binaries.
CLUSTERCHECK := build/clustercheck
cluster-test: IMAGE = bub-bus:compose-test
cluster-test: image
	$(GO) build -o $(CLUSTERCHECK) ./deploy/clustercheck
	BUB_IMAGE=$(IMAGE) COMPOSE="$(COMPOSE)" deploy/cluster-test.sh $(IMAGE_DIR)/bub $(CLUSTERCHECK)

cluster-test-if-docker:
	@if ! docker info >/dev/null 2>&1; then echo "cluster-test skipped: no Docker Engine answers (docker info failed)"; \
	elif ! $(COMPOSE) version >/dev/null 2>&1; then echo "cluster-test skipped: no compose tool (docker compose or docker-compose)"; \
	else $(MAKE) cluster-test; fi
