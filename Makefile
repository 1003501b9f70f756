# Kiln. `make help` lists the targets.
GO      ?= go
BIN     := bin
PKGS    := ./...
DATA    ?= .data
LISTEN  ?= 127.0.0.1:7080
FUZZTIME ?= 15

.PHONY: help build test test-all test-report flake-hunt faults soak fuzz lint bench run demo e2e clean kube kube-smoke node-image node-test system-images conformance conformance-build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

build: ## build kilnd, kiln and kiln-agent into bin/, kiln-agent for each architecture edge installers offer, kiln-aws-local, kiln-azure-local and kiln-gcp-local (the local AWS, Azure and Compute Engine test doubles)
	@echo "build: kilnd, kiln, kiln-agent into $(BIN)/ (with nothing cached this target takes about 2 minutes on 2 cores, measured 1m49s; modules downloaded once)"
	$(GO) build -o $(BIN)/ ./cmd/...
	@echo "build: kiln-aws-local, the local AWS (a test double: docs/aws-local.md)"
	$(GO) build -o $(BIN)/kiln-aws-local ./test/cloud/aws/kiln-aws-local
	@echo "build: kiln-azure-local, the local Azure (a test double: docs/azure-local.md)"
	$(GO) build -o $(BIN)/kiln-azure-local ./test/cloud/azure/kiln-azure-local
	@echo "build: kiln-gcp-local, the local Compute Engine (a test double: docs/gcp-local.md)"
	$(GO) build -o $(BIN)/kiln-gcp-local ./test/cloud/gcp/kiln-gcp-local
	@echo "build: kiln-agent for linux/amd64 and linux/arm64 (the edge installers' downloads)"
	for arch in amd64 arm64; do GOOS=linux GOARCH=$$arch CGO_ENABLED=0 $(GO) build -o $(BIN)/kiln-agent-linux-$$arch ./cmd/kiln-agent; done

test: ## fast tests (SQLite; PostgreSQL only when KILN_TEST_POSTGRES is set)
	$(GO) test -count=1 $(PKGS)

test-all: build kube node-image system-images conformance-build ## every test: private PostgreSQL, unit, API, crash, kube smoke, node image and real-cluster tests
	scripts/test-all.sh

test-report: ## where the last make test-all's time went and what failed, from its go test -json (.tmp/test-all.json)
	$(GO) run ./test/testreport .tmp/test-all.json

FLAKE_N   ?= 3
FLAKE_RUN ?= .
FLAKE_PKGS ?= ./test/e2e/
flake-hunt: build kube node-image system-images ## FLAKE_PKGS (default ./test/e2e/) run FLAKE_N times (default 3; FLAKE_RUN picks tests) beside two busy loops; prints each failing test's whole output
	scripts/flake-hunt.sh -n $(FLAKE_N) -run '$(FLAKE_RUN)' $(FLAKE_PKGS)

FAULTS ?= 100
faults: ## the fault suite (test/faults): FAULTS (default 100) kills of replicas (SIGKILL or a random fault point), plus SIGTERMs, under load, on PostgreSQL (3 replicas) and SQLite
	@if pg_env=$$(scripts/postgres.sh start); then eval "$$pg_env"; export KILN_TEST_POSTGRES; else echo "faults: PostgreSQL could not be started: its half will be SKIPPED" >&2; fi; \
	FAULTS=$(FAULTS) $(GO) test -count=1 -v -timeout 90m -run TestFaults ./test/faults/

SOAK ?= 30m
soak: ## the soak (test/faults, docs/faults.md): SOAK (default 30m) of random create/scale/upgrade/delete with faults; prints the checker's verdict and the observed kilnd's RSS and open files
	@if pg_env=$$(scripts/postgres.sh start); then eval "$$pg_env"; export KILN_TEST_POSTGRES; else echo "soak: PostgreSQL could not be started: the soak runs on SQLite, with no kills" >&2; fi; \
	SOAK=$(SOAK) $(GO) test -count=1 -v -timeout 3h -run TestSoak ./test/faults/

fuzz: ## every Go fuzz target for FUZZTIME seconds each (default 15); failing inputs land in testdata/fuzz
	scripts/fuzz.sh $(FUZZTIME)

