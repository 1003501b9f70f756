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
# Agent fan-in: KILN_BENCH_AGENTS (default 10,000) simulated agents on real websocket sessions from the test
# process, heartbeating every 10 s to one kilnd for 60 s (docs/benchmarks.md).
go test -run '^$' -bench AgentFanIn -benchtime 1x -timeout 60m ./test/bench/ | tee -a "$out"
# The fault suite, bounded: BENCH_FAULTS kills (default 10) under load, on PostgreSQL (3 replicas) when
# it runs, else SQLite (1 process); its last line is the summary with the takeover and hand-back times.
if [ -n "${KILN_TEST_POSTGRES:-}" ]; then faults_run=TestFaultsPostgres; else faults_run=TestFaultsSQLite; fi
FAULTS=${BENCH_FAULTS:-10} go test -count=1 -v -run "^$faults_run\$" -timeout 30m ./test/faults/ | tee -a "$out"

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
	echo "- BenchmarkAgentFanIn: ${KILN_BENCH_AGENTS:-10000} agent sessions (real mTLS websockets on loopback from the test"
	echo "  process, 100 nodes per edge cluster) heartbeating every 10 s to one kilnd, measured over 60 s once all are up:"
	echo "  kilnd's RSS (target under 1 GiB) and CPU, each heartbeat's round trip to kilnd's answer (target p99 under"
	echo "  50 ms), and the same round trip to an echo server in the test process (same TLS, same messages, same rate:"
	echo "  the machine's floor); p99/ref is their ratio."
	echo "- fault suite summary: test/faults with FAULTS=${BENCH_FAULTS:-10} (PostgreSQL and 3 replicas when it runs, else"
	echo "  SQLite and 1 process) under a load of sim creates, scales and deletes (150 ms steps). faults counts SIGKILLs,"
	echo "  fault-point kills (a process armed with a random --fault point killing itself there), SIGTERMs and the"
	echo "  PostgreSQL restart; operations-checked is how many operations the checker proved Succeeded with nothing lost"
	echo "  or done twice. takeover-after-kill is from a kill to the next step of an interrupted operation starting on"
	echo "  another process (target under 20 s; with --lease-ttl 3s it waits for the lease to expire, so ~3 s);"
	echo "  handback-after-sigterm is from a SIGTERM to that next step (--drain-timeout 500ms, then the lease is"
	echo "  handed back: no wait for expiry). docs/faults.md says what is measured and what is asserted."
	echo
	echo '```'
	grep -E '^(Benchmark|goos|goarch|cpu|pkg)|create to Succeeded|^ +bench_test.go:[0-9]+:   ' "$out" | sed -E 's/^ +bench_test.go:[0-9]+: /    /' || true
	grep -E 'agent fan-in: ' "$out" | sed -E 's/^ +[a-z_]+\.go:[0-9]+: //' || true
	grep -E 'fault suite summary: ' "$out" | sed -E 's/^ +[a-z_]+\.go:[0-9]+: //' || true
	echo '```'
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
