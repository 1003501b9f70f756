#!/usr/bin/env bash
# Every test Kiln has: starts a private PostgreSQL (installing it from Debian's
# packages when missing) so the store conformance suite runs on both databases,
# then vets and runs all packages, including the crash tests that start real
# kilnd processes and the end-to-end tests that bring up real Kubernetes
# clusters with bin/kiln-kube (built by make test-all) and drive the web console
# in Debian's chromium (installed when missing), checks the alert rules with
# Debian's promtool (installed when missing), and last runs every
# fuzz target for 10 s (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if pg_env=$(scripts/postgres.sh start); then
	eval "$pg_env"
	export KILN_TEST_POSTGRES
	echo "test-all: PostgreSQL at ${KILN_TEST_POSTGRES}" >&2
else
	echo "test-all: PostgreSQL could not be started: its half of the store suite will be SKIPPED" >&2
fi

# Debian's chromium for the console's browser tests (test/e2e), installed when missing.
if chromium_env=$(scripts/chromium.sh); then
	eval "$chromium_env"
	export KILN_CHROMIUM
else
	echo "test-all: chromium could not be found or installed: the console's browser tests will be SKIPPED" >&2
fi

# Debian's promtool for the alert rules' test (internal/daemon TestAlertRules), installed when missing.
# KILN_PROMTOOL is always set here, so that test fails instead of skipping when promtool is missing.
if promtool_env=$(scripts/promtool.sh); then
	eval "$promtool_env"
else
	echo "test-all: promtool could not be found or installed: TestAlertRules will FAIL" >&2
	KILN_PROMTOOL=missing
fi
export KILN_PROMTOOL

# Debian's AWS CLI, which test/cloud/aws points at the local AWS (a second client beside the Go SDK).
if ! command -v aws >/dev/null; then
	if [ "$(id -u)" = 0 ] && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq awscli >/dev/null; }; then
		echo "test-all: installed Debian's awscli" >&2
	else
		echo "test-all: no aws command and awscli could not be installed: the local AWS's CLI check will be SKIPPED" >&2
	fi
fi

# Every kubelet, containerd and kube-proxy of a node container takes inotify instances of the host's
# root user, whose default limit is 128 (fs.inotify.max_user_instances): the real-cluster tests'
# clusters, three tests at a time, came to 128 and a node's kubelet failed with "too many open
# files" (2026-11-29). kind asks for the same raise on hosts of many nodes.
if [ "$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 0)" -lt 1024 ]; then
	if [ "$(id -u)" = 0 ] && sysctl -qw fs.inotify.max_user_instances=1024; then
		echo "test-all: raised fs.inotify.max_user_instances to 1024 (node containers' kubelets take them)" >&2
	else
		echo "test-all: fs.inotify.max_user_instances is $(cat /proc/sys/fs/inotify/max_user_instances) and could not be raised: real-cluster tests may fail with \"too many open files\"" >&2
	fi
fi

go vet ./...
# The Kubernetes components on their own (each version), then everything (test/e2e brings up
# real clusters with them; it needs bin/kiln-kube, which make test-all built).
make --no-print-directory kube-smoke
# FAULTS: the fault suite's bounded run (test/faults: 15 kills on each store, ~75 s; make faults runs 100).
# -timeout is per package: test/e2e took 37 min on 2026-11-27 and over 45 on a machine running half
# as fast the day after (its fleet wave too).
#
# The run is kept as `go test -json` in $TEST_JSON (default .tmp/test-all.json): test/testreport
# prints a line as each package ends, then where the time went (packages, the 25 slowest tests),
# what was skipped and why, and last the whole output of every failed test. `make test-report`
# prints that report again from the file.
json=${TEST_JSON:-.tmp/test-all.json}
mkdir -p "$(dirname "$json")" .tmp
go build -o .tmp/testreport ./test/testreport
FAULTS=15 KILN_KUBE_BIN=$PWD/bin/kiln-kube go test -json -count=1 -timeout 60m "$@" ./... 2>&1 |
	.tmp/testreport -o "$json"
# Every fuzz target for a bounded time (go test above ran their seeds).
scripts/fuzz.sh 10
