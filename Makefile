# PicoMQ developer entry points. `make run` and `make test` are the two
# commands a newcomer needs; everything else is for working on PicoMQ.

GO       ?= go
BIN      ?= bin/picomq
DATA_DIR ?= ./data
PKGS     := ./...
FUZZTIME ?= 10s
BENCHTIME ?= 2s

.PHONY: all build run test test-race unit e2e fuzz bench lint fmt clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/picomq

## run: one node, zero config: embedded etcd + local object store in ./data
run: build
	./$(BIN) serve --data-dir $(DATA_DIR)

## test: lint + every test, the crash and e2e tests included (what CI runs)
test: lint
	$(GO) test -count=1 -timeout 20m $(PKGS)

unit:
	$(GO) test -count=1 -short $(PKGS)

test-race:
	$(GO) test -count=1 -race -timeout 30m $(PKGS)

e2e:
	$(GO) test -count=1 -v -timeout 20m ./e2e/...

## fuzz: every fuzz target for FUZZTIME each (go test runs one target at a time)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "== $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## bench: hot-path benchmarks next to their same-run baselines
bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./wal/ | tee /tmp/picomq-bench-wal.txt
	$(GO) test -run '^$$' -bench . -benchmem ./node/record/ ./api/pico/

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck $(PKGS); \
	  else echo "staticcheck not installed (go install honnef.co/go/tools/cmd/staticcheck@v0.7.0); skipped"; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
