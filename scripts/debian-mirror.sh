#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses for SUITE (a deb822 .sources stanza or a
# one-line "deb URI SUITE" entry), so a machine that reaches only its own mirror builds the same
# way; KILN_DEBIAN_MIRROR overrides it, and deb.debian.org is the answer when apt names none.
# The node image's base (scripts/node-image.sh) and the conformance images' busybox source
# (scripts/conformance-images.sh) come from it.
#
#   scripts/debian-mirror.sh SUITE
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 SUITE" >&2; exit 2; }
suite=$1
if [ -n "${KILN_DEBIAN_MIRROR:-}" ]; then
	echo "$KILN_DEBIAN_MIRROR"
	exit 0
fi
m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v suite="$suite" '
	/^[ \t]*$/ { if (uris != "" && ok) { print uris; exit } uris = ""; ok = 0; next }
	/^URIs:/ { uris = $2 }
	/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
	END { if (uris != "" && ok) print uris }' | head -1)
[ -n "$m" ] || m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
	awk -v suite="$suite" '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i == suite) { print ($2 ~ /^\[/ ? $3 : $2); exit } }')
echo "${m:-http://deb.debian.org/debian}"