lint: ## go vet, gofmt, and go.mod tidy (direct requirements not marked indirect)
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: build kube system-images ## benchmarks (incl. real local and docker clusters and a bounded fault suite); figures written to BENCHMARKS.md
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory node-image; fi
	scripts/bench.sh

e2e: build kube system-images ## only the real-cluster tests (test/e2e)
	$(GO) test -count=1 -v -timeout 30m ./test/e2e/

run: build kube system-images ## kilnd --dev in the foreground (data in $(DATA))
	$(BIN)/kilnd --dev --data-dir $(DATA) --listen $(LISTEN)

demo: build kube system-images ## the main job: kilnd --dev, a 1+2 cluster (docker: real containers; without Docker: hollow local nodes), the demo app answering from each worker, logs, exec, scale, delete
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory node-image; else echo "demo: no Docker engine answers: no node image, the cluster will be of hollow local nodes" >&2; fi
	scripts/demo.sh

clean: ## remove build output and dev data
	rm -rf $(BIN) $(DATA) .tmp

# kiln-kube: the Kubernetes components (kube/, its own module; see docs/kube.md), one program per
# Kubernetes version in KUBE_VERSIONS (oldest first; internal/distro's LocalVersions must match):
# bin/kiln-kube-VERSION, and bin/kiln-kube a link to the newest. A version with its own
# kube/versions/VERSION.mod (and .sum) builds from it (go build -modfile), the newest from
# kube/go.mod; each build has the tag kube1.MINOR for the few files that differ between versions.
# The file targets make a second `make kube` a no-op; Go's build cache makes a rebuild after a
# change incremental. Builds run under nice: a cold one takes minutes of both cores.
KUBE_VERSIONS := v1.35.4 v1.36.3
KUBE_NEWEST   := $(lastword $(KUBE_VERSIONS))
KUBE_SRC      := $(shell find kube -name '*.go')
kube_modfile   = $(if $(wildcard kube/versions/$(1).mod),versions/$(1).mod,go.mod)
kube_minor     = $(word 2,$(subst ., ,$(1)))

kube: $(KUBE_VERSIONS:%=$(BIN)/kiln-kube-%) $(BIN)/kiln-kube ## build bin/kiln-kube-VERSION for each KUBE_VERSIONS, from kube/ (cold: ~15 min for both on 2 idle cores, 2.5 GB to link)

# kube_build VERSION: the rule of bin/kiln-kube-VERSION. scripts/kube-build.sh checks that the
# go.mod it builds from requires that version of k8s.io/kubernetes, says what a cold build costs,
# and prints a line per stage.
define kube_build
$(BIN)/kiln-kube-$(1): kube/$(call kube_modfile,$(1)) kube/$(basename $(call kube_modfile,$(1))).sum $(KUBE_SRC) scripts/kube-build.sh
	GO=$(GO) scripts/kube-build.sh $(1) $(call kube_modfile,$(1)) $$@
endef
$(foreach v,$(KUBE_VERSIONS),$(eval $(call kube_build,$(v))))

$(BIN)/kiln-kube: $(BIN)/kiln-kube-$(KUBE_NEWEST)
	ln -sfn kiln-kube-$(KUBE_NEWEST) $@

kube-smoke: kube ## kube/internal's unit tests; for each version: etcd, apiserver, controller-manager, scheduler, 2 hollow kubelets; 5 replicas available; as root, kubeadm's local etcd run as kubeadm writes it
	cd kube && $(GO) test ./internal/...
	for v in $(KUBE_VERSIONS); do kube/smoke/smoke.sh $(BIN)/kiln-kube-$$v $$v || exit 1; done
	@if [ "$$(id -u)" = 0 ]; then for v in $(KUBE_VERSIONS); do kube/smoke/kubeadm-etcd.sh $(BIN)/kiln-kube-$$v || exit 1; done; \
	else echo "kube-smoke: kube/smoke/kubeadm-etcd.sh needs root (a mount namespace): SKIPPED" >&2; fi

# node-image: Kiln's node image, kiln/node:VERSION for every version in KUBE_VERSIONS (see
# docs/node-image.md): Debian bookworm from Debian's mirror by debootstrap with containerd 2 built
# from its Go module (scripts/containerd-build.sh; the base, shared by every version, built once),
# then kiln-kube of that version, kiln-agent and the pause image Kiln
# builds. Nothing is pulled. Each image carries the hash of its inputs: a second `make node-image`
# with nothing changed does nothing. Needs root and Docker.
node-image: kube ## build the node image kiln/node:VERSION for each KUBE_VERSIONS (Docker, root; first build ~2 min on top of make kube, and containerd from its Go module the first time, ~6 min of CPU)
	for v in $(KUBE_VERSIONS); do GO=$(GO) scripts/node-image.sh $$v $(BIN)/kiln-kube-$$v || exit 1; done

