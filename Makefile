# PicoMQ developer entry points. `make run` and `make test` are the two
# commands a newcomer needs; everything else is for working on PicoMQ.

GO       ?= go
BIN      ?= bin/picomq
DATA_DIR ?= ./data
PKGS     := ./...
# Go modules of their own inside the tree (docs/sdk-go.md): `go test ./...`
# at the root does not descend into them, so test, lint, unit, test-race
# and fuzz run each one in its directory, against its own go.mod.
NESTED_MODULES := client/go sdk internal/testproc
# Per-package test timeouts: a unit package that hangs (a lost wake-up, an
# ack that never comes) fails within UNIT_TIMEOUT with every goroutine's
# stack, instead of holding the run for the e2e budget. The e2e budget is
# sized for a loaded machine (the package took over 25 min at load 45).
# The Rust client's tests are compiled before the e2e package starts (a
# cold build took over 15 min at load 30), so its budget is for tests.
UNIT_TIMEOUT ?= 8m
E2E_TIMEOUT  ?= 40m
FUZZTIME ?= 10s
# The unit tests run with the stream service's invariant checks on
# (node/stream/invariants.go): each change of a stream's offsets and
# chunks is checked, and a broken rule panics with the stream's name.
UNIT_TAGS ?= picomq_invariants
BENCHTIME ?= 2s

.PHONY: image k8s-test soak all build run test test-race unit e2e fuzz bench bench-ds bench-peers bench-micro lint fmt clean cluster cluster-down cluster-report minio minio-stop

all: build

build:
	$(GO) build -o $(BIN) ./cmd/picomq

## run: one node, zero config: embedded etcd + local object store in ./data
run: build
	./$(BIN) serve --data-dir $(DATA_DIR)

# A MinIO started by deploy/local-minio.sh (`make minio`) is used by the
# tests and benchmarks when it is running, unless the environment already
# names an S3 endpoint (CI does); the e2e tests get the cached MinIO binary.
S3_ENV = $(if $(PICOMQ_S3_ENDPOINT),,$(shell deploy/local-minio.sh env 2>/dev/null))
MINIO_BIN_ENV = $(if $(PICOMQ_MINIO_BIN),,$(shell deploy/local-minio.sh built 2>/dev/null && echo PICOMQ_MINIO_BIN=$$(deploy/local-minio.sh bin)))

## test: lint + every test, the crash, tiering, cluster and conformance tests included (what CI runs).
## Without an S3 endpoint in the environment it builds MinIO once (~10 min, cached), starts a
## loopback MinIO for the run and stops it afterwards, so nothing is skipped.
test: lint
	@set -e; started=; \
	if [ -z "$$PICOMQ_S3_ENDPOINT" ] && [ -z "$$(deploy/local-minio.sh env 2>/dev/null)" ]; then \
	  echo "== starting a loopback MinIO for the tests (deploy/local-minio.sh)"; \
	  deploy/local-minio.sh start >/dev/null; started=1; \
	fi; \
	status=0; \
	deploy/etcd-tools.sh build || status=$$?; \
	if command -v cargo >/dev/null 2>&1; then \
	  echo "== building the Rust client's tests (e2e TestRustClient runs them)"; \
	  (cd client/rust && cargo test --offline --workspace --no-run -q) || status=$$?; \
	else \
	  echo "== cargo missing: the Rust client's tests (e2e TestRustClient) need cargo and the Debian crates .ci/run installs"; status=1; \
	fi; \
	env $$( [ -n "$$PICOMQ_S3_ENDPOINT" ] || deploy/local-minio.sh env ) \
	    PICOMQ_MINIO_BIN=$${PICOMQ_MINIO_BIN:-$$(deploy/local-minio.sh bin)} \
	    $(GO) test -tags $(UNIT_TAGS) -count=1 -timeout $(UNIT_TIMEOUT) $$($(GO) list $(PKGS) | grep -v '/e2e') || status=$$?; \
	for m in $(NESTED_MODULES); do \
	  (cd $$m && $(GO) test -count=1 -timeout $(UNIT_TIMEOUT) ./...) || status=$$?; \
	done; \
	env $$( [ -n "$$PICOMQ_S3_ENDPOINT" ] || deploy/local-minio.sh env ) \
	    PICOMQ_MINIO_BIN=$${PICOMQ_MINIO_BIN:-$$(deploy/local-minio.sh bin)} \
	    $(GO) test -count=1 -timeout $(E2E_TIMEOUT) $$($(GO) list $(PKGS) | grep '/e2e') || status=$$?; \
	$(MAKE) --no-print-directory console-test || status=$$?; \
	env $$( [ -n "$$PICOMQ_S3_ENDPOINT" ] || deploy/local-minio.sh env ) \
	    $(MAKE) --no-print-directory tf-test || status=$$?; \
	$(MAKE) --no-print-directory k8s-test || status=$$?; \
	if [ -n "$$started" ]; then deploy/local-minio.sh stop >/dev/null; fi; \
	exit $$status

