#!/usr/bin/env bash
# Builds Kiln's node image for one Kubernetes version (make node-image runs it once per version):
#
#   scripts/node-image.sh VERSION KILN_KUBE
#
# VERSION is the Kubernetes version (v1.36.3), KILN_KUBE the kiln-kube program of that version
# (bin/kiln-kube-v1.36.3). The result is the Docker image kiln/node:VERSION, made with no registry
# pull (docs/node-image.md); KILN_NODE_IMAGE_REPO names another repository than kiln/node (an image
# under development beside the one tests use; kilnd's --docker-node-image takes the same name):
#
#   1. the base: a Debian bookworm root filesystem made by debootstrap (minbase) from Debian's
#      mirror, with the packages of images/node/packages (runc, the CNI plugins, iptables,
#      conntrack, ...) and containerd 2 built from its Go module (scripts/containerd-build.sh,
#      in /usr/local/bin), imported as kiln/node-base:KEY, where KEY hashes the package list, the
#      mirror, the suite and the containerd programs. Shared by every version, built once (minutes).
#   2. the node: one layer on the base with kiln-kube, kiln-agent, Kiln's pause image
#      (images/pause, an OCI archive containerd imports at start) and images/node/files
#      (containerd's configuration, the entrypoint). Seconds.
#
# Cached: the image carries the hash of everything it was made from (label
# kiln.dev/node-image-inputs); when kiln/node:VERSION exists with the same hash, nothing is done.
# Needs root (debootstrap, installed with apt-get when missing), Docker, Go, and Debian's mirror
# (the one this machine's apt uses; KILN_DEBIAN_MIRROR overrides it).
set -euo pipefail

