#!/usr/bin/env bash
# Builds one kiln-kube program (make kube runs it once per Kubernetes version):
#
#   scripts/kube-build.sh VERSION MODFILE OUT
#
# VERSION is the Kubernetes version (v1.36.3), MODFILE the go.mod it builds from, relative to kube/
# (go.mod, or versions/VERSION.mod), OUT the program to write. A cold build compiles most of
# k8s.io/kubernetes and etcd and takes minutes, so it says first what it builds, how long that
# takes and how much memory it needs, then prints one line per stage with the time it took. The
# stages are the same go build split by component: each compiles into Go's build cache and the
# next reuses what the earlier ones compiled, so the split costs nothing, and a build with a warm
# cache runs through every stage in seconds.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 VERSION MODFILE OUT" >&2; exit 2; }
version=$1 modfile=$2 out=$3
minor=$(echo "$version" | cut -d. -f2)
repo=$(cd "$(dirname "$0")/.." && pwd)
case $out in /*) ;; *) out=$PWD/$out ;; esac
cd "$repo/kube"

grep -Eq "^\s*k8s.io/kubernetes $version\$" "$modfile" ||
	{ echo "kube/$modfile does not require k8s.io/kubernetes $version" >&2; exit 1; }

# A program built from the same inputs is taken from the cache beside Go's build cache: a new clone
# (CI makes one for every run) does not link again what an earlier clone linked (~45 s a version, 2.5 GB).
# The key hashes every input: this script, the version, the go.mod and go.sum, kube/'s sources and
# overlay, and the Go toolchain's version.
cachedir=$(dirname "$("${GO:-go}" env GOCACHE)")/kiln/kube-bin
key=$({
	echo "$version"
	"${GO:-go}" version
	sha256sum <"$repo/scripts/kube-build.sh"
	cat "$modfile" "${modfile%.mod}.sum"
	find . -type f \( -name '*.go' -o -name '*.mod' -o -name '*.sum' \) | LC_ALL=C sort | xargs sha256sum
} | sha256sum | cut -c1-16)
cached=$cachedir/kiln-kube-$version-$key
if [ -x "$cached" ]; then
	cp "$cached" "$out.tmp" && mv "$out.tmp" "$out"
	echo "kiln-kube $version: $(basename "$out") taken from $cached (built from the same inputs before)"
	exit 0
fi

vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
export GOFLAGS=-mod=mod
# Static, as upstream builds its server binaries: the kube image (scripts/system-images.sh) holds
# kiln-kube and nothing else (no libc), and a host of any distribution runs it as it is.
export CGO_ENABLED=0
# The patched copy lives beside Go's build cache, not in the clone: Go's cache keys a package by its
# directory, so every clone and worktree of the project shares one copy and its compiled packages.
# One build of a version at a time uses it (flock).
patched=$(dirname "$("${GO:-go}" env GOCACHE)")/kiln/kube-patched/$version
mkdir -p "$(dirname "$patched")"
exec 9>"$patched.lock"
if ! flock -n 9; then
	echo "kiln-kube $version: waiting for another build of $version to finish (lock $patched.lock)"
	flock 9
fi
gobuild() { nice -n 10 "${GO:-go}" build -modfile="$patched/go.mod" -tags "kube1.$minor" "$@"; }

# patch_componentstatus makes the copy of k8s.io/kubernetes the build uses, with kube-apiserver's
# componentstatus probes pointed at the addresses its node gives it (kube/_overlay: upstream probes
# 127.0.0.1, where a local node's controller-manager and scheduler are not), and a go.mod that is
# kube/MODFILE with a replace of k8s.io/kubernetes by that copy. (go build -overlay cannot patch
# a file in the module cache.) It fails when upstream's lines are not found, rather than build a
# kube-apiserver that reports falsely.
patch_componentstatus() {
	local orig src dst
	orig=$("${GO:-go}" list -modfile="$modfile" -m -f '{{.Dir}}' k8s.io/kubernetes)
	if [ "$(cat "$patched/source" 2>/dev/null)" != "$orig" ]; then
		rm -rf "$patched"
		mkdir -p "$patched"
		cp -r "$orig" "$patched/kubernetes"
		chmod -R u+w "$patched/kubernetes"
		echo "$orig" >"$patched/source"
	fi
	src=$orig/pkg/registry/core/rest/storage_core.go dst=$patched/kubernetes/pkg/registry/core/rest
	sed -e 's/Addr: "127.0.0.1", Port: ports.KubeControllerManagerPort,/Addr: kilnComponentHost(kilnControllerManagerEnv, "127.0.0.1"), Port: kilnComponentPort(kilnControllerManagerEnv, ports.KubeControllerManagerPort),/' \
		-e 's/Addr: "127.0.0.1", Port: kubeschedulerconfig.DefaultKubeSchedulerPort,/Addr: kilnComponentHost(kilnSchedulerEnv, "127.0.0.1"), Port: kilnComponentPort(kilnSchedulerEnv, kubeschedulerconfig.DefaultKubeSchedulerPort),/' \
		"$src" >"$dst/storage_core.go.new"
	if [ "$(grep -c 'kilnComponentHost(kiln' "$dst/storage_core.go.new")" != 2 ]; then
		echo "scripts/kube-build.sh: $src no longer has the componentstatus probe lines the patch expects; see docs/kube.md" >&2
		return 1
	fi
	# Written only when they differ, so that an unchanged patch keeps Go's cache valid.
	cmp -s "$dst/storage_core.go.new" "$dst/storage_core.go" || mv "$dst/storage_core.go.new" "$dst/storage_core.go"
	rm -f "$dst/storage_core.go.new"
	cmp -s "$repo/kube/_overlay/pkg/registry/core/rest/kiln_componentstatus.go" "$dst/kiln_componentstatus.go" ||
		cp "$repo/kube/_overlay/pkg/registry/core/rest/kiln_componentstatus.go" "$dst/"
	{ cat "$modfile"; printf '\nreplace k8s.io/kubernetes => %s\n' "$patched/kubernetes"; } >"$patched/go.mod.new"
	cmp -s "$patched/go.mod.new" "$patched/go.mod" || mv "$patched/go.mod.new" "$patched/go.mod"
	rm -f "$patched/go.mod.new"
	cp "${modfile%.mod}.sum" "$patched/go.sum"
}

# The stages: a name, then the packages it compiles (the main package's imports, by component).
stages=(
	"etcd|go.etcd.io/etcd/server/v3/embed go.etcd.io/etcd/server/v3/etcdmain go.etcd.io/etcd/client/v3"
	"kube-apiserver|k8s.io/kubernetes/cmd/kube-apiserver/app"
	"kube-controller-manager|k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"kube-scheduler|k8s.io/kubernetes/cmd/kube-scheduler/app"
	"kubelet (real and hollow)|k8s.io/kubernetes/cmd/kubelet/app k8s.io/kubernetes/pkg/kubemark"
	"kube-proxy|k8s.io/kubernetes/cmd/kube-proxy/app"
	"kubectl|k8s.io/kubectl/pkg/cmd"
	"kubeadm|k8s.io/kubernetes/cmd/kubeadm/app"
)
total=$((${#stages[@]} + 3))

cores=$(nproc 2>/dev/null || echo 2)
cat <<EOF
kiln-kube $version: building the Kubernetes components of Kiln's nodes (etcd, kube-apiserver,
  controller-manager, scheduler, kubelet, kube-proxy, hollow kubelet, kubectl, kubeadm) from k8s.io/kubernetes
  $version into $(basename "$out").
  With nothing cached this takes about 8 minutes on an idle 2-core machine (13 CPU-minutes; 11-17 minutes
  were measured while other builds ran), downloads ~750 MB of modules once, and needs 2.5 GB of free memory
  for the link. Go's build cache keeps the result: rebuilding after a change takes seconds.
  This machine: $cores cores, $(awk '/MemAvailable/ {printf "%.1f GB", $2/1048576}' /proc/meminfo 2>/dev/null || echo "unknown memory") available.
EOF

start=$SECONDS
n=0
stage() { # stage NAME COMMAND...: one numbered line, then the command, then its time.
	local name=$1 t=$SECONDS
	shift
	n=$((n + 1))
	printf '  [%d/%d] %s ...\n' "$n" "$total" "$name"
	"$@"
	printf '  [%d/%d] %s: done in %ds\n' "$n" "$total" "$name" $((SECONDS - t))
}

download() { nice -n 10 "${GO:-go}" list -modfile="$modfile" -tags "kube1.$minor" -deps ./cmd/kiln-kube >/dev/null; }
stage "modules: resolving and downloading what $version needs" download
stage "patching kube-apiserver's componentstatus probes (a patched copy, kube/_overlay)" patch_componentstatus
for s in "${stages[@]}"; do
	# shellcheck disable=SC2086 # the package list splits on spaces
	stage "compiling ${s%%|*}" gobuild ${s#*|}
done
stage "compiling kiln-kube and linking $(basename "$out") (2.5 GB of memory)" \
	gobuild -ldflags "$ldflags" -o "$out" ./cmd/kiln-kube
echo "kiln-kube $version: built $out in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
# Kept for the next clone; older builds of this version go (each is ~160 MB).
mkdir -p "$cachedir"
rm -f "$cachedir/kiln-kube-$version-"*
cp "$out" "$cached.tmp" && mv "$cached.tmp" "$cached"