## soak: the history checker under random faults on a 3-node cluster with real etcd and MinIO
## (e2e TestSoak, docs/durability.md); DURATION, FAULT_EVERY (mean time between faults) and
## SOAK_DURABILITY (local,replicated,object) and SOAK_NODE_FLAGS (serve flags for every node) are variables. Beside the faults it creates, forks, trims, sets retention,
## deletes, with GC/retention/compaction every few seconds. Ends with the line `soak: N operations,
## M acknowledged records checked, K faults, G GC runs, D objects deleted, F fork reads checked, V violations`;
## exit status 1 when V > 0.
DURATION ?= 10m
FAULT_EVERY ?= 10s
SOAK_DURABILITY ?= local,replicated,object
SOAK_NODE_FLAGS ?=
soak:
	@out=$$(mktemp); \
	{ $(MINIO_BIN_ENV) PICOMQ_SOAK_DURATION=$(DURATION) PICOMQ_SOAK_FAULT_EVERY=$(FAULT_EVERY) \
	  PICOMQ_SOAK_DURABILITY=$(SOAK_DURABILITY) PICOMQ_SOAK_NODE_FLAGS='$(SOAK_NODE_FLAGS)' \
	  $(GO) test -tags soak -count=1 -v -timeout 4h -run '^TestSoak$$' ./e2e/ 2>&1; echo $$? > $$out.rc; } | tee $$out | \
	  grep --line-buffered -E '^(soak|    soak_test|--- )'; \
	status=$$(cat $$out.rc); line=$$(grep -E '^soak: [0-9]+ operations' $$out | tail -1); rm -f $$out.rc; \
	if [ -z "$$line" ]; then echo "soak: did not finish (go test exit $$status; full output in $$out)"; exit 1; fi; \
	rm -f $$out; \
	echo "$$line"; [ "$$status" = 0 ]

## tf-test: the Terraform and deploy/ tests (own Go module terraform/tests): offline HCL checks,
## tofu fmt, tflint, systemd-analyze verify, the docs check, the cloud-init node joining a
## local etcd + MinIO cluster, the IAM policy evaluation of every S3/SSM/KMS call, the per-boot
## disk script on loop devices (root), etcd backup and etcd RBAC scripts on a real etcd.
## tofu and tflint come from deploy/tf-tools.sh, etcdctl/etcdutl from deploy/etcd-tools.sh
## (built once, cached).
## A tool that cannot be built or found fails the run, naming it (PICOMQ_REQUIRE_TOOLS): nothing is skipped.
tf-test:
	@deploy/tf-tools.sh build || { echo "tf-test: could not build tofu/tflint (deploy/tf-tools.sh build needs the Go module proxy once; set PICOMQ_TOFU_BIN/PICOMQ_TFLINT_BIN to use installed ones)"; exit 1; }
	@deploy/etcd-tools.sh build || { echo "tf-test: could not build etcdctl/etcdutl (deploy/etcd-tools.sh build needs the Go module proxy once; set PICOMQ_ETCDCTL_BIN/PICOMQ_ETCDUTL_BIN to use installed ones)"; exit 1; }
	cd terraform/tests && $(GO) vet ./... && PICOMQ_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 15m ./...

