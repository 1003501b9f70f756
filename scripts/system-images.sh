#!/usr/bin/env bash
# Builds the system images every real cluster pulls from kilnd's registry, from source, with no
# registry pull (make system-images runs it; docs/system-images.md):
#
#   scripts/system-images.sh OUT_DIR
#
#   OUT_DIR/coredns.tar  CoreDNS (images/coredns, its own Go module) as internal/sysimages.CoreDNSImage
#   OUT_DIR/demo.tar     the demo application (images/demo) as internal/sysimages.DemoImage
#
# Each is one static program (CGO_ENABLED=0, -trimpath, -s -w) packed by scripts/oci-archive.sh as
# an OCI archive; kilnd seeds every archive of its --system-images directory (bin/images beside
# bin/kilnd) into its registry at start. The image names are read from internal/sysimages, the
# one place the controller and the tests take them from too.
#
# Cached: OUT_DIR/.NAME.inputs holds the hash of what NAME.tar was built from (its sources,
# go.mod and go.sum, the Go version, the name, this script and oci-archive.sh); when it matches,
# nothing is built. The first build of CoreDNS is long: it compiles CoreDNS and client-go, ~800
# packages. Measured on this machine's 2 cores, shared with a Kubernetes build (load average 8):
# 11 min wall, 6.5 min of CPU; nothing changed: well under a second. The demo builds in seconds.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
names=$repo/internal/sysimages/sysimages.go

# ref NAME: the value of the constant NAME in internal/sysimages (a line NAME = "REF").
ref() {
	local r
	r=$(sed -n "s/^[[:space:]]*$1 = \"\([^\"]*\)\"\$/\1/p" "$names")
	[ -n "$r" ] || { echo "system-images: no line '$1 = \"...\"' in $names" >&2; exit 1; }
	echo "$r"
}

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# build NAME REF MODULE_DIR PACKAGE FILE...: builds PACKAGE (a main package, from MODULE_DIR)
# into OUT_DIR/NAME.tar as REF, unless the hash of the FILEs and the rest of the inputs is the
# one it was built from.
build() {
	local name=$1 ref=$2 dir=$3 pkg=$4
	shift 4
	local inputs have t
	inputs=$({
		echo "$ref"
		"$GO" env GOVERSION GOARCH
		(cd "$repo" && sha256sum "$@" scripts/system-images.sh scripts/oci-archive.sh)
	} | sha256sum | cut -c1-16)
	have=$(cat "$out/.$name.inputs" 2>/dev/null || true)
	if [ -f "$out/$name.tar" ] && [ "$have" = "$inputs" ]; then
		echo "system-images: $out/$name.tar ($ref) is up to date (inputs $inputs)"
		return
	fi
	echo "system-images: building $ref into $out/$name.tar"
	t=$SECONDS
	(cd "$repo/$dir" && CGO_ENABLED=0 nice "$GO" build -trimpath -ldflags '-s -w' -o "$work/$name" "$pkg")
	"$repo/scripts/oci-archive.sh" "$work/$name.tar" "$ref" "$work/$name"
	mv "$work/$name.tar" "$out/$name.tar"
	echo "$inputs" >"$out/.$name.inputs"
	echo "system-images: built $ref in $((SECONDS - t))s ($(du -h "$out/$name.tar" | cut -f1))"
}

coredns_files=$(cd "$repo" && find images/coredns -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' | LC_ALL=C sort)
if [ ! -f "$out/coredns.tar" ]; then
	echo "system-images: CoreDNS is built from its Go module the first time: ~800 packages, minutes (measured 11 min on 2 shared cores)"
fi
# shellcheck disable=SC2086 # one file a word
build coredns "$(ref CoreDNSImage)" images/coredns . $coredns_files
# The demo imports only the standard library: its source and go.mod are all it is built from.
build demo "$(ref DemoImage)" . ./images/demo images/demo/main.go go.mod
