#!/usr/bin/env bash
# Builds the system images every real cluster pulls from kilnd's registry, from source, with no
# registry pull (make system-images runs it; docs/system-images.md):
#
#   scripts/system-images.sh OUT_DIR [KILN_KUBE...]
#
#   OUT_DIR/coredns.tar       CoreDNS (images/coredns, its own Go module) as internal/sysimages.CoreDNSImage
#   OUT_DIR/demo.tar          the demo application (images/demo) as internal/sysimages.DemoImage
#   OUT_DIR/pause.tar         the pods' sandbox (images/pause) as internal/sysimages.PauseImage
#   OUT_DIR/cni-plugins.tar   the CNI plugins of the bridge pod network as internal/sysimages.CNIPluginsImage
#   OUT_DIR/local-path-provisioner.tar  Rancher's local-path-provisioner as internal/sysimages.LocalPathImage
#   OUT_DIR/busybox.tar       Debian's static busybox as internal/sysimages.BusyboxImage
#   OUT_DIR/metrics-server.tar  the Kubernetes metrics-server as internal/sysimages.MetricsServerImage
#   OUT_DIR/metallb-controller.tar, metallb-speaker.tar  MetalLB's (layer 2) as
#                             internal/sysimages.MetalLBControllerImage, MetalLBSpeakerImage
#   OUT_DIR/kube-router.tar   kube-router's network policy controller (images/kube-router, its own Go
#                             module) with Debian's iptables and ipset, as
#                             internal/sysimages.KubeRouterImage
#   OUT_DIR/local-path-VERSION.tgz  the local-path pack's chart (charts/local-path, with the
#                             provisioner's own chart from its module as a subchart)
#   OUT_DIR/metrics-server-VERSION.tgz  the metrics-server pack's chart (charts/metrics-server, with
#                             metrics-server's own chart from its module as a subchart)
#   OUT_DIR/metallb-VERSION.tgz  the metallb pack's chart (charts/metallb, with MetalLB's own chart
#                             from its module as a subchart)
#   OUT_DIR/traefik.tar       Traefik (the ingress pack's) as internal/sysimages.TraefikImage
#   OUT_DIR/ingress-VERSION.tgz  the ingress pack's chart (charts/ingress, Kiln's own)
#   OUT_DIR/kube-VERSION.tar  for each KILN_KUBE program (bin/kiln-kube-VERSION, made by make kube):
#                             the kube image, kiln-kube of that Kubernetes version (it says which)
#
# Each of the first three is one static program (CGO_ENABLED=0, -trimpath, -s -w) packed by
# scripts/oci-archive.sh as an OCI archive; kilnd seeds every archive of its --system-images
# directory (bin/images beside bin/kilnd) into its registry at start. The image names are read
# from internal/sysimages, the one place the controller and the tests take them from too.
#
# The kube image holds /usr/local/bin/kiln-kube (static) and links to it named as the upstream
# binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet,
# kubeadm, kubectl, etcd: kiln-kube runs the component its program name says), PATH
# /usr/local/bin; one manifest named kiln.dev/REPO:VERSION for each of
# sysimages.KubeImageRepositories (kube-apiserver, kube-controller-manager, kube-scheduler,
# etcd, kube). Its layer is gzipped: ~200 MB of program become ~60 MB, in seconds.
#
# Cached: OUT_DIR/.NAME.inputs holds the hash of what NAME.tar was built from (its sources,
# go.mod and go.sum, the Go version, the name, this script and oci-archive.sh; for the kube
# image, the program); when it matches, nothing is built. The first build of CoreDNS is long: it
# compiles CoreDNS and client-go, ~800 packages. Measured on this machine's 2 cores, shared with
# a Kubernetes build (load average 8): 11 min wall, 6.5 min of CPU; nothing changed: well under a
# second. The demo and pause build in seconds.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [KILN_KUBE...]" >&2; exit 2; }
out=$1
shift
kubes=("$@")
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

# up_to_date NAME REF INPUTS: OUT_DIR/NAME.tar was built from INPUTS (and says so).
up_to_date() {
	local have
	have=$(cat "$out/.$1.inputs" 2>/dev/null || true)
	if [ -f "$out/$1.tar" ] && [ "$have" = "$3" ]; then
		echo "system-images: $out/$1.tar ($2) is up to date (inputs $3)"
		return 0
	fi
	return 1
}