## tf-check: just `tofu fmt -check -recursive terraform/` and tflint (builds them once)
tf-check:
	deploy/tf-tools.sh build
	$$(deploy/tf-tools.sh tofu) fmt -check -recursive -diff terraform/
	cd terraform && $$(../deploy/tf-tools.sh tflint) --recursive --config $$PWD/.tflint.hcl

## release: picomq for linux/amd64 and linux/arm64 in dist/, version/commit/date stamped, SHA256SUMS
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
RELEASE_LDFLAGS = -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
release:
	rm -rf dist && mkdir -p dist
	for arch in amd64 arm64; do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' \
	    -o dist/picomq-$(VERSION)-linux-$$arch ./cmd/picomq || exit 1; \
	done
	cd dist && sha256sum picomq-* > SHA256SUMS && cat SHA256SUMS

## image: OCI image of the release binaries (linux/amd64 + linux/arm64, non-root, CA certificates, OCI labels
## version/revision as release stamps them) written as an OCI layout in IMAGE_DIR; no container runtime needed
## (deploy/tools/image, go-containerregistry). Push it as docs/operations.md#kubernetes shows.
IMAGE_DIR ?= dist/image
image: release
	cd deploy/tools && GOFLAGS= $(GO) run ./image -out $(abspath $(IMAGE_DIR)) \
	  -version $(VERSION) -revision $(COMMIT) -created $(DATE) \
	  -binary linux/amd64=$(abspath dist/picomq-$(VERSION)-linux-amd64) \
	  -binary linux/arm64=$(abspath dist/picomq-$(VERSION)-linux-arm64)

## k8s-test: the container image, Helm chart and monitoring tests (own Go module deploy/tools): make image, then
## the image test runs its binary from the unpacked layers; helm lint + helm template and a strict decode of every
## rendered manifest into the Kubernetes API types; promtool check/test rules. helm and promtool come from
## deploy/k8s-tools.sh (built once, cached). e2e TestMonitoringMetricsExist checks the rules' metrics on a node.
k8s-test: image
	deploy/k8s-tools.sh build
	cd deploy/tools && $(GO) vet ./... && \
	  PICOMQ_IMAGE_LAYOUT=$(abspath $(IMAGE_DIR)) PICOMQ_IMAGE_VERSION=$(VERSION) \
	  PICOMQ_HELM_BIN=$$(../k8s-tools.sh helm) PICOMQ_PROMTOOL_BIN=$$(../k8s-tools.sh promtool) \
	  $(GO) test -count=1 -timeout 15m ./...

## minio: start a loopback MinIO for tests and benchmarks (docs/storage.md); minio-stop stops it
minio:
	deploy/local-minio.sh start

minio-stop:
	deploy/local-minio.sh stop

unit:
	$(GO) test -tags $(UNIT_TAGS) -count=1 -short $(PKGS)
	for m in $(NESTED_MODULES); do (cd $$m && $(GO) test -count=1 -short ./...) || exit 1; done

test-race:
	$(GO) test -count=1 -race -timeout 30m $(PKGS)
	for m in $(NESTED_MODULES); do (cd $$m && $(GO) test -count=1 -race -timeout 30m ./...) || exit 1; done

e2e:
	$(GO) test -count=1 -v -timeout 20m ./e2e/...

## console-test: the web console's browser tests (own Go module e2e/console, chromedp driving
## Debian's chromium headless; docs/console.md); screenshots under REPORT_DIR/console
console-test:
	cd e2e/console && $(GO) vet ./... && $(MINIO_BIN_ENV) PICOMQ_REPORT_DIR=$(abspath $(REPORT_DIR)) \
	  $(GO) test -count=1 -v -timeout 15m ./...

## cluster: 3 nodes + etcd + MinIO on loopback (data in ./cluster-data); prints the URLs
cluster:
	deploy/local-cluster.sh up

## cluster-down: stop exactly the processes `make cluster` started
cluster-down:
	deploy/local-cluster.sh down

