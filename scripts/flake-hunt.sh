#!/usr/bin/env bash
# Hunts flaky tests: runs the chosen packages N times beside a CPU load (two
# busy loops, one a core on this project's 2-core machines), each run's
# `go test -json` kept in .tmp/flake-hunt-RUN.json, and prints each failing
# test's whole output (test/testreport) and at the end which tests failed in
# how many runs.
#
#   scripts/flake-hunt.sh [-n N] [-run REGEXP] [PACKAGE...]   (default: 3 runs of ./test/e2e/)
#
# Environment as for scripts/test-all.sh: it starts PostgreSQL and finds
# chromium the same way, so the tests skip nothing they would not skip in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

n=3
run=.
while [ $# -gt 0 ]; do
	case $1 in
	-n) n=$2; shift 2 ;;
	-run) run=$2; shift 2 ;;
	-h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "flake-hunt: unknown flag $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
done
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./test/e2e/)
if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
	echo "flake-hunt: -n wants a number of runs, got $n" >&2
	exit 2
fi

if pg_env=$(scripts/postgres.sh start); then
	eval "$pg_env"
	export KILN_TEST_POSTGRES
fi
if chromium_env=$(scripts/chromium.sh); then
	eval "$chromium_env"
	export KILN_CHROMIUM
fi

mkdir -p .tmp
go build -o .tmp/testreport ./test/testreport
go test -count=1 -run '^$' "${pkgs[@]}" >/dev/null # build once, before the load starts

loads=()
stop_load() { for p in "${loads[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_load EXIT
for _ in 1 2; do
	(while :; do :; done) &
	loads+=($!)
done
echo "flake-hunt: $n runs of ${pkgs[*]} (-run $run) beside two busy loops" >&2

failed_runs=0
for i in $(seq "$n"); do
	echo "flake-hunt: run $i of $n" >&2
	if ! KILN_KUBE_BIN=$PWD/bin/kiln-kube go test -json -count=1 -timeout 90m -run "$run" "${pkgs[@]}" 2>&1 |
		.tmp/testreport -o ".tmp/flake-hunt-$i.json"; then
		failed_runs=$((failed_runs + 1))
	fi
done
stop_load

echo
echo "== flake-hunt: $failed_runs of $n runs failed"
for i in $(seq "$n"); do .tmp/testreport -failed ".tmp/flake-hunt-$i.json" || true; done | sort | uniq -c | sort -rn |
	awk '{ printf "  failed in %d of '"$n"' runs: %s %s\n", $1, $2, $3 }'
[ "$failed_runs" -eq 0 ]
