#!/usr/bin/env bash
# The main job, end to end: start kilnd --dev (HTTPS from a CA it makes in
# its data dir; it seeds the system images of bin/images into its registry),
# log in trusting that CA, create a Kubernetes cluster of one control plane
# and two workers, show its nodes with kubectl, deploy the demo application
# (2 replicas and a Service), show a request answered by a pod on each
# worker, kubectl logs and exec, scale, delete, stop kilnd.
#
# With Docker and the node images (make node-image) the nodes are containers
# running real containers (the docker provider); otherwise the cluster is of
# hollow nodes on this machine (the local provider: a real control plane, no
# container runs, so no application is deployed). PROVIDER=local|docker|sim
# chooses.
set -euo pipefail
cd "$(dirname "$0")/.."

PROVIDER=${PROVIDER:-}
DATA=$(mktemp -d "${TMPDIR:-/tmp}/kiln-demo.XXXXXX")
PORT=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 7080)}
SERVER=https://127.0.0.1:$PORT
# The demo's own CLI config, so it does not touch yours.
export XDG_CONFIG_HOME=$DATA/config
export PATH=$PWD/bin:$PATH

AGENT_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 7443)
bin/kilnd --dev --data-dir "$DATA" --listen "127.0.0.1:$PORT" --agent-listen "127.0.0.1:$AGENT_PORT" 2>"$DATA/kilnd.log" &
KILND=$!
cleanup() {
	kill -TERM "$KILND" 2>/dev/null && wait "$KILND" 2>/dev/null
	# Machines outlive kilnd by design; the demo's are stopped with it: local
	# machines' agents, and docker machines' containers, networks and volumes
	# (those of this kilnd's instance: its data dir's).
	instance=k$(printf %s "$DATA" | sha256sum | cut -c1-8)
	ids=$(docker ps -aq --filter "label=kiln.dev/instance=$instance" 2>/dev/null || true)
	[ -z "$ids" ] || docker rm -f -v $ids >/dev/null 2>&1 || true
	for kind in network volume; do
		ids=$(docker "$kind" ls -q --filter "label=kiln.dev/instance=$instance" 2>/dev/null || true)
		[ -z "$ids" ] || docker "$kind" rm $ids >/dev/null 2>&1 || true
	done
	for pid in $(python3 -c 'import glob,json,sys; [print(json.load(open(f))["pid"]) for f in glob.glob(sys.argv[1]+"/machines/*/*/*/agent.pid")]' "$DATA" 2>/dev/null); do
		kill -TERM -- "-$pid" 2>/dev/null
	done
	rm -rf "$DATA"
}
trap cleanup EXIT

# kilnd writes its CA before it listens; until then curl fails and we wait.
for _ in $(seq 1 100); do
	curl -fsS --cacert "$DATA/tls/ca.crt" "$SERVER/readyz" >/dev/null 2>&1 && break
	kill -0 "$KILND" 2>/dev/null || { cat "$DATA/kilnd.log" >&2; exit 1; }
	sleep 0.1
done

if [ -z "$PROVIDER" ]; then
	# kilnd --dev registers the docker provider when Docker answers and a node image is there.
	for _ in $(seq 1 100); do
		grep -q 'docker provider registered' "$DATA/kilnd.log" && { PROVIDER=docker; break; }
		grep -q 'docker provider not registered' "$DATA/kilnd.log" && { PROVIDER=local; break; }
		sleep 0.1
	done
	PROVIDER=${PROVIDER:-local}
	if [ "$PROVIDER" = local ]; then
		echo "demo: no Docker engine or no node image (make node-image): the cluster is of HOLLOW nodes, no container runs" >&2
		grep -o 'docker provider not registered.*' "$DATA/kilnd.log" >&2 || true
	fi
fi

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
kubectl() { kiln-kube kubectl --kubeconfig "$DATA/demo.kubeconfig" "$@"; }
step kiln login --server "$SERVER" --token-file "$DATA/admin.token" --ca-file "$DATA/tls/ca.crt"
step kiln cluster create demo --provider "$PROVIDER" --dedicated-control-plane --workers 2 --wait
step kiln cluster list
echo "The web console shows the same at $SERVER/ (sign in with the token in $DATA/admin.token)."
step curl -sS --cacert "$DATA/tls/ca.crt" -o /dev/null -w "GET $SERVER/login: %{http_code} %{content_type}\n" "$SERVER/login"
step kiln node list demo
if [ "$PROVIDER" != sim ]; then
	step kiln kubeconfig demo --output-file "$DATA/demo.kubeconfig"
	step kubectl get nodes -o wide
fi
if [ "$PROVIDER" = docker ]; then
	# The demo application, pulled from kilnd's registry (seeded from bin/images): 2 replicas, one
	# per worker, and a NodePort Service (images/demo/demo.yaml).
	step kubectl apply -f images/demo/demo.yaml
	step kubectl rollout status deployment/demo --timeout 2m
	step kubectl get pods -o wide
	node_ip=$(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}')
	printf '\n\033[1m$ curl http://%s:30080/   (the Service by NodePort, until a pod on each worker answered)\033[0m\n' "$node_ip"
	# kube-proxy on the node programs the Service's NodePort, and the other worker's pod, a moment after
	# the rollout (until then the port refuses connections): ask for up to 20 s, a request every 0.2 s,
	# printing only what changes.
	nodes= last=
	for _ in $(seq 1 100); do
		if answer=$(curl -sS --max-time 5 "http://$node_ip:30080/" 2>/dev/null); then
			[ "$answer" = "$last" ] || echo "$answer"
			last=$answer
			nodes=$(printf '%s\n%s\n' "$nodes" "${answer##* on }" | grep . | sort -u)
			[ "$(printf '%s\n' "$nodes" | wc -l)" -ge 2 ] && break
		fi
		sleep 0.2
	done
	[ "$(printf '%s\n' "$nodes" | wc -l)" -ge 2 ] || { echo "demo: within 20 s, only the pods of $nodes answered on $node_ip:30080" >&2; exit 1; }
	step kubectl logs deployment/demo --tail 3
	step kubectl exec deployment/demo -- /demo whoami
fi
step kiln cluster scale demo --pool default --size 3 --wait
if [ "$PROVIDER" != sim ]; then
	step kubectl get nodes
fi
step kiln cluster delete demo --yes --wait
echo
echo "demo finished: kilnd log was $DATA/kilnd.log (removed on exit)"
