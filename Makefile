# Kiln. `make help` lists the targets.
GO      ?= go
BIN     := bin
PKGS    := ./...
DATA    ?= .data
LISTEN  ?= 127.0.0.1:7080

.PHONY: help build test test-all lint bench run demo e2e clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build kilnd and kiln into bin/
	$(GO) build -o $(BIN)/ ./cmd/...

test: ## fast tests (SQLite; PostgreSQL only when KILN_TEST_POSTGRES is set)
	$(GO) test -count=1 $(PKGS)

test-all: build ## every test: starts a private PostgreSQL, runs unit, API, e2e and crash tests
	scripts/test-all.sh

lint: ## go vet and gofmt
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: build ## benchmarks; figures written to BENCHMARKS.md
	scripts/bench.sh

run: build ## kilnd --dev in the foreground (data in $(DATA))
	$(BIN)/kilnd --dev --data-dir $(DATA) --listen $(LISTEN)

demo: build ## the main job: start kilnd --dev, create a cluster, show it, delete it
	scripts/demo.sh

clean: ## remove build output and dev data
	rm -rf $(BIN) $(DATA) .tmp
