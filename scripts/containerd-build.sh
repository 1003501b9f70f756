#!/usr/bin/env bash
# Builds containerd for Kiln's node image (scripts/node-image.sh runs it; docs/node-image.md):
#
#   scripts/containerd-build.sh OUT_DIR
#
# writes OUT_DIR/containerd, OUT_DIR/containerd-shim-runc-v2 and OUT_DIR/ctr, built from
# github.com/containerd/containerd/v2 at the version images/containerd/go.mod requires (its own
# module, the three commands its tools), and prints that version (v2.4.2) on stdout; what it says
# goes to stderr.
#
# Static and without cgo (CGO_ENABLED=0): the programs run on any Linux root filesystem. The build
# tags leave out what needs cgo or that a node never uses: btrfs (cgo, libbtrfs), devmapper and
# zfs snapshotters (a node uses overlayfs), and the shim's gRPC server (no_grpc, as upstream builds
# the shim: it speaks ttrpc). No cgo costs nothing a node uses: containerd applies seccomp
# profiles through runc, which has its own libseccomp (Debian's runc).
#
# One change to containerd (images/containerd/overlay/): its CRI server marks a container exited
# before its CRI logger has written the last lines of its output to the log file, so a client that
# reads the log as soon as the container ended can find it empty (upstream's conformance spec
# "Downward API should provide pod name, namespace and IP address as env vars" did, once, on a
# loaded machine). cri-log-before-exit.patch makes closing a logger's pipe wait for the logger
# (logged.go): applied with git apply to a copy of the module's source, which the build uses
# through a replace in a copy of images/containerd/go.mod (go build -overlay refuses files in the
# module cache), the module cache itself untouched.
#
# Cached: the programs are kept beside Go's build cache, under a key that hashes every input (this
# script, images/containerd/go.mod and go.sum, the overlay, the Go toolchain's version): a second
# build, or a new clone, copies them in a second. A cold build compiles containerd and its ~700 packages:
# minutes of both cores (nice'd).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
mod=$repo/images/containerd
pkg=github.com/containerd/containerd/v2
progs=(containerd containerd-shim-runc-v2 ctr)
exec 3>&1 1>&2

version=$(awk -v m="$pkg" '$1 == m { print $2; exit }' "$mod/go.mod")
[ -n "$version" ] || { echo "containerd-build: images/containerd/go.mod requires no $pkg" >&2; exit 1; }
key=$({
	echo "$version"
	"$GO" version
	cat "$0" "$mod/go.mod" "$mod/go.sum" "$mod"/overlay/*
} | sha256sum | cut -c1-16)
cached=$(dirname "$("$GO" env GOCACHE)")/kiln/containerd-bin/$version-$key
if ! [ -x "$cached/ctr" ]; then
	echo "containerd-build: building containerd $version ($pkg: containerd, containerd-shim-runc-v2, ctr; static, no cgo; cold: minutes)"
	t=$SECONDS
	tmp=$cached.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$tmp"
	tags='urfave_cli_no_docs no_btrfs no_devmapper no_zfs'
	# upstream's release builds stamp the version; the revision (a git commit) is not in the module
	ldflags="-s -w -X $pkg/version.Version=$version -X $pkg/version.Revision=module"
	# The overlay: the patched copy of the CRI server's container_start.go, and logged.go beside it.
	src=$(cd "$mod" && GOFLAGS=-mod=readonly "$GO" mod download -json "$pkg" | awk -F'"' '$2 == "Dir" { print $4 }')
	[ -d "$src" ] || { echo "containerd-build: $pkg $version is not in the module cache" >&2; exit 1; }
	# Go refuses an -overlay of files in the module cache, so the build is of a copy: the module's
	# source patched in $tmp/src, and images/containerd's go.mod in $tmp/mod with a replace to it
	# (the same module graph: the copy's go.mod is the module's own).
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	(cd "$tmp/src" && git apply --unsafe-paths "$mod/overlay/cri-log-before-exit.patch") ||
		{ echo "containerd-build: overlay/cri-log-before-exit.patch does not apply to $pkg $version" >&2; exit 1; }
	cp "$mod/overlay/logged.go" "$tmp/src/internal/cri/server/"
	mkdir -p "$tmp/mod"
	cp "$mod/go.mod" "$mod/go.sum" "$tmp/mod/"
	(cd "$tmp/mod" && "$GO" mod edit -replace "$pkg=$tmp/src")
	build() { (cd "$tmp/mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 10 "$GO" build -trimpath "$@"); }
	build -tags "$tags" -ldflags "$ldflags" -o "$tmp/" "$pkg/cmd/containerd" "$pkg/cmd/ctr"
	build -tags "$tags no_grpc" -ldflags "$ldflags" -o "$tmp/" "$pkg/cmd/containerd-shim-runc-v2"
	rm -rf "$tmp/src" "$tmp/mod"
	# Another build of the same inputs may have finished meanwhile: its programs are the same.
	mv -T "$tmp" "$cached" 2>/dev/null || { [ -x "$cached/ctr" ] && rm -rf "$tmp"; } ||
		{ rm -rf "$cached" && mv -T "$tmp" "$cached"; }
	echo "containerd-build: built containerd $version in $((SECONDS - t))s ($(du -sh "$cached" | cut -f1))"
fi
mkdir -p "$out"
for p in "${progs[@]}"; do
	cmp -s "$cached/$p" "$out/$p" || { cp "$cached/$p" "$out/$p.tmp" && mv "$out/$p.tmp" "$out/$p"; }
done
echo "$version" >&3
