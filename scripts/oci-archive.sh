#!/usr/bin/env bash
# Packs one static program as a one-layer OCI image archive (an OCI image layout in a tar), the
# form `ctr images import` and `docker load` read, with no registry and no Docker:
#
#   scripts/oci-archive.sh [-d DIR] [-f FILE]... [-l LINK]... [-n NAME:TAG]... [-r ROOT] [-z] OUT.tar NAME:TAG PROGRAM [ARG...]
#
# The image holds PROGRAM at /BASENAME (mode 0755) and nothing else; its entrypoint is
# /BASENAME ARG.... NAME is a full reference (kiln.dev/pause:1). The archive is reproducible:
# the same program gives the same digests.
#
#   -d DIR      PROGRAM at DIR/BASENAME instead (DIR absolute: /usr/local/bin), and DIR is the
#               image's PATH, so a container's command may name a link below by itself
#   -f FILE     also FILE, another program, at DIR/ITS_BASENAME, mode 0755 (repeatable; needs -d)
#   -l LINK     also DIR/LINK, a symbolic link to BASENAME (repeatable)
#   -n NAME:TAG the image has this name too (repeatable): the index has one entry per name, each
#               of the same manifest, as `ctr images export` writes an image of several names
#   -r ROOT     also every file of the directory ROOT, at its place below / (Debian packages'
#               files unpacked there, say: the programs a Go program runs), owned by root; the
#               image's PATH then also has /usr/sbin, /usr/bin, /sbin and /bin
#   -z          the layer is gzipped (tar+gzip media type); without it, an uncompressed tar
set -euo pipefail

usage() { echo "usage: $0 [-d DIR] [-f FILE]... [-l LINK]... [-n NAME:TAG]... [-r ROOT] [-z] OUT.tar NAME:TAG PROGRAM [ARG...]" >&2; exit 2; }
dir="" files=() links=() names=() gz="" rootfs=""
while getopts "d:f:l:n:r:z" opt; do
	case $opt in
	d) dir=${OPTARG%/} ;;
	f) files+=("$OPTARG") ;;
	l) links+=("$OPTARG") ;;
	n) names+=("$OPTARG") ;;
	r) rootfs=$OPTARG ;;
	z) gz=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || usage
case $dir in "" | /*) ;; *) echo "$0: -d $dir: the directory must be absolute" >&2; exit 2 ;; esac
[ -n "$dir" ] || [ ${#files[@]} -eq 0 ] || { echo "$0: -f needs -d" >&2; exit 2; }
out=$1 ref=$2 prog=$3
shift 3
names=("$ref" ${names[@]+"${names[@]}"})
name=$(basename "$prog")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/root$dir" "$work/oci/blobs/sha256"
chmod 0755 "$work/root"
path=${dir:-/}
if [ -n "$rootfs" ]; then
	[ -d "$rootfs" ] || { echo "$0: -r $rootfs: not a directory" >&2; exit 2; }
	cp -a "$rootfs/." "$work/root/"
	path=${dir:+$dir:}/usr/sbin:/usr/bin:/sbin:/bin
fi
if [ -n "$dir" ]; then # every directory of DIR 0755, whatever the umask
	d=$dir
	while [ -n "$d" ] && [ "$d" != / ]; do chmod 0755 "$work/root$d"; d=$(dirname "$d"); done
fi
install -m 0755 "$prog" "$work/root$dir/$name"
for f in ${files[@]+"${files[@]}"}; do install -m 0755 "$f" "$work/root$dir/$(basename "$f")"; done
for l in ${links[@]+"${links[@]}"}; do ln -s "$name" "$work/root$dir/$l"; done
top=$name
[ -z "$dir" ] || top=$(echo "$dir" | cut -d/ -f2)
tops=("$top")
[ -z "$rootfs" ] || mapfile -t tops < <(cd "$work/root" && LC_ALL=C ls -A)
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/root" -cf "$work/layer.tar" "${tops[@]}"
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blob() { # blob FILE: moves FILE into the layout's blobs, prints its digest
	local d
	d=$(sha "$1")
	mv "$1" "$work/oci/blobs/sha256/$d"
	echo "$d"
}
json_args() { # a JSON array of DIR/NAME and the arguments
	local s="\"$dir/$name\"" a
	for a in "$@"; do s+=",\"${a//\"/\\\"}\""; done
	echo "[$s]"
}

diff_id=$(sha "$work/layer.tar")
layer_type=application/vnd.oci.image.layer.v1.tar
if [ -n "$gz" ]; then
	gzip -n -6 "$work/layer.tar" # -n: no name or time in the header, so the digest is reproducible
	mv "$work/layer.tar.gz" "$work/layer.tar"
	layer_type=$layer_type+gzip
fi
layer_size=$(size "$work/layer.tar")
layer=$(blob "$work/layer.tar")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=%s"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"scripts/oci-archive.sh %s"}]}' \
	"$(go env GOARCH 2>/dev/null || echo amd64)" "$(json_args "$@")" "$path" "$diff_id" "$name" >"$work/config.json"
config_size=$(size "$work/config.json")
config=$(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"%s","digest":"sha256:%s","size":%d}]}' \
	"$config" "$config_size" "$layer_type" "$layer" "$layer_size" >"$work/manifest.json"
manifest_size=$(size "$work/manifest.json")
manifest=$(blob "$work/manifest.json")
entries=""
for n in "${names[@]}"; do
	entries+="${entries:+,}$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}' \
		"$manifest" "$manifest_size" "$n" "${n##*:}")"
done
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "$entries" >"$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out" oci-layout index.json blobs
