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

go test -run '^$' -bench . -benchmem -benchtime "${BENCHTIME:-2s}" -timeout 30m \
	./internal/store/... ./internal/daemon/... | tee "$out"
# Real local clusters (needs bin/kiln-kube: make bench builds it); -v shows each step's time.
KILN_KUBE_BIN=$PWD/bin/kiln-kube go test -run '^$' -bench LocalCreate -benchtime 1x -v -timeout 30m ./test/e2e/ | tee -a "$out"

{
	echo "# Benchmarks"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "- machine: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "- go: $(go env GOVERSION)"
	if [ -n "${KILN_TEST_POSTGRES:-}" ]; then echo "- PostgreSQL: running"; else echo "- PostgreSQL: not running: its benchmarks skipped"; fi
	echo
	echo "Regenerate with \`make bench\`. Custom metrics (ms/cluster, clusters/s) are reported next to ns/op."
	echo
	echo "- BenchmarkClaim: one lease claim + release on SQLite."
	echo "- BenchmarkCreateToSucceeded: create (1 control plane + 2 workers) on the sim provider with zero step"
	echo "  latency, through the HTTP API and the Go client, until the operation is Succeeded; sequential is one"
	echo "  cluster at a time (latency), parallel-8 is 8 clients creating waves of 64 (throughput)."
	echo "- BenchmarkLocalCreate: create-to-Succeeded of real local clusters (1+2 and 3+3, dedicated control"
	echo "  planes) through the API, with each step's time (targets: 1+2 under 20 s, 3+3 under 40 s)."
	echo
	echo '```'
	grep -E '^(Benchmark|goos|goarch|cpu|pkg)|create to Succeeded|^ +bench_test.go:[0-9]+:   ' "$out" | sed -E 's/^ +bench_test.go:[0-9]+: /    /' || true
	echo '```'
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
