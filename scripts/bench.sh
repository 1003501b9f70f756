#!/usr/bin/env bash
# Runs the benchmarks and writes BENCHMARKS.md with the machine, the date and
# the commit, so figures from different runs can be told apart: first a table
# of issue 9's targets and what this run measured, then every benchmark's
# output, then the before/after record kept in docs/benchmarks.md. Compare
# figures as ratios within one run: the machines are shared and noisy.
# docs/benchmarks.md says what each benchmark measures and how to profile.
#
# Environment: BENCHTIME (Go micro-benchmarks, default 2s), BENCH_FAULTS
# (kills in the bounded fault suite, default 10), KILN_BENCH_FLEET (fleet
# wave sizes, default 1000,10000), KILN_BENCH_AGENTS (agent session counts,
# default 1000,10000), KILN_BENCH_PROFILE (a directory: kilnd's CPU and heap
# profiles during the fleet and latency benchmarks are saved there).
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The tree as the benchmarks ran it (BENCHMARKS.md itself aside: it is rewritten at the end).
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain -- . ':!BENCHMARKS.md' 2>/dev/null)" ]; then commit="$commit (with uncommitted changes)"; fi

if pg_env=$(scripts/postgres.sh start 2>/dev/null); then
	eval "$pg_env"
	export KILN_TEST_POSTGRES
fi

# Go micro-benchmarks of the hot paths.
go test -run '^$' -bench . -benchmem -benchtime "${BENCHTIME:-2s}" -timeout 30m \
	./internal/store/... ./internal/daemon/... ./internal/backend/elastic/... ./internal/server/ ./internal/console/ | tee "$out"
# kilnd as a process under load from this one (test/bench): the API's latency during a wave against a
# bare net/http reference, the fleet wave, the agent fan-in. One test process each, so that one's
# leftovers (10,000 agents' memory being collected) do not disturb the next one's load generator.
for b in APILatency FleetWave AgentFanIn; do
	go test -run '^$' -bench "^Benchmark$b\$" -benchtime 1x -timeout 90m -v ./test/bench/ | tee -a "$out"
done
# Real local clusters (needs bin/kiln-kube: make bench builds it), and real docker ones (needs Docker,
# the node and system images; skipped, saying so, without them); -v shows each step's time.
KILN_KUBE_BIN=$PWD/bin/kiln-kube go test -run '^$' -bench 'LocalCreate|Credential|DockerCreate|ServiceLoadBalancer|NetworkPolicy|EdgeKubeadm|AWSCreate|AutoscaleUp|Resume|ProfileApply|ProfileRollout' -benchtime 1x -v -timeout 30m ./test/e2e/ | tee -a "$out"
# The fault suite, bounded: BENCH_FAULTS kills (default 10) under load, on PostgreSQL (3 replicas) when
# it runs, else SQLite (1 process); its last line is the summary with the takeover and hand-back times.
if [ -n "${KILN_TEST_POSTGRES:-}" ]; then faults_run=TestFaultsPostgres; else faults_run=TestFaultsSQLite; fi
FAULTS=${BENCH_FAULTS:-10} go test -count=1 -v -run "^$faults_run\$" -timeout 30m ./test/faults/ | tee -a "$out"

# metric PKG BENCH UNIT: the figure reported in UNIT by the first benchmark named BENCH (a regexp on
# the name without its -GOMAXPROCS suffix) of package PKG (a regexp), or "—" when there is none.
metric() {
	awk -v p="$1" -v b="^$2-[0-9]+\$" -v u="$3" '
		/^pkg: / { pkg = $2 }
		pkg ~ p && $1 ~ b { for (i = 3; i < NF; i++) if ($(i + 1) == u) { v = $i; exit } }
		END { print (v == "" ? "—" : v) }' "$out"
}

