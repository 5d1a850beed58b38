#!/usr/bin/env bash
# Runs a pinned local-kms (an AWS KMS emulator) on loopback, for
# durashuffle's client-side encryption tests with encryption_kms_key_id.
#
#   local-kms.sh install    build the pinned local-kms into the cache (once); print its path
#   local-kms.sh start      start it on a free port with a fresh data dir; print endpoint=URL
#   local-kms.sh stop       stop it and delete its data dir
#   local-kms.sh endpoint   print the endpoint of the running server
#
# Environment:
#   DURASHUFFLE_CACHE              cache root (default $HOME/.cache/durashuffle)
#   DURASHUFFLE_LOCALKMS_STATE     state dir of one server (default $DURASHUFFLE_CACHE/localkms-state)
#   DURASHUFFLE_LOCALKMS_WATCH_PID stop the server when this process exits
#
# The server takes any credentials, in region eu-west-2 of account
# 111122223333 (local-kms's defaults); keys are made with CreateKey.
set -euo pipefail

SCRIPT=local-kms.sh LABEL=local-kms COMM=local-kms
MODULE=github.com/nsmithuk/local-kms VERSION=v0.0.0-20260228092603-2a5e92d09ab6
BUILD_NOTE="takes a minute" DATA_PREFIX=durashuffle-localkms START_TIMEOUT=30
STATE=${DURASHUFFLE_LOCALKMS_STATE:-${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}/localkms-state}
WATCHED=${DURASHUFFLE_LOCALKMS_WATCH_PID:-}
SCHEME=http
# shellcheck source=server-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server-lib.sh"

# healthy ENDPOINT: the server answers a KMS request (ListKeys).
healthy() {
	command -v curl >/dev/null || die "curl is required for the health check of local-kms"
	curl -fsS -o /dev/null --max-time 2 -X POST -H 'X-Amz-Target: TrentService.ListKeys' \
		-H 'Content-Type: application/x-amz-json-1.1' -d '{}' "$1/" 2>/dev/null
}

log_tail() { tail -n 30 "$1" >&2 2>/dev/null || true; }

# launch BIN PORT DATA LOG starts local-kms in the background (pid); no
# seed file, so it starts with no keys.
launch() {
	PORT=$2 KMS_DATA_PATH=$3 KMS_SEED_PATH=$3/no-seed.yaml "$1" </dev/null >"$4" 2>&1 &
	pid=$!
}

cmd_start() { start_server; }

dispatch "${1:-}"
