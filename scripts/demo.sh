#!/usr/bin/env bash
# The main job, end to end: start kilnd --dev, log in, create a cluster and
# watch its steps, show it, delete it, stop kilnd.
#
# Until the local provider lands (issue 3) the cluster runs on the sim
# provider, whose machines are simulated; everything else (API, store,
# workers, plans, CLI) is the real thing.
set -euo pipefail
cd "$(dirname "$0")/.."

PROVIDER=${PROVIDER:-sim}
DATA=$(mktemp -d "${TMPDIR:-/tmp}/kiln-demo.XXXXXX")
PORT=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 7080)}
SERVER=http://127.0.0.1:$PORT
# The demo's own CLI config, so it does not touch yours.
export XDG_CONFIG_HOME=$DATA/config
export PATH=$PWD/bin:$PATH

bin/kilnd --dev --data-dir "$DATA" --listen "127.0.0.1:$PORT" 2>"$DATA/kilnd.log" &
KILND=$!
cleanup() { kill -TERM "$KILND" 2>/dev/null && wait "$KILND" 2>/dev/null; rm -rf "$DATA"; }
trap cleanup EXIT

for _ in $(seq 1 100); do
	curl -fsS "$SERVER/readyz" >/dev/null 2>&1 && break
	kill -0 "$KILND" 2>/dev/null || { cat "$DATA/kilnd.log" >&2; exit 1; }
	sleep 0.1
done

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step kiln login --server "$SERVER" --token-file "$DATA/admin.token"
step kiln cluster create demo --provider "$PROVIDER" --workers 2 --wait
step kiln cluster list
step kiln node list demo
step kiln cluster scale demo --pool default --size 3 --wait
step kiln cluster describe demo
step kiln cluster delete demo --yes --wait
echo
echo "demo finished: kilnd log was $DATA/kilnd.log (removed on exit)"
