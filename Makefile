# jetembed — build, test and run targets. `make run` and `make test` are the
# two set-up commands; both fetch what they need through `make deps`.
SHELL := /bin/bash
GO ?= go
BIN := bin/jetembed
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
DEPS := $(CURDIR)/.deps
export JETEMBED_ORT_LIB ?= $(DEPS)/onnxruntime/libonnxruntime.so.1
export JETEMBED_NATS_SERVER_BIN ?= $(DEPS)/bin/nats-server
export JETEMBED_NATS_CLI ?= $(DEPS)/bin/nats
export JETEMBED_HF_ORACLE ?= $(DEPS)/hf-oracle
# Lint tools at fixed versions, built into bin/tools (not @latest: a new
# release must not turn a clean tree red).
STATICCHECK_VERSION := v0.8.2
DEADCODE_VERSION := v0.52.0
TOOLS := $(CURDIR)/bin/tools
STATICCHECK ?= $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)
DEADCODE ?= $(TOOLS)/deadcode-$(DEADCODE_VERSION)
TEST_TIMEOUT ?= 14m
FUZZTIME ?= 50000x

.PHONY: all deps build run test test-short bench bench-fleet lint deadcode fuzz vet-tags docker docker-cuda clean torch-fixtures

all: build

deps:
	@./scripts/deps.sh

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/jetembed

run: deps build
	$(BIN) dev

test: deps
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

test-short: deps
	$(GO) test -short -count=1 ./...

bench: deps build
	./scripts/bench.sh

# The fleet-at-scale run (cmd/internal/bench/fleet): 3 nats-server processes, 64 members,
# 200k jobs, churn; prints the figures and writes them to bin/bench-fleet.md.
# FLEET_ARGS passes more of its flags (go test -args), e.g.
# FLEET_ARGS='-fleet.members 32 -fleet.prefetch 64'.
bench-fleet: deps
	@mkdir -p bin
	$(GO) test -count=1 -timeout 20m -run '^TestFleet$$' -v ./cmd/internal/bench/fleet/ -args -fleet.full -fleet.out $(CURDIR)/bin/bench-fleet.md $(FLEET_ARGS)

fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# Regenerate the torch-made test models (testdata/models/torch-m3*) and the
# .pt reader's test files; installs python3-torch and python3-onnx with
# apt-get when it can, else skips with a message.
torch-fixtures:
	./scripts/gen-torch-fixtures.sh

lint: $(STATICCHECK)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags hftokenizers ./engine/tokenizer/...
	$(STATICCHECK) ./...

$(STATICCHECK):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(TOOLS)/staticcheck $@

$(DEADCODE):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)
	mv $(TOOLS)/deadcode $@

# Functions no program or test reaches (golang.org/x/tools deadcode, with
# the tests as roots, so test helpers count as used).
deadcode: $(DEADCODE)
	$(DEADCODE) -test ./...

docker:
	docker build -t jetembed:$(VERSION) -f Dockerfile .

docker-cuda:
	docker build -t jetembed:$(VERSION)-cuda -f Dockerfile.cuda .

clean:
	rm -rf bin
