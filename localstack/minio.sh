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

CACHE=${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}
STATE=${DURASHUFFLE_MINIO_STATE:-$CACHE/minio-state}
STATE_FILE=$STATE/server

die() {
	echo "minio.sh: $*" >&2
	exit 1
}

# state_get KEY prints KEY's value from the state file (never sourced, so a
# stray file cannot run code).
state_get() {
	[[ -f $STATE_FILE ]] || return 1
	sed -n "s/^$1=//p" "$STATE_FILE" | head -n 1
}

# is_minio PID: alive and still our server, not a recycled pid.
is_minio() {
	[[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null && [[ $(ps -o comm= -p "$1" 2>/dev/null) == minio* ]]
}

cmd_install() {
	local dir=$CACHE/minio-$MINIO_VERSION
	local bin=$dir/minio
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	command -v go >/dev/null || die "go is required to build MinIO ($MINIO_MODULE@$MINIO_VERSION)"
	mkdir -p "$dir"
	# Build into a private dir and rename: concurrent installs (parallel
	# test binaries) each produce the same binary, and none sees half a file.
	local tmp
	tmp=$(mktemp -d "$dir/.install.XXXXXX")
	echo "minio.sh: building $MINIO_MODULE@$MINIO_VERSION (first run only; takes minutes)" >&2
	if ! (cd "$tmp" && GOBIN=$tmp CGO_ENABLED=0 go install "$MINIO_MODULE@$MINIO_VERSION") >&2; then
		rm -rf "$tmp"
		die "go install $MINIO_MODULE@$MINIO_VERSION failed"
	fi
	mv -f "$tmp/minio" "$bin"
	rm -rf "$tmp"
	echo "$bin"
}

port_free() {
	if command -v ss >/dev/null; then
		[[ -z $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
	else
		! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

pick_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		if port_free "$p"; then
			echo "$p"
			return
		fi
	done
	die "no free loopback port found"
}

# http_ok URL: GET answers 200.
http_ok() {
	if command -v curl >/dev/null; then
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

cmd_start() {
	local pid
	if pid=$(state_get pid) && is_minio "$pid"; then
		echo "endpoint=$(state_get endpoint)"
		return
	fi
	local bin
	bin=$(cmd_install)
	mkdir -p "$STATE"
	local data log="$STATE/minio.log"
	data=$(mktemp -d "${TMPDIR:-/tmp}/durashuffle-minio.XXXXXX")

	export MINIO_ROOT_USER=${MINIO_ROOT_USER:-durashuffle}
	export MINIO_ROOT_PASSWORD=${MINIO_ROOT_PASSWORD:-durashuffle-test-secret}
	export MINIO_KMS_SECRET_KEY=${MINIO_KMS_SECRET_KEY:-$TEST_KMS_KEY}
	export MINIO_UPDATE=off MINIO_BROWSER=off

	# A port seen free can be taken before MinIO binds it: retry a few.
	local attempt port cport endpoint deadline
	for attempt in 1 2 3 4 5; do
		port=$(pick_port)
		cport=$(pick_port)
		[[ $port != "$cport" ]] || continue
		endpoint=http://127.0.0.1:$port
		"$bin" server "$data" --address "127.0.0.1:$port" --console-address "127.0.0.1:$cport" \
			</dev/null >"$log" 2>&1 &
		pid=$!
		deadline=$((SECONDS + START_TIMEOUT))
		while ((SECONDS < deadline)); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if healthy "$endpoint"; then
				printf 'pid=%s\nendpoint=%s\ndata=%s\nlog=%s\n' "$pid" "$endpoint" "$data" "$log" >"$STATE_FILE"
				watch "$pid" "$data"
				echo "endpoint=$endpoint"
				return
			fi
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
			rm -rf "$data"
			echo "minio.sh: MinIO not healthy after ${START_TIMEOUT}s; log tail:" >&2
			log_tail "$log"
			exit 1
		fi
		wait "$pid" 2>/dev/null || true
		if ! grep -qi "address already in use" "$log"; then
			break
		fi
		echo "minio.sh: port taken, retrying (attempt $attempt)" >&2
	done
	rm -rf "$data"
	echo "minio.sh: MinIO exited during start; log tail:" >&2
	log_tail "$log"
	exit 1
}

# watch PID DATA stops the server once DURASHUFFLE_MINIO_WATCH_PID exits.
watch() {
	local watched=${DURASHUFFLE_MINIO_WATCH_PID:-}
	[[ -n $watched ]] || return 0
	(
		while kill -0 "$watched" 2>/dev/null && kill -0 "$1" 2>/dev/null; do
			sleep 1
		done
		if kill -0 "$1" 2>/dev/null; then
			stop_pid "$1"
			rm -rf "$2"
			if [[ $(state_get pid) == "$1" ]]; then rm -f "$STATE_FILE"; fi
		fi
	) </dev/null >/dev/null 2>&1 &
	disown
}

stop_pid() {
	is_minio "$1" || return 0
	kill "$1" 2>/dev/null || true
	for _ in $(seq 1 100); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null || true
}

cmd_stop() {
	local pid data
	if ! pid=$(state_get pid); then
		echo "minio.sh: not running" >&2
		return
	fi
	data=$(state_get data)
	stop_pid "$pid"
	# Only ever delete a data dir this script created.
	if [[ $data == */durashuffle-minio.* ]]; then
		rm -rf "$data"
	fi
	rm -f "$STATE_FILE"
}

cmd_endpoint() {
	local pid
	if pid=$(state_get pid) && is_minio "$pid"; then
		state_get endpoint
	else
		die "not running"
	fi
}

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
endpoint) cmd_endpoint ;;
*)
	echo "usage: $0 install|start|stop|endpoint" >&2
	exit 2
	;;
esac
