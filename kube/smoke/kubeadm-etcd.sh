#!/usr/bin/env bash
# kubeadm's local etcd, run as kubeadm writes it, from kiln-kube:
#
#   kube/smoke/kubeadm-etcd.sh path/to/kiln-kube      (as root: a private mount namespace)
#
# In a temporary directory: links named as the upstream binaries (kubeadm, etcd) to kiln-kube;
# a kubeadm configuration of the kubeadm distribution's shape (imageRepository kiln.dev, etcd's
# local imageRepository kiln.dev and imageTag VERSION); `kubeadm config images list` (printed:
# the control plane's images must be kiln.dev/{kube-apiserver,kube-controller-manager,
# kube-scheduler,etcd}:VERSION, the kube image's names); `kubeadm init phase certs all` and
# `kubeadm init phase etcd local` (--rootfs: the directory, with /proc bound in, in a mount
# namespace of its own, so nothing is written outside it). Then it runs the etcd static pod's
# command exactly (only /pki and /var/lib/etcd moved into the directory) through the link named
# etcd, and checks what kubeadm and kube-apiserver need of it: the probes' /livez and /readyz on
# the metrics URL, client TLS with client certificates (a put and a range through the v3 JSON
# gateway with apiserver-etcd-client's certificate; refused without one), peer TLS (/members and
# /version with the peer certificate; refused without one), and a clean stop on SIGTERM.
set -euo pipefail

KUBE=$(realpath "${1:?usage: $0 path/to/kiln-kube}")
VERSION=$("$KUBE" version)
[ "$(id -u)" = 0 ] || { echo "kubeadm-etcd: needs root (unshare -m, mount --bind)" >&2; exit 2; }
IP=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$IP" ] || { echo "kubeadm-etcd: no IPv4 address with a default route to advertise" >&2; exit 2; }

W=$(mktemp -d "${TMPDIR:-/tmp}/kiln-kubeadm-etcd.XXXXXX")
pid=""
cleanup() {
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	[ -n "${KEEP:-}" ] && echo "kept $W" || rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/bin" "$W/root/proc"
for n in kubeadm etcd; do ln -s "$KUBE" "$W/bin/$n"; done

cat >"$W/root/kubeadm.yaml" <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $IP
nodeRegistration:
  name: cp1
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $VERSION
imageRepository: kiln.dev
certificatesDir: /pki
etcd:
  local:
    imageRepository: kiln.dev
    imageTag: $VERSION
    dataDir: /var/lib/etcd
YAML

echo "== kubeadm $("$W/bin/kubeadm" version -o short): config images list"
"$W/bin/kubeadm" config images list --config "$W/root/kubeadm.yaml" | tee "$W/images"
for r in kube-apiserver kube-controller-manager kube-scheduler etcd; do
	grep -qx "kiln.dev/$r:$VERSION" "$W/images" || { echo "kubeadm-etcd: kubeadm does not list kiln.dev/$r:$VERSION" >&2; exit 1; }
done

echo "== kubeadm init phase certs all; kubeadm init phase etcd local (--rootfs $W/root)"
unshare -m --propagation private sh -c '
	mount --bind /proc "$1/proc" &&
	"$2" init phase certs all --config /kubeadm.yaml --rootfs "$1" >/dev/null &&
	"$2" init phase etcd local --config /kubeadm.yaml --rootfs "$1"' sh "$W/root" "$W/bin/kubeadm"
manifest=$W/root/etc/kubernetes/manifests/etcd.yaml
grep -q "image: kiln.dev/etcd:$VERSION" "$manifest" || { echo "kubeadm-etcd: $manifest names another image" >&2; exit 1; }
mapfile -t cmd < <(sed -n '/^  - command:/,/^    image:/p' "$manifest" | sed -n 's/^    - //p')
[ "${cmd[0]}" = etcd ] || { echo "kubeadm-etcd: the static pod runs ${cmd[0]}, not etcd" >&2; exit 1; }
args=()
for a in "${cmd[@]:1}"; do args+=("$(echo "$a" | sed -e "s#/pki#$W/root/pki#g" -e "s#/var/lib/etcd#$W/data#g")"); done
echo "== the static pod's command, through the link named etcd:"
printf '   etcd'; printf ' %s' "${cmd[@]:1}"; echo
start=$EPOCHREALTIME
"$W/bin/etcd" "${args[@]}" >"$W/etcd.log" 2>&1 &
pid=$!

p=$W/root/pki/etcd
metrics=""
for a in "${cmd[@]}"; do case $a in --listen-metrics-urls=*) metrics=${a#*=} metrics=${metrics%%,*} ;; esac; done
[ -n "$metrics" ] || { echo "kubeadm-etcd: the static pod has no --listen-metrics-urls (its probes' port)" >&2; exit 1; }
fail() { echo "kubeadm-etcd: FAILED: $*" >&2; tail -n 20 "$W/etcd.log" >&2; exit 1; }
for _ in $(seq 100); do
	curl -sf --max-time 1 "$metrics/readyz" >/dev/null && break
	kill -0 "$pid" 2>/dev/null || fail "etcd exited"
	sleep 0.1
done
echo "   ready in $(awk -v s="$start" -v n="$EPOCHREALTIME" 'BEGIN { printf "%.2f", n - s }')s"
check() { # check WHAT WANT COMMAND...: the output of COMMAND contains WANT
	local got
	got=$("${@:3}" 2>&1 || true)
	[[ $got == *"$2"* ]] || fail "$1: got '$got', want '$2'"
	echo "   ok  $1: ${got:0:110}"
}
cli=(--cacert "$p/ca.crt" --cert "$W/root/pki/apiserver-etcd-client.crt" --key "$W/root/pki/apiserver-etcd-client.key")
peer=(--http1.1 --cacert "$p/ca.crt" --cert "$p/peer.crt" --key "$p/peer.key")
check "probe $metrics/livez" ok curl -s "$metrics/livez"
check "probe $metrics/readyz" ok curl -s "$metrics/readyz"
check "client TLS /health (healthcheck-client)" '"health":"true"' curl -s --cacert "$p/ca.crt" --cert "$p/healthcheck-client.crt" --key "$p/healthcheck-client.key" https://127.0.0.1:2379/health
check "client TLS put (apiserver-etcd-client)" '"revision"' curl -s "${cli[@]}" "https://$IP:2379/v3/kv/put" -d '{"key":"a2lsbg==","value":"b2s="}'
check "client TLS range" '"value":"b2s="' curl -s "${cli[@]}" "https://$IP:2379/v3/kv/range" -d '{"key":"a2lsbg=="}'
check "client TLS without a client certificate is refused" "curl: (" curl -sS --cacert "$p/ca.crt" https://127.0.0.1:2379/health
check "peer TLS /members (peer)" '"name":"cp1"' curl -s "${peer[@]}" "https://$IP:2380/members"
check "peer TLS /version (peer)" '"etcdserver"' curl -s "${peer[@]}" "https://$IP:2380/version"
check "peer TLS without a client certificate is refused" "curl: (" curl -sS --http1.1 --cacert "$p/ca.crt" "https://$IP:2380/members"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
grep -q '"msg":"closed etcd server"' "$W/etcd.log" || fail "etcd did not close on SIGTERM (exit $rc)"
echo "   ok  SIGTERM: closed etcd server (exit $rc: etcd re-raises the signal, as upstream's binary does)"
grep -o '"msg":"[^"]*deprecated[^"]*"' "$W/etcd.log" | sort -u | sed 's/^/   etcd warns: /' || true
echo "kubeadm-etcd: PASS ($VERSION)"
