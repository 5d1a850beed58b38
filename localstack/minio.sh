#!/usr/bin/env bash
# Runs a pinned MinIO server on loopback, for durashuffle's tests and for
# trying durashuffle against a real S3 implementation without Docker.
#
#   minio.sh install    build the pinned MinIO into the cache (once); print its path
#   minio.sh start      start it on a free port with a fresh data dir; print endpoint=URL
#   minio.sh stop       stop it and delete its data dir
#   minio.sh endpoint   print the endpoint of the running server
#
# Environment:
#   DURASHUFFLE_CACHE            cache root (default $HOME/.cache/durashuffle)
#   DURASHUFFLE_MINIO_STATE      state dir of one server (default $DURASHUFFLE_CACHE/minio-state);
#                                concurrent servers need one each
#   DURASHUFFLE_MINIO_WATCH_PID  stop the server when this process exits (test binaries
#                                set it so a killed test run leaves nothing behind)
#   DURASHUFFLE_MINIO_CERTS_DIR  serve HTTPS with the certificate in this dir (MinIO's
#                                --certs-dir: public.crt, private.key, and CAs/ca.crt, the
#                                CA that signed it, which the health check trusts);
#                                the endpoint is then https://
#   MINIO_ROOT_USER, MINIO_ROOT_PASSWORD
#                                credentials (test defaults); use them as
#                                AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
#   MINIO_KMS_SECRET_KEY         NAME:BASE64 of 32 bytes: MinIO's built-in KMS key, which
#                                SSE-S3 (sse AES256) and SSE-KMS (sse aws:kms with
#                                sse_kms_key_id NAME) need. Default: a fixed TEST-ONLY key
#                                named durashuffle-key; never use it for real data.
set -euo pipefail

readonly MINIO_MODULE=github.com/minio/minio
readonly MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
readonly START_TIMEOUT=60
# Test-only KMS key (32 fixed bytes), so the tests can exercise SSE-S3 and
# SSE-KMS against a throwaway server. Not a secret worth keeping.
readonly TEST_KMS_KEY=durashuffle-key:ZHVyYXNodWZmbGUtdGVzdC1rbXMta2V5LTMyYnl0ZXM=

SCRIPT=minio.sh LABEL=MinIO COMM=minio MODULE=$MINIO_MODULE VERSION=$MINIO_VERSION
BUILD_NOTE="takes minutes" DATA_PREFIX=durashuffle-minio
STATE=${DURASHUFFLE_MINIO_STATE:-${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}/minio-state}
WATCHED=${DURASHUFFLE_MINIO_WATCH_PID:-}
CERTS=${DURASHUFFLE_MINIO_CERTS_DIR:-}
SCHEME=http
if [[ -n $CERTS ]]; then SCHEME=https; fi
# shellcheck source=server-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server-lib.sh"

# http_ok URL: GET answers 200.
http_ok() {
	if [[ -n $CERTS ]]; then
		command -v curl >/dev/null || die "curl is required for the health check of an HTTPS MinIO"
		curl -fsS -o /dev/null --max-time 2 --cacert "$CERTS/CAs/ca.crt" "$1" 2>/dev/null
	elif command -v curl >/dev/null; then
		curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null
	else
		local rest=${1#http://} status
		local hostport=${rest%%/*} path=/${rest#*/}
		exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || return 1
		printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hostport" >&3
		read -r _ status _ <&3 || status=
		exec 3>&-
		[[ $status == 200 ]]
	fi
}

# healthy ENDPOINT: live, and ready to serve S3. /minio/health/live answers
# 200 as soon as the HTTP server is up, while S3 requests still get 503
# until the object layer is initialized; /minio/health/cluster waits for it.
healthy() {
	http_ok "$1/minio/health/live" && http_ok "$1/minio/health/cluster"
}

# log_tail LOG prints the end of MinIO's log without any line that could
# carry the password (some MinIO versions print it in the banner).
log_tail() {
	tail -n 30 "$1" 2>/dev/null | grep -viF -e "$MINIO_ROOT_PASSWORD" -e "${MINIO_KMS_SECRET_KEY#*:}" -e rootpass >&2 || true
}

# launch BIN PORT DATA LOG starts MinIO in the background (pid), its
# console on another free port.
launch() {
	local cport
	cport=$(pick_port)
	while [[ $cport == "$2" ]]; do cport=$(pick_port); done
	local tls=()
	if [[ -n $CERTS ]]; then tls=(--certs-dir "$CERTS"); fi
	"$1" server "$3" --address "127.0.0.1:$2" --console-address "127.0.0.1:$cport" "${tls[@]}" </dev/null >"$4" 2>&1 &
	pid=$!
}

cmd_start() {
	export MINIO_ROOT_USER=${MINIO_ROOT_USER:-durashuffle}
	export MINIO_ROOT_PASSWORD=${MINIO_ROOT_PASSWORD:-durashuffle-test-secret}
	export MINIO_KMS_SECRET_KEY=${MINIO_KMS_SECRET_KEY:-$TEST_KMS_KEY}
	export MINIO_UPDATE=off MINIO_BROWSER=off
	start_server
}

dispatch "${1:-}"
