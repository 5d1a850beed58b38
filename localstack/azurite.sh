#!/usr/bin/env bash
# Runs a pinned Azurite (the Azure Storage emulator) blob service on
# loopback, for the tests of durashuffle's Azure Blob Storage store.
#
#   azurite.sh install    install the pinned Azurite into the cache with npm (once); print the path of azurite-blob
#   azurite.sh start      start its blob service on a free port with a fresh data dir; print endpoint=URL
#   azurite.sh stop       stop it and delete its data dir
#   azurite.sh endpoint   print the endpoint of the running server
#
# The endpoint serves Azurite's well-known development account,
# devstoreaccount1, at URL/devstoreaccount1.
#
# Environment:
#   DURASHUFFLE_CACHE              cache root (default $HOME/.cache/durashuffle)
#   DURASHUFFLE_AZURITE_STATE      state dir of one server (default $DURASHUFFLE_CACHE/azurite-state);
#                                  concurrent servers need one each
#   DURASHUFFLE_AZURITE_WATCH_PID  stop the server when this process exits (test binaries
#                                  set it so a killed test run leaves nothing behind)
set -euo pipefail

readonly AZURITE_VERSION=3.37.0
readonly START_TIMEOUT=60

# Azurite runs under node: the server process's name is node's.
SCRIPT=azurite.sh LABEL=Azurite COMM=node MODULE=azurite VERSION=$AZURITE_VERSION
BUILD_NOTE="" DATA_PREFIX=durashuffle-azurite
STATE=${DURASHUFFLE_AZURITE_STATE:-${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}/azurite-state}
WATCHED=${DURASHUFFLE_AZURITE_WATCH_PID:-}
SCHEME=http
# shellcheck source=server-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server-lib.sh"

# cmd_install replaces server-lib.sh's (a go install): Azurite is an npm
# package, installed under a prefix of its own in the cache.
cmd_install() {
	local dir=$CACHE/azurite-$AZURITE_VERSION
	local bin=$dir/node_modules/.bin/azurite-blob
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	command -v npm >/dev/null || die "npm (and node) are required to install Azurite $AZURITE_VERSION"
	mkdir -p "$CACHE"
	# Install into a private prefix and rename: concurrent installs (parallel
	# test binaries) each produce the same tree, and none sees half of one.
	local tmp
	tmp=$(mktemp -d "$CACHE/.azurite-install.XXXXXX")
	echo "$SCRIPT: installing azurite@$AZURITE_VERSION with npm (first run only)" >&2
	if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >&2; then
		rm -rf "$tmp"
		die "npm install azurite@$AZURITE_VERSION failed"
	fi
	if ! mv -T "$tmp" "$dir" 2>/dev/null; then
		# Another install won the rename.
		rm -rf "$tmp"
	fi
	[[ -x $bin ]] || die "azurite@$AZURITE_VERSION installed no $bin"
	echo "$bin"
}

# healthy ENDPOINT: the blob service answers HTTP (any status: an
# unauthenticated request is refused, but by Azurite).
healthy() {
	local code
	code=$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$1/devstoreaccount1?comp=list" 2>/dev/null) || true
	[[ -n $code && $code != 000 ]]
}

# log_tail LOG prints the end of Azurite's log and error output.
log_tail() {
	tail -n 30 "$1" 2>/dev/null >&2 || true
}

# launch BIN PORT DATA LOG starts Azurite's blob service in the background
# (pid), keeping its data in DATA. --skipApiVersionCheck: the Azure SDK
# asks for a newer service version than Azurite lists; Azurite refuses
# such requests unless told not to check. --disableTelemetry: the tests
# stay on loopback.
launch() {
	"$1" --blobHost 127.0.0.1 --blobPort "$2" --location "$3" --silent \
		--skipApiVersionCheck --disableTelemetry </dev/null >"$4" 2>&1 &
	pid=$!
}

cmd_start() {
	command -v curl >/dev/null || die "curl is required for the health check of Azurite"
	start_server
}

dispatch "${1:-}"
