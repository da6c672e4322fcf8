GO ?= go
BIN := bin/bub

.PHONY: all build run test fuzz bench vet clean

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

# A short run of every fuzz target; `go test -fuzz` takes one target at a time.
FUZZTIME ?= 5s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
