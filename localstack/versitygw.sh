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

CACHE=${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}
STATE=${DURASHUFFLE_VERSITYGW_STATE:-$CACHE/versitygw-state}
STATE_FILE=$STATE/server

die() {
	echo "versitygw.sh: $*" >&2
	exit 1
}

# state_get KEY prints KEY's value from the state file (never sourced, so a
# stray file cannot run code).
state_get() {
	[[ -f $STATE_FILE ]] || return 1
	sed -n "s/^$1=//p" "$STATE_FILE" | head -n 1
}

# is_vgw PID: alive and still our server, not a recycled pid.
is_vgw() {
	[[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null && [[ $(ps -o comm= -p "$1" 2>/dev/null) == versitygw* ]]
}

cmd_install() {
	local dir=$CACHE/versitygw-$VGW_VERSION
	local bin=$dir/versitygw
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	command -v go >/dev/null || die "go is required to build versitygw ($VGW_MODULE@$VGW_VERSION)"
	mkdir -p "$dir"
	# Build into a private dir and rename: concurrent installs (parallel
	# test binaries) each produce the same binary, and none sees half a file.
	local tmp
	tmp=$(mktemp -d "$dir/.install.XXXXXX")
	echo "versitygw.sh: building $VGW_MODULE@$VGW_VERSION (first run only; takes a minute or two)" >&2
	if ! (cd "$tmp" && GOBIN=$tmp CGO_ENABLED=0 go install "$VGW_MODULE@$VGW_VERSION") >&2; then
		rm -rf "$tmp"
		die "go install $VGW_MODULE@$VGW_VERSION failed"
	fi
	mv -f "$tmp/versitygw" "$bin"
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

cmd_start() {
	local pid
	if pid=$(state_get pid) && is_vgw "$pid"; then
		echo "endpoint=$(state_get endpoint)"
		return
	fi
	local bin
	bin=$(cmd_install)
	mkdir -p "$STATE"
	local data log="$STATE/versitygw.log"
	data=$(mktemp -d "${TMPDIR:-/tmp}/durashuffle-versitygw.XXXXXX")

	export ROOT_ACCESS_KEY=${ROOT_ACCESS_KEY:-durashuffle}
	export ROOT_SECRET_KEY=${ROOT_SECRET_KEY:-durashuffle-test-secret}
	# Credentials only through the environment (never on the command
	# line, where ps shows them to every user of the machine).
	unset ROOT_ACCESS_KEY_ID ROOT_SECRET_ACCESS_KEY

	# A port seen free can be taken before the gateway binds it: retry a few.
	local attempt port endpoint deadline
	for attempt in 1 2 3 4 5; do
		port=$(pick_port)
		endpoint=http://127.0.0.1:$port
		"$bin" --port "127.0.0.1:$port" --quiet posix "$data" </dev/null >"$log" 2>&1 &
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
			echo "versitygw.sh: versitygw not answering after ${START_TIMEOUT}s; log tail:" >&2
			log_tail "$log"
			exit 1
		fi
		wait "$pid" 2>/dev/null || true
		if ! grep -qi "address already in use" "$log"; then
			break
		fi
		echo "versitygw.sh: port taken, retrying (attempt $attempt)" >&2
	done
	rm -rf "$data"
	echo "versitygw.sh: versitygw exited during start; log tail:" >&2
	log_tail "$log"
	exit 1
}

# watch PID DATA stops the server once DURASHUFFLE_VERSITYGW_WATCH_PID exits.
watch() {
	local watched=${DURASHUFFLE_VERSITYGW_WATCH_PID:-}
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
	is_vgw "$1" || return 0
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
		echo "versitygw.sh: not running" >&2
		return
	fi
	data=$(state_get data)
	stop_pid "$pid"
	# Only ever delete a root dir this script created.
	if [[ $data == */durashuffle-versitygw.* ]]; then
		rm -rf "$data"
	fi
	rm -f "$STATE_FILE"
}

cmd_endpoint() {
	local pid
	if pid=$(state_get pid) && is_vgw "$pid"; then
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
