#!/usr/bin/env bash
# Runs a pinned versitygw (Versity's S3 gateway, POSIX backend) on loopback:
# durashuffle's second real S3 implementation, next to MinIO, for the tests
# and for trying durashuffle against a gateway that keeps objects as files.
#
#   versitygw.sh install    build the pinned versitygw into the cache (once); print its path
#   versitygw.sh start      start it on a free port with a fresh root dir; print endpoint=URL
#   versitygw.sh stop       stop it and delete its root dir
#   versitygw.sh endpoint   print the endpoint of the running server
#
# Environment:
#   DURASHUFFLE_CACHE                cache root (default $HOME/.cache/durashuffle)
#   DURASHUFFLE_VERSITYGW_STATE      state dir of one server (default
#                                    $DURASHUFFLE_CACHE/versitygw-state); concurrent servers need one each
#   DURASHUFFLE_VERSITYGW_WATCH_PID  stop the server when this process exits (test binaries
#                                    set it so a killed test run leaves nothing behind)
#   ROOT_ACCESS_KEY, ROOT_SECRET_KEY credentials of the gateway's single account (test
#                                    defaults); use them as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
#
# Each bucket is a directory under the root dir and each object a file; the
# gateway keeps ETags, checksums and multipart state in extended attributes
# and hidden directories, so the root dir must be on a filesystem with user
# xattrs (ext4, xfs, btrfs and tmpfs have them).
set -euo pipefail

readonly VGW_MODULE=github.com/versity/versitygw/cmd/versitygw
readonly VGW_VERSION=v1.8.0
readonly START_TIMEOUT=30

SCRIPT=versitygw.sh LABEL=versitygw COMM=versitygw MODULE=$VGW_MODULE VERSION=$VGW_VERSION
BUILD_NOTE="takes a minute or two" DATA_PREFIX=durashuffle-versitygw
STATE=${DURASHUFFLE_VERSITYGW_STATE:-${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}/versitygw-state}
WATCHED=${DURASHUFFLE_VERSITYGW_WATCH_PID:-}
# shellcheck source=server-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server-lib.sh"

# healthy ENDPOINT: the gateway answers S3 requests. It has no health
# route; an anonymous GET / gets an S3 error document (403 AccessDenied)
# from a server that names itself VERSITYGW, which is enough to know the
# listener is up and the backend initialized (the root dir is opened
# before the listener starts).
healthy() {
	if command -v curl >/dev/null; then
		curl -sS -o /dev/null -D - --max-time 2 "$1/" 2>/dev/null | grep -qi '^server: *versitygw'
	else
		local rest=${1#http://}
		local hostport=${rest%%/*} line
		exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || return 1
		printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' "$hostport" >&3
		local ok=1
		while IFS= read -r line <&3; do
			line=${line%$'\r'}
			[[ -z $line ]] && break
			if [[ ${line,,} == server:*versitygw* ]]; then ok=0; fi
		done
		exec 3>&-
		return $ok
	fi
}

# log_tail LOG prints the end of the gateway's log without any line that
# could carry the secret.
log_tail() {
	tail -n 30 "$1" 2>/dev/null | grep -viF -e "$ROOT_SECRET_KEY" >&2 || true
}

# launch BIN PORT DATA LOG starts the gateway in the background (pid).
launch() {
	"$1" --port "127.0.0.1:$2" --quiet posix "$3" </dev/null >"$4" 2>&1 &
	pid=$!
}

cmd_start() {
	export ROOT_ACCESS_KEY=${ROOT_ACCESS_KEY:-durashuffle}
	export ROOT_SECRET_KEY=${ROOT_SECRET_KEY:-durashuffle-test-secret}
	# Credentials only through the environment (never on the command
	# line, where ps shows them to every user of the machine).
	unset ROOT_ACCESS_KEY_ID ROOT_SECRET_ACCESS_KEY

	start_server
}

dispatch "${1:-}"
