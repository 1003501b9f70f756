#!/usr/bin/env bash
# Debian's promtool (package prometheus) for the alert rules' tests
# (internal/daemon TestAlertRules: promtool check rules and promtool test
# rules of docs/alerts.yaml).
#
#   eval "$(scripts/promtool.sh)"   # prints: export KILN_PROMTOOL=/usr/bin/promtool
#
# Uses a promtool already on PATH; otherwise installs Debian's prometheus
# package with apt-get (needs root and a package mirror). Fails, saying why,
# when neither works. Only the export line goes to stdout.
set -euo pipefail

exec 3>&1 1>&2

if ! path=$(command -v promtool); then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "promtool.sh: no promtool, and this machine cannot install one (needs root and apt-get)"
		exit 1
	fi
	echo "promtool.sh: installing Debian's prometheus (for promtool)"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; then
		echo "promtool.sh: apt-get could not install prometheus"
		exit 1
	fi
	path=$(command -v promtool) || { echo "promtool.sh: prometheus installed but promtool not found on PATH"; exit 1; }
fi
if ! version=$("$path" --version 2>&1 | head -1); then
	echo "promtool.sh: $path does not run"
	exit 1
fi
echo "promtool.sh: $version at $path"
echo "export KILN_PROMTOOL=$path" >&3