# go_inputs WORD... [-- FILE...]: the hash of what a Go-built image is made of: the WORDs (its
# names, its package), the Go version and architecture, the FILEs (relative to the repository) and
# this script and oci-archive.sh.
go_inputs() {
	local words=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		words+=("$1")
		shift
	done
	[ $# -eq 0 ] || shift
	{
		echo "${words[*]}"
		"$GO" env GOVERSION GOARCH
		(cd "$repo" && sha256sum "$@" scripts/system-images.sh scripts/oci-archive.sh)
	} | sha256sum | cut -c1-16
}

# kube PROGRAM: packs kiln-kube PROGRAM as the kube image of its Kubernetes version into
# OUT_DIR/kube-VERSION.tar, unless the hash of the program and the scripts is the one it was
# packed from.
kube() {
	local prog=$1 version name inputs t refs=() r
	version=$("$prog" version) || { echo "system-images: $prog version failed: is it kiln-kube (make kube)?" >&2; exit 1; }
	if file -L "$prog" 2>/dev/null | grep -q "dynamically linked"; then
		echo "system-images: $prog is dynamically linked: the kube image holds no libc (scripts/kube-build.sh builds it static; make kube)" >&2
		exit 1
	fi
	name=kube-$version
	for r in $(ref KubeImageRepositories); do refs+=("$(ref Registry)/$r:$version"); done
	inputs=$({
		echo "${refs[@]}"
		sha256sum "$prog" | cut -d' ' -f1
		(cd "$repo" && sha256sum scripts/system-images.sh scripts/oci-archive.sh)
	} | sha256sum | cut -c1-16)
	if up_to_date "$name" "${refs[*]}" "$inputs"; then
		return
	fi
	echo "system-images: packing $prog ($(du -h "$prog" | cut -f1)) into $out/$name.tar as ${refs[*]}"
	t=$SECONDS
	cp "$prog" "$work/kiln-kube"
	local args=(-d /usr/local/bin -z)
	for r in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm kubectl etcd; do args+=(-l "$r"); done
	for r in "${refs[@]:1}"; do args+=(-n "$r"); done
	nice "$repo/scripts/oci-archive.sh" "${args[@]}" "$work/$name.tar" "${refs[0]}" "$work/kiln-kube"
	rm "$work/kiln-kube"
	mv "$work/$name.tar" "$out/$name.tar"
	echo "$inputs" >"$out/.$name.inputs"
	echo "system-images: packed the kube image $version in $((SECONDS - t))s ($(du -h "$out/$name.tar" | cut -f1))"
}

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# build NAME REFS MODULE_DIR PACKAGE FILE...: builds PACKAGE (a main package, from MODULE_DIR)
# into OUT_DIR/NAME.tar named REFS (one or more, separated by spaces; the first is the image's
# name, the others more names of it), unless the hash of the FILEs and the rest of the inputs is
# the one it was built from.
build() {
	local name=$1 ref=$2 dir=$3 pkg=$4
	shift 4
	local inputs t first extra=() r
	first=${ref%% *}
	for r in ${ref#"$first"}; do extra+=(-n "$r"); done
	inputs=$(go_inputs "$ref" -- "$@")
	if up_to_date "$name" "$ref" "$inputs"; then
		return
	fi
	echo "system-images: building $ref into $out/$name.tar"
	t=$SECONDS
	(cd "$repo/$dir" && CGO_ENABLED=0 nice "$GO" build -trimpath -ldflags '-s -w' -o "$work/$name" "$pkg")
	"$repo/scripts/oci-archive.sh" "${extra[@]}" "$work/$name.tar" "$first" "$work/$name"
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
# The pause program imports only the standard library too.
pause_refs="$(ref PauseImage)"
for tag in $(ref PauseKubeadmTags); do pause_refs+=" $(ref Registry)/pause:$tag"; done
build pause "$pause_refs" . ./images/pause images/pause/main.go go.mod
# The CNI plugins the bridge pod network runs (bridge, host-local, portmap, loopback), built from
# github.com/containernetworking/plugins at the tag of CNIPluginsImage, in /opt/cni/bin of one image:
# kubeadm installs from Kiln copy them to the host (Kiln's node image has Debian's instead).
cni() {
	local ref version inputs t m=github.com/containernetworking/plugins/plugins
	ref=$(ref CNIPluginsImage)
	version=${ref##*:}
	inputs=$(go_inputs "$ref")
	if up_to_date cni-plugins "$ref" "$inputs"; then
		return
	fi
	echo "system-images: building the CNI plugins $version into $out/cni-plugins.tar"
	t=$SECONDS
	mkdir -p "$work/cni"
	(cd "$work" && GOBIN=$work/cni CGO_ENABLED=0 nice "$GO" install -trimpath -ldflags '-s -w' \
		"$m/main/bridge@$version" "$m/ipam/host-local@$version" "$m/meta/portmap@$version" "$m/main/loopback@$version")
	"$repo/scripts/oci-archive.sh" -d /opt/cni/bin -f "$work/cni/host-local" -f "$work/cni/portmap" -f "$work/cni/loopback" \
		"$work/cni-plugins.tar" "$ref" "$work/cni/bridge"
	mv "$work/cni-plugins.tar" "$out/cni-plugins.tar"
	echo "$inputs" >"$out/.cni-plugins.inputs"
	echo "system-images: built $ref in $((SECONDS - t))s ($(du -h "$out/cni-plugins.tar" | cut -f1))"
}
cni

# goinstall NAME REF PACKAGE: PACKAGE (a main package) go installed at REF's tag, its module's
# version, static, as the image REF with the program in /usr/local/bin (the PATH).
goinstall() {
	local name=$1 ref=$2 pkg=$3 version inputs t
	version=${ref##*:}
	inputs=$(go_inputs "$ref $pkg")
	if up_to_date "$name" "$ref" "$inputs"; then
		return
	fi
	echo "system-images: building $pkg@$version into $out/$name.tar (the first time: minutes, client-go's packages)"
	t=$SECONDS
	mkdir -p "$work/$name.bin"
	(cd "$work" && GOBIN=$work/$name.bin CGO_ENABLED=0 nice "$GO" install -trimpath -ldflags '-s -w' "$pkg@$version")
	"$repo/scripts/oci-archive.sh" -d /usr/local/bin "$work/$name.tar" "$ref" "$work/$name.bin/$(basename "$pkg")"
	mv "$work/$name.tar" "$out/$name.tar"
	echo "$inputs" >"$out/.$name.inputs"
	echo "system-images: built $ref in $((SECONDS - t))s ($(du -h "$out/$name.tar" | cut -f1))"
}
# Rancher's local-path-provisioner: the local-path pack's provisioner.
goinstall local-path-provisioner "$(ref LocalPathImage)" github.com/rancher/local-path-provisioner
# The Kubernetes metrics-server: the metrics-server pack's.
goinstall metrics-server "$(ref MetricsServerImage)" sigs.k8s.io/metrics-server/cmd/metrics-server

# metallb: MetalLB's controller and speaker, built from its Go module's source at the tag of
# MetalLBControllerImage, static, each an image with the program at /controller or /speaker (where
# MetalLB's own images have them: its chart names no command). Its go.mod requires a version of
# github.com/metallb/frr-k8s the module proxy here does not serve, so the source is copied out of
# the module cache and built with a replace to MetalLBFRRK8s (internal/sysimages says why).
metallb() {
	local cref sref version frr inputs t dir
	cref=$(ref MetalLBControllerImage)
	sref=$(ref MetalLBSpeakerImage)
	frr=$(ref MetalLBFRRK8s)
	version=${cref##*:}
	inputs=$(go_inputs "$cref $sref $frr")
	if up_to_date metallb-controller "$cref" "$inputs" && up_to_date metallb-speaker "$sref" "$inputs"; then
		return
	fi
	echo "system-images: building MetalLB $version (controller, speaker) with frr-k8s $frr (the first time: minutes, client-go's packages)"
	t=$SECONDS
	dir=$(cd "$work" && "$GO" mod download -json "go.universe.tf/metallb@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "system-images: go mod download go.universe.tf/metallb@$version failed" >&2; exit 1; }
	cp -R "$dir" "$work/metallb"
	chmod -R u+w "$work/metallb"
	(cd "$work/metallb" && GOTOOLCHAIN=local "$GO" mod edit -replace "github.com/metallb/frr-k8s=github.com/metallb/frr-k8s@$frr" &&
		GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 nice "$GO" build -trimpath -ldflags '-s -w' -o "$work/metallb.bin/" ./controller ./speaker)
	"$repo/scripts/oci-archive.sh" -z "$work/metallb-controller.tar" "$cref" "$work/metallb.bin/controller"
	"$repo/scripts/oci-archive.sh" -z "$work/metallb-speaker.tar" "$sref" "$work/metallb.bin/speaker"
	mv "$work/metallb-controller.tar" "$work/metallb-speaker.tar" "$out/"
	echo "$inputs" >"$out/.metallb-controller.inputs"
	echo "$inputs" >"$out/.metallb-speaker.inputs"
	echo "system-images: built $cref and $sref in $((SECONDS - t))s ($(du -ch "$out"/metallb-*.tar | tail -1 | cut -f1))"
}
metallb

# kube-router: kube-router's network policy controller, built from images/kube-router (a module of
# Kiln's whose go.mod requires kube-router at KubeRouterImage's tag and lifts the dependencies security
# flaws are reported against: docs/system-images.md), at /usr/local/bin/kube-router, with Debian's
# iptables and ipset and the libraries they link (apt-get download, no container registry) below /.
# The iptables names are links to xtables-nft-multi; the program points them at the node's backend
# when it starts.
kube_router_debs="libc6 iptables libip4tc2 libip6tc2 libxtables12 libmnl0 libnetfilter-conntrack3 libnfnetlink0 libnftnl11 netbase ipset libipset13"
kube_router() {
	local ref inputs t deb files
	ref=$(ref KubeRouterImage)
	files=$(cd "$repo" && find images/kube-router -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' | LC_ALL=C sort)
	# shellcheck disable=SC2086 # one file a word
	inputs=$(go_inputs "$ref $kube_router_debs" -- $files)
	if up_to_date kube-router "$ref" "$inputs"; then
		return
	fi
	echo "system-images: building $ref (images/kube-router; the first time: minutes, client-go's packages) with Debian's $kube_router_debs"
	t=$SECONDS
	# The version kube-router prints (and checks against the API server's) is its tag.
	(cd "$repo/images/kube-router" && CGO_ENABLED=0 nice "$GO" build -trimpath \
		-ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=${ref##*:}" -o "$work/kube-router" .)
	mkdir -p "$work/kube-router.debs" "$work/kube-router.root"
	# shellcheck disable=SC2086 # one package a word
	if ! (cd "$work/kube-router.debs" && apt-get download $kube_router_debs >/dev/null 2>&1); then
		command -v apt-get >/dev/null || { echo "system-images: kube-router's image takes iptables and ipset from Debian's packages, and there is no apt-get" >&2; exit 1; }
		apt-get update -qq >/dev/null && (cd "$work/kube-router.debs" && apt-get download $kube_router_debs >/dev/null) ||
			{ echo "system-images: apt-get download $kube_router_debs failed (is Debian's mirror reachable?)" >&2; exit 1; }
	fi
	for deb in "$work"/kube-router.debs/*.deb; do
		echo "system-images:   $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
		dpkg-deb -x "$deb" "$work/kube-router.root"
	done
	(cd "$work/kube-router.root" && rm -rf usr/share/doc usr/share/man usr/share/lintian usr/share/locale usr/share/info etc/init.d etc/default)
	for l in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -sfn xtables-nft-multi "$work/kube-router.root/usr/sbin/$l"
	done
	mkdir -p "$work/kube-router.root/run" "$work/kube-router.root/tmp" "$work/kube-router.root/etc/kiln"
	# The program points the iptables links at the node's backend only where this file is: in its image.
	echo "kube-router's image: the iptables links are the program's to change" >"$work/kube-router.root/etc/kiln/kube-router-image"
	chmod 1777 "$work/kube-router.root/tmp"
	"$repo/scripts/oci-archive.sh" -d /usr/local/bin -r "$work/kube-router.root" -z "$work/kube-router.tar" "$ref" "$work/kube-router"
	mv "$work/kube-router.tar" "$out/kube-router.tar"
	echo "$inputs" >"$out/.kube-router.inputs"
	echo "system-images: built $ref in $((SECONDS - t))s ($(du -h "$out/kube-router.tar" | cut -f1))"
}
kube_router

# traefik: Traefik (the ingress pack's), built from its Go module's source at the tag of TraefikImage
# (./cmd/traefik), static, /usr/local/bin/traefik as the entrypoint. Its go.mod cannot be built as
# it is here, so the source is copied out of the module cache and three replaces are added
# (internal/sysimages and docs/system-images.md say why):
# - github.com/abbot/go-http-auth, Traefik's fork, to TraefikGoHTTPAuth (the version v3.7.13 names
#   is refused by the module proxy; only the basic and digest auth middlewares use it);
# - github.com/traefik/traefik/dynamic/ext, a module nested in Traefik's repository that its module
#   zip leaves out (./pkg/config/dynamic/ext), to a module written here with the two empty types
#   Traefik's open-source build has in it (its dynamic configuration's extension points);
# - github.com/go-acme/lego/v5 (ACME, for certificates from Let's Encrypt; a cluster's nodes reach
#   no internet) to a copy without the DNS-01 providers in traefik_lego_without, whose SDKs the
#   module proxy refuses: their imports and cases are taken out of its providers/dns registry.
traefik_lego_without="alidns aliesa azion dnsimple edgedns edgeone huaweicloud oraclecloud regfish sakuracloud tencentcloud ucloud yandexcloud"
traefik() {
	local ref version auth inputs t src lego reg p
	ref=$(ref TraefikImage)
	auth=$(ref TraefikGoHTTPAuth)
	version=${ref##*:}
	inputs=$(go_inputs "$ref $auth $traefik_lego_without")
	if up_to_date traefik "$ref" "$inputs"; then
		return
	fi
	echo "system-images: building Traefik $version (the first time: many minutes, ~1,000 packages)"
	t=$SECONDS
	src=$(cd "$work" && "$GO" mod download -json "github.com/traefik/traefik/v3@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "system-images: go mod download github.com/traefik/traefik/v3@$version failed" >&2; exit 1; }
	cp -R "$src" "$work/traefik"
	lego=$(sed -n 's/^[[:space:]]*github.com\/go-acme\/lego\/v5 \(v[^ ]*\)$/\1/p' "$work/traefik/go.mod")
	[ -n "$lego" ] || { echo "system-images: Traefik $version's go.mod requires no github.com/go-acme/lego/v5" >&2; exit 1; }
	src=$(cd "$work" && "$GO" mod download -json "github.com/go-acme/lego/v5@$lego" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "system-images: go mod download github.com/go-acme/lego/v5@$lego failed" >&2; exit 1; }
	cp -R "$src" "$work/lego"
	chmod -R u+w "$work/traefik" "$work/lego"
	reg=$work/lego/providers/dns/zz_gen_dns_providers.go
	for p in $traefik_lego_without; do
		grep -q "^	\"github.com/go-acme/lego/v5/providers/dns/$p\"\$" "$reg" ||
			{ echo "system-images: lego $lego's $reg has no provider $p: change traefik_lego_without" >&2; exit 1; }
		sed -i -e "\|^	\"github.com/go-acme/lego/v5/providers/dns/$p\"\$|d" \
			-e "/^	case .*:\$/{N;/\n		return $p\.NewDNSProvider()\$/d}" "$reg"
	done
	mkdir -p "$work/traefik-ext"
	printf 'module github.com/traefik/traefik/dynamic/ext\n\ngo 1.24.0\n' >"$work/traefik-ext/go.mod"
	printf '// Package ext is the extension points of Traefik'"'"'s dynamic configuration: empty.\npackage ext\n\ntype HTTP struct{}\n\ntype Router struct{}\n' >"$work/traefik-ext/ext.go"
	(cd "$work/traefik" && GOTOOLCHAIN=local "$GO" mod edit \
		-replace "github.com/abbot/go-http-auth=github.com/containous/go-http-auth@$auth" \
		-replace "github.com/traefik/traefik/dynamic/ext=../traefik-ext" \
		-replace "github.com/go-acme/lego/v5=../lego" &&
		GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 nice "$GO" build -trimpath \
			-ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$version" -o "$work/traefik.bin/traefik" ./cmd/traefik)
	"$repo/scripts/oci-archive.sh" -d /usr/local/bin -z "$work/traefik.tar" "$ref" "$work/traefik.bin/traefik"
	mv "$work/traefik.tar" "$out/traefik.tar"
	echo "$inputs" >"$out/.traefik.inputs"
	echo "system-images: built $ref in $((SECONDS - t))s ($(du -h "$out/traefik.tar" | cut -f1))"
}
traefik

# busybox: Debian's busybox-static (apt-get download; no container registry), /bin/busybox with
# the applets the local-path pack's helper pods run as links (/bin/sh, mkdir, rm, chmod, ...).
busybox() {
	local ref version inputs t deb
	ref=$(ref BusyboxImage)
	version=${ref##*:}
	inputs=$({
		echo "$ref"
		(cd "$repo" && sha256sum scripts/system-images.sh scripts/oci-archive.sh)
	} | sha256sum | cut -c1-16)
	if up_to_date busybox "$ref" "$inputs"; then
		return
	fi
	echo "system-images: packing Debian's busybox-static as $ref"
	t=$SECONDS
	mkdir -p "$work/busybox"
	if ! (cd "$work/busybox" && apt-get download busybox-static >/dev/null 2>&1); then
		command -v apt-get >/dev/null || { echo "system-images: busybox comes from Debian's busybox-static package, and there is no apt-get" >&2; exit 1; }
		apt-get update -qq >/dev/null && (cd "$work/busybox" && apt-get download busybox-static >/dev/null) ||
			{ echo "system-images: apt-get download busybox-static failed (is Debian's mirror reachable?)" >&2; exit 1; }
	fi
	deb=$(ls "$work"/busybox/busybox-static_*.deb)
	case "$(dpkg-deb -f "$deb" Version)" in
	*:"$version"-* | "$version"-*) ;;
	*) echo "system-images: Debian's busybox-static is $(dpkg-deb -f "$deb" Version), not $version: change BusyboxImage in internal/sysimages" >&2; exit 1 ;;
	esac
	dpkg-deb -x "$deb" "$work/busybox/root"
	local args=(-d /bin) a
	for a in sh mkdir rm rmdir chmod ls cat echo test sleep; do args+=(-l "$a"); done
	"$repo/scripts/oci-archive.sh" "${args[@]}" "$work/busybox.tar" "$ref" "$work/busybox/root/bin/busybox"
	mv "$work/busybox.tar" "$out/busybox.tar"
	echo "$inputs" >"$out/.busybox.inputs"
	echo "system-images: packed $ref in $((SECONDS - t))s ($(du -h "$out/busybox.tar" | cut -f1))"
}
busybox

# chart NAME [MODULE@VERSION PATH]: Kiln's chart charts/NAME packed as OUT_DIR/NAME-VERSION.tgz (the
# version its Chart.yaml says), with the upstream chart at PATH of MODULE's source (from the Go
# module cache) as its subchart when one is named (the ingress chart is Kiln's own, with no
# subchart: Traefik's module holds no chart): kilnd seeds it as kiln.system/charts/NAME:VERSION.
chart() {
	local name=$1 module=${2-} sub=${3-} version inputs dir
	version=$(sed -n 's/^version: *//p' "$repo/charts/$name/Chart.yaml")
	inputs=$({
		echo "$name $module $sub"
		(cd "$repo" && find "charts/$name" -type f | LC_ALL=C sort | xargs sha256sum)
		(cd "$repo" && sha256sum scripts/system-images.sh)
	} | sha256sum | cut -c1-16)
	if [ -f "$out/$name-$version.tgz" ] && [ "$(cat "$out/.$name-chart.inputs" 2>/dev/null)" = "$inputs" ]; then
		echo "system-images: $out/$name-$version.tgz is up to date (inputs $inputs)"
		return
	fi
	mkdir -p "$work/charts/$name"
	cp -R "$repo/charts/$name/." "$work/charts/$name/"
	if [ -n "$module" ]; then
		dir=$(cd "$work" && "$GO" mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$dir/$sub" ] || { echo "system-images: $module has no $sub" >&2; exit 1; }
		mkdir -p "$work/charts/$name/charts"
		cp -R "$dir/$sub" "$work/charts/$name/charts/"
	fi
	chmod -R u+w "$work/charts/$name"
	tar -C "$work/charts" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$out/$name-$version.tgz" "$name"
	echo "$inputs" >"$out/.$name-chart.inputs"
	if [ -n "$module" ]; then
		echo "system-images: packed the chart $name $version with $module's $(basename "$sub") ($(du -h "$out/$name-$version.tgz" | cut -f1))"
	else
		echo "system-images: packed the chart $name $version ($(du -h "$out/$name-$version.tgz" | cut -f1))"
	fi
}
lp=$(ref LocalPathImage)
chart local-path "github.com/rancher/local-path-provisioner@${lp##*:}" deploy/chart/local-path-provisioner
ms=$(ref MetricsServerImage)
chart metrics-server "sigs.k8s.io/metrics-server@${ms##*:}" charts/metrics-server
mlb=$(ref MetalLBControllerImage)
chart metallb "go.universe.tf/metallb@${mlb##*:}" charts/metallb
chart ingress

for k in ${kubes[@]+"${kubes[@]}"}; do
	kube "$k"
done
