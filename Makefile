GO ?= go
BIN := bin/bub

.PHONY: all build run test fuzz bench bench-quick bench-go vet clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/bub

# Starts the bus on 127.0.0.1:7892 with its data in ./data.
run: build
	./$(BIN) serve

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

test: vet
	$(GO) test -race -count=1 -timeout 8m ./...
	$(MAKE) fuzz

# A short run of every fuzz target; `go test -fuzz` takes one target at a
# time. The budget is a count of executions, not a duration: Go 1.26's
# fuzz coordinator can report a spurious "context deadline exceeded" when a
# duration runs out mid-execution (golang/go#75804, fixed in Go 1.27), and
# a count has no deadline to race. 50000 is a few seconds per target here.
FUZZTIME ?= 50000x
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# The harness (bench/, a module of its own; docs/BENCHMARKS.md): builds
# bub, runs it as a separate process next to a raw WebSocket relay and
# NATS, prints a table and writes bench/results/latest.json. A few minutes.
bench:
	cd bench && $(GO) run . -out results/latest.json

# One short round: checks the harness works, numbers not for publishing.
bench-quick:
	cd bench && $(GO) run . -quick -out results/quick.json

# The in-package Go benchmarks (router, relay, store).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
