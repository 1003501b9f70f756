#!/usr/bin/env bash
# A private PostgreSQL for tests.
#
#   eval "$(scripts/postgres.sh start [DIR])"   # prints: export KILN_TEST_POSTGRES=postgres://...
#   scripts/postgres.sh stop [DIR]
#   scripts/postgres.sh url [DIR]               # the export line of a running server
#
# start installs PostgreSQL from Debian's packages when no initdb can be found,
# initialises a cluster in DIR (default /tmp/kiln-postgres-UID-<hash of the
# repository path>),
# and runs it on 127.0.0.1 (port 55432, or the next free one) with trust
# authentication on loopback. Durability is off (fsync, synchronous_commit,
# full_page_writes): it is a throwaway test server, and tests create a
# database each. Run as root, the server runs as the `postgres` system user,
# created if missing, since PostgreSQL refuses to run as root. Starting a
# running server only prints its line. Only that line goes to stdout.
set -euo pipefail

exec 3>&1 1>&2

repo=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
# Outside the clone by default: the server runs as the postgres user, which
# may not be able to traverse the clone's parent directories (say /root).
dir=${2:-${TMPDIR:-/tmp}/kiln-postgres-$(id -u)-$(printf '%s' "$repo" | cksum | cut -d' ' -f1)}
data=$dir/data

usage() {
	echo "usage: $0 start|stop|url [DIR]"
	exit 2
}

log() { echo "postgres.sh: $*"; }

# find_bin sets bin to the directory holding initdb, pg_ctl and pg_isready.
find_bin() {
	bin=
	local c
	if c=$(command -v initdb 2>/dev/null); then
		c=$(readlink -f "$c")
		bin=$(dirname "$c")
	else
		for c in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
			if [[ -x $c/initdb ]]; then
				bin=$c
				break
			fi
		done
	fi
	[[ -n $bin && -x $bin/pg_ctl ]]
}

install_postgres() {
	if find_bin; then
		return
	fi
	log "no initdb found: installing PostgreSQL from Debian packages"
	if [[ $(id -u) -ne 0 ]]; then
		log "need root to apt-get install postgresql"
		exit 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
	find_bin || {
		log "postgresql installed but initdb still not found"
		exit 1
	}
}

# as_owner runs a command as the user that owns the server.
as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

ensure_user() {
	[[ $(id -u) -eq 0 ]] || return 0
	if ! id postgres >/dev/null 2>&1; then
		log "creating system user postgres"
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
	fi
}

running() {
	[[ -f $data/postmaster.pid ]] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

port_free() {
	! (exec 9<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

print_url() {
	local port
	port=$(cat "$dir/port")
	echo "export KILN_TEST_POSTGRES=postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >&3
}

start() {
	install_postgres
	ensure_user
	mkdir -p "$dir"
	if [[ $(id -u) -eq 0 ]]; then
		chown postgres:postgres "$dir"
		chmod 700 "$dir"
	fi
	if running && [[ -f $dir/port ]]; then
		log "already running in $dir"
		print_url
		return
	fi
	if [[ ! -f $data/PG_VERSION ]]; then
		log "initialising a cluster in $data with $bin/initdb"
		as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
			cat "$dir/initdb.log"
			exit 1
		}
	fi
	local port=${KILN_POSTGRES_PORT:-55432}
	local tries=0
	until port_free "$port"; do
		port=$((port + 1))
		tries=$((tries + 1))
		if ((tries > 100)); then
			log "no free port from ${KILN_POSTGRES_PORT:-55432}"
			exit 1
		fi
	done
	log "starting on 127.0.0.1:$port"
	# The server must not inherit this script's stdout (fd 3) or its stderr:
	# a caller reading them, as in $(postgres.sh start), would wait for the
	# server to exit.
	as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start \
		-o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
		3>&- </dev/null >"$dir/pg_ctl.log" 2>&1 || {
		cat "$dir/pg_ctl.log"
		tail -n 30 "$dir/server.log"
		exit 1
	}
	local i
	for ((i = 0; i < 60; i++)); do
		if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
			echo "$port" >"$dir/port"
			print_url
			return
		fi
		sleep 1
	done
	log "server did not accept connections; see $dir/server.log"
	exit 1
}

stop() {
	if ! find_bin || [[ ! -d $data ]]; then
		log "nothing to stop in $dir"
		return
	fi
	if running; then
		as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop
	else
		log "not running in $dir"
	fi
}

case $cmd in
start) start ;;
stop) stop ;;
url)
	find_bin && running && [[ -f $dir/port ]] || {
		log "not running in $dir"
		exit 1
	}
	print_url
	;;
*) usage ;;
esac
