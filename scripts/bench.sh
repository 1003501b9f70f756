#!/usr/bin/env bash
# Runs the benchmarks and writes BENCHMARKS.md with the machine, the date and
# the commit, so figures from different runs can be told apart. Compare
# figures as ratios within one run: the machines are shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(mktemp)
trap 'rm -f "$out"' EXIT

if pg_env=$(scripts/postgres.sh start 2>/dev/null); then
	eval "$pg_env"
	export KILN_TEST_POSTGRES
fi

go test -run '^$' -bench . -benchmem -benchtime "${BENCHTIME:-1x}" -timeout 30m \
	./internal/store/... ./internal/daemon/... | tee "$out"

{
	echo "# Benchmarks"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "- machine: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "- go: $(go env GOVERSION)"
	echo "- PostgreSQL: ${KILN_TEST_POSTGRES:+yes}${KILN_TEST_POSTGRES:-not running: its benchmarks skipped}"
	echo
	echo "Regenerate with \`make bench\`. Custom metrics (ops/s, ms/cluster) are reported next to ns/op."
	echo
	echo '```'
	grep -E '^(Benchmark|goos|goarch|cpu|pkg)' "$out" || true
	echo '```'
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
