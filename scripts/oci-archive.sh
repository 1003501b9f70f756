#!/usr/bin/env bash
# Packs one static program as a one-layer OCI image archive (an OCI image layout in a tar), the
# form `ctr images import` and `docker load` read, with no registry and no Docker:
#
#   scripts/oci-archive.sh OUT.tar NAME:TAG PROGRAM [ARG...]
#
# The image holds PROGRAM at /BASENAME (mode 0755) and nothing else; its entrypoint is
# /BASENAME ARG.... NAME is a full reference (kiln.dev/pause:1). The archive is reproducible:
# the same program gives the same digests.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 OUT.tar NAME:TAG PROGRAM [ARG...]" >&2; exit 2; }
out=$1 ref=$2 prog=$3
shift 3
name=$(basename "$prog")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/root" "$work/oci/blobs/sha256"
install -m 0755 "$prog" "$work/root/$name"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/root" -cf "$work/layer.tar" "$name"
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blob() { # blob FILE: moves FILE into the layout's blobs, prints its digest
	local d
	d=$(sha "$1")
	mv "$1" "$work/oci/blobs/sha256/$d"
	echo "$d"
}
json_args() { # a JSON array of /NAME and the arguments
	local s="\"/$name\"" a
	for a in "$@"; do s+=",\"${a//\"/\\\"}\""; done
	echo "[$s]"
}

layer_size=$(size "$work/layer.tar")
layer=$(blob "$work/layer.tar")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"scripts/oci-archive.sh %s"}]}' \
	"$(go env GOARCH 2>/dev/null || echo amd64)" "$(json_args "$@")" "$layer" "$name" >"$work/config.json"
config_size=$(size "$work/config.json")
config=$(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%d}]}' \
	"$config" "$config_size" "$layer" "$layer_size" >"$work/manifest.json"
manifest_size=$(size "$work/manifest.json")
manifest=$(blob "$work/manifest.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
	"$manifest" "$manifest_size" "$ref" "${ref##*:}" >"$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out" oci-layout index.json blobs