# system-images: the images every real cluster pulls from kilnd's registry, built from source
# (docs/system-images.md): bin/images/coredns.tar (CoreDNS from its Go module, images/coredns),
# bin/images/demo.tar (images/demo), bin/images/pause.tar (images/pause) and, for each version in
# KUBE_VERSIONS, bin/images/kube-VERSION.tar: bin/kiln-kube-VERSION as kiln.dev/kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd and kube, tagged VERSION (kubeadm's static pods;
# the host binaries). OCI archives kilnd seeds into its registry at start (--system-images,
# default bin/images beside bin/kilnd). Cached by a hash of their inputs: with nothing changed it
# does nothing in seconds. The first CoreDNS build is long (nice'd); it needs make kube first.
system-images: kube ## build bin/images/: coredns, demo, pause, kube-VERSION (kubeadm's control plane) for kilnd's registry (first build: CoreDNS ~11 min on 2 busy cores, each kube image ~20 s after make kube)
	GO=$(GO) scripts/system-images.sh $(BIN)/images $(KUBE_VERSIONS:%=$(BIN)/kiln-kube-%)

# conformance: upstream Kubernetes' end-to-end suite as the judge (docs/conformance.md).
# bin/e2e.test is upstream's test/e2e at the version test/conformance/go.mod requires (Kiln's
# newest; a unit test keeps the two equal), built as upstream builds it (go test -c, the version
# stamped); bin/ginkgo runs it in parallel; bin/conformance-images/ holds the images its specs run,
# from source and Debian's packages (scripts/conformance-images.sh). Cold: ~12 min for e2e.test
# on 2 cores, ~3 min for the images; warm, nothing is done.
CONF_DIR      := test/conformance
CONF_K8S       = $(shell awk '$$1 == "k8s.io/kubernetes" { print $$2; exit }' $(CONF_DIR)/go.mod)
CONF_LDFLAGS   = -s -w -X k8s.io/component-base/version.gitVersion=$(CONF_K8S) -X k8s.io/component-base/version.gitTreeState=clean
conformance-build: $(BIN)/e2e.test $(BIN)/ginkgo kube system-images ## build bin/e2e.test (upstream's suite), bin/ginkgo and the images its specs run (bin/conformance-images)
	GO=$(GO) scripts/conformance-images.sh $(BIN)/conformance-images

$(BIN)/e2e.test: $(CONF_DIR)/go.mod $(CONF_DIR)/go.sum $(wildcard $(CONF_DIR)/*.go)
	@echo "conformance-build: upstream's e2e suite $(CONF_K8S) into $@ (cold: ~12 min on 2 cores; 1-2 min to link when cached)"
	cd $(CONF_DIR) && $(GO) test -c -trimpath -ldflags '$(CONF_LDFLAGS)' -o $(CURDIR)/$@ .

$(BIN)/ginkgo: $(CONF_DIR)/go.mod $(CONF_DIR)/go.sum
	cd $(CONF_DIR) && $(GO) build -o $(CURDIR)/$@ github.com/onsi/ginkgo/v2/ginkgo

CONFORMANCE_FOCUS ?= all
conformance: conformance-build node-image ## the whole [Conformance] set on a docker cluster (CONFORMANCE_FOCUS=curated: CI's part; or a ginkgo focus); results written to docs/conformance.md, the suite's output to bin/conformance.log (~1 h)
	KILN_CONFORMANCE=$(CONFORMANCE_FOCUS) KILN_CONFORMANCE_RESULTS=$(CURDIR)/docs/conformance.md KILN_CONFORMANCE_LOG=$(CURDIR)/$(BIN)/conformance.log $(GO) test -count=1 -v -timeout 3h -run 'TestConformance$$' ./test/e2e/

node-test: node-image ## a node container from the image runs a real kubelet, containerd, kube-proxy and a pod (test/node)
	$(GO) test -count=1 -v -timeout 10m ./test/node/
