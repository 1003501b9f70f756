#!/usr/bin/env bash
# The main job, end to end: start kilnd --dev (HTTPS from a CA it makes in
# its data dir), log in trusting that CA, create a Kubernetes cluster of
# hollow nodes on this machine (one control plane, two workers: each a
# kiln-agent process running kiln-kube components on its own 127.0.0.N; real
# control plane, no container runs), watch its steps, show
# its nodes with kubectl, scale it, delete it, stop kilnd. PROVIDER=sim runs
# the same flow on simulated machines.
set -euo pipefail
cd "$(dirname "$0")/.."

PROVIDER=${PROVIDER:-local}
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
	# Machines outlive kilnd by design; the demo's are stopped with it.
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

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step kiln login --server "$SERVER" --token-file "$DATA/admin.token" --ca-file "$DATA/tls/ca.crt"
step kiln cluster create demo --provider "$PROVIDER" --dedicated-control-plane --workers 2 --wait
step kiln cluster list
echo "The web console shows the same at $SERVER/ (sign in with the token in $DATA/admin.token)."
step curl -sS --cacert "$DATA/tls/ca.crt" -o /dev/null -w "GET $SERVER/login: %{http_code} %{content_type}\n" "$SERVER/login"
step kiln node list demo
if [ "$PROVIDER" != sim ]; then
	step kiln kubeconfig demo -f "$DATA/demo.kubeconfig"
	step kiln-kube kubectl --kubeconfig "$DATA/demo.kubeconfig" get nodes -o wide
fi
step kiln cluster scale demo --pool default --size 3 --wait
if [ "$PROVIDER" != sim ]; then
	step kiln-kube kubectl --kubeconfig "$DATA/demo.kubeconfig" get nodes
fi
step kiln cluster delete demo --yes --wait
echo
echo "demo finished: kilnd log was $DATA/kilnd.log (removed on exit)"