{
	echo "# Benchmarks"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- commit: $commit"
	echo "- machine: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "- go: $(go env GOVERSION)"
	if [ -n "${KILN_TEST_POSTGRES:-}" ]; then echo "- PostgreSQL: running"; else echo "- PostgreSQL: not running: its benchmarks skipped"; fi
	echo
	echo "Regenerate with \`make bench\`; [docs/benchmarks.md](docs/benchmarks.md) says what each benchmark measures,"
	echo "what its reference is, and how to profile kilnd. The machines are shared: read ratios, not absolutes."
	echo
	echo "## Issue 9's targets and this run"
	echo
	echo "| benchmark | target | this run |"
	echo "|---|---|---|"
	echo "| fleet wave: 1,000 clusters (1+2, sim) from 32 clients until all Succeeded | under 60 s | $(metric bench 'BenchmarkFleetWave/1000' s-to-succeeded) s ($(metric bench 'BenchmarkFleetWave/1000' clusters/s) clusters/s) |"
	echo "| fleet wave: 10,000 clusters | under 10 min (issue 27: under 30 s) | $(metric bench 'BenchmarkFleetWave/10000' s-to-succeeded) s, kilnd RSS $(metric bench 'BenchmarkFleetWave/10000' kilnd-rss-MiB) MiB |"
	echo "| kilnd's store per cluster after the wave of 10,000 (docs/benchmarks.md, the store per cluster) | (reported) | $(metric bench 'BenchmarkFleetWave/10000' store-KiB/cluster) KiB |"
	echo "| API during a wave at 1,000 req/s: p99 GET cluster | under 20 ms | $(metric bench BenchmarkAPILatency get-p99-ms) ms (reference $(metric bench BenchmarkAPILatency ref-get-p99-ms) ms, ratio $(metric bench BenchmarkAPILatency get-p99-ratio)) |"
	echo "| API during a wave at 1,000 req/s: p99 PUT cluster | under 50 ms | $(metric bench BenchmarkAPILatency put-p99-ms) ms (reference $(metric bench BenchmarkAPILatency ref-put-p99-ms) ms, ratio $(metric bench BenchmarkAPILatency put-p99-ratio)) |"
	echo "| the console's fleet page for 10,000 clusters and 100,000 operations (SQLite), rendered on the server (issue 52) | under 300 ms | $(metric console BenchmarkFleetPage ms/page) ms |"
	echo "| the same fleet page on PostgreSQL | (reported) | $(metric console BenchmarkFleetPagePostgres ms/page) ms |"
	echo "| lease writes / raw single-row UPDATEs, SQLite | at least 0.5 | $(metric store/sqlite BenchmarkLeaseThroughput ratio) |"
	echo "| lease writes / raw single-row UPDATEs, PostgreSQL | at least 0.5 | $(metric store/postgres BenchmarkLeaseThroughput ratio) |"
	echo "| agent fan-in: kilnd RSS with 1,000 sessions heartbeating every 10 s | — | $(metric bench 'BenchmarkAgentFanIn/1000' kilnd-rss-MiB) MiB, $(metric bench 'BenchmarkAgentFanIn/1000' kilnd-KiB/session) KiB a session |"
	echo "| agent fan-in: kilnd RSS with 10,000 sessions heartbeating every 10 s | under 1 GiB | $(metric bench 'BenchmarkAgentFanIn/10000' kilnd-rss-MiB) MiB, $(metric bench 'BenchmarkAgentFanIn/10000' kilnd-KiB/session) KiB a session |"
	echo "| agent fan-in: heartbeat round trip p99, 10,000 sessions | under 50 ms | $(metric bench 'BenchmarkAgentFanIn/10000' heartbeat-p99-ms) ms |"
	echo "| real local cluster 1+2, create to Succeeded | under 20 s | $(metric e2e 'BenchmarkLocalCreate/1\+2' s/create) s |"
	echo "| real local cluster 3+3, create to Succeeded | under 40 s | $(metric e2e 'BenchmarkLocalCreate/3\+3' s/create) s |"
	echo "| docker cluster 1+2 (real nodes), create to Succeeded | under 30 s | $(metric e2e 'BenchmarkDockerCreate' s/create) s |"
	echo "| docker cluster: kubectl apply of 2 replicas to both Running | under 5 s | $(metric e2e 'BenchmarkDockerCreate' s/deploy) s |"
	echo "| docker cluster: a worker container's memory; the node image's size | (reported) | $(metric e2e 'BenchmarkDockerCreate' worker-MiB) MiB; $(metric e2e 'BenchmarkDockerCreate' image-MB) MB |"
	echo "| docker: a Service of type LoadBalancer, kubectl expose to answering on its address (issue 46) | under 5 s | $(metric e2e 'BenchmarkServiceLoadBalancer' s/answering) s (address in $(metric e2e 'BenchmarkServiceLoadBalancer' s/address) s) |"
	echo "| docker: NetworkPolicy's cost, pod-to-pod req/s across workers, bridge vs kube-router with 4 policies (issue 46) | under 10% | $(metric e2e 'BenchmarkNetworkPolicy' new-cost-%) % a connection a request ($(metric e2e 'BenchmarkNetworkPolicy' new-bridge-rps) vs $(metric e2e 'BenchmarkNetworkPolicy' new-kube-router-rps) req/s), $(metric e2e 'BenchmarkNetworkPolicy' keepalive-cost-%) % kept alive |"
	echo "| edge 1+2 on bare hosts (kubeadm from Kiln), provision to Ready | under 90 s | $(metric e2e 'BenchmarkEdgeKubeadm' s/provision) s |"
	echo "| edge installer download (gzipped) | (reported) | $(metric e2e 'BenchmarkEdgeKubeadm' installer-MB) MB |"
	echo "| aws 1+2 on 2 zones through the local AWS, create to Succeeded | under 60 s | $(metric e2e 'BenchmarkAWSCreate' s/create) s |"
	echo "| aws: AWS API calls per create (dry-run checks included) | fewer is better | $(metric e2e 'BenchmarkAWSCreate' calls/create) |"
	echo "| aws: delete to clean (nothing tagged left) | (reported) | $(metric e2e 'BenchmarkAWSCreate' s/delete) s |"
	echo "| idle kilnd with 10,000 Succeeded clusters | under 5% of a core | $(metric bench 'BenchmarkFleetWave/10000' idle-cpu-%) % |"
	echo "| docker: pending pod to Running on the autoscaler's new node | under 30 s | $(metric e2e 'BenchmarkAutoscaleUp' s/scale-up) s |"
	echo "| docker: resume of a hibernated 1+2 to every node Ready | under 30 s | $(metric e2e 'BenchmarkResume' s/resume) s |"
	echo "| docker: apply-profile of 3 packs (local-path, manifests, a chart) on a new 1+1 | — | $(metric e2e 'BenchmarkProfileApply' s/apply-3-packs) s |"
	echo "| sim: rollout of a profile version to 20 clusters, 5 at a time | — | $(metric e2e 'BenchmarkProfileRollout' s/rollout-20) s |"
	echo "| autoscaler: one pass over 1,000 autoscaled sim clusters, as a share of a core every 10 s | (reported) | $(metric elastic BenchmarkCheckAll1000 core-%) % ($(metric elastic BenchmarkCheckAll1000 ms/pass) ms/pass) |"
	echo
	echo "## Everything this run printed"
	echo
	echo '```'
	grep -E '^(Benchmark|goos|goarch|cpu|pkg)|create to Succeeded|to 2 pods Running|container memory|autoscaler.s new node|resume to Succeeded|^ +bench_test.go:[0-9]+:   |^ +[a-z_]+_test.go:[0-9]+: (fleet wave|api latency|agent fan-in)' "$out" |
		sed -E 's/^ +bench_test.go:[0-9]+: /    /; s/^ +[a-z_]+_test.go:[0-9]+: /    /' || true
	grep -E 'fault suite summary: ' "$out" | sed -E 's/^ +[a-z_]+\.go:[0-9]+: //' || true
	echo '```'
	echo
	sed -n '/^## Before and after/,$p' docs/benchmarks.md
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
