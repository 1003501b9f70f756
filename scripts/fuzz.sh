#!/usr/bin/env bash
# Runs every Go fuzz target in the module, one at a time, for SECONDS each
# (default 15): scripts/fuzz.sh [SECONDS]. Targets are found with
# `go test -list '^Fuzz'`, so a new Fuzz function anywhere is picked up.
#
# Go keeps the inputs it generates in its cache (go env GOCACHE, fuzz/);
# only an input that fails is written to the package's
# testdata/fuzz/<FuzzName>/, where plain `go test` runs it from then on.
# Fix the cause, then commit that file (renamed to say what it is) as a seed.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-15}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
	echo "usage: scripts/fuzz.sh [SECONDS]" >&2
	exit 2
fi

# `go test -list` prints a package's matching names, then its "ok" line.
listing=$(go test -list '^Fuzz' ./...)
targets=$(awk '
	/^Fuzz/ { names[++n] = $1; next }
	/^ok / { for (i = 1; i <= n; i++) print $2, names[i]; n = 0 }
' <<<"$listing")
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

failed=()
while read -r pkg name; do
	echo "fuzz: $name ($pkg) for ${secs}s" >&2
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" "$pkg" </dev/null; then
		# Go's fuzzing engine may end a run that found nothing with "context deadline exceeded" when a
		# worker stops late on a loaded machine; it saves no input then. Such a run is run again, once;
		# a run that saved a failing input (git status shows it) is not.
		dir=$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz
		if [ -z "$(git status --porcelain -- "$dir" 2>/dev/null)" ]; then
			echo "fuzz: $name saved no failing input; running it again once" >&2
			go test -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" "$pkg" </dev/null && continue
		fi
		failed+=("$name ($pkg)")
	fi
done <<<"$targets"

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	echo "fuzz: the failing inputs are in testdata/fuzz/ (git status shows them)" >&2
	exit 1
fi
echo "fuzz: $(wc -l <<<"$targets") targets passed" >&2
