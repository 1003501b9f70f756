# Kiln. `make help` lists the targets.
GO      ?= go
BIN     := bin
PKGS    := ./...
DATA    ?= .data
LISTEN  ?= 127.0.0.1:7080
FUZZTIME ?= 15

.PHONY: help build test test-all fuzz lint bench run demo e2e clean kube kube-smoke

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build kilnd, kiln and kiln-agent into bin/, and kiln-agent for each architecture edge installers offer
	$(GO) build -o $(BIN)/ ./cmd/...
	for arch in amd64 arm64; do GOOS=linux GOARCH=$$arch CGO_ENABLED=0 $(GO) build -o $(BIN)/kiln-agent-linux-$$arch ./cmd/kiln-agent; done

test: ## fast tests (SQLite; PostgreSQL only when KILN_TEST_POSTGRES is set)
	$(GO) test -count=1 $(PKGS)

test-all: build kube ## every test: private PostgreSQL, unit, API, crash, kube smoke and real-cluster tests
	scripts/test-all.sh

fuzz: ## every Go fuzz target for FUZZTIME seconds each (default 15); failing inputs land in testdata/fuzz
	scripts/fuzz.sh $(FUZZTIME)

lint: ## go vet and gofmt
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: build kube ## benchmarks (incl. real local clusters); figures written to BENCHMARKS.md
	scripts/bench.sh

e2e: build kube ## only the real-cluster tests (test/e2e)
	$(GO) test -count=1 -v -timeout 30m ./test/e2e/

run: build kube ## kilnd --dev in the foreground (data in $(DATA))
	$(BIN)/kilnd --dev --data-dir $(DATA) --listen $(LISTEN)

demo: build kube ## the main job: kilnd --dev, a real local cluster, kubectl get nodes, delete
	scripts/demo.sh

clean: ## remove build output and dev data
	rm -rf $(BIN) $(DATA) .tmp

# kiln-kube: the Kubernetes components (kube/, its own module; see docs/kube.md). The file target
# makes a second `make kube` a no-op; Go's build cache makes a rebuild after a change incremental.
KUBE_VERSION := v1.36.3
KUBE_VPKG    := k8s.io/component-base/version
KUBE_LDFLAGS := -s -w -X $(KUBE_VPKG).gitVersion=$(KUBE_VERSION) -X $(KUBE_VPKG).gitMajor=1 \
	-X $(KUBE_VPKG).gitMinor=36 -X $(KUBE_VPKG).gitTreeState=clean

kube: $(BIN)/kiln-kube ## build bin/kiln-kube, Kubernetes components from kube/ (cold: ~5 min, 2.5 GB)

$(BIN)/kiln-kube: kube/go.mod kube/go.sum $(shell find kube -name '*.go')
	cd kube && GOFLAGS=-mod=mod $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o ../$(BIN)/kiln-kube ./cmd/kiln-kube

kube-smoke: $(BIN)/kiln-kube ## etcd, apiserver, controller-manager, scheduler, 2 hollow kubelets; 5 replicas available
	kube/smoke/smoke.sh $(BIN)/kiln-kube
