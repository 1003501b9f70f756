#!/usr/bin/env bash
# Runs every Go fuzz target in the module, one at a time, for SECONDS each
# (default 15): scripts/fuzz.sh [SECONDS]. Targets are the functions
# `func FuzzXxx(f *testing.F)` of the module's test files, found with grep,
# so a new one anywhere is picked up (`go test -list` would link every test
# binary of the module first: 2.3 minutes on 2 cores).
#
# Each package with targets is compiled once, instrumented for fuzzing
# (`go test -c -fuzz`), and its binary run for each target in the package's
# directory, as `go test -fuzz` runs it: compiling again for every target
# cost 25-30 s a target.
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

# "DIR IMPORTPATH NAME" for each target.
targets=$(go list -f '{{.Dir}} {{.ImportPath}}' ./... | while read -r dir pkg; do
	for f in "$dir"/*_test.go; do
		[ -e "$f" ] || continue
		sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\).*/\1/p' "$f" |
			while read -r name; do echo "$dir $pkg $name"; done
	done
done)
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache=$(go env GOCACHE)/fuzz

failed=()
while read -r dir pkg name; do
	exe="$bin/$(basename "$dir").${pkg//\//_}.test"
	if [ ! -x "$exe" ]; then
		echo "fuzz: compiling $pkg for fuzzing" >&2
		go test -c -fuzz '^Fuzz' -o "$exe" "$pkg"
	fi
	echo "fuzz: $name ($pkg) for ${secs}s" >&2
	if ! (cd "$dir" && "$exe" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "${secs}s" \
		-test.fuzzcachedir "$cache/$pkg" -test.timeout 10m -test.paniconexit0 </dev/null); then
		# Go's fuzzing engine may end a run that found nothing with "context deadline exceeded" when a
		# worker stops late on a loaded machine; it saves no input then. Such a run is run again, once;
		# a run that saved a failing input (git status shows it) is not.
		if [ -z "$(git status --porcelain -- "$dir/testdata/fuzz" 2>/dev/null)" ]; then
			echo "fuzz: $name saved no failing input; running it again once" >&2
			(cd "$dir" && "$exe" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "${secs}s" \
				-test.fuzzcachedir "$cache/$pkg" -test.timeout 10m -test.paniconexit0 </dev/null) && continue
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