# scripts/node-image.sh --base builds only the base (when missing) and prints its name on stdout:
# the Debian host without Kiln that scripts/bare-host.sh runs.
base_only=
if [ "${1:-}" = --base ] && [ $# -eq 1 ]; then
	base_only=1
	set -- "" ""
	exec 3>&1 1>&2 # what it says goes to stderr; stdout is the name alone
fi
[ $# -eq 2 ] || { echo "usage: $0 VERSION KILN_KUBE | $0 --base" >&2; exit 2; }
version=$1 kube=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
suite=bookworm
image=${KILN_NODE_IMAGE_REPO:-kiln/node}:$version
[[ ${KILN_NODE_IMAGE_REPO:-kiln/node} =~ ^[a-z0-9]+([._/-][a-z0-9]+)*$ ]] ||
	{ echo "node-image: KILN_NODE_IMAGE_REPO=$KILN_NODE_IMAGE_REPO is not a Docker repository name" >&2; exit 2; }
base_rev=2 # bump to rebuild the base when how it is made (below) changes

if [ -z "$base_only" ]; then
	[ -x "$kube" ] || { echo "node-image: $kube is not built (make kube)" >&2; exit 1; }
	got=$("$kube" version)
	[ "$got" = "$version" ] || { echo "node-image: $kube says it is $got, not $version" >&2; exit 1; }
fi
docker version >/dev/null 2>&1 || { echo "node-image: Docker does not answer (docker version)" >&2; exit 1; }

mirror=$("$repo/scripts/debian-mirror.sh" "$suite")
packages=$(grep -v '^#' "$repo/images/node/packages" | grep -v '^[[:space:]]*$' | sort | paste -sd, -)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# containerd and its runc shim (and ctr), from containerd's Go module: Debian bookworm's is 1.6,
# which has no image volumes and no _default registry host (docs/node-image.md). Cached by its
# inputs; the programs' hashes are part of the base's key.
containerd_version=$(GO=$GO "$repo/scripts/containerd-build.sh" "$work/containerd")
base_key=$({
	printf '%s\n' "$base_rev" "$suite" "$mirror" "$packages" "$containerd_version"
	(cd "$work/containerd" && sha256sum containerd containerd-shim-runc-v2 ctr)
} | sha256sum | cut -c1-16)
base=kiln/node-base:$base_key

if [ -z "$base_only" ]; then
# The node layer's contents, built first: their hash decides whether anything is to do.
mkdir -p "$work/ctx/rootfs/usr/local/bin" "$work/ctx/rootfs/usr/share/kiln/images"
(cd "$repo" && CGO_ENABLED=0 "$GO" build -ldflags '-s -w' -o "$work/ctx/rootfs/usr/local/bin/kiln-agent" ./cmd/kiln-agent)
(cd "$repo" && CGO_ENABLED=0 "$GO" build -ldflags '-s -w' -o "$work/pause" ./images/pause)
"$repo/scripts/oci-archive.sh" "$work/ctx/rootfs/usr/share/kiln/images/pause.tar" kiln.dev/pause:1 "$work/pause"
cp "$kube" "$work/ctx/rootfs/usr/local/bin/kiln-kube"
# kiln-agent's --kube-binary: a directory of kiln-kube-VERSION programs, the image's own here; kilnd
# mounts other versions beside it (a control plane upgraded in place, docs/provider-docker.md).
mkdir -p "$work/ctx/rootfs/opt/kiln/kube"
ln -s /usr/local/bin/kiln-kube "$work/ctx/rootfs/opt/kiln/kube/kiln-kube-$version"
cp -a "$repo/images/node/files/." "$work/ctx/rootfs/"
# Says, on a node, that it is a node of this image (kiln-agent: containerd there is the image's own).
mkdir -p "$work/ctx/rootfs/etc/kiln"
printf 'KUBERNETES_VERSION=%s\nCONTAINERD_CONFIG=/etc/containerd/config.toml\n' "$version" >"$work/ctx/rootfs/etc/kiln/node-image"
inputs=$({
	echo "$base_key"
	(cd "$work/ctx/rootfs" && find . -type f | LC_ALL=C sort | xargs sha256sum)
	sha256sum <"$0"
} | sha256sum | cut -c1-16)

have=$(docker image inspect -f '{{index .Config.Labels "kiln.dev/node-image-inputs"}}' "$image" 2>/dev/null || true)
if [ "$have" = "$inputs" ]; then
	echo "node-image: $image is up to date (inputs $inputs)"
	exit 0
fi
fi

# ---- the base: Debian bookworm and its packages ---------------------------------------------
if ! docker image inspect "$base" >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { echo "node-image: debootstrap needs root to build the base $base" >&2; exit 1; }
	if ! command -v debootstrap >/dev/null; then
		command -v apt-get >/dev/null || { echo "node-image: debootstrap is missing and there is no apt-get to install it" >&2; exit 1; }
		echo "node-image: installing Debian's debootstrap (apt-get update; apt-get install debootstrap)"
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } ||
			{ echo "node-image: apt-get could not install debootstrap" >&2; exit 1; }
	fi
	echo "node-image: building the base $base: Debian $suite (minbase) from $mirror with $packages, containerd $containerd_version"
	echo "  (once for every version; a few minutes, ~70 MB downloaded)"
	t=$SECONDS
	rootfs=$work/base
	debootstrap --variant=minbase --include="$packages" --components=main "$suite" "$rootfs" "$mirror" \
		>"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; echo "node-image: debootstrap failed" >&2; exit 1; }
	# Trim what a node never reads, and what Docker provides at run time.
	chroot "$rootfs" apt-get clean
	rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/* \
		"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
		"$rootfs"/usr/share/locale/* "$rootfs"/tmp/* "$rootfs"/etc/hostname "$rootfs"/etc/resolv.conf
	: >"$rootfs/etc/machine-id"
	install -m 0755 "$work/containerd/containerd" "$work/containerd/containerd-shim-runc-v2" "$work/containerd/ctr" "$rootfs/usr/local/bin/"
	printf 'deb %s %s main\n' "$mirror" "$suite" >"$rootfs/etc/apt/sources.list"
	# debootstrap leaves the mounts it made on the target; none may go into the image.
	grep -o " $rootfs/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	tar --numeric-owner -C "$rootfs" -c . | docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change "LABEL kiln.dev/node-base=$base_key" \
		--change "LABEL kiln.dev/containerd-version=$containerd_version" \
		-m "Debian $suite minbase + $packages from $mirror, containerd $containerd_version (scripts/node-image.sh)" - "$base" >/dev/null
	rm -rf "$rootfs"
	echo "node-image: base $base built in $((SECONDS - t))s ($(docker image inspect -f '{{.Size}}' "$base" | awk '{printf "%d MB", $1/1e6}'))"
fi

if [ -n "$base_only" ]; then
	echo "$base" >&3
	exit 0
fi

# ---- the node: Kiln's programs and configuration on the base --------------------------------
echo "node-image: building $image (kiln-kube $version, kiln-agent, pause) on $base"
cat >"$work/ctx/Dockerfile" <<EOF
FROM $base
COPY rootfs/ /
# ctr (the entrypoint's, a person's in docker exec) says once per call that cgroup v1 is deprecated
# in containerd 2.2 and later; containerd's own log says it at start, which is enough.
ENV CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1
LABEL kiln.dev/node-image-inputs=$inputs kiln.dev/kubernetes-version=$version
ENTRYPOINT ["/usr/local/bin/kiln-node-init"]
EOF
# The classic builder uses the local base image and pulls nothing.
old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$work/ctx" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
# The image it replaces goes (kept while a container still uses it).
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$image")" ]; then
	docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "node-image: built $image in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1e6}'))"
