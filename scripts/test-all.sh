#!/usr/bin/env bash
# Every test Kiln has: starts a private PostgreSQL (installing it from Debian's
# packages when missing) so the store conformance suite runs on both databases,
# then vets and runs all packages, including the end-to-end and crash tests
# that start real kilnd processes.
set -euo pipefail
cd "$(dirname "$0")/.."

if pg_env=$(scripts/postgres.sh start); then
	eval "$pg_env"
	export KILN_TEST_POSTGRES
	echo "test-all: PostgreSQL at ${KILN_TEST_POSTGRES}" >&2
else
	echo "test-all: PostgreSQL could not be started: its half of the store suite will be SKIPPED" >&2
fi

go vet ./...
go test -count=1 -timeout 30m "$@" ./...
