#!/usr/bin/env bash
# Smoke test for kiln-kube: real Kubernetes components working together on 127.0.0.1.
#
#   kube/smoke/smoke.sh [path/to/kiln-kube [VERSION]]      (make kube-smoke: each version)
#
# Starts, in a temporary directory with free ports: a throwaway CA and certificates (openssl),
# embedded etcd (client and peer TLS from the CA), kube-apiserver (client-certificate auth,
# Node,RBAC), controller-manager, scheduler and two hollow kubelets. Then checks that both nodes
# are Ready and a Deployment of 5 replicas becomes Available, prints timings and each
# component's resident memory, stops everything and removes the directory (KEEP=1 keeps it).
# kiln-kube version, kubectl, the apiserver and both kubelets must all report the same version,
# and VERSION when it is given.
# These flags are the reference for the `local` distribution; docs/kube.md lists them.
set -euo pipefail

KUBE=$(realpath "${1:-bin/kiln-kube}")
[ -x "$KUBE" ] || { echo "smoke: $KUBE is not an executable (run make kube)" >&2; exit 2; }
VERSION=$("$KUBE" version)
[ -z "${2:-}" ] || [ "$VERSION" = "$2" ] || { echo "smoke: $KUBE is $VERSION, not $2" >&2; exit 1; }
for tool in openssl ss; do
	command -v "$tool" >/dev/null || { echo "smoke: $tool is required" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-kube-smoke.XXXXXX")
PIDS=()
NAMES=()
START=$EPOCHREALTIME

elapsed() { awk -v s="$START" -v n="$EPOCHREALTIME" 'BEGIN { printf "%.2f", n - s }'; }
log() { printf '[%6ss] %s\n' "$(elapsed)" "$*"; }

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$rc" -ne 0 ]; then
		echo "smoke: FAILED (exit $rc); last log lines:" >&2
		for f in "$WORK"/logs/*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f")" >&2
			tail -n 15 "$f" >&2
		done
	fi
	# Stop in reverse start order, each before the next (clients before the apiserver before
	# etcd): SIGTERM, then SIGKILL after 20 s.
	local i t0
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -TERM "${PIDS[i]}" 2>/dev/null || continue
		t0=$SECONDS
		while kill -0 "${PIDS[i]}" 2>/dev/null && [ $((SECONDS - t0)) -lt 20 ]; do sleep 0.1; done
		if kill -0 "${PIDS[i]}" 2>/dev/null; then
			echo "smoke: ${NAMES[i]} (pid ${PIDS[i]}) still running 20 s after SIGTERM; killing" >&2
			kill -KILL "${PIDS[i]}" 2>/dev/null || true
			rc=1
		fi
		wait "${PIDS[i]}" 2>/dev/null || true
	done
	log "stopped"
	if [ "${KEEP:-}" = 1 ]; then echo "smoke: kept $WORK" >&2; else rm -rf "$WORK"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- free ports on 127.0.0.1 ----------------------------------------------------------------
USED_PORTS=" $(ss -Htan | awk '{n=split($4,a,":"); print a[n]}' | sort -u | tr '\n' ' ') "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		case "$USED_PORTS" in *" $p "*) continue ;; esac
		USED_PORTS="$USED_PORTS$p "
		echo "$p"
		return
	done
}
ETCD_CLIENT=$(free_port) ETCD_PEER=$(free_port) APISERVER=$(free_port)
CM_PORT=$(free_port) SCHED_PORT=$(free_port) KUBELET1=$(free_port) KUBELET2=$(free_port)
SERVER=https://127.0.0.1:$APISERVER

# ---- PKI: one CA, a certificate per identity ------------------------------------------------
PKI=$WORK/pki
mkdir -p "$PKI" "$WORK/logs"
openssl_q() { openssl "$@" 2>/dev/null; }
openssl_q ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key"
openssl_q req -x509 -new -key "$PKI/ca.key" -subj "/CN=kiln-smoke-ca" -days 1 -out "$PKI/ca.crt" \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

# cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
cert() {
	local name=$1 subj=$2 eku=$3 san=${4:-}
	openssl_q ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key"
	openssl_q req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		[ -z "$san" ] || echo "subjectAltName=$san"
	} >"$PKI/$name.ext"
	openssl_q x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 1 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt"
}
LOOPBACK_SAN="IP:127.0.0.1,DNS:localhost"
cert etcd-server "/CN=etcd-1" serverAuth,clientAuth "$LOOPBACK_SAN"
cert etcd-peer "/CN=etcd-1" serverAuth,clientAuth "$LOOPBACK_SAN"
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
cert apiserver "/CN=kube-apiserver" serverAuth \
	"$LOOPBACK_SAN,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=kiln-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert node-1 "/O=system:nodes/CN=system:node:hollow-1" clientAuth
cert node-2 "/O=system:nodes/CN=system:node:hollow-2" clientAuth
openssl_q genrsa -out "$PKI/sa.key" 2048
openssl_q rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"

# kubeconfig NAME: a kubeconfig for the identity whose certificate is pki/NAME.crt
kubeconfig() {
	cat >"$WORK/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster: {server: "$SERVER", certificate-authority: "$PKI/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$PKI/$1.crt", client-key: "$PKI/$1.key"}
contexts:
- name: smoke
  context: {cluster: smoke, user: $1}
current-context: smoke
EOF
}
for id in admin controller-manager scheduler node-1 node-2; do kubeconfig "$id"; done
export KUBECONFIG=$WORK/admin.kubeconfig
kubectl() { "$KUBE" kubectl "$@"; }
log "pki and kubeconfigs written to $WORK"

# start NAME ARGS...: runs kiln-kube ARGS in the background, output in logs/NAME.log
start() {
	local name=$1
	shift
	"$KUBE" "$@" >"$WORK/logs/$name.log" 2>&1 &
	PIDS+=($!)
	NAMES+=("$name")
}

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds
wait_for() {
	local what=$1 deadline=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		local i
		for i in "${!PIDS[@]}"; do
			kill -0 "${PIDS[i]}" 2>/dev/null || { echo "smoke: ${NAMES[i]} exited while waiting for $what" >&2; return 1; }
		done
		[ $SECONDS -lt "$deadline" ] || { echo "smoke: timed out waiting for $what" >&2; return 1; }
		sleep 0.2
	done
}

# ---- etcd -----------------------------------------------------------------------------------
start etcd etcd --name etcd-1 --data-dir "$WORK/etcd" \
	--listen-client-urls "https://127.0.0.1:$ETCD_CLIENT" --advertise-client-urls "https://127.0.0.1:$ETCD_CLIENT" \
	--listen-peer-urls "https://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "https://127.0.0.1:$ETCD_PEER" \
	--initial-cluster "etcd-1=https://127.0.0.1:$ETCD_PEER" --initial-cluster-state new \
	--cert-file "$PKI/etcd-server.crt" --key-file "$PKI/etcd-server.key" \
	--trusted-ca-file "$PKI/ca.crt" --client-cert-auth \
	--peer-cert-file "$PKI/etcd-peer.crt" --peer-key-file "$PKI/etcd-peer.key" \
	--peer-trusted-ca-file "$PKI/ca.crt" --peer-client-cert-auth

# ---- kube-apiserver -------------------------------------------------------------------------
start apiserver apiserver \
	--etcd-servers "https://127.0.0.1:$ETCD_CLIENT" --etcd-cafile "$PKI/ca.crt" \
	--etcd-certfile "$PKI/apiserver-etcd-client.crt" --etcd-keyfile "$PKI/apiserver-etcd-client.key" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER" \
	--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
	--client-ca-file "$PKI/ca.crt" \
	--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
	--service-cluster-ip-range 10.96.0.0/12 \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--allow-privileged --endpoint-reconciler-type none --cert-dir "$WORK/apiserver-certs"
wait_for "apiserver /readyz" 60 kubectl get --raw /readyz
T_API=$(elapsed)
log "apiserver ready"
# The version ldflags reached every part: kubectl, the apiserver (and below, the kubelets).
git_version() { grep -o '"gitVersion": *"[^"]*"' | head -n 1 | cut -d '"' -f 4; }
client=$(kubectl version --client -o json | git_version)
server=$(kubectl get --raw /version | git_version)
[ "$client" = "$VERSION" ] && [ "$server" = "$VERSION" ] ||
	{ echo "smoke: kubectl says $client, the apiserver $server; kiln-kube version says $VERSION" >&2; exit 1; }

# ---- controller-manager and scheduler -------------------------------------------------------
start controller-manager controller-manager \
	--kubeconfig "$WORK/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$WORK/controller-manager.kubeconfig" \
	--authorization-kubeconfig "$WORK/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
	--use-service-account-credentials \
	--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
	--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
	--service-cluster-ip-range 10.96.0.0/12 --cluster-cidr 10.244.0.0/16 --allocate-node-cidrs
start scheduler scheduler \
	--kubeconfig "$WORK/scheduler.kubeconfig" \
	--authentication-kubeconfig "$WORK/scheduler.kubeconfig" \
	--authorization-kubeconfig "$WORK/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false

# ---- two hollow kubelets --------------------------------------------------------------------
for n in 1 2; do
	port_var=KUBELET$n
	start "kubelet-$n" hollow-kubelet \
		--name "hollow-$n" --kubeconfig "$WORK/node-$n.kubeconfig" --root-dir "$WORK/kubelet-$n" \
		--node-ip 127.0.0.1 --kubelet-port "${!port_var}" --kubelet-read-only-port 0
done

# kubectl wait fails at once while no node exists, so first wait for both to register.
node_count() { [ "$(kubectl get nodes -o name | wc -l)" -eq 2 ]; }
wait_for "two nodes registered" 120 node_count
# Both Ready, read from a list: a GET of a node just registered can still answer "not found"
# for a moment (the kubelet's own log says so), and kubectl wait and label fail at once on it.
nodes_ready() {
	[ "$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}')" = "True True " ]
}
wait_for "both nodes Ready" 120 nodes_ready
# NodeRestriction refuses node-role.kubernetes.io/* labels from a kubelet; the admin sets them.
wait_for "the worker role label on both nodes" 30 kubectl label --overwrite node hollow-1 hollow-2 node-role.kubernetes.io/worker=
T_NODES=$(elapsed)
log "both nodes Ready"
kubelets=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{" "}{end}')
[ "$kubelets" = "$VERSION $VERSION " ] || { echo "smoke: kubelets report '$kubelets', want $VERSION" >&2; exit 1; }
kubectl get nodes -o wide

# ---- a Deployment of 5 replicas -------------------------------------------------------------
kubectl create deployment x --image=registry.k8s.io/pause:3.10 --replicas=5
available() { [ "$(kubectl get deployment x -o jsonpath='{.status.availableReplicas}')" = 5 ]; }
wait_for "5 available replicas of deployment x" 120 available
kubectl wait --for=condition=Ready pod -l app=x --timeout=60s >/dev/null
T_DEPLOY=$(elapsed)
log "deployment x: 5/5 available, pods Ready"
kubectl get pods -o wide

# ---- figures --------------------------------------------------------------------------------
echo
printf 'kiln-kube smoke: %s (kubectl, apiserver and kubelets agree)\n' "$VERSION"
printf '  apiserver ready     %6.2f s\n' "$T_API"
printf '  nodes Ready         %6.2f s\n' "$T_NODES"
printf '  deployment (5/5)    %6.2f s\n' "$T_DEPLOY"
echo "  resident memory (ps -o rss):"
for i in "${!PIDS[@]}"; do
	printf '    %-20s %6d MiB\n' "${NAMES[i]}" $(($(ps -o rss= -p "${PIDS[i]}") / 1024))
done
echo "smoke: PASS"
