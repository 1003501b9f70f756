#!/usr/bin/env bash
# A "bare host" for the edge flow (issue 22): a Docker container that behaves like a machine someone
# prepared for Kiln, made from the node image's Debian base without Kiln (no kiln-agent, no kubelet,
# no containerd running; runc and the CNI plugins are installed packages and containerd 2 is in
# /usr/local/bin, as on a prepared host), with exactly the grants of a docker provider node (internal/nodeimage,
# docs/node-image.md), on a Docker network of the edge hosts' own. Debian's CNI plugins, which the base
# has for Kiln's node image, are hidden (an empty /usr/lib/cni): a host someone prepared need not have
# them, and Kiln's installs bring their own. Its first process runs
# kiln-host-init (images/node/files/usr/local/bin, mounted read-only), which makes the container
# behave like a machine (mount propagation, /dev/kmsg, network sysctls, its own cgroup subtree for
# a kubelet, Docker's DNS reachable from pods), then waits.
#
#   scripts/bare-host.sh run NAME   starts host NAME (building the base image when missing) and
#                                   prints the container's name
#   scripts/bare-host.sh rm NAME    removes it (and the network when no bare host is left on it)
#
# KILN_EDGE_NETWORK names the Docker network (default kiln-edge-hosts), made when missing: a test
# uses one of its own, so that its hosts and kilnd's agent listener on that network's gateway are its
# alone (test/e2e/barehost_test.go).
# docs/edge.md says how to run Kiln's installer inside one by hand.
set -euo pipefail

usage() { echo "usage: $0 run NAME | rm NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 name=$2
[[ $name =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || { echo "bare-host: $name: use lower-case letters, digits and '-'" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
network=${KILN_EDGE_NETWORK:-kiln-edge-hosts}
[[ $network =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]] || { echo "bare-host: KILN_EDGE_NETWORK=$network is not a Docker network name" >&2; exit 2; }
label=kiln.dev/bare-host
container=kiln-bare-$name

case $cmd in
run)
	base=$("$repo/scripts/node-image.sh" --base)
	if ! docker network inspect "$network" >/dev/null 2>&1; then
		docker network create --label "$label=1" "$network" >/dev/null
	fi
	docker run -d --name "$container" --hostname "$name" --network "$network" --label "$label=1" \
		--cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE \
		--security-opt "seccomp=$repo/internal/nodeimage/seccomp.json" --security-opt apparmor=unconfined \
		-v /sys/fs/cgroup:/sys/fs/cgroup:rw -v /var --tmpfs /run --tmpfs /usr/lib/cni:ro \
		-v "$repo/images/node/files/usr/local/bin/kiln-host-init:/usr/local/sbin/kiln-host-init:ro" \
		--entrypoint /bin/sh "$base" \
		-c '/usr/local/sbin/kiln-host-init; touch /run/kiln-host-ready; trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done' >/dev/null
	# The host is ready once kiln-host-init is done: it rewrites /etc/resolv.conf, and a change made
	# in the host before then (a test breaking it on purpose) could be lost.
	i=0
	until docker exec "$container" test -e /run/kiln-host-ready 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 300 ]; then
			echo "bare-host: $container did not finish kiln-host-init within 60 s; its log:" >&2
			docker logs --tail 20 "$container" >&2
			exit 1
		fi
		sleep 0.2
	done
	echo "$container"
	;;
rm)
	docker rm -f -v "$container" >/dev/null
	if [ -z "$(docker ps -aq --filter "label=$label=1" --filter "network=$network")" ]; then
		docker network rm "$network" >/dev/null 2>&1 || true
	fi
	;;
*) usage ;;
esac