## cluster-report: the kill -9 takeover test, its report in REPORT_DIR (docs/operations.md)
REPORT_DIR ?= reports
cluster-report:
	$(MINIO_BIN_ENV) PICOMQ_REPORT_DIR=$(abspath $(REPORT_DIR)) \
	  $(GO) test -count=1 -v -timeout 10m -run '^TestClusterOwnerKill$$' ./e2e/; \
	  status=$$?; cat $(REPORT_DIR)/cluster-takeover.txt 2>/dev/null; exit $$status

## fuzz: every fuzz target for FUZZTIME each (go test runs one target at a time)
fuzz:
	@set -e; for m in . $(NESTED_MODULES); do \
	  for dir in $$(cd $$m && $(GO) list -f '{{.Dir}}' ./...); do \
	    for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	      echo "== $$dir $$t"; \
	      (cd $$dir && $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s .); \
	    done; \
	  done; \
	done

## bench: PicoMQ next to its baselines and peers (disk floor, NATS JetStream with
## sync_interval: always, the Durable Streams reference server, ...), each
## figure beside the one measured in the same run, twice, with the spread:
## one table on stdout, the report (table.md, SVG charts, results.json) in
## BENCH_OUT. Builds the peers from bench/go.mod and npm itself. Not part of
## make test (its harness is smoke-tested there). docs/benchmarks.md.
BENCH_OUT   ?= bin/bench-report
BENCH_RUNS  ?= 2
BENCH_SECS  ?= 3s
BENCH_ONLY  ?=
BENCH_STREAMS ?= 100000
# KLITE: a klite binary built outside the repository (docs/benchmarks.md,
# "Kafka next to klite"); unset, the kafka group's klite rows are not measured.
KLITE       ?=
BENCH_TOOLS := bin/bench-tools
bench: build bench-peers
	$(GO) run ./e2e/benchmatrix -picomq $(BIN) -natsload $(BENCH_TOOLS)/natsload -nats-server $(BENCH_TOOLS)/nats-server \
	  -out $(BENCH_OUT) -runs $(BENCH_RUNS) -secs $(BENCH_SECS) -streams $(BENCH_STREAMS) $(if $(BENCH_ONLY),-only $(BENCH_ONLY)) \
	  $(if $(KLITE),-klite $(KLITE))

## bench-peers: build the NATS server and its load client from their own module (bench/)
bench-peers:
	@mkdir -p $(BENCH_TOOLS)
	cd bench && GOFLAGS= $(GO) build -o ../$(BENCH_TOOLS)/natsload ./natsload && \
	  GOFLAGS= $(GO) build -o ../$(BENCH_TOOLS)/nats-server github.com/nats-io/nats-server/v2

## bench-ds: only the Durable Streams rows of make bench (vs the Node reference server; vs Caddy too with PICOMQ_BENCH_CADDY)
bench-ds:
	$(MAKE) --no-print-directory bench BENCH_ONLY=ds

## bench-micro: the go test -bench hot-path benchmarks next to their same-run baselines
bench-micro:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./wal/ | tee /tmp/picomq-bench-wal.txt
	$(GO) test -run '^$$' -bench . -benchmem ./record/ ./api/pico/
	cd sdk && $(GO) test -run '^$$' -bench . -benchmem ./wire/codec/
	cd client/go && $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) . | tee /tmp/picomq-bench-sdk.txt
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./e2e/bench/ | tee /tmp/picomq-bench-pico.txt
	$(S3_ENV) $(GO) test -run '^$$' -bench . -benchtime 10x ./tiering/ | tee /tmp/picomq-bench-tiering.txt
	$(GO) test -run '^$$' -bench PUTsPerGiB -benchtime 1x -timeout 20m ./node/ | tee /tmp/picomq-bench-puts.txt
	$(GO) test -run '^$$' -bench AppendHTTPNode -benchmem -benchtime $(BENCHTIME) ./node/ | tee /tmp/picomq-bench-node-http.txt

lint:
	$(GO) vet $(PKGS)
	for m in $(NESTED_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck $(PKGS) && \
	  for m in $(NESTED_MODULES); do (cd $$m && staticcheck ./...) || exit 1; done; \
	  else echo "staticcheck not installed (go install honnef.co/go/tools/cmd/staticcheck@v0.8.2); skipped"; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin dist
