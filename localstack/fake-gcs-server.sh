#!/usr/bin/env bash
# Runs a pinned fake-gcs-server (an in-memory Google Cloud Storage JSON API
# emulator) on loopback, for the tests of durashuffle's GCS store.
#
#   fake-gcs-server.sh install    build the pinned server into the cache (once); print its path
#   fake-gcs-server.sh start      start it on a free port; print endpoint=URL
#   fake-gcs-server.sh stop       stop it (its objects are in memory and go with it)
#   fake-gcs-server.sh endpoint   print the endpoint of the running server
#
# Environment:
#   DURASHUFFLE_CACHE               cache root (default $HOME/.cache/durashuffle)
#   DURASHUFFLE_FAKEGCS_STATE       state dir of one server (default $DURASHUFFLE_CACHE/fakegcs-state);
#                                   concurrent servers need one each
#   DURASHUFFLE_FAKEGCS_WATCH_PID   stop the server when this process exits (test binaries
#                                   set it so a killed test run leaves nothing behind)
#
# The server takes no credentials: clients connect without authentication.
set -euo pipefail

SCRIPT=fake-gcs-server.sh LABEL=fake-gcs-server COMM=fake-gcs-server
MODULE=github.com/fsouza/fake-gcs-server VERSION=v1.56.1
BUILD_NOTE="takes a minute or two" DATA_PREFIX=durashuffle-fakegcs START_TIMEOUT=30
STATE=${DURASHUFFLE_FAKEGCS_STATE:-${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}/fakegcs-state}
WATCHED=${DURASHUFFLE_FAKEGCS_WATCH_PID:-}
SCHEME=http
# shellcheck source=server-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server-lib.sh"

# healthy ENDPOINT: the server's own health route answers 200.
healthy() {
	if command -v curl >/dev/null; then
		curl -fsS -o /dev/null --max-time 2 "$1/_internal/healthcheck" 2>/dev/null
	else
		local rest=${1#http://} status
		local hostport=${rest%%/*}
		exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || return 1
		printf 'GET /_internal/healthcheck HTTP/1.0\r\nHost: %s\r\n\r\n' "$hostport" >&3
		read -r _ status _ <&3 || status=
		exec 3>&-
		[[ $status == 200 ]]
	fi
}

log_tail() { tail -n 30 "$1" >&2 2>/dev/null || true; }

# launch BIN PORT DATA LOG starts the server in the background (pid). Its
# objects live in memory (DATA stays empty). The public host and external
# URL are the loopback address, so that the download and upload URLs it
# hands out lead back to it.
launch() {
	"$1" -scheme http -host 127.0.0.1 -port "$2" -backend memory \
		-public-host "127.0.0.1:$2" -external-url "http://127.0.0.1:$2" \
		-log-level warn </dev/null >"$4" 2>&1 &
	pid=$!
}

cmd_start() { start_server; }

dispatch "${1:-}"
