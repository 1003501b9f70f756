#!/usr/bin/env bash
# Builds the images upstream's conformance specs run, from source and Debian's packages, with no
# registry pull (make conformance-build runs it; docs/conformance.md):
#
#   scripts/conformance-images.sh OUT_DIR
#
# Each image is a docker save archive OUT_DIR/NAME.tar, and OUT_DIR/images.txt lists what to push
# into Kiln's registry, one line "NAME.tar REPOSITORY:TAG" per name the suite asks for (the
# registry host dropped, as a node's containerd asks kilnd's registry for it):
#
#   agnhost            k8s.io/kubernetes/test/images/agnhost (the suite's own module, at
#                      test/conformance/go.mod's version), static, at /agnhost, on a root of
#                      Debian packages (busybox's applets, bash, curl, dig, getent, ip, nc) as upstream's
#                      image has them on Alpine, with its porter's TLS key pair, /uploads and
#                      its user 1000; entrypoint /agnhost, command pause. Tagged 2.63.0 (Agnhost)
#                      and, with another label (another digest), 2.55 (AgnhostPrev).
#   kitten, nautilus   agnhost with upstream's picture and data.json, command test-webserver.
#   nonewprivs         upstream's nnp (test/images/nonewprivs), set-user-ID root, on busybox.
#   nonroot            a Debian root (dash, busybox) whose user is 1234.
#   busybox            busybox 1.37.0 built from source (upstream's ash keeps environment
#                      variables Debian's drops), every applet linked in /bin; command sh.
#                      Tagged 1.37.0-1 and 1.36.1-1 (two digests), both of which the suite runs.
#   nginx              Debian's nginx-light serving /usr/share/nginx/html on :80 in the
#                      foreground, with busybox's applets; 1.15-4 (Nginx) and 1.27-0 (NginxNew),
#                      two digests, as the specs that roll from one to the other need.
#   glibc-dns-testing  Debian's dig and glibc's getent with busybox's applets: the DNS specs'
#                      probes.
#   sample-apiserver   k8s.io/sample-apiserver (its module at the suite's replace), static, as the
#                      entrypoint: the aggregator spec's extension API server.
#   etcd               kiln-kube of the suite's version (bin/kiln-kube-VERSION, make kube) with
#                      the link /usr/local/bin/etcd, as Kiln's kube image has it: the aggregator
#                      spec runs /usr/local/bin/etcd from registry.k8s.io/etcd:3.6.8-0 (kiln-kube's
#                      embedded etcd is 3.6.x).
#
# The suite's pause (registry.k8s.io/pause:3.10.2) is a system image already (PauseKubeadmTags).
# The names come from the suite itself: e2e.test --list-images prints every image it may run, and
# the script stops when a name it builds is not among them (a new Kubernetes version moved a tag).
#
# Cached: OUT_DIR/.NAME.inputs holds the hash of what NAME.tar was made from (the package list,
# the Go module files, this script); when it matches, nothing is built. A first build takes about
# 5 minutes on an idle machine (agnhost and sample-apiserver compile, busybox from source, ~150
# Debian packages downloaded once); busybox alone took 37 min at a load of 36 on 2 cores.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
suite_dir=$repo/test/conformance
e2e=$repo/bin/e2e.test
[ -x "$e2e" ] || { echo "conformance-images: $e2e is not built (make conformance-build)" >&2; exit 1; }
docker version >/dev/null 2>&1 || { echo "conformance-images: Docker does not answer (docker version)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$e2e" --list-images >"$work/suite-images" 2>/dev/null ||
	{ echo "conformance-images: $e2e --list-images failed" >&2; exit 1; }
# suite_name REPOSITORY:TAG: the name the suite asks for, or a stop naming what moved.
suite_name() {
	local full
	full=$(grep -E "^[^/]+/$1\$" "$work/suite-images" | head -1)
	[ -n "$full" ] || { echo "conformance-images: the suite ($e2e --list-images) asks for no image named */$1: change scripts/conformance-images.sh" >&2; exit 1; }
	echo "${full#*/}"
}

# debroot DIR PACKAGE...: DIR becomes a root of busybox-static, the Debian packages and everything
# they depend on (apt-get download, dpkg-deb -x: no maintainer scripts), with busybox's applets in
# /bin where no package put a program of that name, dash as /bin/sh when it is one of them, and a
# passwd/group with root, nobody and www-data.
debroot() {
	local dir=$1 debs=$work/debs
	shift
	mkdir -p "$debs" "$dir"
	local pkgs
	closure() {
		apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
			--no-replaces --no-enhances busybox-static "$@" 2>/dev/null | grep -v '^ ' | grep -v '<' | sort -u
	}
	pkgs=$(closure "$@")
	if ! grep -qx busybox-static <<<"$pkgs"; then # a fresh machine's apt knows no package yet
		apt-get update -qq >/dev/null || true
		pkgs=$(closure "$@")
		grep -qx busybox-static <<<"$pkgs" || { echo "conformance-images: apt-cache knows none of busybox-static $* (is Debian's mirror reachable?)" >&2; exit 1; }
	fi
	# shellcheck disable=SC2086
	if ! (cd "$debs" && apt-get download $pkgs >/dev/null 2>&1); then
		apt-get update -qq >/dev/null
		(cd "$debs" && apt-get download $pkgs >/dev/null) ||
			{ echo "conformance-images: apt-get download failed (is Debian's mirror reachable?)" >&2; exit 1; }
	fi
	local p f
	for p in $pkgs; do
		f=$(ls "$debs/${p}_"*.deb 2>/dev/null | head -1)
		[ -n "$f" ] || continue # a virtual package
		dpkg-deb -x "$f" "$dir"
	done
	mkdir -p "$dir/bin" "$dir/tmp" "$dir/etc" "$dir/var/tmp"
	chmod 1777 "$dir/tmp" "$dir/var/tmp"
	# What a package's maintainer script would have linked (update-alternatives), before busybox's
	# applets take the names.
	[ ! -e "$dir/bin/nc.openbsd" ] || ln -sf nc.openbsd "$dir/bin/nc"
	# With dash, /bin/sh is dash, as on Debian: Debian's static busybox prefers its own applets
	# to the programs on PATH (nc -v would be busybox's nc, which has no -v).
	[ ! -e "$dir/bin/dash" ] || ln -sf dash "$dir/bin/sh"
	local a d have
	for a in $("$dir/bin/busybox" --list); do # in /bin, unless a package has a program of that name
		have=
		for d in bin usr/bin sbin usr/sbin; do [ -e "$dir/$d/$a" ] || [ -L "$dir/$d/$a" ] && have=1; done
		[ -n "$have" ] || ln -s busybox "$dir/bin/$a"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/etc/passwd"
	printf 'root:x:0:\nwww-data:x:33:\nnogroup:x:65534:\n' >"$dir/etc/group"
	printf 'hosts: files dns\n' >"$dir/etc/nsswitch.conf"
}

# pack NAME DIR CHANGE... -- NAME:TAG LABEL [NAME:TAG LABEL]...: OUT_DIR/NAME.tar holds DIR as
# one image per NAME:TAG (docker import with the Dockerfile CHANGEs and the label
# kiln.dev/conformance-tag=LABEL, so two tags are two digests), and images.txt names each.
pack() {
	local name=$1 dir=$2 changes=() refs=()
	shift 2
	changes+=(--change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	while [ "$1" != -- ]; do changes+=(--change "$1"); shift; done
	shift
	tar --numeric-owner -C "$dir" -c . | docker import "${changes[@]}" --change "LABEL kiln.dev/conformance-tag=$2" - "e2e-test-images/$1" >/dev/null
	refs+=("e2e-test-images/$1")
	shift 2
	while [ $# -gt 0 ]; do # another tag: the same layer, another label (docker build adds no layer for it)
		printf 'FROM %s\nLABEL kiln.dev/conformance-tag=%s\n' "${refs[0]}" "$2" | docker build -q -t "e2e-test-images/$1" - >/dev/null 2>"$work/build.err" ||
			{ cat "$work/build.err" >&2; exit 1; }
		refs+=("e2e-test-images/$1")
		shift 2
	done
	docker save -o "$out/$name.tar.new" "${refs[@]}"
	mv "$out/$name.tar.new" "$out/$name.tar"
	docker rmi "${refs[@]}" >/dev/null
}

# cached NAME INPUTS: OUT_DIR/NAME.tar was made from INPUTS.
cached() {
	[ -f "$out/$1.tar" ] && [ "$(cat "$out/.$1.inputs" 2>/dev/null)" = "$2" ]
}

inputs_of() { # inputs_of WORDS...: the hash of WORDS, the suite's module files and this script
	{ echo "$*"; "$GO" env GOVERSION GOARCH; sha256sum "$suite_dir/go.mod" "$suite_dir/go.sum" "$repo/scripts/conformance-images.sh"; } | sha256sum | cut -c1-16
}

gobuild() { # gobuild OUT PACKAGE: a static program of the suite's module
	(cd "$suite_dir" && CGO_ENABLED=0 nice "$GO" build -trimpath -ldflags '-s -w' -o "$1" "$2")
}

: >"$work/images.txt"
image() { # image NAME INPUTS BUILD_FUNCTION REPOSITORY:TAG...
	local name=$1 inputs=$2 fn=$3 t r
	shift 3
	for r in "$@"; do echo "$name.tar $(suite_name "$r")" >>"$work/images.txt"; done
	if cached "$name" "$inputs"; then
		echo "conformance-images: $out/$name.tar is up to date"
		return
	fi
	t=$SECONDS
	"$fn"
	echo "$inputs" >"$out/.$name.inputs"
	echo "conformance-images: built $name ($*) in $((SECONDS - t))s ($(du -h "$out/$name.tar" | cut -f1))"
}

agnhost_pkgs="dash bash curl bind9-dnsutils iproute2 netcat-openbsd libc-bin"
agnhost_tags=("agnhost:2.63.0" "agnhost:2.55")
build_agnhost() {
	local src r=$work/agnhost
	src=$(cd "$suite_dir" && "$GO" list -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost)
	debroot "$r" $agnhost_pkgs
	gobuild "$r/agnhost" k8s.io/kubernetes/test/images/agnhost
	# As upstream's Dockerfile makes it: porter's TLS key pair at the root, the link agnhost-2,
	# /uploads, and a user and group of the image's own (1000, 50000).
	install -m 0644 "$src/porter/localhost.crt" "$src/porter/localhost.key" "$r/"
	ln -s agnhost "$r/agnhost-2"
	mkdir -p "$r/uploads"
	echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$r/etc/passwd"
	printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >>"$r/etc/group"
	pack agnhost "$r" 'ENTRYPOINT ["/agnhost"]' 'CMD ["pause"]' 'EXPOSE 80 8080 8081 9376 5000' -- \
		"${agnhost_tags[0]}" 2.63.0 "${agnhost_tags[1]}" 2.55
}
image agnhost "$(inputs_of "$agnhost_pkgs" "${agnhost_tags[*]}")" build_agnhost \
	"e2e-test-images/${agnhost_tags[0]}" "e2e-test-images/${agnhost_tags[1]}"

# kitten and nautilus: upstream's, agnhost's test-webserver serving a picture and data.json from
# the image's root (the kubectl update-demo specs roll one to the other).
build_pictures() {
	local src d
	src=$(cd "$suite_dir" && "$GO" list -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost)/..
	docker load -i "$out/agnhost.tar" >/dev/null
	for d in kitten nautilus; do
		mkdir -p "$work/$d"
		cp "$src/$d/html/"* "$work/$d/"
		printf 'FROM e2e-test-images/%s\nCOPY . /\nCMD ["test-webserver"]\n' "${agnhost_tags[0]}" >"$work/$d/Dockerfile"
		docker build -q -t "e2e-test-images/$d:1.8" "$work/$d" >/dev/null 2>"$work/build.err" ||
			{ cat "$work/build.err" >&2; exit 1; }
	done
	docker save -o "$out/pictures.tar.new" e2e-test-images/kitten:1.8 e2e-test-images/nautilus:1.8
	mv "$out/pictures.tar.new" "$out/pictures.tar"
	docker rmi e2e-test-images/kitten:1.8 e2e-test-images/nautilus:1.8 "e2e-test-images/${agnhost_tags[0]}" "e2e-test-images/${agnhost_tags[1]}" >/dev/null
}
image pictures "$(inputs_of pictures "$(cat "$out/.agnhost.inputs")")" build_pictures \
	e2e-test-images/kitten:1.8 e2e-test-images/nautilus:1.8

# busybox_from_source OUT: OUT is busybox 1.37.0 built from its source, upstream's default
# configuration, static: what upstream's busybox image (Docker's busybox:1.37.0) runs. Debian's
# busybox-static (bookworm's 1.35, trixie's 1.37) reverts upstream's ash keeping environment
# variables whose names are not shell names: the ConfigMap and Secret specs print `sh -c env` and
# look for data-1=value-1. The source is Debian's copy of upstream's tarball, checked by its
# hash; the program is kept in OUT_DIR/.cache, by that hash and this recipe's revision.
busybox_version=1.37.0
busybox_sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4
busybox_rev=1 # bump when how it is built (below) changes
busybox_from_source() {
	local cached=$out/.cache/busybox-$busybox_version-${busybox_sha256:0:12}-$busybox_rev src=$work/busybox-src
	if [ ! -x "$cached" ]; then
		local url
		url=$("$repo/scripts/debian-mirror.sh" bookworm)/pool/main/b/busybox/busybox_$busybox_version.orig.tar.bz2
		mkdir -p "$src" "$out/.cache"
		curl -fsS -o "$src/src.tar.bz2" "$url" || { echo "conformance-images: cannot download $url" >&2; exit 1; }
		echo "$busybox_sha256  $src/src.tar.bz2" | sha256sum -c --quiet - ||
			{ echo "conformance-images: $url is not busybox $busybox_version's source (sha256 differs)" >&2; exit 1; }
		tar -C "$src" -xjf "$src/src.tar.bz2"
		(
			cd "$src/busybox-$busybox_version"
			make defconfig >/dev/null
			# Static (the image has no C library); tc off: it needs traffic-control headers newer
			# kernels dropped (CBQ).
			sed -i 's/^# CONFIG_STATIC is not set/CONFIG_STATIC=y/; s/^CONFIG_TC=y/# CONFIG_TC is not set/' .config
			nice make -j"$(nproc)" busybox >"$src/build.log" 2>&1 ||
				{ tail -20 "$src/build.log" >&2; echo "conformance-images: building busybox $busybox_version failed" >&2; exit 1; }
		)
		install -m 0755 "$src/busybox-$busybox_version/busybox" "$cached.new"
		mv "$cached.new" "$cached"
	fi
	install -m 0755 "$cached" "$1"
}

build_busybox() {
	debroot "$work/busybox"
	# Upstream's busybox in place of Debian's, with its applets where Debian's had none.
	busybox_from_source "$work/busybox/bin/busybox"
	local a
	for a in $("$work/busybox/bin/busybox" --list); do
		[ -e "$work/busybox/bin/$a" ] || ln -s busybox "$work/busybox/bin/$a"
	done
	pack busybox "$work/busybox" 'CMD ["sh"]' -- busybox:1.37.0-1 1.37.0-1 busybox:1.36.1-1 1.36.1-1
}
image busybox "$(inputs_of busybox:1.37.0-1 busybox:1.36.1-1)" build_busybox \
	e2e-test-images/busybox:1.37.0-1 e2e-test-images/busybox:1.36.1-1

# nonewprivs: upstream's nnp (k8s.io/kubernetes/test/images/nonewprivs), set-user-ID root, on
# busybox: it says whether it gained root, which allowPrivilegeEscalation: false must stop.
build_nonewprivs() {
	debroot "$work/nnp"
	mkdir -p "$work/nnp/usr/local/bin"
	gobuild "$work/nnp/usr/local/bin/nnp" k8s.io/kubernetes/test/images/nonewprivs
	chmod 4755 "$work/nnp/usr/local/bin/nnp"
	pack nonewprivs "$work/nnp" 'CMD ["nnp"]' -- nonewprivs:1.4 1.4
}
image nonewprivs "$(inputs_of nonewprivs:1.4)" build_nonewprivs e2e-test-images/nonewprivs:1.4

# nonroot: a Debian root whose user is 1234, as upstream's.
build_nonroot() {
	debroot "$work/nonroot" dash
	pack nonroot "$work/nonroot" 'USER 1234' -- nonroot:1.5 1.5
}
image nonroot "$(inputs_of dash nonroot:1.5)" build_nonroot e2e-test-images/nonroot:1.5

build_nginx() {
	debroot "$work/nginx" dash nginx-light
	mkdir -p "$work/nginx/usr/share/nginx/html" "$work/nginx/var/log/nginx" "$work/nginx/var/lib/nginx" "$work/nginx/run"
	rm -f "$work/nginx/etc/nginx/sites-enabled/"*
	cat >"$work/nginx/etc/nginx/nginx.conf" <<-'EOF'
		# Kiln's conformance image: Debian's nginx serving /usr/share/nginx/html on :80.
		user www-data;
		worker_processes 1;
		pid /run/nginx.pid;
		error_log /dev/stderr;
		events { worker_connections 256; }
		http {
		    include /etc/nginx/mime.types;
		    access_log /dev/stdout;
		    server {
		        listen 80;
		        listen [::]:80;
		        root /usr/share/nginx/html;
		        index index.html;
		    }
		}
	EOF
	echo '<html><body>It works: nginx (Kiln conformance image)</body></html>' >"$work/nginx/usr/share/nginx/html/index.html"
	pack nginx "$work/nginx" 'CMD ["nginx", "-g", "daemon off;"]' 'EXPOSE 80' -- \
		nginx:1.15-4 1.15-4 nginx:1.27-0 1.27-0
}
image nginx "$(inputs_of dash nginx-light nginx:1.15-4 nginx:1.27-0)" build_nginx \
	e2e-test-images/nginx:1.15-4 e2e-test-images/nginx:1.27-0

build_dns() {
	debroot "$work/dns" dash bind9-dnsutils libc-bin
	pack glibc-dns-testing "$work/dns" 'CMD ["sh"]' -- glibc-dns-testing:2.0.0 2.0.0
}
image glibc-dns-testing "$(inputs_of dash bind9-dnsutils libc-bin glibc-dns-testing:2.0.0)" build_dns \
	e2e-test-images/glibc-dns-testing:2.0.0

build_sample_apiserver() {
	mkdir -p "$work/sample-apiserver/tmp"
	chmod 1777 "$work/sample-apiserver/tmp"
	gobuild "$work/sample-apiserver/sample-apiserver" k8s.io/sample-apiserver
	pack sample-apiserver "$work/sample-apiserver" 'ENTRYPOINT ["/sample-apiserver"]' -- sample-apiserver:1.29.2 1.29.2
}
image sample-apiserver "$(inputs_of sample-apiserver:1.29.2)" build_sample_apiserver e2e-test-images/sample-apiserver:1.29.2

# etcd: kiln-kube of the suite's Kubernetes version (make kube) packed as the kube image is
# (scripts/oci-archive.sh, the link /usr/local/bin/etcd), under the name the suite asks for.
version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$suite_dir/go.mod")
kube=$repo/bin/kiln-kube-$version
[ -x "$kube" ] || { echo "conformance-images: $kube is not built (make kube)" >&2; exit 1; }
etcd_ref=$(suite_name etcd:3.6.8-0)
build_etcd() {
	nice "$repo/scripts/oci-archive.sh" -d /usr/local/bin -z -l etcd "$out/etcd.tar" "$etcd_ref" "$kube"
}
image etcd "$(inputs_of "$etcd_ref" "$(sha256sum "$kube" | cut -c1-64)" "$(sha256sum "$repo/scripts/oci-archive.sh")")" build_etcd "$etcd_ref"

mv "$work/images.txt" "$out/images.txt"
echo "conformance-images: $out/images.txt names $(wc -l <"$out/images.txt") images"
