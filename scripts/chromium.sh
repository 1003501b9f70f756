#!/usr/bin/env bash
# Debian's chromium for the console's browser tests (test/e2e).
#
#   eval "$(scripts/chromium.sh)"   # prints: export KILN_CHROMIUM=/usr/bin/chromium
#
# Uses a chromium already on PATH (chromium, chromium-browser or
# google-chrome); otherwise installs Debian's chromium package with apt-get
# (needs root and a package mirror). Fails, saying why, when neither works:
# the browser tests then skip with that message. Only the export line goes
# to stdout.
set -euo pipefail

exec 3>&1 1>&2

find_chromium() {
	local name
	for name in chromium chromium-browser google-chrome; do
		if command -v "$name" >/dev/null 2>&1; then
			command -v "$name"
			return 0
		fi
	done
	return 1
}

if ! path=$(find_chromium); then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "chromium.sh: no chromium, and this machine cannot install one (needs root and apt-get)"
		exit 1
	fi
	echo "chromium.sh: installing Debian's chromium"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }; then
		echo "chromium.sh: apt-get could not install chromium"
		exit 1
	fi
	path=$(find_chromium) || { echo "chromium.sh: chromium installed but not found on PATH"; exit 1; }
fi
# The Debian wrapper's --version needs a display; headless asks the binary.
if ! version=$("$path" --headless --no-sandbox --version 2>/dev/null | tail -1); then
	echo "chromium.sh: $path does not run"
	exit 1
fi
echo "chromium.sh: $version at $path"
echo "export KILN_CHROMIUM=$path" >&3
